"""Owned host buffers: new Arrays (`zeros`, `empty`), their bytes, a finiteness scan. Reading
callers' buffers is `_intake`'s."""

import array as _pyarray
import math

from ._array import _CODES, Array, _check_dtype, _check_shape
from ._intake import as_f32_c


def empty(shape, dtype="<f4"):
    """A new owned Array. Its contents are zeros too (array.array has no uninitialised
    allocation), so `empty` and `zeros` differ only in intent."""
    return zeros(shape, dtype)


def zeros(shape, dtype="<f4"):
    """A new owned Array of zeros (+0.0 bytes)."""
    shape = _check_shape(shape)
    code = _CODES[_check_dtype(dtype)]
    return Array._wrap(_pyarray.array(code, bytes(math.prod(shape) * int(dtype[2]))), shape, dtype)


def le_bytes(obj, kind=None):
    """The little-endian bytes of a C-contiguous buffer, C order (hosts are little-endian)."""
    if type(obj) is Array:
        return obj._mv.tobytes()
    with memoryview(obj) as mv:
        if not mv.c_contiguous:
            raise ValueError("le_bytes needs a C-contiguous buffer")
        return mv.tobytes()


def all_finite(obj, name="array"):
    """True when every value of a float32 buffer is finite (scanned in the binding)."""
    from . import _backend

    arr, _ = as_f32_c(obj, name=name)
    if arr._size == 0:
        return True
    return _backend.binding().all_finite([arr._addr], [arr._size]) == 1
