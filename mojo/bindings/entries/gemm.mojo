"""Binding entries of the GEMM family."""
from std.ffi import external_call
from std.python import PythonObject

from entries.args import Args, Layout, refuse_nonfinite
from training.gemm import gemm

comptime NEURAL_GEMM = Layout("neural_gemm", "a,b,c",
                               "m,n,k,transpose_a,transpose_b,accumulate,row_begin,row_end")
# The same call with its lists packed (DESIGN.md "The binding ABI"): the addresses of an int64
# array [3, a, b, c] and a float64 array [8, m, ..., row_end]. Reading 11 list items costs
# ~0.7 µs, more than an MLP-sized product.
comptime NEURAL_GEMM_PACKED = Layout("neural_gemm_packed", "a,b,c",
                                      "m,n,k,transpose_a,transpose_b,accumulate,row_begin,row_end")
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


def neural_gemm_packed(packed_addrs: PythonObject,
                       packed_params: PythonObject) raises -> PythonObject:
    """`neural_gemm` with packed arguments: (address of int64 [3, a, b, c], address of
    float64 [8, m, n, k, transpose_a, transpose_b, accumulate, row_begin, row_end])."""
    var qa = Int(py=packed_addrs)
    var dp = Int(py=packed_params)
    if qa == 0 or dp == 0:
        raise Error("ValueError: neural_gemm_packed: the packed argument arrays must not be null")
    return _run(Args(NEURAL_GEMM_PACKED, qa, dp))


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
    if (r1 - r0) * n * k >= GIL_RELEASE_MACS:
        var ts = external_call["PyEval_SaveThread", Int]()  # no Python API until restored
        gemm(a, b, c, m, n, k, ta, tb, acc, r0, r1)
        external_call["PyEval_RestoreThread", NoneType](ts)
    else:
        gemm(a, b, c, m, n, k, ta, tb, acc, r0, r1)
    refuse_nonfinite(entry, "c", c.unsafe_offset(r0 * n), (r1 - r0) * n)
    return PythonObject((r1 - r0) * n)
