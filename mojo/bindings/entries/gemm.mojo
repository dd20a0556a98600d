"""Binding entries of the GEMM family."""
from std.python import PythonObject

from entries.args import Args, Layout, refuse_nonfinite
from training.gemm import gemm_naive

comptime NEURAL_GEMM = Layout("neural_gemm", "a,b,c",
                               "m,n,k,transpose_a,transpose_b,accumulate,row_begin,row_end")


def neural_gemm(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """C (+)= op(A)·op(B) for rows [row_begin, row_end) of C; returns the outputs written."""
    var args = Args(NEURAL_GEMM, addrs, params)
    var m = args.int(0, "m")
    var n = args.int(1, "n")
    var k = args.int(2, "k")
    var ta = args.flag(3, "transpose_a")
    var tb = args.flag(4, "transpose_b")
    var acc = args.flag(5, "accumulate")
    var r0 = args.int(6, "row_begin")
    var r1 = args.int(7, "row_end")
    if r0 > r1 or r1 > m:
        raise Error("ValueError: neural_gemm: rows [", r0, ", ", r1, ") outside [0, ", m, ")")
    var c = args.f32(2)
    gemm_naive(args.f32(0), args.f32(1), c, m, n, k, ta, tb, acc, r0, r1)
    refuse_nonfinite(NEURAL_GEMM.name, "c", c.unsafe_offset(r0 * n), (r1 - r0) * n)
    return PythonObject((r1 - r0) * n)
