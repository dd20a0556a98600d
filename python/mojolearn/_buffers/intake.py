"""The one way in: any accepted input — `mojolearn.Array`, a NumPy array, `array.array`,
`memoryview` or any buffer-protocol object, a CPU torch tensor, any object with `__dlpack__` —
as (keep-alive, address, shape), checked and refused by name.

Every public entry (both trainers, the optimizers, `cross_entropy`, `clip_grad_norm_`,
`matmul`) takes its inputs by this policy. The common case costs one `_reader.read` (one
binding call) per argument, or a few attribute reads for an Array; the hottest entries (the
trainers' steps, `matmul`) go further and hand the objects to the binding, which reads them
within the step's own call by the same rule (`mojo/bindings/entries/intake.mojo`) and sends
back here only what it declines. Anything not accepted zero-copy goes the slow way, the
policy: `probe` describes it, then it is copied in the binding (strided float32 into C order,
integer labels into int32, a strided DLPack tensor too) or refused with the messages below.
Nothing converts silently: float64 is never rounded to float32, except where a trainer reads
its batches (`rounded_f32`: documented there and in each trainer's docstrings).

The caller keeps the returned keep-alive for as long as the address is used. It pins the
memory: a memoryview holding a buffer's export (an array.array or bytearray then refuses to
resize: BufferError), a borrowed Array (which holds one too), a DLPack capsule, or a copy. A
torch tensor read for reading only is copied, with the GIL held: nothing pins its
storage (`resize_` frees it). One updated in place (`f32_shared`), or an optimizer's
gradient (`borrowed_f32` without `pin`), is borrowed, and its owner must not resize it
meanwhile.

Two policies for callers that take many tensors or keep one (the sections at the end): the
optimizers' *tensor lists* (one buffer or an iterable of them, each float32 C-contiguous and
borrowed in place, never copied: an optimizer writes its parameters and clips its gradients
where they are), and the trainers' *owned tensor* (a checked C-order copy the trainer keeps).
"""

from __future__ import annotations

import array as _pyarray
import math

from . import reader as _reader
from .array import _CODES, Array, _flatten, dtype_of
from .formats import dtype_name, is_int32, is_integer, is_native_f32, split_format

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_CPU = 1
_MAX_NDIM = 8  # intake.mojo MAX_NDIM
_F32 = {(n, w): _reader.spec(_reader.F32, n, w) for n in (None, 1, 2) for w in (False, True)}
_LABELS_1D = _reader.spec(_reader.LABELS, 1)
_I32 = {n: _reader.spec(_reader.I32, n) for n in (None, 1, 2)}
_read = _reader.read


def probe(obj):
    """The `_reader.Layout` of `obj`'s memory. TypeError when it exports none; the DLPack
    refusals (a tensor that requires grad, a GPU tensor, a strided tensor, another dtype) are
    `from_dlpack`'s."""
    if type(obj) is Array:
        return obj._probe()
    layout = _reader.describe(obj)
    if layout is not None and (layout.device == _CPU or not _reader.is_dlpack_only(obj)):
        return layout
    if layout is None and not _reader.is_dlpack_only(obj):
        try:
            with memoryview(obj) as mv:
                ndim = mv.ndim
        except TypeError:
            pass
        else:  # a buffer the reader declined: too many dimensions, or suboffsets
            raise ValueError(
                f"buffers of at most {_MAX_NDIM} dimensions without suboffsets "
                f"are supported, got {ndim} dimensions"
            )
    if hasattr(obj, "__dlpack__"):
        from .array import from_dlpack

        return from_dlpack(obj)._probe()  # raises its refusal; a success is an Array's layout
    raise TypeError(
        f"expected an object with the buffer protocol or DLPack (a NumPy array, "
        f"torch tensor, array.array, memoryview, bytes or mojolearn.Array), got "
        f"{type(obj).__name__}"
    )


