"""Gather along one axis (`mojolearn.Array.take`): bytes moved as they are, any dtype.

Legend: the source is C-contiguous, viewed as (O, R, B): O = `outer` (the product of the axes
before the gathered one), R = `rows` (the gathered axis), B = `inner_bytes` (the bytes of one
row: the product of the axes after it, times the itemsize). `n` indices, int32 or int64
(`index_itemsize` 4 or 8), each in [-R, R); a negative one counts from the end, as a Python
index does. The destination is (O, n, B):

    dst[o, i, :] = src[o, idx[i] + (R if idx[i] < 0 else 0), :]    o ascending, then i ascending

Every index is checked before any byte is written, so a refused call leaves `dst` untouched.
"""
from std.ffi import external_call

comptime I32P = Pointer[Int32, MutAnyOrigin]
comptime I64P = Pointer[Int64, MutAnyOrigin]


@always_inline
def index_at(indices: Int, index_itemsize: Int, i: Int) -> Int:
    """Index `i` of the int32 (`index_itemsize` 4) or int64 (8) array at address `indices`."""
    if index_itemsize == 4:
        return Int(I32P(unsafe_from_address=indices)[unsafe_offset=i])
    return Int(I64P(unsafe_from_address=indices)[unsafe_offset=i])


def first_bad_index(indices: Int, index_itemsize: Int, n: Int, rows: Int) -> Int:
    """The position of the first index outside [-rows, rows), or -1 when all are inside."""
    for i in range(n):
        var r = index_at(indices, index_itemsize, i)
        if r < -rows or r >= rows:
            return i
    return -1


def take_rows(src: Int, dst: Int, indices: Int, index_itemsize: Int, n: Int, outer: Int,
              rows: Int, inner_bytes: Int) -> Int:
    """dst (outer, n, inner_bytes) = the rows `indices` of src (outer, rows, inner_bytes).

    Returns -1 when done, else the position of the first index outside [-rows, rows) (then
    nothing was written). The buffers must not overlap; an address may be 0 only where no byte
    of it is read or written.
    """
    var bad = first_bad_index(indices, index_itemsize, n, rows)
    if bad >= 0:
        return bad
    if inner_bytes == 0:
        return -1
    for o in range(outer):
        var s = src + o * rows * inner_bytes
        var d = dst + o * n * inner_bytes
        for i in range(n):
            var r = index_at(indices, index_itemsize, i)
            if r < 0:
                r += rows
            _ = external_call["memcpy", Int](d + i * inner_bytes, s + r * inner_bytes,
                                             inner_bytes)
    return -1
