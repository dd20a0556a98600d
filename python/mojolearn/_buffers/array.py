"""`mojolearn.Array`: a typed, shaped, C-contiguous buffer for people without NumPy.

An Array either OWNS an `array.array` (allocated once, never resized, so its address is fixed
for the Array's lifetime) or BORROWS another object's C-contiguous buffer through a memoryview
that keeps the exporter alive and locked. It has no arithmetic: the kernels do that.
`numpy.asarray(a)` is zero-copy (`__array_interface__`), `memoryview(a)` works on 3.12+
(`__buffer__`).
"""

from __future__ import annotations

import array as _pyarray
import math
import operator
import sys

if sys.byteorder != "little":  # every CPU and GPU target we build for is little-endian
    raise ImportError("mojolearn supports little-endian hosts only")

from . import dlpack as _dlpack
from . import reader as _reader
from . import take as _take
from .formats import dtype_name, split_format
from .indexing import Indexing, has_slice

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, Literal, SupportsIndex, TypeAlias

    # Absolute, typing-only: `_types` imports this module, and nothing imports `_types` at
    # run time (tests/test_intake.py's import-circle check reads relative imports).
    from mojolearn._buffers.types import BufferLike, DType, PyArray, SupportsDLPack, View

    _Code: TypeAlias = Literal["f", "i", "l", "d", "q"]

# dtype -> array.array typecode (native = little-endian, checked above).
_CODES: dict[str, _Code] = {
    "<f4": "f",
    "<i4": "i" if _pyarray.array("i").itemsize == 4 else "l",
    "<f8": "d",
    "<i8": "q",
}
_DTYPE_OF_CODE: dict[tuple[str, int], DType] = {("f", 4): "<f4", ("d", 8): "<f8"}
_name: DType
for _c in "bhilqn":
    for _size, _name in ((4, "<i4"), (8, "<i8")):
        _DTYPE_OF_CODE[(_c, _size)] = _name
_REPR_LIMIT = 8
# One zero per typecode: `_ZERO[code] * n` is the fastest zero-filled allocation.
_ZERO = {code: _pyarray.array(code, (0,)) for code in set(_CODES.values())}


def dtype_of(fmt: str, itemsize: int) -> DType | None:
    """The Array dtype of a native buffer format, or None."""
    prefix, code = split_format(fmt)
    return _DTYPE_OF_CODE.get((code, itemsize)) if prefix == "" else None


def _check_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a tuple of ints, got {shape!r}") from None
    for d in shape:
        if type(d) is not int or d < 0:
            raise ValueError(f"shape must hold non-negative ints, got {shape!r}")
    return shape


def _shape_of(shape: Any) -> tuple[int, ...]:
    """`Array()`'s shape argument as a tuple of non-negative ints. Anything that is not an int
    or a list / tuple of ints (values, a buffer) is a TypeError that says how to build an Array
    from values, since the constructor took values before 0.x's drop-in parity change."""
    if type(shape) is tuple:  # the common case, checked without a generator
        for d in shape:
            if type(d) is not int or d < 0:
                break
        else:
            return shape
    dims = shape if isinstance(shape, (list, tuple)) else (shape,)
    try:
        if any(isinstance(d, bool) for d in dims):
            raise TypeError
        ints = tuple(operator.index(d) for d in dims)
    except TypeError:  # a float, a nested list, a buffer...: values, not a shape
        import reprlib  # abbreviates a long list of values

        raise TypeError(
            f"Array(shape, dtype) allocates zeros: shape must be an int or a sequence of ints, "
            f"got {reprlib.repr(shape)}; build an Array from values with "
            f"Array.from_list(values, dtype), or from a buffer with Array.from_buffer(obj) "
            f"(.copy() for an owned copy)"
        ) from None
    return _check_shape(ints)


def _check_dtype(dtype: DType) -> DType:
    if dtype not in _CODES:
        raise TypeError(f"dtype must be one of {sorted(_CODES)}, got {dtype!r}")
    return dtype


