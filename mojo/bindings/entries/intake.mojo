"""The one reader of caller memory: a buffer-protocol object, a DLPack capsule, or an object
whose type has the DLPack C exchange API (torch), read through the CPython C API
(`PyObject_GetBuffer` / `PyBuffer_Release`, `PyCapsule_GetPointer`).

Two callers. `intake_read` (for `mojolearn/_buffers/reader.py`, which says what its results mean)
reads one argument and releases its view before returning: the address stays valid while the
caller holds the object (or the capsule, whose producer keeps its memory alive), exactly as a
released `memoryview`'s would. The hot entries (`mlp_resident_step/_steps`, `matmul`) call
`input_arg`, which reads an argument and keeps a buffer's view (`Held`) until the entry
returns. Reading here costs about 0.05 µs per buffer; a `memoryview` in Python costs ~0.1 µs
before any field is read, ctypes ~1 µs.

Spec (an int): bit 9 says `obj` is a DLPack capsule (else a buffer-protocol or exchange-API
object); with no other bit set the object is described; otherwise bits 0-2 name a dtype class
(SPEC_F32 native float32, SPEC_LABELS native signed 4- or 8-byte integers, SPEC_I32 native
signed 4-byte), bits 4-7 the exact ndim (ANY_NDIM: any), bit 8 writable. A spec accepts only a
non-empty, C-contiguous CPU layout that meets it; anything else is declined (None) and the
Python side decides (copy, convert or refuse by name), so the acceptance rule here is a fast
subset of `_intake`'s, never a second policy.
"""
from std.ffi import _get_global, c_int, external_call
from std.python import Python, PythonObject
from std.python._cpython import PyObjectPtr

from entries.args import Layout, addr_arg, int_arg

comptime INTAKE_READ = Layout("intake_read", "object", "spec")

comptime SPEC_F32 = 1
comptime SPEC_LABELS = 2
comptime SPEC_I32 = 3
comptime SPEC_WRITABLE = 256
comptime SPEC_CAPSULE = 512
comptime SPEC_HOLD = 1024
comptime SPEC_COPY = 2048
comptime SPEC_CHECK = 4096
comptime MAX_NDIM = 8
comptime ANY_NDIM = 15
# PyBUF_STRIDES | PyBUF_FORMAT (PyBUF_RECORDS_RO): strides and format, no suboffsets.
comptime PYBUF_RECORDS_RO = 0x1C
comptime DL_CPU = 1
comptime _PY_LONG_SUBCLASS = UInt64(1 << 24)  # Py_TPFLAGS_LONG_SUBCLASS: int and bool

comptime I64P = Pointer[Int64, MutAnyOrigin]
comptime U8P = Pointer[UInt8, MutAnyOrigin]


struct Seen(Copyable, Movable):
    """One layout as read, in bytes for strides (DLPack's element strides are scaled)."""

    var addr: Int
    var itemsize: Int
    var code: UInt8  # struct-module code of a one-item native format, else 0
    var native: Bool
    var fmt: String  # filled when describing only (a String allocates)
    var ndim: Int
    var shape: SIMD[DType.int64, MAX_NDIM]
    var strides: SIMD[DType.int64, MAX_NDIM]  # in bytes (C order when the exporter gives none)
    var contiguous: Bool
    var readonly: Bool
    var device: Int
    var size: Int

    def __init__(out self):
        self.addr = 0
        self.itemsize = 0
        self.code = 0
        self.native = False
        self.fmt = String()
        self.ndim = 0
        self.shape = SIMD[DType.int64, MAX_NDIM](0)
        self.strides = SIMD[DType.int64, MAX_NDIM](0)
        self.contiguous = True
        self.readonly = False
        self.device = DL_CPU
        self.size = 1


