"""`Array.take`'s host side: the indices as (keep-alive, address, count, itemsize), then ONE
`array_take` binding call (mojo/training/take.mojo), which checks every index, allocates the
result (a bytearray, not zeroed: every byte is then written) and gathers into it.

Indices come as a list, tuple or range of ints (packed into an int64 `array.array`), or as a
1-D integer buffer: a native int32 / int64 C-contiguous one (an Array, NumPy, torch,
array.array, memoryview) is read where it lies; any other integer buffer is read as a list.

This module imports no `_array` (which imports it): the Array class is the source's own type.
"""

from __future__ import annotations

import array as _pyarray

from . import reader as _reader
from .formats import dtype_name, is_integer

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .array import Array

_INDEX_SPEC = _reader.spec(_reader.LABELS, 1)  # native int32 / int64, 1-D, C-contiguous
_EXPECTED = (
    "a list, tuple or range of ints, or a 1-D int32/int64 buffer (NumPy array, torch tensor, "
    "array.array, memoryview or mojolearn.Array)"
)
_entry: Callable[..., Any] | None = None
_new = object.__new__


def _load_entry() -> Callable[..., Any]:
    global _entry
    _entry = _reader.host_entry("array_take")
    return _entry


def take(src: Array, indices: Any, axis: Any, code: Any) -> Array:
    """A new owned Array: `src`'s entries at `indices` along `axis` (the typecode `code`)."""
    shape = src._shape
    keep, address, n, index_itemsize = _indices(indices, type(src))
    if axis == 0 and type(axis) is int and shape:  # the common case, without the loops below
        ax, outer, rows, inner = 0, 1, shape[0], 1
        for d in shape[1:]:
            inner *= d
        out_shape = (n, *shape[1:])
    else:
        ax = _axis(axis, len(shape))
        outer, rows, inner = 1, shape[ax], 1
        for d in shape[:ax]:
            outer *= d
        for d in shape[ax + 1 :]:
            inner *= d
        out_shape = (*shape[:ax], n, *shape[ax + 1 :])
    try:
        r = (_entry or _load_entry())(
            src._addr, address, outer, rows, inner * int(src._dtype[2]), n, index_itemsize
        )
    except Exception as exc:
        raise _reader.translate(exc) from None
    del keep  # held until the binding has read the indices
    owned, at = r
    if type(owned) is int:
        raise IndexError(
            f"Array.take: indices[{owned}] = {at} is out of bounds for axis {ax} with size {rows}"
        )
    # The binding's bytearray, every byte written (not zeroed first), viewed as the dtype.
    out = _new(type(src))
    out._mv_ = memoryview(owned).cast(code)
    out._owner, out._shape, out._dtype = owned, out_shape, src._dtype
    out._size, out._readonly = len(out._mv_), False
    out._addr = at if out._size else 0
    return out


def _axis(axis: Any, ndim: int) -> int:
    if isinstance(axis, bool) or type(axis) is not int:
        raise TypeError(f"Array.take: axis must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"Array.take: axis must be in [{-ndim}, {ndim}) for an Array of {ndim} "
            f"dimension{'s' if ndim != 1 else ''}, got {axis}"
        )
    return axis + ndim if axis < 0 else axis


def _indices(obj: Any, array_type: type) -> tuple[Any, int, int, int]:
    """(keep, address, count, itemsize 4 or 8) of the indices; refusals by name."""
    t = type(obj)
    if t is list or t is tuple or t is range:
        return _packed(obj)
    if t is array_type:
        if obj._dtype in ("<i4", "<i8") and len(obj._shape) == 1:
            return obj, obj._addr, obj._size, int(obj._dtype[2])
        return _other_buffer(obj, obj._probe())
    r = _reader.read(obj, _INDEX_SPEC, True)
    if r is not None:
        keep, address, shape, itemsize = r
        return keep, address, shape[0], itemsize
    layout = _reader.describe(obj)
    if layout is None:
        raise TypeError(f"Array.take: indices must be {_EXPECTED}, got {t.__name__}")
    return _other_buffer(obj, layout)


def _other_buffer(obj: Any, layout: Any) -> tuple[Any, int, int, int]:
    """A buffer the fast read declined: empty, strided, another integer dtype, or refused."""
    if not is_integer(layout.format):
        raise TypeError(
            f"Array.take: indices must hold integers, got "
            f"{dtype_name(layout.format, layout.itemsize)}"
        )
    if layout.ndim != 1:
        raise ValueError(f"Array.take: indices must be 1-D, got shape {tuple(layout.shape)}")
    if layout.nbytes == 0:
        return None, 0, 0, 8
    if _reader.is_dlpack_only(obj):  # nothing to read it as a list with
        raise ValueError(
            f"Array.take: indices must be a C-contiguous int32 or int64 tensor, got "
            f"{dtype_name(layout.format, layout.itemsize)} with shape {tuple(layout.shape)} "
            f"(call .contiguous() or convert it to int64 first)"
        )
    try:
        with memoryview(obj) as mv:
            values = mv.tolist()
    except (NotImplementedError, ValueError):  # a non-native byte order, say
        raise TypeError(
            f"Array.take: indices must be native-endian integers, got "
            f"{dtype_name(layout.format, layout.itemsize)}"
        ) from None
    return _packed(values)


def _packed(values: Any) -> tuple[Any, int, int, int]:
    """A sequence of ints as an int64 array.array (bools refused: a mask is not positions)."""
    try:
        packed = _pyarray.array("q", values)
    except (TypeError, OverflowError):
        _refuse_item(values)
        raise
    if bool in set(map(type, values)):
        _refuse_item(values)
    n = len(packed)
    return packed, packed.buffer_info()[0] if n else 0, n, 8


def _refuse_item(values: Any) -> None:
    """Raise for the first item that is not an index: TypeError, or IndexError (too large)."""
    for i, v in enumerate(values):
        if isinstance(v, bool):
            raise TypeError(
                f"Array.take: indices[{i}] is a bool; indices are positions, not a mask "
                f"(pass the positions of the True values)"
            )
        try:
            v = v.__index__()
        except (AttributeError, TypeError):
            raise TypeError(
                f"Array.take: indices must be ints, got {type(v).__name__} at indices[{i}]"
            ) from None
        if not -(1 << 63) <= v < 1 << 63:
            raise IndexError(f"Array.take: indices[{i}] = {v} is out of bounds")