class Array(Indexing):
    """A typed, shaped, C-contiguous buffer: float32, int32, float64 or int64.

    `Array(shape, dtype)` allocates zeros (as `mojolearn.zeros`); `Array.from_list(values)`
    copies numbers, `Array.from_buffer(obj)` borrows a buffer. It has no arithmetic (the kernels
    do that); `a.numpy()`, `numpy.asarray(a)`, `torch.from_dlpack(a)` and (Python 3.12+)
    `memoryview(a)` share its memory. Integers index (`a[1]`: a view); a slice copies
    (`a[:3]`, `a[1:4, 2]`, `a[::-1]`: a fresh Array, as `take` makes).

    Example:
        >>> mojolearn.Array((2, 3)).tolist()
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        >>> a = mojolearn.Array.from_list([[1.0, 2.0], [3.0, 4.0]])
        >>> a.shape, a.dtype, a[1, 0]
        ((2, 2), '<f4', 3.0)
    """

    # `_mv_` holds the memoryview, read through the `_mv` property (a result view makes it on
    # first use). No `__getattr__` on this class: CPython 3.11 does not specialize attribute
    # access on a type that has one, which made every `_addr` / `_shape` read ~2x slower.
    __slots__ = ("_mv_", "_shape", "_dtype", "_addr", "_owner", "_size", "_readonly", "__weakref__")
    _mv_: View
    _shape: tuple[int, ...]
    _dtype: DType
    _addr: int
    _owner: Any  # what keeps the memory alive: an array.array, the exporter, an Array
    _size: int
    _readonly: bool

    def __init__(self, shape: int | Sequence[SupportsIndex], dtype: DType = "<f4") -> None:
        """Allocate a new owned Array of zeros (+0.0: all bytes zero), as `mojolearn.zeros`.

        Args:
            shape: an int (one axis) or a sequence of non-negative ints.
            dtype: '<f4' (float32), '<i4', '<f8' or '<i8'.

        Raises:
            TypeError: `shape` is not an int or a sequence of ints (values such as
                `[1.5, 2.0]`, nested lists, a buffer: the message names `Array.from_list`),
                or an unsupported dtype.
            ValueError: a negative length.

        Example:
            >>> mojolearn.Array(3, "<i4").tolist()
            [0, 0, 0]
        """
        dims = _shape_of(shape)
        code = _CODES[_check_dtype(dtype)]
        self._own(_ZERO[code] * math.prod(dims), dims, dtype)

    @property
    def _mv(self) -> View:
        try:
            return self._mv_
        except AttributeError:  # a result view (`_result_view`): made on first use
            start = (self._addr - self._owner.buffer_info()[0]) >> 2  # offset, in floats
            mv = self._mv_ = memoryview(self._owner)[start : start + self._size]
            return mv

    # -- construction ----------------------------------------------------------------------

    def _own(self, owned: PyArray, shape: tuple[int, ...], dtype: DType) -> None:
        self._mv_ = memoryview(owned)
        self._owner = owned
        self._shape = shape
        self._dtype = dtype
        self._size = len(owned)
        self._readonly = False
        self._addr = owned.buffer_info()[0] if len(owned) else 0

    @classmethod
    def _wrap(cls, owned: PyArray, shape: tuple[int, ...], dtype: DType) -> Array:
        self = cls.__new__(cls)
        self._own(owned, shape, dtype)
        return self

    @classmethod
    def from_list(cls, values: list[Any] | tuple[Any, ...], dtype: DType = "<f4") -> Array:
        """A new owned Array from a flat or nested (rectangular) list of numbers.

        Args:
            values: a list or tuple of numbers, or of such lists (rectangular).
            dtype: the Array's dtype: '<f4' (float32, the default), '<i4', '<f8' or '<i8'.

        Returns:
            The new Array, shaped as the nesting (reshape it for another shape).

        Raises:
            TypeError: `values` is not a list or tuple, an unsupported dtype, or a value the
                dtype cannot hold (a float for an integer dtype).
            ValueError: a ragged list.

        Example:
            >>> mojolearn.Array.from_list([[1, 2], [3, 4]], "<i4").shape
            (2, 2)
        """
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"Array.from_list needs a list or tuple, got {type(values).__name__}")
        code = _CODES[_check_dtype(dtype)]
        flat, shape = _flatten(values)
        return cls._wrap(_pyarray.array(code, flat), shape, dtype)

    @classmethod
    def from_buffer(cls, obj: BufferLike) -> Array:
        """Borrow `obj`'s buffer without copying.

        Args:
            obj: a C-contiguous float32, int32, float64 or int64 buffer in native byte order,
                or a CPU DLPack producer (`mojolearn.from_dlpack`); an Array is returned as is.

        Returns:
            An Array over `obj`'s memory that keeps `obj` alive; writes go through to it.

        Raises:
            TypeError: `obj` exports no buffer and no DLPack, or has another dtype.
            ValueError: the buffer is not C-contiguous.
        """
        if type(obj) is cls:
            return obj
        try:
            mv = memoryview(obj)  # type: ignore[arg-type]  # DLPack-only: TypeError, below
        except TypeError:
            if hasattr(obj, "__dlpack__"):  # a torch tensor, a JAX array: DLPack, zero-copy
                return from_dlpack(obj)  # type: ignore[arg-type]  # has __dlpack__
            raise TypeError(
                f"Array.from_buffer needs a buffer-protocol or DLPack object, got "
                f"{type(obj).__name__}"
            ) from None
        dtype = dtype_of(mv.format, mv.itemsize)
        if dtype is None:
            raise TypeError(
                f"Array.from_buffer: unsupported dtype {dtype_name(mv.format, mv.itemsize)}"
                f" (expected float32, int32, float64 or int64, native byte order)"
            )
        if not mv.c_contiguous:
            raise ValueError("Array.from_buffer needs a C-contiguous buffer (copy it first)")
        self = cls.__new__(cls)
        # A view with a 0 in its shape cannot be cast: an empty one of the dtype stands in.
        flat = (
            mv.cast("B").cast(_CODES[dtype])
            if mv.nbytes
            else memoryview(_pyarray.array(_CODES[dtype]))
        )
        self._mv_ = flat
        self._owner = obj
        self._shape = tuple(mv.shape)  # type: ignore[arg-type]  # None only once released
        self._dtype = dtype
        self._size = math.prod(self._shape)
        self._readonly = mv.readonly
        self._addr = _reader.describe(mv).address if mv.nbytes else 0
        return self

    # -- layout --------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The length of each axis."""
        return self._shape

    @property
    def dtype(self) -> DType:
        """'<f4', '<i4', '<f8' or '<i8' (NumPy's little-endian typestr)."""
        return self._dtype

    @property
    def size(self) -> int:
        """The number of values (the product of `shape`)."""
        return self._size

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self._shape)

    @property
    def itemsize(self) -> int:
        """Bytes per value: 4 or 8."""
        return int(self._dtype[2])

    @property
    def nbytes(self) -> int:
        """Bytes of all values: `size * itemsize`."""
        return self._size * self.itemsize

    @property
    def readonly(self) -> bool:
        """True when the memory is read-only (a borrowed read-only buffer)."""
        return self._readonly

    def _probe(self) -> Any:
        """This Array's `_reader.Layout` (always C-contiguous, on the CPU)."""
        return _reader.Layout(
            _CODES[self._dtype],
            self.itemsize,
            self._shape,
            len(self._shape),
            True,
            self._readonly,
            self.nbytes,
            self._addr,
            1,
            self,
        )

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d Array")
        return self._shape[0]

    # -- interop -------------------------------------------------------------------------

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self._shape,
            "typestr": self._dtype,
            "version": 3,
            "strides": None,
            "data": (self._addr, self._readonly),
        }

    def __buffer__(self, flags: int) -> View:
        """PEP 688 (used by memoryview() on Python 3.12+)."""
        if self._size == 0:
            return self._mv.cast("B").cast(_CODES[self._dtype])
        return self._mv.cast("B").cast(_CODES[self._dtype], self._shape)

    def __release_buffer__(self, view: View) -> None:
        view.release()

    def __dlpack__(
        self,
        *,
        stream: object = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> object:
        """DLPack export (a capsule sharing this Array's memory; `copy=True` exports a copy):
        `numpy.from_dlpack(a)`, `torch.from_dlpack(a)`."""
        return _dlpack.export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(1, 0): CPU memory."""
        return (1, 0)

    def tobytes(self) -> bytes:
        """The raw bytes.

        Returns:
            The values' native (little-endian) bytes, in C order.
        """
        return self._mv.tobytes()

    def tolist(self) -> Any:
        """The values as Python numbers.

        Returns:
            Nested lists shaped as the Array (a number for a 0-d Array).
        """
        return _nest(self._mv.tolist(), self._shape)

    def copy(self) -> Array:
        """An owned copy.

        Returns:
            A new Array with the same values, shape and dtype (never aliasing this one).
        """
        owned = _pyarray.array(_CODES[self._dtype])
        owned.frombytes(self._mv.tobytes())
        return Array._wrap(owned, self._shape, self._dtype)

    def __copy__(self) -> Array:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Array:
        return self.copy()

    def __reduce__(self) -> tuple[Callable[..., Array], tuple[bytes, DType, tuple[int, ...]]]:
        # Pickled as its bytes: the copy owns its memory (a borrowed buffer is not shared).
        return frombytes, (self.tobytes(), self._dtype, self._shape)

    def reshape(self, *shape: int | Sequence[int]) -> Array:
        """A view with another shape over the same memory.

        Args:
            *shape: the new shape, as ints or one sequence of ints; one may be -1 (inferred).

        Returns:
            An Array sharing this one's memory.

        Raises:
            ValueError: the shape does not hold `size` values.
        """
        # mypy cannot follow `shape` from "ints or one sequence" to ints: hence two ignores.
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        if shape.count(-1) == 1:
            rest = math.prod(d for d in shape if d != -1)  # type: ignore[misc]
            if rest == 0 or self._size % rest:
                raise ValueError(f"cannot reshape size {self._size} into {shape}")
            shape = tuple(self._size // rest if d == -1 else d for d in shape)
        shape = _check_shape(shape)  # type: ignore[arg-type]
        if math.prod(shape) != self._size:
            raise ValueError(f"cannot reshape size {self._size} into {shape}")
        return self._view(self._mv, shape, self._addr)

    def _view(self, mv: View, shape: tuple[int, ...], addr: int) -> Array:
        out = Array.__new__(Array)
        out._mv_, out._owner, out._shape, out._dtype = mv, self, shape, self._dtype
        out._size, out._readonly, out._addr = math.prod(shape), self._readonly, addr
        return out

    # -- gathering -----------------------------------------------------------------------

    def take(self, indices: Sequence[SupportsIndex] | BufferLike, axis: int = 0) -> Array:
        """Gather entries along an axis into a new Array, in one binding call.

        As `numpy.take(a, indices, axis)` for 1-D indices: the result's `axis` holds the
        entries at `indices`, in their order (repeats allowed); a negative index counts from
        the end, as in Python. Bytes are copied as they are, for every dtype. This Array is
        not changed.

        Args:
            indices: a list, tuple or range of ints, or a 1-D integer buffer (an int32 or
                int64 Array, NumPy array, torch tensor, array.array or memoryview: read in
                place when C-contiguous).
            axis: the axis to gather along (negative: from the end).

        Returns:
            A new owned C-contiguous Array of this dtype, shaped as this one with
            `shape[axis]` replaced by `len(indices)`: `(len(indices), *shape[1:])` for axis 0.

        Raises:
            IndexError: an index outside [-shape[axis], shape[axis]) (the message names its
                position in `indices` and its value).
            TypeError: indices that are not integers (bools included: a mask is not a list
                of positions), or an axis that is not an int.
            ValueError: indices that are not 1-D, or an axis out of range.

        Example:
            >>> a = mojolearn.Array.from_list([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
            >>> a.take([2, 0, -1]).tolist()
            [[5.0, 6.0], [1.0, 2.0], [5.0, 6.0]]
        """
        return _take.take(self, indices, axis, _CODES[self._dtype])

    # -- indexing ------------------------------------------------------------------------

    def _offset(self, key: SupportsIndex | tuple[SupportsIndex, ...]) -> tuple[int, int]:
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > len(self._shape):
            raise IndexError(f"too many indices for an Array of shape {self._shape}")
        offset, stride = 0, self._size
        for i, (k, d) in enumerate(zip(key, self._shape)):
            if type(k) is not int and not hasattr(k, "__index__") or isinstance(k, bool):
                raise TypeError(f"Array indices must be ints, got {type(k).__name__}")
            k = k.__index__()
            if not -d <= k < d:
                raise IndexError(f"index {k} is out of bounds for axis {i} with size {d}")
            stride //= d
            offset += (k + d if k < 0 else k) * stride
        return offset, len(key)

    def __getitem__(self, key: SupportsIndex | slice | tuple[SupportsIndex | slice, ...]) -> Any:
        if has_slice(key):
            return self._sliced(key)
        offset, used = self._offset(key)  # type: ignore[arg-type]  # no slice here (has_slice)
        if used == len(self._shape):
            return self._mv[offset]
        sub = self._shape[used:]
        n = math.prod(sub)
        return self._view(self._mv[offset : offset + n], sub, self._addr + offset * self.itemsize)

    def __setitem__(self, key: SupportsIndex | tuple[SupportsIndex, ...], value: float) -> None:
        if self._readonly:
            raise ValueError("assignment to a read-only Array")
        offset, used = self._offset(key)
        if used != len(self._shape):
            raise TypeError("only single elements can be assigned (no arithmetic, no slices)")
        self._mv[offset] = value

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    # -- reductions without NumPy ---------------------------------------------------------

    def _values(self, what: str) -> Sequence[float]:
        if self._size == 0:
            raise ValueError(f"{what}() of an empty Array")
        return self._mv.tolist()

    def min(self) -> float:
        """The smallest value.

        Returns:
            The smallest value (an int for an integer Array).

        Raises:
            ValueError: the Array is empty.
        """
        return min(self._values("min"))

    def max(self) -> float:
        """The largest value.

        Returns:
            The largest value (an int for an integer Array).

        Raises:
            ValueError: the Array is empty.
        """
        return max(self._values("max"))

    def argmax(self) -> int:
        """Where the largest value is.

        Returns:
            The flat (C-order) index of the first maximum (NaN-free data assumed).

        Raises:
            ValueError: the Array is empty.
        """
        vals = self._values("argmax")
        return vals.index(max(vals))

    def sum(self) -> float:
        """The sum of all values.

        Returns:
            The correctly rounded sum (math.fsum) for floats, the exact one for ints (0 or 0.0
            when empty).
        """
        vals = self._mv.tolist()
        return math.fsum(vals) if self._dtype[1] == "f" else sum(vals)

    def __repr__(self) -> str:
        vals = self._mv[:_REPR_LIMIT].tolist()
        body = ", ".join(repr(v) for v in vals)
        if self._size > _REPR_LIMIT:
            body += f", ... ({self._size} values)"
        return f"Array([{body}], dtype='{self._dtype}', shape={self._shape})"


_new_object = object.__new__


def _result_view(owner: PyArray, shape: tuple[int, ...], addr: int, size: int) -> Array:
    """A float32 Array over `size` items of `owner` (an array.array("f") a binding has just
    written) from address `addr`: the cheapest construction, for results. Its memoryview is
    made on first use (the `_mv` property). No checks: the caller guarantees that the
    arguments agree. (`SmallMLPTrainer.train_step` inlines this for its five result views.)"""
    a = _new_object(Array)
    a._owner = owner
    a._shape = shape
    a._dtype = "<f4"
    a._size = size
    a._readonly = False
    a._addr = addr
    return a


def from_dlpack(obj: SupportsDLPack) -> Array:
    """An Array sharing a DLPack producer's CPU memory, without copying.

    Args:
        obj: a NumPy array, a CPU torch tensor, a JAX array: anything with `__dlpack__`,
            C-contiguous, float32, float64, int32 or int64.

    Returns:
        An Array viewing `obj`'s memory and keeping it alive (writes go through).

    Raises:
        TypeError: `obj` has no `__dlpack__`, or refuses to export (a torch parameter that
            requires grad: pass `p.detach()`).
        ValueError: a non-CPU device, a strided layout or another dtype.

    Example:
        >>> a = mojolearn.from_dlpack(torch.zeros(2, 3))
        >>> a.shape, a.dtype
        ((2, 3), '<f4')
    """
    raw, keeper, shape, dtype, size, readonly, address = _dlpack.import_parts(obj)
    mv = memoryview(raw).cast("B").cast(_CODES[dtype])
    a = Array.__new__(Array)
    a._mv_, a._owner, a._shape, a._dtype = (
        (mv.toreadonly() if readonly else mv),
        keeper,
        shape,
        dtype,
    )
    a._size, a._readonly, a._addr = size, readonly, address
    return a


def frombytes(raw: bytes, dtype: DType, shape: int | Sequence[int]) -> Array:
    """A new owned Array from little-endian bytes (the checkpoint encoding, pickles)."""
    shape = _check_shape(shape)
    owned = _pyarray.array(_CODES[_check_dtype(dtype)])
    if len(raw) != math.prod(shape) * owned.itemsize:
        raise ValueError(f"{len(raw)} bytes do not hold shape {shape} of {dtype}")
    owned.frombytes(raw)
    return Array._wrap(owned, shape, dtype)


def _flatten(values: Any) -> tuple[list[Any], tuple[int, ...]]:
    """Flat list and shape of a rectangular nested list."""
    if not isinstance(values, (list, tuple)):
        return [values], ()
    if not values:
        return [], (0,)
    parts = [_flatten(v) for v in values]
    inner = parts[0][1]
    if any(p[1] != inner for p in parts):
        raise ValueError("nested lists must be rectangular")
    return [x for p in parts for x in p[0]], (len(values),) + inner


def _nest(flat: list[Any], shape: tuple[int, ...]) -> Any:
    if len(shape) <= 1:
        return flat if shape else flat[0]
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
