"""`mojolearn.Array`: a typed, shaped, C-contiguous buffer for people without NumPy.

An Array either OWNS an `array.array` (allocated once, never resized, so its address is fixed
for the Array's lifetime) or BORROWS another object's C-contiguous buffer through a memoryview
that keeps the exporter alive and locked. It has no arithmetic: the kernels do that.
`numpy.asarray(a)` is zero-copy (`__array_interface__`), `memoryview(a)` works on 3.12+
(`__buffer__`).
"""

import array as _pyarray
import math
import sys

if sys.byteorder != "little":  # every CPU and GPU target we build for is little-endian
    raise ImportError("mojolearn supports little-endian hosts only")

from . import _reader
from ._bufcheck import dtype_name, split_format

# dtype -> array.array typecode (native = little-endian, checked above).
_CODES = {
    "<f4": "f",
    "<i4": "i" if _pyarray.array("i").itemsize == 4 else "l",
    "<f8": "d",
    "<i8": "q",
}
_DTYPE_OF_CODE = {("f", 4): "<f4", ("d", 8): "<f8"}
for _c in "bhilqn":
    for _size, _name in ((4, "<i4"), (8, "<i8")):
        _DTYPE_OF_CODE[(_c, _size)] = _name
_REPR_LIMIT = 8


def dtype_of(fmt, itemsize):
    """The Array dtype of a native buffer format, or None."""
    prefix, code = split_format(fmt)
    return _DTYPE_OF_CODE.get((code, itemsize)) if prefix == "" else None


def _check_shape(shape):
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


def _check_dtype(dtype):
    if dtype not in _CODES:
        raise TypeError(f"dtype must be one of {sorted(_CODES)}, got {dtype!r}")
    return dtype