struct Held(Movable):
    """What pins a hot entry's input for the length of the call: a Py_buffer kept, so that the
    exporter refuses to resize or free the memory meanwhile (bytearray and array.array raise
    BufferError while a view is held), or, for an object read through the DLPack exchange API
    (a torch tensor, whose storage nothing pins: `resize_` frees it), a copy made while the
    GIL is held, which the entry reads instead. Released by `release`, or when dropped (an
    error on the way out)."""

    var view: SIMD[DType.int64, 16]  # the Py_buffer (80 bytes)
    var held: Bool
    var copy: Int  # malloc'ed copy of an exchange-read input, or 0

    def __init__(out self):
        self.view = SIMD[DType.int64, 16](0)
        self.held = False
        self.copy = 0

    def get(mut self, obj: Int) -> Bool:
        var vp = Int(Pointer(to=self.view))
        if external_call["PyObject_GetBuffer", c_int](obj, vp, c_int(PYBUF_RECORDS_RO)) != 0:
            external_call["PyErr_Clear", NoneType]()
            return False
        self.held = True
        return True

    def keep_copy(mut self, mut seen: Seen) -> Bool:
        """Copy `seen`'s C-contiguous memory and point `seen` at the copy; False when the
        allocation fails (nothing kept)."""
        var n = seen.size * seen.itemsize
        var p = external_call["malloc", Int](n)
        if p == 0:
            return False
        _ = external_call["memcpy", Int](p, seen.addr, n)
        self.copy = p
        seen.addr = p
        return True

    def release(mut self):
        if self.held:
            external_call["PyBuffer_Release", NoneType](Int(Pointer(to=self.view)))
            self.held = False
        if self.copy != 0:
            external_call["free", NoneType](self.copy)
            self.copy = 0

    def __deinit__(deinit self):
        if self.held:
            external_call["PyBuffer_Release", NoneType](Int(Pointer(to=self.view)))
        if self.copy != 0:
            external_call["free", NoneType](self.copy)


def _contiguous(mut seen: Seen, strides_at: Int, scale: Int) -> Bool:
    """Fills `seen.strides` (bytes: elements × scale; C order when `strides_at` is 0) and
    says whether the layout is C order: each stride the product of the sizes after it; sizes
    of 1 may have any stride, and an empty layout is contiguous."""
    var step = seen.itemsize
    var contiguous = True
    for i in range(seen.ndim - 1, -1, -1):
        var d = Int(seen.shape[i])
        if strides_at == 0:
            seen.strides[i] = Int64(step)
        else:
            seen.strides[i] = I64P(unsafe_from_address=strides_at)[unsafe_offset=i] * Int64(scale)
            if d != 1 and Int(seen.strides[i]) != step:
                contiguous = False
        step *= d
    return contiguous or seen.size <= 1


def _parse_format(fmt_at: Int, mut seen: Seen, describe: Bool):
    """Native one-item formats ('f', '<f', '=i', '@q') set `code`; others keep code 0."""
    if fmt_at == 0:
        seen.code = UInt8(ord("B"))
        seen.native = True
        if describe:
            seen.fmt = String("B")
        return
    var fmt = U8P(unsafe_from_address=fmt_at)
    var n = 0
    while fmt[unsafe_offset=n] != 0 and n < 64:
        n += 1
    if describe:
        var text = String()
        for i in range(n):
            text += chr(Int(fmt[unsafe_offset=i]))
        seen.fmt = text^
    var start = 0
    var first = fmt[unsafe_offset=0]
    if first == UInt8(ord("@")) or first == UInt8(ord("=")) or first == UInt8(ord("<")):
        start = 1
    elif first == UInt8(ord(">")) or first == UInt8(ord("!")):
        return
    if n == start + 1:
        seen.code = fmt[unsafe_offset=start]
        seen.native = True


def _parse_view(view: SIMD[DType.int64, 16], mut seen: Seen, describe: Bool) -> Bool:
    """A Py_buffer's layout into `seen`; False for what we never read (more than MAX_NDIM
    dimensions, suboffsets as in PIL-style arrays)."""
    var nd = Int((view[4] >> 32) & 0xFFFFFFFF)
    if nd > MAX_NDIM or view[8] != 0:
        return False
    seen.addr = Int(view[0])
    seen.itemsize = Int(view[3])
    seen.readonly = (view[4] & 0xFFFFFFFF) != 0
    seen.ndim = nd
    _parse_format(Int(view[5]), seen, describe)
    _read_shape(I64P(unsafe_from_address=Int(view[6])), seen)
    seen.contiguous = _contiguous(seen, Int(view[7]), 1)
    return True


def _read_buffer(obj: PythonObject, mut seen: Seen, describe: Bool) -> Bool:
    var held = Held()
    if not held.get(Int(obj._obj_ptr)):
        return False
    var ok = _parse_view(held.view, seen, describe)
    held.release()
    return ok


def _read_shape(shape: I64P, mut seen: Seen):
    for i in range(seen.ndim):
        var d = shape[unsafe_offset=i]
        seen.shape[i] = d
        seen.size *= Int(d)