def _unpinned(obj):
    """A torch tensor: its storage can be resized or freed under a borrowed address (nothing
    like a buffer export stops `resize_`), so reading it for reading only takes a copy."""
    return type(obj) is not Array and _reader.is_torch(obj)


_F32_ANY = _reader.spec(_reader.F32)
_I32_ANY = _reader.spec(_reader.I32)


def _copied(obj, layout, spec_, dtype, name):
    """An owned C-order copy of `obj` (described by `layout`) as an Array of `dtype`, made in
    the binding (`_reader.copy`): strides followed, integers converted to int32 for I32.
    ValueError naming `name` for a value outside int32 or a null address."""
    shape = layout.shape
    if not layout.nbytes:
        return Array(shape, dtype)
    if not layout.address:
        raise ValueError(
            f"{name}: the tensor's memory is gone (shape {shape}, a null data pointer: its "
            f"storage was freed or resized to 0)"
        )
    if type(obj) is Array:
        r = _reader.copy(obj._mv, spec_)
    elif _reader.is_dlpack_only(obj):
        r = _reader.copy(layout.keep, spec_, capsule=True)
    else:
        r = _reader.copy(obj, spec_)
    if type(r) is int:
        raise ValueError(f"{name} holds {r}, outside the int32 range")
    if r is None:
        raise MemoryError(f"{name}: cannot make a copy of {layout.nbytes} bytes")
    owned, address, got, _ = r
    if type(obj) is not Array and got != shape:
        raise ValueError(f"{name} changed shape while it was read ({shape}, then {got})")
    a = Array.__new__(Array)
    a._mv_ = memoryview(owned).cast(_CODES[dtype])
    a._owner, a._shape, a._dtype = owned, shape, dtype
    a._size, a._readonly, a._addr = math.prod(shape), False, address
    return a


# -- float32 -----------------------------------------------------------------------------------


def borrowed_f32(obj, ndim=None, writable=False, pin=False):
    """(keep, address, shape) of a non-empty float32 C-contiguous buffer, zero-copy, or None
    (the caller's slow path then copies or refuses with its own messages). With `pin` (and
    not `writable`) a torch tensor is copied (the module docstring says why); without, it is
    read in place (the optimizers: their owner must not resize it during the step)."""
    if type(obj) is Array:
        if (
            obj._dtype == "<f4"
            and (ndim is None or len(obj._shape) == ndim)
            and not (writable and obj._readonly)
            and obj._size
        ):
            return obj, obj._addr, obj._shape
        return None
    r = _read(obj, _F32[ndim, writable], pin)
    if r is None:
        return None
    keep, address, shape, _ = r
    return keep, address, shape


def c_f32(obj, ndim=None, declined=False):
    """(keep, address, shape) of a non-empty float32 buffer in C order: borrowed in place, or
    a copy made in the binding (any strides; a torch tensor, pinned: the module docstring
    says why), or None (the caller's refusal describes it). `declined`: a step entry of the
    binding has declined it already (`_reader.c_order`)."""
    r = _reader.c_order(obj, _F32[ndim, False], declined)
    return None if r is None else r[:3]


def f32(obj, name, ndim=None, writable=False):
    """(keep, address, shape) of a float32 buffer: borrowed when C-contiguous, else (read-only
    use only) a C-order copy. TypeError for any other dtype, ValueError for another ndim or,
    when `writable`, a read-only or strided buffer."""
    r = borrowed_f32(obj, ndim, writable, pin=True)
    if r is not None:
        return r
    if writable:
        arr = f32_shared(obj, name)
        _check_ndim(arr._probe(), ndim, name)
    else:
        arr = as_f32_c(obj, ndim, name)[0]
    return arr, arr._addr, arr._shape


