"""Binding entries of the GEMM family."""
from std.ffi import external_call
from std.python import PythonObject

from entries.args import Args, Layout, addr_arg, int_arg, refuse_nonfinite
from entries.intake import SPEC_F32, Held, Seen, input_arg
from training.config import F32P
from training.gemm import gemm

comptime NEURAL_GEMM = Layout("neural_gemm", "a,b,c",
                               "m,n,k,transpose_a,transpose_b,accumulate,row_begin,row_end")
# `mojolearn.matmul`'s entry: plain positional arguments (reading 11 list items costs ~0.7 µs,
# more than an MLP-sized product), the whole of C, and the operands as addresses or as the
# caller's objects, read here.
comptime MATMUL = Layout("matmul", "a,b,c", "m,n,k,transpose_a,transpose_b")
# Below this many multiply-adds the GIL round trip (~0.1 µs) costs more than it frees.
comptime GIL_RELEASE_MACS = 32768
comptime MAX_DIM = 1 << 31
comptime MAX_ELEMENTS = 1 << 40
comptime _OPERAND = SPEC_F32 | (2 << 4)


def neural_gemm(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """C (+)= op(A)·op(B) for rows [row_begin, row_end) of C; returns the outputs written.

    A is m×k (k×m when transpose_a), B is k×n (n×k when transpose_b), C is m×n, all float32
    row-major. Raises ValueError for a bad call before touching C, RuntimeError naming `c`
    when an output of the written rows is NaN/Inf.
    """
    return _run(Args(NEURAL_GEMM, addrs, params))


def matmul_entry(a: PythonObject, b: PythonObject, c: PythonObject, m: PythonObject,
                 n: PythonObject, k: PythonObject, transpose_a: PythonObject,
                 transpose_b: PythonObject) raises -> PythonObject:
    """C = op(A)·op(B), all of C (m×n, at address c). a / b: addresses, or objects read here
    (float32, C-contiguous, of op's stored shape: else None is returned and nothing is
    done). Returns the outputs written; RuntimeError naming `c` when one is NaN/Inf."""
    comptime E = MATMUL.name
    var mm = int_arg(E, "m", m, 1, MAX_DIM)
    var nn = int_arg(E, "n", n, 1, MAX_DIM)
    var kk = int_arg(E, "k", k, 1, MAX_DIM)
    var ta = int_arg(E, "transpose_a", transpose_a, 0, 1) == 1
    var tb = int_arg(E, "transpose_b", transpose_b, 0, 1) == 1
    if mm * kk > MAX_ELEMENTS or kk * nn > MAX_ELEMENTS or mm * nn > MAX_ELEMENTS:
        raise Error("ValueError: ", E, ": m=", mm, ", n=", nn, ", k=", kk,
                    " exceed 2**40 elements per operand")
    var a_seen = Seen()
    var a_held = Held()
    var a_at = input_arg(E, "a", a, _OPERAND, kk if ta else mm, mm if ta else kk, a_seen, a_held)
    if a_at == 0:
        return PythonObject(None)
    var b_seen = Seen()
    var b_held = Held()
    var b_at = input_arg(E, "b", b, _OPERAND, nn if tb else kk, kk if tb else nn, b_seen, b_held)
    if b_at == 0:
        return PythonObject(None)
    var out = F32P(unsafe_from_address=addr_arg(E, "c", c))
    _product(F32P(unsafe_from_address=a_at), F32P(unsafe_from_address=b_at), out, mm, nn, kk,
             ta, tb, False, 0, mm)
    a_held.release()
    b_held.release()
    refuse_nonfinite(E, "c", out, mm * nn)
    return PythonObject(mm * nn)


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
