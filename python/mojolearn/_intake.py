"""The one way in: any accepted input — `mojolearn.Array`, a NumPy array, `array.array`,
`memoryview` or any buffer-protocol object, a CPU torch tensor, any object with `__dlpack__` —
as (keep-alive, address, shape), checked and refused by name.

Every public entry (both trainers, the optimizers, `cross_entropy`, `clip_grad_norm_`,
`matmul`) takes its inputs by this policy. The common case costs one `_reader.read` (one
binding call) per argument, or a few attribute reads for an Array; the hottest entries (the
trainers' steps, `matmul`) go further and hand the objects to the binding, which reads them
within the step's own call by the same rule (`mojo/bindings/entries/intake.mojo`) and sends
back here only what it declines. Anything not accepted zero-copy goes the slow way, the
policy: `probe` describes it, then it is copied (strided float32 into C order, integer labels
into int32) or refused with the messages below. Nothing converts silently: float64 is never
rounded to float32.

The caller keeps the returned keep-alive (the object itself, its DLPack capsule or a copy) for
as long as the address is used, and must not resize the buffer meanwhile.
"""

import array as _pyarray

from . import _reader
from ._array import _CODES, Array, dtype_of
from ._bufcheck import dtype_name, is_integer, is_native_f32, split_format

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
        from ._dlpack import from_dlpack

        return from_dlpack(obj)._probe()  # raises its refusal; a success is an Array's layout
    raise TypeError(
        f"expected an object with the buffer protocol or DLPack (a NumPy array, "
        f"torch tensor, array.array, memoryview, bytes or mojolearn.Array), got "
        f"{type(obj).__name__}"
    )


def _dlpack_strided(obj, layout):
    """A DLPack-only layout that is not C-contiguous: from_dlpack's refusal (no copy: we
    cannot read strided memory that has no buffer protocol)."""
    if not layout.c_contiguous and _reader.is_dlpack_only(obj):
        from ._dlpack import from_dlpack

        from_dlpack(obj)


# -- float32 -----------------------------------------------------------------------------------


def borrowed_f32(obj, ndim=None, writable=False):
    """(keep, address, shape) of a non-empty float32 C-contiguous buffer, zero-copy, or None
    (the caller's slow path then copies or refuses with its own messages)."""
    if type(obj) is Array:
        if (
            obj._dtype == "<f4"
            and (ndim is None or len(obj._shape) == ndim)
            and not (writable and obj._readonly)
            and obj._size
        ):
            return obj, obj._addr, obj._shape
        return None
    r = _read(obj, _F32[ndim, writable])
    if r is None:
        return None
    keep, address, shape, _ = r
    return keep, address, shape


def f32(obj, name, ndim=None, writable=False):
    """(keep, address, shape) of a float32 buffer: borrowed when C-contiguous, else (read-only
    use only) a C-order copy. TypeError for any other dtype, ValueError for another ndim or,
    when `writable`, a read-only or strided buffer."""
    r = borrowed_f32(obj, ndim, writable)
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
            from ._dlpack import from_dlpack

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
    """(Array, copied): `obj` as float32 C-contiguous, borrowed when it already is, else a
    C-order copy. TypeError for any other dtype (float64 included: no silent rounding)."""
    layout = probe_f32(obj, name)
    _check_ndim(layout, ndim, name)
    if layout.c_contiguous:
        return _borrow(obj, layout, name), False
    _dlpack_strided(obj, layout)
    return Array(_strided_values(obj), "<f4", layout.shape), True


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
    r = _read(obj, _LABELS_1D)
    if r is None:
        return None
    keep, address, shape, itemsize = r
    return (keep, address, itemsize) if shape == (rows,) else None


def i32(obj, name, ndim=None):
    """(keep, address, shape) of integers as int32: borrowed when native int32 C-contiguous,
    else converted as `as_i32_c` converts (and refuses)."""
    if type(obj) is Array:
        if obj._dtype == "<i4" and (ndim is None or len(obj._shape) == ndim) and obj._size:
            return obj, obj._addr, obj._shape
    else:
        r = _read(obj, _I32[ndim])
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
    _dlpack_strided(obj, layout)
    if layout.c_contiguous and dtype_of(layout.format, layout.itemsize) == "<i4":
        return _borrow(obj, layout, name), False
    if layout.c_contiguous and layout.nbytes:
        # array.array converts item by item in C and refuses values outside int32.
        with _flat_view(obj, layout) as flat:
            try:
                owned = _pyarray.array(_CODES["<i4"], flat)
            except OverflowError:
                owned = None
            values = None if owned is not None else flat.tolist()
        if owned is not None:
            return Array._wrap(owned, layout.shape, "<i4"), True
    else:
        values = _strided_values(obj)
    bad = next((v for v in values if not _I32_MIN <= v <= _I32_MAX), None)
    if bad is not None:
        raise ValueError(f"{name} holds {bad}, outside the int32 range")
    return Array(values, "<i4", layout.shape), True


def _flat_view(obj, layout):
    """A flat memoryview of a C-contiguous buffer's items (DLPack ones through an Array)."""
    if type(obj) is not Array and _reader.is_dlpack_only(obj):
        obj = _borrow(obj, layout, "array")  # from_dlpack refuses dtypes an Array cannot hold
    mv = obj._mv.cast("B") if type(obj) is Array else memoryview(obj).cast("B")
    return mv.cast(split_format(layout.format)[1])


def _strided_values(obj):
    """Flat C-order Python values of any buffer (memoryview.tolist handles strides)."""
    if type(obj) is Array:
        return obj._mv.tolist()
    with memoryview(obj) as mv:
        nested, ndim = mv.tolist(), mv.ndim
    if ndim == 0:
        return [nested]
    for _ in range(ndim - 1):
        nested = [x for row in nested for x in row]
    return nested


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