class Array:
    """A typed, shaped, C-contiguous buffer. Build one with `mojolearn.zeros`, `empty`,
    `Array(values, dtype)` or `Array.from_buffer(obj)`."""

    # `_mv_` holds the memoryview, read through the `_mv` property (a result view makes it on
    # first use). No `__getattr__` on this class: CPython 3.11 does not specialize attribute
    # access on a type that has one, which made every `_addr` / `_shape` read ~2x slower.
    __slots__ = ("_mv_", "_shape", "_dtype", "_addr", "_owner", "_size", "_readonly", "__weakref__")

    def __init__(self, values, dtype=None, shape=None):
        """Copy `values` (a flat or nested list, or a buffer) into a new owned Array: a list's
        dtype is `dtype` (default '<f4'), a buffer's its own (a different `dtype` given is a
        TypeError: nothing converts silently)."""
        if isinstance(values, (list, tuple)):
            dtype = _check_dtype("<f4" if dtype is None else dtype)
            flat, found = _flatten(values)
            shape = found if shape is None else _check_shape(shape)
            owned = _pyarray.array(_CODES[dtype], flat)
        else:
            src = Array.from_buffer(values)
            dtype = src._dtype if dtype is None else _check_dtype(dtype)
            if src._dtype != dtype:
                raise TypeError(f"values have dtype {src._dtype}, not {dtype}")
            shape = src._shape if shape is None else _check_shape(shape)
            owned = _pyarray.array(_CODES[dtype], src._mv.tobytes())
        if math.prod(shape) != len(owned):
            raise ValueError(f"shape {shape} does not hold {len(owned)} values")
        self._own(owned, shape, dtype)

    @property
    def _mv(self):
        try:
            return self._mv_
        except AttributeError:  # a result view (`_result_view`): made on first use
            start = (self._addr - self._owner.buffer_info()[0]) >> 2  # offset, in floats
            mv = self._mv_ = memoryview(self._owner)[start : start + self._size]
            return mv

    # -- construction ----------------------------------------------------------------------

    def _own(self, owned, shape, dtype):
        self._mv_ = memoryview(owned)
        self._owner = owned
        self._shape = shape
        self._dtype = dtype
        self._size = len(owned)
        self._readonly = False
        self._addr = owned.buffer_info()[0] if len(owned) else 0

    @classmethod
    def _wrap(cls, owned, shape, dtype):
        self = cls.__new__(cls)
        self._own(owned, shape, dtype)
        return self

    @classmethod
    def from_list(cls, values, dtype="<f4"):
        """A new owned Array from a flat or nested (rectangular) list of numbers."""
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"Array.from_list needs a list or tuple, got {type(values).__name__}")
        return cls(values, dtype)

    @classmethod
    def from_buffer(cls, obj):
        """Borrow `obj`'s buffer without copying (it must be C-contiguous, float32/int32/
        float64/int64 native). The Array keeps `obj` alive; writes go through to it."""
        if type(obj) is cls:
            return obj
        try:
            mv = memoryview(obj)
        except TypeError:
            if hasattr(obj, "__dlpack__"):  # a torch tensor, a JAX array: DLPack, zero-copy
                from ._dlpack import from_dlpack

                return from_dlpack(obj)
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
        self._shape = tuple(mv.shape)
        self._dtype = dtype
        self._size = math.prod(self._shape)
        self._readonly = mv.readonly
        self._addr = _reader.describe(mv).address if mv.nbytes else 0
        return self

    # -- layout --------------------------------------------------------------------------

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def size(self):
        return self._size

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def itemsize(self):
        return int(self._dtype[2])

    @property
    def nbytes(self):
        return self._size * self.itemsize

    @property
    def readonly(self):
        return self._readonly

    def _probe(self):
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

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d Array")
        return self._shape[0]

    # -- interop -------------------------------------------------------------------------

    @property
    def __array_interface__(self):
        return {
            "shape": self._shape,
            "typestr": self._dtype,
            "version": 3,
            "strides": None,
            "data": (self._addr, self._readonly),
        }

    def __buffer__(self, flags):
        """PEP 688 (used by memoryview() on Python 3.12+)."""
        if self._size == 0:
            return self._mv.cast("B").cast(_CODES[self._dtype])
        return self._mv.cast("B").cast(_CODES[self._dtype], self._shape)

    def __release_buffer__(self, view):
        view.release()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export (a capsule sharing this Array's memory; `copy=True` exports a copy):
        `numpy.from_dlpack(a)`, `torch.from_dlpack(a)`."""
        from . import _dlpack

        return _dlpack.export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        """(1, 0): CPU memory."""
        return (1, 0)

    def tobytes(self):
        """The raw native-endian bytes in C order."""
        return self._mv.tobytes()

    def tolist(self):
        return _nest(self._mv.tolist(), self._shape)

    def copy(self):
        """An owned copy (never aliases this Array)."""
        owned = _pyarray.array(_CODES[self._dtype])
        owned.frombytes(self._mv.tobytes())
        return Array._wrap(owned, self._shape, self._dtype)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):
        # Pickled as its bytes: the copy owns its memory (a borrowed buffer is not shared).
        return frombytes, (self.tobytes(), self._dtype, self._shape)

    def reshape(self, *shape):
        """A view with another shape over the same memory (one of -1 allowed)."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        if shape.count(-1) == 1:
            rest = math.prod(d for d in shape if d != -1)
            if rest == 0 or self._size % rest:
                raise ValueError(f"cannot reshape size {self._size} into {shape}")
            shape = tuple(self._size // rest if d == -1 else d for d in shape)
        shape = _check_shape(shape)
        if math.prod(shape) != self._size:
            raise ValueError(f"cannot reshape size {self._size} into {shape}")
        return self._view(self._mv, shape, self._addr)

    def _view(self, mv, shape, addr):
        out = Array.__new__(Array)
        out._mv_, out._owner, out._shape, out._dtype = mv, self, shape, self._dtype
        out._size, out._readonly, out._addr = math.prod(shape), self._readonly, addr
        return out

    # -- indexing ------------------------------------------------------------------------

    def _offset(self, key):
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

    def __getitem__(self, key):
        offset, used = self._offset(key)
        if used == len(self._shape):
            return self._mv[offset]
        sub = self._shape[used:]
        n = math.prod(sub)
        return self._view(self._mv[offset : offset + n], sub, self._addr + offset * self.itemsize)

    def __setitem__(self, key, value):
        if self._readonly:
            raise ValueError("assignment to a read-only Array")
        offset, used = self._offset(key)
        if used != len(self._shape):
            raise TypeError("only single elements can be assigned (no arithmetic, no slices)")
        self._mv[offset] = value

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # -- reductions without NumPy ---------------------------------------------------------

    def _values(self, what):
        if self._size == 0:
            raise ValueError(f"{what}() of an empty Array")
        return self._mv.tolist()

    def min(self):
        return min(self._values("min"))

    def max(self):
        return max(self._values("max"))

    def argmax(self):
        """Flat index of the first maximum (NaN-free data assumed)."""
        vals = self._values("argmax")
        return vals.index(max(vals))

    def sum(self):
        """Correctly rounded sum (math.fsum) for floats, exact for ints."""
        vals = self._mv.tolist()
        return math.fsum(vals) if self._dtype[1] == "f" else sum(vals)

    def __repr__(self):
        vals = self._mv[:_REPR_LIMIT].tolist()
        body = ", ".join(repr(v) for v in vals)
        if self._size > _REPR_LIMIT:
            body += f", ... ({self._size} values)"
        return f"Array([{body}], dtype='{self._dtype}', shape={self._shape})"


_new_object = object.__new__


def _result_view(owner, shape, addr, size):
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


def frombytes(raw, dtype, shape):
    """A new owned Array from little-endian bytes (the checkpoint encoding, pickles)."""
    shape = _check_shape(shape)
    owned = _pyarray.array(_CODES[_check_dtype(dtype)])
    if len(raw) != math.prod(shape) * owned.itemsize:
        raise ValueError(f"{len(raw)} bytes do not hold shape {shape} of {dtype}")
    owned.frombytes(raw)
    return Array._wrap(owned, shape, dtype)


def _flatten(values):
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


def _nest(flat, shape):
    if len(shape) <= 1:
        return flat if shape else flat[0]
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
