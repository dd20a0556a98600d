"""Read the layout of any buffer-protocol object without NumPy.

`probe(obj)` reports format, itemsize, shape, strides, C-contiguity and read-only-ness of a
NumPy array, `array.array`, `memoryview`, `bytes`/`bytearray` or `mojolearn.Array`. The
predicates below classify format codes: native-endian float32 and 32-bit integers are
recognised by code and itemsize, never by guessing from values.
"""
import sys
from collections import namedtuple

Probe = namedtuple("Probe", "format itemsize shape strides ndim c_contiguous readonly nbytes")

_NATIVE = "<" if sys.byteorder == "little" else ">"
_NATIVE_PREFIXES = ("", "@", "=", _NATIVE)
_INT_CODES = frozenset("bBhHiIlLqQnN")
_FLOAT_NAMES = {2: "float16", 4: "float32", 8: "float64"}


def split_format(fmt):
    """('<' / '>' / '' for native, code) of a single-item struct format such as '<f' or 'i'."""
    if fmt and fmt[0] in "@=<>!":
        prefix, code = fmt[0], fmt[1:]
        prefix = "" if prefix in "@=" or prefix == _NATIVE else (">" if prefix == "!" else prefix)
        return prefix, code
    return "", fmt


def probe(obj):
    """Layout of `obj`'s buffer. TypeError when `obj` does not export one."""
    from ._array import Array  # local: _array imports this module

    if type(obj) is Array:
        return obj._probe()
    try:
        mv = memoryview(obj)
    except TypeError:
        if hasattr(obj, "__dlpack__"):  # a torch tensor, a JAX array: DLPack, zero-copy
            return Array.from_buffer(obj)._probe()
        raise TypeError(f"expected an object with the buffer protocol or DLPack (a NumPy "
                        f"array, torch tensor, array.array, memoryview, bytes or "
                        f"mojolearn.Array), got {type(obj).__name__}") from None
    with mv:
        return Probe(mv.format, mv.itemsize, tuple(mv.shape), tuple(mv.strides), mv.ndim,
                     mv.c_contiguous, mv.readonly, mv.nbytes)


def is_native_f32(fmt, itemsize=4):
    prefix, code = split_format(fmt)
    return prefix == "" and code == "f" and itemsize == 4


def is_integer(fmt):
    return split_format(fmt)[1] in _INT_CODES


def is_int32(fmt, itemsize):
    prefix, code = split_format(fmt)
    return prefix == "" and code in _INT_CODES and code.islower() and itemsize == 4


def dtype_name(fmt, itemsize):
    """A readable name for error messages: 'float64', 'int64', 'uint8', '>f4', 'bool' ..."""
    prefix, code = split_format(fmt)
    if code == "?":
        name = "bool"
    elif code in "efd":
        name = _FLOAT_NAMES.get(itemsize, f"float{8 * itemsize}")
    elif code in _INT_CODES:
        name = ("int" if code.islower() else "uint") + str(8 * itemsize)
    else:
        return f"format {fmt!r}"
    return name if prefix == "" else f"{name} ({'big' if prefix == '>' else 'little'}-endian)"


def address(obj):
    """Base address of `obj`'s buffer (read-only buffers included), through PyObject_GetBuffer.

    The address stays valid while the caller keeps `obj` (or a memoryview of it) alive and
    the exporter does not reallocate; `mojolearn.Array` holds a memoryview for exactly that.
    """
    arr_info = getattr(obj, "buffer_info", None)
    if arr_info is not None and type(obj).__module__ == "array":
        return arr_info()[0]
    view = _PyBuffer()
    if _get_buffer(obj, view, 0) != 0:  # PyBUF_SIMPLE; a failure has raised already
        raise TypeError(f"{type(obj).__name__} does not export a buffer")
    try:
        return view.buf or 0
    finally:
        _release_buffer(view)


def _ctypes_api():
    import ctypes

    class PyBuffer(ctypes.Structure):  # CPython's Py_buffer, stable across 3.10-3.13
        _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                    ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                    ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                    ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                    ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                    ("internal", ctypes.c_void_p)]

    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int]
    get.restype = ctypes.c_int
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.POINTER(PyBuffer)]
    release.restype = None
    return PyBuffer, (lambda o, v, f: get(o, ctypes.byref(v), f)), (lambda v: release(ctypes.byref(v)))


class _Lazy:
    """ctypes is imported on first use only (keeps `import mojolearn` fast)."""
    api = None


def _PyBuffer():
    if _Lazy.api is None:
        _Lazy.api = _ctypes_api()
    return _Lazy.api[0]()


def _get_buffer(obj, view, flags):
    return _Lazy.api[1](obj, view, flags)


def _release_buffer(view):
    _Lazy.api[2](view)
