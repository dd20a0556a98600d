"""Host checks and buffers: addresses for the binding, dtype-strict C-contiguous copies.

Nothing here converts silently: `as_f32_c` REFUSES anything but float32 (a float64 array is a
TypeError naming the argument, never a rounded copy), `as_i32_c` converts integer labels only
and refuses values outside int32 by name. Non-contiguous inputs are copied into C order.
"""
import array as _pyarray
import math

from ._array import Array, _CODES, _check_dtype, _check_shape, dtype_of
from ._bufcheck import address, dtype_name, is_integer, is_native_f32, probe, split_format

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def _dlpack_in(obj):
    """A DLPack-only object (a torch tensor, no buffer protocol) as the Array sharing its
    memory; anything else as it is."""
    if type(obj) is Array or not hasattr(type(obj), "__dlpack__"):
        return obj
    try:
        memoryview(obj).release()
        return obj
    except TypeError:
        return Array.from_buffer(obj)


def _as_array(obj, name):
    if type(obj) is Array:
        return obj
    try:
        return Array.from_buffer(obj)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc}") from None


def addr(obj, name="buffer"):
    """Address of a writable, C-contiguous buffer. ValueError when read-only or strided.
    The caller keeps `obj` alive for as long as the address is used."""
    if type(obj) is Array:
        if obj._readonly:
            raise ValueError(f"{name} is read-only; a writable buffer is required")
        return obj._addr
    pb = probe(obj)
    if pb.readonly:
        raise ValueError(f"{name} is read-only; a writable buffer is required")
    if not pb.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return address(obj)


def addr_ro(obj, name="buffer"):
    """Address of a C-contiguous buffer that the binding will only read."""
    if type(obj) is Array:
        return obj._addr
    if not probe(obj).c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return address(obj)


def _check_ndim(pb, ndim, name):
    if ndim is not None and pb.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension{'s' if ndim != 1 else ''}, "
                         f"got shape {pb.shape}")


def probe_f32(obj, name="array"):
    """The layout of a native float32 buffer; TypeError naming `name` and the dtype seen for
    anything else (float64 included: no silent rounding)."""
    try:
        pb = probe(obj)
    except TypeError as exc:
        if hasattr(type(obj), "__dlpack__"):  # e.g. a torch tensor that requires grad
            raise TypeError(f"{name}: {exc}") from None
        raise TypeError(f"{name} must be a float32 buffer (NumPy array, torch tensor, "
                        f"array.array, memoryview or mojolearn.Array), got "
                        f"{type(obj).__name__}") from None
    if not is_native_f32(pb.format, pb.itemsize):
        raise TypeError(f"{name} must be float32, got {dtype_name(pb.format, pb.itemsize)}")
    return pb


def as_f32_c(obj, ndim=None, name="array"):
    """(Array, copied): `obj` as float32 C-contiguous, borrowed when it already is, else a
    C-order copy. TypeError for any other dtype (float64 included: no silent rounding)."""
    obj = _dlpack_in(obj)
    pb = probe_f32(obj, name)
    _check_ndim(pb, ndim, name)
    if pb.c_contiguous:
        return _as_array(obj, name), False
    return Array(_strided_values(obj), "<f4", pb.shape), True


def as_i32_c(obj, ndim=None, name="array"):
    """(Array, copied): integer values as int32 C-contiguous. Any integer format converts
    (int8..int64, unsigned); a non-integer format is a TypeError, a value outside int32 a
    ValueError naming `name`."""
    obj = _dlpack_in(obj)
    try:
        pb = probe(obj)
    except TypeError:
        raise TypeError(f"{name} must be an integer buffer, got {type(obj).__name__}") from None
    if not is_integer(pb.format):
        raise TypeError(f"{name} must hold integers, got {dtype_name(pb.format, pb.itemsize)}")
    if split_format(pb.format)[0] != "":
        raise TypeError(f"{name} must hold native-endian integers, got "
                        f"{dtype_name(pb.format, pb.itemsize)}")
    _check_ndim(pb, ndim, name)
    if pb.c_contiguous and dtype_of(pb.format, pb.itemsize) == "<i4":
        return _as_array(obj, name), False
    if pb.c_contiguous and split_format(pb.format)[0] == "" and pb.nbytes:
        # array.array converts item by item in C and refuses values outside int32.
        with (memoryview(obj) if type(obj) is not Array else obj._mv.cast("B")) as mv:
            flat = mv.cast("B").cast(split_format(pb.format)[1])
            try:
                owned = _pyarray.array(_CODES["<i4"], flat)
            except OverflowError:
                owned = None
            values = None if owned is not None else flat.tolist()
            flat.release()
        if owned is not None:
            return Array._wrap(owned, pb.shape, "<i4"), True
    else:
        values = _strided_values(obj)
    bad = next((v for v in values if not _I32_MIN <= v <= _I32_MAX), None)
    if bad is not None:
        raise ValueError(f"{name} holds {bad}, outside the int32 range")
    return Array(values, "<i4", pb.shape), True


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