def probe_f32(obj, name="array"):
    """The layout of a native float32 buffer; TypeError naming `name` and the dtype seen for
    anything else (float64 included: no silent rounding)."""
    try:
        layout = probe(obj)
    except TypeError as exc:
        if hasattr(type(obj), "__dlpack__"):  # e.g. a torch tensor that requires grad
            raise TypeError(f"{name}: {exc}") from None
        raise TypeError(
            f"{name} must be a float32 buffer (NumPy array, torch tensor, "
            f"array.array, memoryview or mojolearn.Array), got "
            f"{type(obj).__name__}"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if not is_native_f32(layout.format, layout.itemsize):
        raise TypeError(f"{name} must be float32, got {dtype_name(layout.format, layout.itemsize)}")
    return layout


def f32_shared(obj, name, writable=True):
    """`obj` as an Array sharing its memory (for in-place updates when `writable`): float32,
    C-contiguous (and writable), refused by name otherwise."""
    if type(obj) is Array and obj._dtype == "<f4" and not (writable and obj._readonly):
        return obj
    layout = probe_f32(obj, name)
    if not layout.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if writable and layout.readonly:
        raise ValueError(f"{name} is read-only; it is updated in place, so it must be writable")
    return _borrow(obj, layout, name)


def _borrow(obj, layout, name):
    """An Array sharing `obj`'s C-contiguous memory (it keeps `obj` alive)."""
    if type(obj) is Array:
        return obj
    try:
        if _reader.is_dlpack_only(obj):
            from .array import from_dlpack

            return from_dlpack(obj)
        return Array.from_buffer(obj)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc}") from None


def _check_ndim(layout, ndim, name):
    if ndim is not None and layout.ndim != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimension{'s' if ndim != 1 else ''}, got shape {layout.shape}"
        )


def as_f32_c(obj, ndim=None, name="array"):
    """(Array, copied): `obj` as float32 C-contiguous, borrowed when it already is (a torch
    tensor: copied, see the module docstring), else a C-order copy. TypeError for any other
    dtype (float64 included: no silent rounding)."""
    layout = probe_f32(obj, name)
    _check_ndim(layout, ndim, name)
    if layout.c_contiguous and not _unpinned(obj):
        return _borrow(obj, layout, name), False
    return _copied(obj, layout, _F32_ANY, "<f4", name), True


# -- integers ----------------------------------------------------------------------------------


def labels(obj, rows, name):
    """(keep, address, itemsize 4 or 8) of `rows` native signed int32/int64 labels, zero-copy,
    or None (the caller converts through `as_i32_c` and its own messages)."""
    if type(obj) is Array:
        if obj._shape == (rows,):
            dt = obj._dtype
            if dt == "<i4":
                return obj, obj._addr, 4
            if dt == "<i8":
                return obj, obj._addr, 8
        return None
    r = _read(obj, _LABELS_1D, True)
    if r is None:
        return None
    keep, address, shape, itemsize = r
    return (keep, address, itemsize) if shape == (rows,) else None


def c_i32(obj, ndim=None):
    """(keep, address, shape) of a non-empty integer buffer converted to int32 C order in the
    binding (any integer dtype, any strides), or None (another dtype, a value outside int32:
    the caller's refusal says which)."""
    r = _reader.c_order(obj, _I32[ndim], True)
    return None if r is None else r[:3]


def i32(obj, name, ndim=None):
    """(keep, address, shape) of integers as int32: borrowed when native int32 C-contiguous,
    else converted as `as_i32_c` converts (and refuses)."""
    if type(obj) is Array:
        if obj._dtype == "<i4" and (ndim is None or len(obj._shape) == ndim) and obj._size:
            return obj, obj._addr, obj._shape
    else:
        r = _read(obj, _I32[ndim], True)
        if r is not None:
            keep, address, shape, _ = r
            return keep, address, shape
    arr = as_i32_c(obj, ndim, name)[0]
    return arr, arr._addr, arr._shape


