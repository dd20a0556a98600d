"""Binding entries of `mojolearn.Array` that move memory: `array_take` (a gather along one
axis, training/take.mojo). Host code only, the same in every vendor and mode."""
from std.ffi import c_int, external_call
from std.python import Python, PythonObject
from std.python._cpython import PyObjectPtr

from entries.args import Layout, int_arg
from entries.intake import new_int, new_tuple, tuple_set
from training.take import first_bad_index, index_at, take_rows

# Positional ints in this order (one call per `Array.take`: no lists to unpack).
comptime ARRAY_TAKE = Layout("array_take", "src,indices", "outer,rows,inner_bytes,n,index_itemsize")
comptime _MAX_COUNT = 1 << 48


def _address(name: StaticString, obj: PythonObject, needed: Bool) raises -> Int:
    """An address, 0 allowed only where the call reads no byte of it."""
    var a = int_arg(ARRAY_TAKE.name, name, obj, 0, Int.MAX)
    if a == 0 and needed:
        raise Error("ValueError: ", ARRAY_TAKE.name, ": address '", name, "' is null")
    return a


def array_take(src: PythonObject, indices: PythonObject, outer: PythonObject,
               rows: PythonObject, inner_bytes: PythonObject, n: PythonObject,
               index_itemsize: PythonObject) raises -> PythonObject:
    """The rows `indices` (n int32 or int64 values, negative ones from the end) of src (outer,
    rows, inner_bytes), as a NEW bytearray (outer, n, inner_bytes): returns (bytearray, its
    address). An index outside [-rows, rows) returns (position, value) of the first one, and
    nothing is allocated. The bytearray's memory is not zeroed first: every byte is written."""
    comptime E = ARRAY_TAKE.name
    var o = int_arg(E, "outer", outer, 0, _MAX_COUNT)
    var r = int_arg(E, "rows", rows, 0, _MAX_COUNT)
    var b = int_arg(E, "inner_bytes", inner_bytes, 0, _MAX_COUNT)
    var k = int_arg(E, "n", n, 0, _MAX_COUNT)
    var isz = int_arg(E, "index_itemsize", index_itemsize, 4, 8)
    if isz != 4 and isz != 8:
        raise Error("ValueError: ", E, ": index_itemsize must be 4 or 8, got ", isz)
    var at = _address("indices", indices, k > 0)
    var bad = first_bad_index(at, isz, k, r)
    if bad >= 0:
        return Python.tuple(PythonObject(bad), PythonObject(index_at(at, isz, bad)))
    var s = _address("src", src, o * b * k > 0)
    var nbytes = o * k * b
    if nbytes > _MAX_COUNT:
        raise Error("ValueError: ", E, ": the result would hold ", nbytes, " bytes")
    var out = PythonObject(from_owned=new_tuple(2))  # first: nothing to free if it fails
    var ba = external_call["PyByteArray_FromStringAndSize", Int](0, nbytes)
    if ba == 0:
        external_call["PyErr_Clear", NoneType]()
        raise Error("MemoryError: ", E, ": cannot allocate ", nbytes, " bytes")
    _ = external_call["PyTuple_SetItem", c_int](Int(out._obj_ptr), 0, ba)  # steals ba
    var d = external_call["PyByteArray_AsString", Int](ba)
    _ = take_rows(s, d, at, isz, k, o, r, b)  # the indices are checked: it copies every row
    tuple_set(out._obj_ptr, 1, new_int(d))
    return out