def _dl_format(code: Int, bits: Int, lanes: Int, mut seen: Seen, describe: Bool):
    var c = 0
    if lanes == 1:
        if code == 2:  # float
            c = ord("e") if bits == 16 else (ord("f") if bits == 32 else (ord("d") if bits == 64 else 0))
        elif code == 0:  # int
            c = ord("b") if bits == 8 else (ord("h") if bits == 16 else (
                ord("i") if bits == 32 else (ord("q") if bits == 64 else 0)))
        elif code == 1:  # uint
            c = ord("B") if bits == 8 else (ord("H") if bits == 16 else (
                ord("I") if bits == 32 else (ord("Q") if bits == 64 else 0)))
        elif code == 6 and bits == 8:  # bool
            c = ord("?")
    if c != 0:
        seen.code = UInt8(c)
        seen.native = True
        if describe:
            seen.fmt = String(chr(c))
    elif describe:
        seen.fmt = String("dlpack:", code, ":", bits, ":", lanes)


def _read_capsule(obj: PythonObject, mut seen: Seen, describe: Bool) -> Bool:
    """A DLPack capsule not yet consumed ("dltensor" or "dltensor_versioned", dlpack.h:
    DLManagedTensor is {DLTensor, ctx, deleter}, the versioned one {version, ctx, deleter,
    flags, DLTensor})."""
    var p = Int(obj._obj_ptr)
    # The capsule names, NUL-terminated in static memory (a local's address, passed on as an
    # Int, does not keep its stores alive: training/pool.mojo `split_parts`).
    var lp = Int(StaticString("dltensor").unsafe_ptr())
    var vp = Int(StaticString("dltensor_versioned").unsafe_ptr())
    var tensor = 0
    var flags = Int64(0)
    if external_call["PyCapsule_IsValid", c_int](p, lp) == 1:
        tensor = external_call["PyCapsule_GetPointer", Int](p, lp)
    elif external_call["PyCapsule_IsValid", c_int](p, vp) == 1:
        var managed = external_call["PyCapsule_GetPointer", Int](p, vp)
        if managed != 0:
            flags = I64P(unsafe_from_address=managed)[unsafe_offset=3]
            tensor = managed + 32
    else:
        return False
    if tensor == 0:
        external_call["PyErr_Clear", NoneType]()
        return False
    if not _parse_dltensor(tensor, seen, describe):
        return False
    seen.readonly = (flags & 1) != 0
    return True


def _parse_dltensor(tensor: Int, mut seen: Seen, describe: Bool) -> Bool:
    """A DLTensor {data, device {type, id}, ndim, dtype {code, bits, lanes}, shape, strides,
    byte_offset} (dlpack.h) into `seen`, strides scaled from elements to bytes."""
    var t = I64P(unsafe_from_address=tensor)
    var device_ndim = t[unsafe_offset=1]
    var word = t[unsafe_offset=2]  # ndim (int32), then dtype {u8 code, u8 bits, u16 lanes}
    var nd = Int(word & 0xFFFFFFFF)
    if nd > MAX_NDIM or nd < 0:
        return False
    seen.device = Int(device_ndim & 0xFFFFFFFF)
    var code = Int((word >> 32) & 0xFF)
    var bits = Int((word >> 40) & 0xFF)
    var lanes = Int((word >> 48) & 0xFFFF)
    _dl_format(code, bits, lanes, seen, describe)
    seen.itemsize = (bits * lanes + 7) // 8
    seen.ndim = nd
    seen.addr = Int(t[unsafe_offset=0]) + Int(t[unsafe_offset=5])
    _read_shape(I64P(unsafe_from_address=Int(t[unsafe_offset=3])), seen)
    seen.contiguous = _contiguous(seen, Int(t[unsafe_offset=4]), seen.itemsize)
    return True


# The DLPack C exchange API (dlpack.h 1.3, `DLPackExchangeAPI`): a type's
# `__dlpack_c_exchange_api__` capsule holds a table whose `dltensor_from_py_object_no_sync`
# (slot 5 of 8-byte words: header {version, prev_api}, allocator, from_py, to_py, this) fills
# a DLTensor on our stack, valid until we return: no capsule, no allocation (torch >= 2.10).
comptime _EXCHANGE_SLOT = 5
comptime DLTensorFromPy = def(Int, Int) thin abi("C") -> c_int


