"""Binding entries of the GEMM family."""
from std.ffi import external_call
from std.python import PythonObject
from std.python._cpython import PyObjectPtr

from entries.args import Args, Layout, addr_arg, int_arg, refuse_nonfinite
from entries.intake import Held, Seen, matrix_arg, new_floats, new_int, new_tuple, tuple_set
from training.config import F32P
from training.checks import first_nonfinite
from training.gemm import gemm

comptime NEURAL_GEMM = Layout("neural_gemm", "a,b,c",
                               "m,n,k,transpose_a,transpose_b,accumulate,row_begin,row_end")
# `mojolearn.matmul`'s entry: plain positional arguments (reading 11 list items costs ~0.7 µs,
# more than an MLP-sized product), operands as addresses or as the caller's objects read here,
# and C made here, so that the Python side reads no shape.
comptime MATMUL = Layout("matmul", "a,b,c",
                         "a_rows,a_cols,b_rows,b_cols,transpose_a,transpose_b,split_macs")
# Below this many multiply-adds the GIL round trip (~0.1 µs) costs more than it frees.
comptime GIL_RELEASE_MACS = 32768
comptime MAX_DIM = 1 << 31
comptime MAX_ELEMENTS = 1 << 40


def neural_gemm(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """C (+)= op(A)·op(B) for rows [row_begin, row_end) of C; returns the outputs written.

    A is m×k (k×m when transpose_a), B is k×n (n×k when transpose_b), C is m×n, all float32
    row-major. Raises ValueError for a bad call before touching C, RuntimeError naming `c`
    when an output of the written rows is NaN/Inf.
    """
    return _run(Args(NEURAL_GEMM, addrs, params))


def matmul_entry(a: PythonObject, b: PythonObject, c: PythonObject, a_rows: PythonObject,
                 a_cols: PythonObject, b_rows: PythonObject, b_cols: PythonObject,
                 transpose_a: PythonObject, transpose_b: PythonObject,
                 split_macs: PythonObject) raises -> PythonObject:
    """C = op(A)·op(B) as (buffer, its address, m, n): the buffer is `c * (m·n)`, `c` a
    one-item float32 array.array of +0.0. a / b: an address with its stored (rows, cols), or
    an object read here (`matrix_arg`). None, with nothing done, when an object is declined,
    the product is empty, the contracted sizes differ, or it has at least `split_macs` (> 0)
    multiply-adds: the Python side then checks, refuses by name, or splits rows over threads.
    RuntimeError naming `c` when an output is NaN/Inf."""
    comptime E = MATMUL.name
    var ta = int_arg(E, "transpose_a", transpose_a, 0, 1) == 1
    var tb = int_arg(E, "transpose_b", transpose_b, 0, 1) == 1
    var split = int_arg(E, "split_macs", split_macs, 0, Int.MAX)
    var a_seen = Seen()
    var a_held = Held()
    var a_at = matrix_arg(E, "a", a, a_rows, a_cols, a_seen, a_held)
    if a_at == 0:
        return PythonObject(None)
    var b_seen = Seen()
    var b_held = Held()
    var b_at = matrix_arg(E, "b", b, b_rows, b_cols, b_seen, b_held)
    if b_at == 0:
        return PythonObject(None)
    var m = Int(a_seen.shape[1] if ta else a_seen.shape[0])
    var k = Int(a_seen.shape[0] if ta else a_seen.shape[1])
    var kb = Int(b_seen.shape[1] if tb else b_seen.shape[0])
    var n = Int(b_seen.shape[0] if tb else b_seen.shape[1])
    if k != kb or (split > 0 and m * n * k >= split):
        return PythonObject(None)
    if m > MAX_DIM or n > MAX_DIM or k > MAX_DIM or m * n > MAX_ELEMENTS:
        raise Error("ValueError: ", E, ": m=", m, ", n=", n, ", k=", k,
                    " exceed 2**31 per dimension or 2**40 outputs")
    var made: PyObjectPtr
    var c_addr: Int
    made, c_addr = new_floats(c, m * n, E)
    var c_at = F32P(unsafe_from_address=c_addr)
    _product(F32P(unsafe_from_address=a_at), F32P(unsafe_from_address=b_at), c_at, m, n, k,
             ta, tb, False, 0, m)
    a_held.release()
    b_held.release()
    var bad = first_nonfinite(c_at, m * n)
    if bad >= 0:
        external_call["Py_DecRef", NoneType](made)
        raise Error("RuntimeError: ", E, ": output 'c' is not finite at index ", bad)
    var r = PythonObject(from_owned=new_tuple(4))
    tuple_set(r._obj_ptr, 0, made)  # steals our reference
    tuple_set(r._obj_ptr, 1, new_int(c_addr))
    tuple_set(r._obj_ptr, 2, new_int(m))
    tuple_set(r._obj_ptr, 3, new_int(n))
    return r


def _product(a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool, acc: Bool,
             r0: Int, r1: Int):
    """`gemm` on rows [r0, r1) of C, with the GIL released when the product is big enough."""
    if (r1 - r0) * n * k >= GIL_RELEASE_MACS:
        var ts = external_call["PyEval_SaveThread", Int]()  # no Python API until restored
        gemm(a, b, c, m, n, k, ta, tb, acc, r0, r1)
        external_call["PyEval_RestoreThread", NoneType](ts)
    else:
        gemm(a, b, c, m, n, k, ta, tb, acc, r0, r1)


def _run(args: Args) raises -> PythonObject:
    var entry = args.entry
    var m = args.int(0, "m", 0, MAX_DIM)
    var n = args.int(1, "n", 0, MAX_DIM)
    var k = args.int(2, "k", 0, MAX_DIM)
    var ta = args.flag(3, "transpose_a")
    var tb = args.flag(4, "transpose_b")
    var acc = args.flag(5, "accumulate")
    var r0 = args.int(6, "row_begin", 0, MAX_DIM)
    var r1 = args.int(7, "row_end", 0, MAX_DIM)
    if r0 > r1 or r1 > m:
        raise Error("ValueError: ", entry, ": rows [", r0, ", ", r1, ") outside [0, ", m, ")")
    if m * k > MAX_ELEMENTS or k * n > MAX_ELEMENTS or m * n > MAX_ELEMENTS:
        raise Error("ValueError: ", entry, ": m=", m, ", n=", n, ", k=", k,
                    " exceed 2**40 elements per operand")
    var a = args.f32(0)
    var b = args.f32(1)
    var c = args.f32(2)
    _product(a, b, c, m, n, k, ta, tb, acc, r0, r1)
    refuse_nonfinite(entry, "c", c.unsafe_offset(r0 * n), (r1 - r0) * n)
    return PythonObject((r1 - r0) * n)