def as_i32_c(obj, ndim=None, name="array"):
    """(Array, copied): integer values as int32 C-contiguous. Any integer format converts
    (int8..int64, unsigned); a non-integer format is a TypeError, a value outside int32 a
    ValueError naming `name`."""
    try:
        layout = probe(obj)
    except TypeError:
        raise TypeError(f"{name} must be an integer buffer, got {type(obj).__name__}") from None
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if not is_integer(layout.format):
        raise TypeError(
            f"{name} must hold integers, got {dtype_name(layout.format, layout.itemsize)}"
        )
    if split_format(layout.format)[0] != "":
        raise TypeError(
            f"{name} must hold native-endian integers, got "
            f"{dtype_name(layout.format, layout.itemsize)}"
        )
    _check_ndim(layout, ndim, name)
    if (
        layout.c_contiguous
        and dtype_of(layout.format, layout.itemsize) == "<i4"
        and not _unpinned(obj)
    ):
        return _borrow(obj, layout, name), False
    # Any integer dtype, any strides, a buffer or a DLPack tensor: converted in the binding,
    # which refuses values outside int32.
    return _copied(obj, layout, _I32_ANY, "<i4", name), True


# -- addresses for in-place and read-only use -------------------------------------------------


def addr(obj, name="buffer"):
    """Address of a writable, C-contiguous buffer. ValueError when read-only or strided.
    The caller keeps `obj` alive for as long as the address is used."""
    layout = probe(obj)
    if layout.readonly:
        raise ValueError(f"{name} is read-only; a writable buffer is required")
    if not layout.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return layout.address


def addr_ro(obj, name="buffer"):
    """Address of a C-contiguous buffer that the binding will only read."""
    layout = probe(obj)
    if not layout.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return layout.address


# -- tensor lists (the optimizers) ------------------------------------------------------------


def is_sparse(obj: object) -> bool:
    """Whether `obj` is a sparse tensor (torch's `is_sparse`, SciPy's `tocsr`): refused."""
    return getattr(obj, "is_sparse", False) is True or hasattr(obj, "tocsr")


def is_buffer(obj: object) -> bool:
    """Whether `obj` is one tensor (an Array, a DLPack producer, a buffer) rather than a list."""
    if type(obj) is Array or hasattr(type(obj), "__dlpack__"):  # torch tensors: DLPack
        return True
    try:
        probe(obj)
        return True
    except (TypeError, ValueError):
        return False


def tensor_list(obj: Any, name: str) -> list[Any]:
    """A buffer means one tensor; any other iterable (not a dict) is a list of tensors."""
    if type(obj) is list or type(obj) is tuple:
        return list(obj)
    if is_buffer(obj) or is_sparse(obj):
        return [obj]
    if isinstance(obj, dict):
        raise TypeError(
            f"{name}: parameter groups (dicts) are not supported; pass a list of float32 buffers"
        )
    try:
        return list(obj)
    except TypeError:
        raise TypeError(
            f"{name} must be a float32 buffer or a list of them, got {type(obj).__name__}"
        ) from None


def leaf_view(obj: object, name: str) -> object:
    """A torch tensor that requires grad as the optimizer can update it: a leaf (a model's
    parameter) as `obj.detach()`, which shares its storage, so the step writes the parameter in
    place as torch.optim does under `no_grad`; a non-leaf (the result of an operation) is
    refused, as torch.optim refuses it. Anything else is returned as it is."""
    if getattr(obj, "requires_grad", False) is not True or not _reader.is_torch(obj):
        return obj
    t: Any = obj
    if not t.is_leaf:
        raise ValueError(
            f"{name}: can't optimize a non-leaf tensor (it requires grad and is the result of "
            f"an operation, grad_fn={type(t.grad_fn).__name__}); pass the leaf tensors that "
            f"hold the values, such as model.parameters()"
        )
    return t.detach()


def f32_tensor(obj: object, name: str, writable: bool) -> tuple[Array, tuple[int, ...]]:
    """(Array sharing obj's memory, shape): a C-contiguous float32 buffer, refused otherwise."""
    if is_sparse(obj):
        raise TypeError(f"{name}: sparse tensors are not supported")
    if isinstance(obj, dict):
        raise TypeError(
            f"{name}: parameter groups (dicts) are not supported; pass the tensors themselves"
        )
    arr = f32_shared(obj, name, writable)
    return arr, arr._shape