# Process-wide cache (GIL-protected, never freed): the interned attribute names and, for a few
# types, the exchange function (0: the type has none). Looked up with every torch tensor,
# interning a name costs ~0.06 µs and the type's attribute ~0.05 µs; the cache ~0.02 µs.
comptime _C_REQUIRES_GRAD = 0
comptime _C_EXCHANGE_NAME = 1
comptime _C_TYPES = 2  # then (type, function) pairs
comptime _CACHED_TYPES = 4
comptime _VoidPtr = OptionalPointer[NoneType, UntrackedOrigin[mut=True]]


def _cache_new() -> _VoidPtr:
    var words = external_call["calloc", Int](_C_TYPES + 2 * _CACHED_TYPES, 8)
    return _VoidPtr(Pointer[NoneType, UntrackedOrigin[mut=True]](unsafe_from_address=words))


def _cache_keep(p: _VoidPtr):
    pass  # at exit: the Python objects it names may be gone already


def _cache() -> I64P:
    # std's process globals (keyed by name; the Mojo runtime's own Python state lives there).
    var p = _get_global["mojolearn.intake.cache", _cache_new, _cache_keep]()
    return I64P(unsafe_from_address=Int(p.value()))


def _name(slot: Int, name: StaticString) -> Int:
    """The interned string `name`, cached in `slot` (a strong reference kept for good)."""
    var c = _cache()
    var key = Int(c[unsafe_offset=slot])
    if key == 0:
        key = external_call["PyUnicode_InternFromString", Int](Int(name.unsafe_ptr()))
        if key == 0:
            external_call["PyErr_Clear", NoneType]()
            return 0
        c[unsafe_offset=slot] = Int64(key)
    return key


def _attr(obj: Int, slot: Int, name: StaticString) -> Int:
    """A new reference to obj.name, or 0 (the error cleared). The name is interned: the type's
    attribute cache is keyed by the name object, which a fresh string would always miss."""
    var key = _name(slot, name)
    if key == 0:
        return 0
    var r = external_call["PyObject_GetAttr", Int](obj, key)
    if r == 0:
        external_call["PyErr_Clear", NoneType]()
    return r


def _is_true(obj: Int) -> Bool:
    """obj (a new reference, dropped here) is true; False when 0 or its truth fails."""
    if obj == 0:
        return False
    var r = external_call["PyObject_IsTrue", c_int](obj)
    external_call["Py_DecRef", NoneType](obj)
    if r < 0:
        external_call["PyErr_Clear", NoneType]()
    return r == 1


def _exchange_function(tp: Int) -> Int:
    """The type's `dltensor_from_py_object_no_sync`, or 0. Cached for the first few types
    seen (each kept alive, so that its address is never reused by another type)."""
    var c = _cache()
    for i in range(_CACHED_TYPES):
        if Int(c[unsafe_offset=_C_TYPES + 2 * i]) == tp:
            return Int(c[unsafe_offset=_C_TYPES + 2 * i + 1])
    var fn_at = 0
    var capsule = _attr(tp, _C_EXCHANGE_NAME, "__dlpack_c_exchange_api__")
    if capsule != 0:
        var api = external_call["PyCapsule_GetPointer", Int](
            capsule, Int(StaticString("dlpack_exchange_api").unsafe_ptr()))
        external_call["Py_DecRef", NoneType](capsule)  # the table lives as long as the process
        if api == 0:
            external_call["PyErr_Clear", NoneType]()
        else:
            var table = I64P(unsafe_from_address=api)
            if (table[unsafe_offset=0] & 0xFFFFFFFF) == 1:  # DLPack major version
                fn_at = Int(table[unsafe_offset=_EXCHANGE_SLOT])
    for i in range(_CACHED_TYPES):
        if c[unsafe_offset=_C_TYPES + 2 * i] == 0:
            external_call["Py_IncRef", NoneType](tp)
            c[unsafe_offset=_C_TYPES + 2 * i] = Int64(tp)
            c[unsafe_offset=_C_TYPES + 2 * i + 1] = Int64(fn_at)
            break
    return fn_at


def _read_exchange(obj: Int, mut seen: Seen, describe: Bool) -> Bool:
    """`obj` read through its type's DLPack C exchange API. A tensor that requires grad, which
    torch's `__dlpack__` refuses but the exchange does not check, is declined here, for the
    slow path to refuse by name. (Like `__dlpack__`, the exchange exports the memory of a
    tensor with its negative bit set as it is: DEVIATIONS 41.)"""
    var fn_at = _exchange_function(Int(I64P(unsafe_from_address=obj)[unsafe_offset=1]))
    if fn_at == 0:
        return False
    # A DLTensor (48 bytes) in memory of its own: the exchange writes it, the parse reads it
    # (a local's address, passed on as an Int, does not keep its stores alive).
    var tensor = List[Int64](length=8, fill=0)
    var at = Int(tensor.unsafe_ptr())
    var from_py = Pointer(to=fn_at).unsafe_bitcast[DLTensorFromPy]()[]
    if from_py(obj, at) != 0:
        external_call["PyErr_Clear", NoneType]()
        return False
    var parsed = _parse_dltensor(at, seen, describe)
    _ = len(tensor)  # the list's memory lives until the parse has read it
    if not parsed:
        return False
    return not _is_true(_attr(obj, _C_REQUIRES_GRAD, "requires_grad"))


def read_arg(obj: PythonObject, spec: Int, mut seen: Seen, mut held: Held) -> Bool:
    """A hot entry's input: `obj` when it meets `spec`, pinned by `held` until the call ends:
    a buffer-protocol object by its view, an object with the DLPack exchange API (torch) by a
    copy that `seen.addr` then points at (read-only specs; a writable one is read in place).
    Else False with nothing kept (the Python side then copies, converts or refuses by name)."""
    var p = Int(obj._obj_ptr)
    if external_call["PyObject_CheckBuffer", c_int](p) != 0:
        if not held.get(p):
            return False
        if _parse_view(held.view, seen, False) and _accepts(seen, spec):
            return True
        held.release()
        return False
    if not (_read_exchange(p, seen, False) and _accepts(seen, spec)):
        return False
    return (spec & SPEC_WRITABLE) != 0 or held.keep_copy(seen)


def _accepts(seen: Seen, spec: Int) -> Bool:
    var kind = spec & 7
    var ndim = (spec >> 4) & 15
    if not seen.native or (ndim != ANY_NDIM and seen.ndim != ndim) or seen.size == 0:
        return False
    if not seen.contiguous or seen.device != DL_CPU or seen.addr == 0:
        return False
    if (spec & SPEC_WRITABLE) != 0 and seen.readonly:
        return False
    var c = seen.code
    if kind == SPEC_F32:
        return c == UInt8(ord("f")) and seen.itemsize == 4
    if kind == SPEC_LABELS:
        return _accepts_labels(c, seen.itemsize)
    if kind == SPEC_I32:
        return _accepts_labels(c, seen.itemsize) and seen.itemsize == 4
    return False


def is_int(obj: PythonObject) -> Bool:
    """`obj` is an int (or a bool): an address, where a hot entry also takes an object."""
    var tp = I64P(unsafe_from_address=Int(obj._obj_ptr))[unsafe_offset=1]
    return (external_call["PyType_GetFlags", UInt64](Int(tp)) & _PY_LONG_SUBCLASS) != 0


def input_arg(entry: StaticString, name: StaticString, obj: PythonObject, spec: Int, size0: Int,
          size1: Int, mut seen: Seen, mut held: Held) raises -> Int:
    """A hot entry's batch argument: an int is the address of memory the caller checked; any
    other object is read here (intake.mojo `read_arg`) and must have shape (size0, size1)
    (size0 -1: any; size1 0: one-dimensional), else 0: declined, with nothing done, for the
    Python side to copy, convert or refuse by name."""
    if is_int(obj):
        return addr_arg(entry, name, obj)
    if not read_arg(obj, spec, seen, held):
        return 0
    if (size0 >= 0 and Int(seen.shape[0]) != size0) or (size1 != 0 and Int(seen.shape[1]) != size1):
        held.release()
        return 0
    return seen.addr


def new_floats(template: PythonObject, n: Int,
               entry: StaticString) raises -> Tuple[PyObjectPtr, Int]:
    """(a new reference to `template * n`, its address): n zeroed floats made from a one-item
    float32 array.array of +0.0. The caller owns the reference and drops it by hand on an
    error (as a PythonObject, ASAP destruction could drop it before it reaches the result)."""
    var made = external_call["PySequence_Repeat", PyObjectPtr](Int(template._obj_ptr), n)
    if not made:
        external_call["PyErr_Clear", NoneType]()
        raise Error("MemoryError: ", entry, ": cannot allocate ", n, " outputs")
    var seen = Seen()
    var held = Held()
    if not read_arg(PythonObject(from_borrowed=made), SPEC_F32 | (1 << 4) | SPEC_WRITABLE, seen,
                    held) or Int(seen.shape[0]) != n:
        external_call["Py_DecRef", NoneType](made)
        raise Error("ValueError: ", entry, ": the output template must be a one-item float32 "
                    "array.array")
    held.release()  # the buffer is ours alone until we return it
    return (made, seen.addr)