def f32_view(obj: object, name: str, writable: bool) -> tuple[Any, int, tuple[int, ...]]:
    """(keep-alive, address, shape) of a C-contiguous float32 buffer: read zero-copy in one
    binding call (`borrowed_f32`: ~0.1-0.3 µs, where an Array sharing the memory costs several
    µs to build), or, for what that declines, borrowed or refused by `f32_tensor`. A
    module-level function that the optimizers call directly, once per gradient per step."""
    r: tuple[Any, int, tuple[int, ...]] | None = borrowed_f32(obj, None, writable)
    if r is None:
        arr, shape = f32_tensor(obj, name, writable)
        return arr, arr._addr, shape
    return r


# -- owned tensor (the trainers) ---------------------------------------------------------------


def owned_tensor(
    value: object, shape: tuple[int, ...], name: str, api: str, dtype: str = "<f4"
) -> Array:
    """An owned, C-contiguous copy of `value` with exactly `shape`; float32 values finite.

    TypeError for anything that is not a buffer of the dtype (lists included: no guessing),
    ValueError for a wrong shape or a non-finite value; each message starts with `api`."""
    kind = "float32" if dtype == "<f4" else "int32"
    try:
        pb = probe(value)
    except ValueError as exc:
        raise ValueError(f"{api}: {name}: {exc}") from None
    except TypeError:
        raise TypeError(
            f"{api}: {name} must be a {kind} buffer (NumPy array, "
            f"array.array, memoryview or mojolearn.Array), got "
            f"{type(value).__name__}"
        ) from None
    ok = (
        is_native_f32(pb.format, pb.itemsize)
        if dtype == "<f4"
        else is_int32(pb.format, pb.itemsize)
    )
    if not ok:
        raise TypeError(f"{api}: {name} must be {kind}, got {dtype_name(pb.format, pb.itemsize)}")
    if tuple(pb.shape) != tuple(shape):
        raise ValueError(f"{api}: {name} must have shape {tuple(shape)}, got {tuple(pb.shape)}")
    arr, copied = (as_f32_c if dtype == "<f4" else as_i32_c)(value, name=name)
    if not copied:
        arr = arr.copy()
    if dtype == "<f4":
        bad = next((i for i, x in enumerate(arr._mv.tolist()) if not math.isfinite(x)), None)
        if bad is not None:
            raise ValueError(f"{api}: {name} must be finite (flat index {bad} is {arr._mv[bad]!r})")
    return arr


# -- float64 and lists, rounded once (the trainers' inputs) ------------------------------------

# The least binary64 value that rounds to float32 infinity: float32's largest finite value is
# 2**128 - 2**104, and the tie halfway to 2**128 rounds to even, which is the infinity.
_F32_OVERFLOW = 2.0**128 - 2.0**103


def rounded_f32(obj: object, name: str, api: str = "") -> Array | None:
    """A fresh float32 C-order Array of a float64 buffer (NumPy, array.array, memoryview, an
    Array, a CPU DLPack tensor; any strides) or of a flat or nested list or tuple of numbers,
    each value rounded once to the nearest float32 (ties to even, as a C cast); None for
    anything else (the caller reads float32 or refuses as before).

    Only the trainers' batch inputs come here: everything else (the optimizers' tensors, the
    weights) takes float32 only. ValueError for a NaN or infinity, or a value that overflows
    float32; TypeError for a list holding something that is not a number; each message names
    `name` after `api` (the trainer), when given."""
    try:
        if isinstance(obj, (list, tuple)):
            flat, shape = _listed(obj, name, (int, float), "numbers")
            values = [float(v) for v in flat]
        else:
            values_shape = _f64_values(obj)
            if values_shape is None:
                return None
            values, shape = values_shape
        _check_f32_range(values, shape, name)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{api}: {exc}" if api else str(exc)) from None
    return Array._wrap(_pyarray.array(_CODES["<f4"], values), shape, "<f4")