def matrix_arg(entry: StaticString, name: StaticString, obj: PythonObject, rows: PythonObject,
               cols: PythonObject, mut seen: Seen, mut held: Held) raises -> Int:
    """A matrix operand: an int is the address of float32 (rows, cols) memory the caller
    checked; any other object is read here (float32, two dimensions, C-contiguous; rows and
    cols are then ignored). Its sizes are left in seen.shape. 0 when declined, or empty."""
    if is_int(obj):
        seen.shape[0] = Int64(int_arg(entry, "rows", rows, 0, 1 << 40))
        seen.shape[1] = Int64(int_arg(entry, "cols", cols, 0, 1 << 40))
        if seen.shape[0] == 0 or seen.shape[1] == 0:
            return 0
        return addr_arg(entry, name, obj)
    if not read_arg(obj, SPEC_F32 | (2 << 4), seen, held):
        return 0
    return seen.addr


def new_int(v: Int) raises -> PyObjectPtr:
    var p = external_call["PyLong_FromSsize_t", PyObjectPtr](v)
    if not p:
        raise Error("MemoryError: out of memory")
    return p


def new_tuple(n: Int) raises -> PyObjectPtr:
    var t = external_call["PyTuple_New", PyObjectPtr](n)
    if not t:
        raise Error("MemoryError: out of memory")
    return t


def tuple_set(t: PyObjectPtr, i: Int, v: PyObjectPtr):
    _ = external_call["PyTuple_SetItem", c_int](Int(t), i, Int(v))  # steals v


def _result(seen: Seen, describe: Bool, keep: Int = 0) raises -> PythonObject:
    """(addr, shape, itemsize) [+ keep, a new reference stolen here] or, describing, the
    7-tuple of `intake_read`."""
    # Built with the C API directly: PythonObject conversions cost ~20 ns each here.
    var out = PythonObject(from_owned=new_tuple(7 if describe else (4 if keep != 0 else 3)))
    var t = out._obj_ptr
    tuple_set(t, 0, new_int(seen.addr))
    var shape = new_tuple(seen.ndim)
    tuple_set(t, 1, shape)
    for i in range(seen.ndim):
        tuple_set(shape, i, new_int(Int(seen.shape[i])))
    tuple_set(t, 2, new_int(seen.itemsize))
    if keep != 0:
        _ = external_call["PyTuple_SetItem", c_int](Int(t), 3, keep)  # steals keep
    if describe:
        var extra = Python.tuple(PythonObject(seen.fmt), PythonObject(seen.readonly),
                                 PythonObject(seen.contiguous), PythonObject(seen.device))
        for i in range(4):
            tuple_set(t, 3 + i, external_call["Py_NewRef", PyObjectPtr](Int(extra[i]._obj_ptr)))
    return out


# -- copies: C order, in the binding ---------------------------------------------------------

comptime _I32_MIN = Int64(-(1 << 31))
comptime _I32_MAX = Int64((1 << 31) - 1)


def _is_integer_code(c: UInt8) -> Bool:
    for code in "bBhHiIlLqQnN".codepoints():
        if c == UInt8(Int(code)):
            return True
    return False


def _copyable(seen: Seen, spec: Int) -> Bool:
    """What a copy (SPEC_COPY) takes: a non-empty native CPU layout of any strides, with a
    non-null address, of the spec's ndim and dtype class: SPEC_F32 float32, SPEC_LABELS signed
    4- or 8-byte integers (copied as they are), SPEC_I32 any integer (converted to int32)."""
    var kind = spec & 7
    var ndim = (spec >> 4) & 15
    if not seen.native or (ndim != ANY_NDIM and seen.ndim != ndim) or seen.size == 0:
        return False
    if seen.device != DL_CPU or seen.addr == 0:
        return False
    var c = seen.code
    var isz = seen.itemsize
    if kind == SPEC_F32:
        return c == UInt8(ord("f")) and isz == 4
    if kind == SPEC_LABELS:
        return _accepts_labels(c, isz)
    if kind == SPEC_I32:
        return _is_integer_code(c) and (isz == 1 or isz == 2 or isz == 4 or isz == 8)
    return False


def _accepts_labels(c: UInt8, isz: Int) -> Bool:
    var signed = (c == UInt8(ord("i")) or c == UInt8(ord("l")) or c == UInt8(ord("q"))
                  or c == UInt8(ord("n")))
    return signed and (isz == 4 or isz == 8)


def _load_int(at: Int, code: UInt8, isz: Int) -> Tuple[Int64, Bool]:
    """The integer at `at` (struct code `code`, `isz` bytes) and whether it is an unsigned
    64-bit value above 2**63-1 (then the Int64 holds its bits)."""
    var signed = code >= UInt8(ord("a"))  # lower-case struct codes are the signed ones
    if isz == 1:
        if signed:
            return (Int64(Pointer[Int8, MutAnyOrigin](unsafe_from_address=at)[unsafe_offset=0]),
                    False)
        return (Int64(U8P(unsafe_from_address=at)[unsafe_offset=0]), False)
    if isz == 2:
        if signed:
            return (Int64(Pointer[Int16, MutAnyOrigin](unsafe_from_address=at)[unsafe_offset=0]),
                    False)
        return (Int64(Pointer[UInt16, MutAnyOrigin](unsafe_from_address=at)[unsafe_offset=0]),
                False)
    if isz == 4:
        if signed:
            return (Int64(Pointer[Int32, MutAnyOrigin](unsafe_from_address=at)[unsafe_offset=0]),
                    False)
        return (Int64(Pointer[UInt32, MutAnyOrigin](unsafe_from_address=at)[unsafe_offset=0]),
                False)
    var v = I64P(unsafe_from_address=at)[unsafe_offset=0]
    return (v, not signed and v < 0)