def _listed(obj: Any, name: str, kinds: tuple[type, ...], what: str) -> tuple[list[Any], Any]:
    """(flat values, shape) of a rectangular nested list of `kinds` (never bools)."""
    try:
        flat, shape = _flatten(obj)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    bad = next((v for v in flat if isinstance(v, bool) or not isinstance(v, kinds)), 0)
    if bad != 0:
        raise TypeError(f"{name} must hold {what}, got {type(bad).__name__} {bad!r}")
    return flat, shape


def _f64_values(obj: object) -> tuple[list[float], tuple[int, ...]] | None:
    """(C-order values, shape) of a float64 buffer, or None when `obj` is not one."""
    try:
        layout = probe(obj)
    except (TypeError, ValueError):
        return None
    if dtype_of(layout.format, layout.itemsize) != "<f8":
        return None
    shape = tuple(layout.shape)
    if type(obj) is Array:
        return obj._mv.tolist(), shape
    try:
        mv = memoryview(obj)  # type: ignore[arg-type]  # DLPack-only: TypeError, below
    except TypeError:
        from .array import from_dlpack

        return from_dlpack(obj)._mv.tolist(), shape  # type: ignore[arg-type]
    with mv:
        if mv.c_contiguous:
            return (mv.cast("B").cast("d").tolist() if mv.nbytes else []), shape
        values = mv.tolist()  # strided: nested lists, flattened a level at a time
        for _ in range(mv.ndim - 1):
            values = [v for row in values for v in row]
        return values, shape


def _check_f32_range(values: list[float], shape: tuple[int, ...], name: str) -> None:
    if all(map(math.isfinite, values)) and (
        not values or max(values) < _F32_OVERFLOW and -min(values) < _F32_OVERFLOW
    ):
        return
    per = math.prod(shape[1:]) if len(shape) > 1 else 1
    at = next(i for i, v in enumerate(values) if not abs(v) < _F32_OVERFLOW)
    where = f"example {at // per}, element {at % per}" if len(shape) > 1 else f"index {at}"
    if math.isfinite(values[at]):
        raise ValueError(
            f"{name} must fit in float32: {where} is {values[at]!r}, beyond float32's largest "
            f"value (3.4028235e38); scale it first"
        )
    raise ValueError(f"{name} must be finite: {where} is {values[at]!r}")


def input_f32(obj: object, ndim: int | None, name: str, api: str = "") -> Array:
    """A trainer's float input as float32 C order: float32 read as `as_f32_c` reads it (and
    refused as it refuses), float64 and lists of numbers through `rounded_f32`."""
    r = rounded_f32(obj, name, api)
    if r is None:
        return as_f32_c(obj, ndim, name)[0]  # type: ignore[no-any-return]
    _check_ndim(r._probe(), ndim, name)
    return r


def input_labels(obj: object, ndim: int | None, name: str, api: str = "") -> Array:
    """A trainer's class ids as int32 C order: integer buffers as `as_i32_c` converts them, a
    flat or nested list or tuple of ints too (a float in it is a TypeError naming `name`)."""
    if not isinstance(obj, (list, tuple)):
        return as_i32_c(obj, ndim, name)[0]  # type: ignore[no-any-return]
    try:
        flat, shape = _listed(obj, name, (int,), "integers (class ids)")
        if flat and not (_I32_MIN <= min(flat) and max(flat) <= _I32_MAX):
            raise ValueError(f"{name} holds a value outside the int32 range")
        arr = Array._wrap(_pyarray.array(_CODES["<i4"], flat), shape, "<i4")
        _check_ndim(arr._probe(), ndim, name)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{api}: {exc}" if api else str(exc)) from None
    return arr