def _copy_items(seen: Seen, dst: Int, kind: Int, mut bad: Int64, mut bad_big: Bool) -> Bool:
    """`seen`'s items in C order into `dst`: float32 and labels bit for bit, SPEC_I32 integers
    converted to int32. False at the first value outside int32 (left in `bad`, `bad_big`)."""
    var nd = seen.ndim
    var isz = seen.itemsize
    var inner = 1
    var step = isz
    if nd > 0:
        inner = Int(seen.shape[nd - 1])
        step = Int(seen.strides[nd - 1])
    var convert = kind == SPEC_I32 and not (isz == 4 and seen.code >= UInt8(ord("a")))
    var out_size = 4 if convert else isz
    var idx = SIMD[DType.int64, MAX_NDIM](0)
    var base = 0  # bytes from seen.addr to the current innermost row
    var out = dst
    for _ in range(seen.size // inner):
        var src = seen.addr + base
        if not convert and step == isz:
            _ = external_call["memcpy", Int](out, src, inner * isz)
        elif not convert and isz == 4:
            var o = Pointer[UInt32, MutAnyOrigin](unsafe_from_address=out)
            for j in range(inner):
                o[unsafe_offset=j] = Pointer[UInt32, MutAnyOrigin](
                    unsafe_from_address=src + j * step)[unsafe_offset=0]
        elif not convert:
            var o = Pointer[UInt64, MutAnyOrigin](unsafe_from_address=out)
            for j in range(inner):
                o[unsafe_offset=j] = Pointer[UInt64, MutAnyOrigin](
                    unsafe_from_address=src + j * step)[unsafe_offset=0]
        else:
            var o = Pointer[Int32, MutAnyOrigin](unsafe_from_address=out)
            for j in range(inner):
                var r = _load_int(src + j * step, seen.code, isz)
                if r[1] or r[0] < _I32_MIN or r[0] > _I32_MAX:
                    bad = r[0]
                    bad_big = r[1]
                    return False
                o[unsafe_offset=j] = Int32(r[0])
        out += inner * out_size
        var d = nd - 2
        while d >= 0:  # the next row: an odometer over the outer dimensions
            idx[d] += 1
            base += Int(seen.strides[d])
            if idx[d] < seen.shape[d]:
                break
            base -= Int(seen.strides[d]) * Int(seen.shape[d])
            idx[d] = 0
            d -= 1
    return True


def _copy_read(obj: PythonObject, s: Int) raises -> PythonObject:
    """`intake_read` with SPEC_COPY: (address, shape, itemsize, a bytearray holding the C-order
    copy) when `_copyable`; the offending value (an int) when an SPEC_I32 conversion meets a
    value outside int32; else None. The source is read and copied with the GIL held, its
    buffer view kept until the copy is made."""
    var seen = Seen()
    var held = Held()
    var p = Int(obj._obj_ptr)
    if (s & SPEC_CAPSULE) != 0:
        if not _read_capsule(obj, seen, False):
            return PythonObject(None)
    elif external_call["PyObject_CheckBuffer", c_int](p) != 0:
        if not held.get(p) or not _parse_view(held.view, seen, False):
            return PythonObject(None)
    elif not _read_exchange(p, seen, False):
        return PythonObject(None)
    if not _copyable(seen, s):
        return PythonObject(None)
    var kind = s & 7
    var out_size = 4 if kind != SPEC_LABELS else seen.itemsize
    var ba = external_call["PyByteArray_FromStringAndSize", Int](0, seen.size * out_size)
    if ba == 0:
        external_call["PyErr_Clear", NoneType]()
        return PythonObject(None)
    var dst = external_call["PyByteArray_AsString", Int](ba)
    var bad = Int64(0)
    var bad_big = False
    if not _copy_items(seen, dst, kind, bad, bad_big):
        external_call["Py_DecRef", NoneType](ba)
        if bad_big:
            return PythonObject(from_owned=external_call["PyLong_FromUnsignedLongLong",
                                                         PyObjectPtr](UInt64(bad)))
        return PythonObject(from_owned=external_call["PyLong_FromLongLong", PyObjectPtr](bad))
    held.release()
    seen.addr = dst
    seen.itemsize = out_size
    return _result(seen, False, ba)


def _hold_read(obj: PythonObject, s: Int) raises -> PythonObject:
    """`intake_read` with SPEC_HOLD, for a buffer-protocol object: (address, shape, itemsize,
    a memoryview of `obj`) when it meets the spec. The memoryview holds `obj`'s buffer export
    for as long as the caller keeps it, so that an exporter which refuses to resize or free
    exported memory (array.array, bytearray) raises BufferError meanwhile; the address is
    read from that very export."""
    var mv = external_call["PyMemoryView_FromObject", Int](Int(obj._obj_ptr))
    if mv == 0:
        external_call["PyErr_Clear", NoneType]()
        return PythonObject(None)
    var seen = Seen()
    var held = Held()
    var ok = held.get(mv) and _parse_view(held.view, seen, False) and _accepts(seen, s)
    held.release()
    if not ok:
        external_call["Py_DecRef", NoneType](mv)
        return PythonObject(None)
    return _result(seen, False, mv)


def intake_read(obj: PythonObject, spec: PythonObject) raises -> PythonObject:
    """(address, shape, itemsize) when `obj` meets `spec`, else None; spec 0 or SPEC_CAPSULE
    alone: (address, shape, itemsize, format, readonly, c_contiguous, device type), or None
    when `obj` exports nothing (SPEC_CAPSULE: `obj` is an unused DLPack capsule, else a
    buffer-protocol object). SPEC_HOLD (a buffer-protocol object) and SPEC_COPY add a
    keep-alive as a fourth item (`_hold_read`, `_copy_read`). SPEC_CHECK alone: whether
    `obj`'s type has the buffer protocol (a property of the type, never of the object)."""
    var s = Int(py=spec)
    if s == SPEC_CHECK:
        return PythonObject(external_call["PyObject_CheckBuffer", c_int](Int(obj._obj_ptr)) != 0)
    if (s & SPEC_COPY) != 0:
        return _copy_read(obj, s)
    if (s & SPEC_HOLD) != 0:
        return _hold_read(obj, s)
    var describe = (s & ~SPEC_CAPSULE) == 0
    var seen = Seen()
    if (s & SPEC_CAPSULE) != 0:
        if not _read_capsule(obj, seen, describe):
            return PythonObject(None)
    elif external_call["PyObject_CheckBuffer", c_int](Int(obj._obj_ptr)) != 0:
        if not _read_buffer(obj, seen, describe):
            return PythonObject(None)
    elif describe or not _read_exchange(Int(obj._obj_ptr), seen, False):
        return PythonObject(None)
    if not describe and not _accepts(seen, s):
        return PythonObject(None)
    return _result(seen, describe)
