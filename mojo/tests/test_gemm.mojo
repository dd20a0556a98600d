# Checks: C (+)= op(A)·op(B), float32, all four transpose combinations, on shapes that break the
# tiling (1×1×1, 1×N×1, 15×16×17, 61×73×79, 2×65×1200, the MLP's shapes, one large):
#  - gemm_naive, gemm and gemm_on[W, NV] for every tile (W in 1, 4, 8, 16; one or two vectors a
#    row) equal a plain scalar fma-chain reference written here (profile v2), bit for bit,
#    overwriting and accumulating, and on any split of the rows or columns: so the x86-64-v3
#    (W = 8) and x86-64-v4 (W = 16) builds' tiles give the same bits;
#  - gemm is within FAST_BOUND of a float64 reference, gives the same bits twice and on any
#    row or column split, also past one k block (KC);
#  - no kernel writes outside the rows it was given or outside C (guard words);
#  - an Epilogue (bias, ReLU) gives the bits of the product followed by those operations
#    written plainly here, in both modes, whole and split by rows or columns;
#  - the loss epilogue (each row's cross-entropy once its tile is stored) gives the bits of
#    the product, its bias and loss.mojo's cross-entropy one after the other, whole or split;
#  - a caller's packing buffer of `gemm_bytes` is enough (nothing written past it, from any
#    alignment) and gives the bits of the call that allocates its own;
#  - an operand that ends where unreadable memory begins (a guard page) is never read past its
#    end, op(A) read in place or packed, op(B) packed, at every row count of an edge tile;
#  - a SharedGemm (one packed B, pieces packed and rows computed in any order, as threads take
#    them) gives the bits of `gemm` (tools/test.sh runs this file in both modes' builds).
# Inputs are fresh random bit patterns each run (±0, subnormals, tiny and large magnitudes); the
# seed is printed in every failure message. Run with --fp-mode contract=off (as identical builds).
from std.ffi import external_call
from std.math import fma
from std.memory import bitcast
from std.random import random_float64, random_ui64, seed
from std.testing import TestSuite, assert_equal, assert_true
from std.time import perf_counter_ns

from training.config import F32P, I32P
from training.loss import (IGNORE_NOTHING, REDUCTION_MEAN, RowLosses, cross_entropy,
                           mean_of_rows)
from training.gemm import (
    PANEL_ALIGN,
    SHARED_CHUNK,
    Epilogue,
    SharedGemm,
    gemm,
    gemm_bytes,
    gemm_naive,
    gemm_on,
    gemm_tiles_hold_rows,
    shared_a_floats,
    shared_b_floats,
    shared_fits,
    shared_pack,
    shared_pieces,
    shared_rows,
)

comptime GUARD = 16  # guard words on each side of C
comptime SENTINEL = UInt32(0x7FA5A5A5)  # a NaN pattern no kernel produces
# Both modes: |c - exact| <= FAST_BOUND * (k + 1) * 2^-24 * (sum_p |a_ip b_pj| + |c_old|)
#            + (k + 1) * 2^-149. The classic bound for a recursive dot product is γ_(k+1) ≈ (k+1)u.
comptime FAST_BOUND = 1.01


struct Case(Copyable, Movable):
    var m: Int
    var n: Int
    var k: Int

    def __init__(out self, m: Int, n: Int, k: Int):
        self.m = m
        self.n = n
        self.k = k


def shapes() -> List[Case]:
    var out = List[Case]()
    out.append(Case(1, 1, 1))
    out.append(Case(1, 37, 1))
    out.append(Case(15, 16, 17))
    out.append(Case(61, 73, 79))
    out.append(Case(2, 65, 1200))
    out.append(Case(7, 3, 0))  # empty sum
    for batch in [1, 32, 256]:  # the 8→16→3 MLP: forward, then backward
        out.append(Case(batch, 16, 8))
        out.append(Case(batch, 3, 16))
        out.append(Case(3, 16, batch))
        out.append(Case(batch, 16, 3))
        out.append(Case(16, 8, batch))
        out.append(Case(batch, 8, 16))
    return out^


def run_seed() -> UInt64:
    var s = UInt64(perf_counter_ns())
    seed(Int(s))
    return s


def random_f32() -> Float32:
    """A random float32 bit pattern: ±0, subnormals, and normals over 2^-70 .. 2^30."""
    var sign = UInt32(random_ui64(0, 1)) << 31
    var kind = random_ui64(0, 19)
    var mant = UInt32(random_ui64(0, (1 << 23) - 1))
    if kind == 0:
        return bitcast[DType.float32, 1](sign)
    if kind == 1:
        return bitcast[DType.float32, 1](sign | mant | 1)
    var e = UInt32(random_ui64(127 - 70, 127 + 30))
    return bitcast[DType.float32, 1](sign | (e << 23) | mant)


def fill_random(mut v: List[Float32]):
    for i in range(len(v)):
        v[i] = random_f32()


def ptr(v: List[Float32]) -> F32P:
    return F32P(unsafe_from_address=Int(v.unsafe_ptr()))


def guarded(count: Int) -> List[Float32]:
    var v = List[Float32](length=count + 2 * GUARD, fill=0.0)
    for i in range(GUARD):
        v[i] = bitcast[DType.float32, 1](SENTINEL)
        v[GUARD + count + i] = bitcast[DType.float32, 1](SENTINEL)
    return v^


def bits(x: Float32) -> UInt32:
    return bitcast[DType.uint32, 1](x)


def scalar_ref(a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
               accumulate: Bool):
    """The contract (profile v2), as plainly as it can be written."""
    for i in range(m):
        for j in range(n):
            var acc = c[unsafe_offset=i * n + j] if accumulate else Float32(0.0)
            for p in range(k):
                var x = a[unsafe_offset=p * m + i] if ta else a[unsafe_offset=i * k + p]
                var y = b[unsafe_offset=j * k + p] if tb else b[unsafe_offset=p * n + j]
                acc = fma(x, y, acc)
            c[unsafe_offset=i * n + j] = acc


def check_guards(v: List[Float32], count: Int, what: String) raises:
    for i in range(GUARD):
        assert_equal(bits(v[i]), SENTINEL, String(what, ": wrote before C"))
        assert_equal(bits(v[GUARD + count + i]), SENTINEL, String(what, ": wrote after C"))


def assert_bits_equal(got: List[Float32], want: List[Float32], count: Int, what: String) raises:
    for i in range(count):
        var g = got[GUARD + i]
        var w = want[GUARD + i]
        if bits(g) != bits(w):
            assert_true(False, String(what, ": output ", i, " got ", hex(bits(g)), " want ",
                                      hex(bits(w))))


def run_tile(variant: Int, a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool,
             tb: Bool, acc: Bool, r0: Int, r1: Int):
    """Rows [r0, r1) with the tile of `variant` (1..7: W × vectors a row)."""
    if variant == 1:
        gemm_on[1, 1](a, b, c, m, n, k, ta, tb, acc, r0, r1)
    elif variant == 2:
        gemm_on[4, 2](a, b, c, m, n, k, ta, tb, acc, r0, r1)
    elif variant == 3:
        gemm_on[8, 1](a, b, c, m, n, k, ta, tb, acc, r0, r1)
    elif variant == 4:
        gemm_on[8, 2](a, b, c, m, n, k, ta, tb, acc, r0, r1)
    elif variant == 5:
        gemm_on[16, 1](a, b, c, m, n, k, ta, tb, acc, r0, r1)
    elif variant == 6:
        gemm_on[16, 2](a, b, c, m, n, k, ta, tb, acc, r0, r1)
    else:
        gemm(a, b, c, m, n, k, ta, tb, acc, r0, r1)


def check_case(m: Int, n: Int, k: Int, s: UInt64) raises:
    var a = List[Float32](length=max(m * k, 1), fill=0.0)
    var b = List[Float32](length=max(k * n, 1), fill=0.0)
    var c0 = List[Float32](length=m * n + 2 * GUARD, fill=0.0)
    fill_random(a)
    fill_random(b)
    fill_random(c0)
    for t in range(4):
        var ta = (t & 1) == 1
        var tb = (t & 2) == 2
        for accumulate in [False, True]:
            var what = String("seed ", s, " shape ", m, "x", n, "x", k, " ta=", ta, " tb=", tb,
                              " acc=", accumulate)
            var want = guarded(m * n)
            for i in range(m * n):
                want[GUARD + i] = c0[GUARD + i]
            scalar_ref(ptr(a), ptr(b), ptr(want).unsafe_offset(GUARD), m, n, k, ta, tb,
                       accumulate)
            for variant in range(10):
                var got = guarded(m * n)
                for i in range(m * n):
                    got[GUARD + i] = c0[GUARD + i]
                var cp = ptr(got).unsafe_offset(GUARD)
                # Rows in two calls split at a random row: threads may split anywhere.
                var split = Int(random_ui64(0, UInt64(m)))
                for part in range(2):
                    var r0 = 0 if part == 0 else split
                    var r1 = split if part == 0 else m
                    if variant == 0:
                        gemm_naive(ptr(a), ptr(b), cp, m, n, k, ta, tb, accumulate, r0, r1)
                    elif variant <= 7:
                        run_tile(variant, ptr(a), ptr(b), cp, m, n, k, ta, tb, accumulate, r0,
                                 r1)
                    elif variant == 8:  # the whole matrix in one call
                        if part == 0:
                            gemm(ptr(a), ptr(b), cp, m, n, k, ta, tb, accumulate, 0, m)
                    else:  # all rows, columns in two calls split at a random column
                        var cut = split * n // max(m, 1)
                        gemm(ptr(a), ptr(b), cp, m, n, k, ta, tb, accumulate, 0, m,
                             0 if part == 0 else cut, cut if part == 0 else n)
                var label = String(what, " variant ", variant,
                                   " (naive, tiles 1x1 4x2 8x1 8x2 16x1 16x2, gemm, whole, ",
                                   "columns)", " split ", split)
                check_guards(got, m * n, label)
                assert_bits_equal(got, want, m * n, label)


def test_every_tile_equals_scalar_fma_reference_bit_for_bit() raises:
    var s = run_seed()
    var cases = shapes()
    cases.append(Case(13, 21, 1100))  # more than one k block at either width (KC 512, 1024)
    cases.append(Case(9, 530, 40))  # a wide C: many column panels over each row of A
    for i in range(len(cases)):
        check_case(cases[i].m, cases[i].n, cases[i].k, s)


def test_large_shape_in_full() raises:
    var s = run_seed()
    check_case(131, 263, 517, s)


def test_gemm_within_bound_deterministic_and_split_invariant() raises:
    var s = run_seed()
    var cases = shapes()
    cases.append(Case(97, 130, 600))  # more than one k block and column panel edge
    for ci in range(len(cases)):
        var m = cases[ci].m
        var n = cases[ci].n
        var k = cases[ci].k
        var a = List[Float32](length=max(m * k, 1), fill=0.0)
        var b = List[Float32](length=max(k * n, 1), fill=0.0)
        var c0 = List[Float32](length=m * n + 2 * GUARD, fill=0.0)
        fill_random(a)
        fill_random(b)
        fill_random(c0)
        for t in range(4):
            var ta = (t & 1) == 1
            var tb = (t & 2) == 2
            for accumulate in [False, True]:
                var what = String("seed ", s, " shape ", m, "x", n, "x", k, " ta=", ta, " tb=",
                                  tb, " acc=", accumulate)
                var once = guarded(m * n)
                var twice = guarded(m * n)
                var split = guarded(m * n)
                for i in range(m * n):
                    once[GUARD + i] = c0[GUARD + i]
                    twice[GUARD + i] = c0[GUARD + i]
                    split[GUARD + i] = c0[GUARD + i]
                gemm(ptr(a), ptr(b), ptr(once).unsafe_offset(GUARD), m, n, k, ta, tb,
                          accumulate, 0, m)
                gemm(ptr(a), ptr(b), ptr(twice).unsafe_offset(GUARD), m, n, k, ta, tb,
                          accumulate, 0, m)
                var r = Int(random_ui64(0, UInt64(m)))
                gemm(ptr(a), ptr(b), ptr(split).unsafe_offset(GUARD), m, n, k, ta, tb,
                          accumulate, 0, r)
                gemm(ptr(a), ptr(b), ptr(split).unsafe_offset(GUARD), m, n, k, ta, tb,
                          accumulate, r, m)
                var cols = guarded(m * n)
                for i in range(m * n):
                    cols[GUARD + i] = c0[GUARD + i]
                var q = Int(random_ui64(0, UInt64(n)))
                gemm(ptr(a), ptr(b), ptr(cols).unsafe_offset(GUARD), m, n, k, ta, tb,
                          accumulate, 0, m, 0, q)
                gemm(ptr(a), ptr(b), ptr(cols).unsafe_offset(GUARD), m, n, k, ta, tb,
                          accumulate, 0, m, q, n)
                check_guards(once, m * n, what)
                check_guards(split, m * n, what)
                check_guards(cols, m * n, what)
                assert_bits_equal(twice, once, m * n, String(what, " (run twice)"))
                assert_bits_equal(split, once, m * n, String(what, " (rows split at ", r, ")"))
                assert_bits_equal(cols, once, m * n, String(what, " (columns split at ", q, ")"))
                for i in range(m):
                    for j in range(n):
                        var exact = Float64(0.0)
                        var mag = Float64(0.0)
                        for p in range(k):
                            var x = Float64(a[p * m + i] if ta else a[i * k + p])
                            var y = Float64(b[j * k + p] if tb else b[p * n + j])
                            exact += x * y
                            mag += abs(x * y)
                        if accumulate:
                            var old = Float64(c0[GUARD + i * n + j])
                            exact += old
                            mag += abs(old)
                        var kk = Float64(k + 1)
                        # 2^-24 per rounding, 2^-149 the subnormal spacing
                        var bound = (FAST_BOUND * kk * 5.960464477539063e-08 * mag
                                     + kk * 1.401298464324817e-45)
                        var got = Float64(once[GUARD + i * n + j])
                        if not abs(got - exact) <= bound:
                            assert_true(False, String(what, ": C[", i, ",", j, "] = ", got,
                                                      " exact ", exact, " bound ", bound))


def test_rows_outside_range_untouched() raises:
    # A kernel given rows [r0, r1) leaves every other row of C exactly as it was.
    var s = run_seed()
    var m = 23
    var n = 37
    var k = 19
    var a = List[Float32](length=m * k, fill=0.0)
    var b = List[Float32](length=k * n, fill=0.0)
    fill_random(a)
    fill_random(b)
    for variant in range(2):
        var c = guarded(m * n)
        for i in range(m * n):
            c[GUARD + i] = bitcast[DType.float32, 1](SENTINEL)
        var cp = ptr(c).unsafe_offset(GUARD)
        if variant == 0:
            gemm_on[8, 2](ptr(a), ptr(b), cp, m, n, k, False, True, False, 5, 11)
        else:
            gemm(ptr(a), ptr(b), cp, m, n, k, True, False, False, 5, 11)
        for i in range(m * n):
            var inside = i >= 5 * n and i < 11 * n
            assert_equal(bits(c[GUARD + i]) == SENTINEL, not inside,
                         String("seed ", s, " variant ", variant, " output ", i))
        check_guards(c, m * n, String("seed ", s))


def plain_epilogue(c: F32P, m: Int, n: Int, bias: F32P, relu: Bool, use_bias: Bool):
    """The epilogue's contract, one output at a time: + bias[j], then ReLU."""
    for i in range(m):
        for j in range(n):
            var z = c[unsafe_offset=i * n + j]
            if use_bias:
                z = z + bias[unsafe_offset=j]
            if relu and not (z > 0):
                z = 0.0
            c[unsafe_offset=i * n + j] = z


def run_mode(fast: Bool, a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
             acc: Bool, r0: Int, r1: Int, c0: Int, c1: Int, epi: Epilogue):
    """`gemm`'s own tile when `fast`, else the 16 × 2 one (the x86-64-v4 build's widest)."""
    if fast:
        gemm(a, b, c, m, n, k, ta, tb, acc, r0, r1, c0, c1, epi)
    else:
        gemm_on[16, 2](a, b, c, m, n, k, ta, tb, acc, r0, r1, c0, c1, epi)


def test_epilogue_equals_product_then_plain_passes() raises:
    var s = run_seed()
    var cases = shapes()
    cases.append(Case(97, 130, 600))
    cases.append(Case(256, 40, 70))  # a last 4-row panel, a 6x8 edge tile
    for ci in range(len(cases)):
        var m = cases[ci].m
        var n = cases[ci].n
        var k = cases[ci].k
        var a = List[Float32](length=max(m * k, 1), fill=0.0)
        var b = List[Float32](length=max(k * n, 1), fill=0.0)
        var c0 = List[Float32](length=m * n + 2 * GUARD, fill=0.0)
        var bias = List[Float32](length=n, fill=0.0)
        fill_random(a)
        fill_random(b)
        fill_random(c0)
        fill_random(bias)
        for variant in range(6):
            var fast = variant >= 3
            var kind = variant % 3  # bias; bias + ReLU; ReLU
            var use_bias = kind != 2
            var relu = kind != 0
            var epi = Epilogue(Int(bias.unsafe_ptr()) if use_bias else 0, relu)
            var t = Int(random_ui64(0, 3))
            var ta = (t & 1) == 1
            var tb = (t & 2) == 2
            for accumulate in [False, True]:
                var what = String("seed ", s, " shape ", m, "x", n, "x", k, " fast=", fast,
                                  " bias=", use_bias, " relu=", relu,
                                  " ta=", ta, " tb=", tb, " acc=", accumulate)
                var want = guarded(m * n)
                for i in range(m * n):
                    want[GUARD + i] = c0[GUARD + i]
                var wp = ptr(want).unsafe_offset(GUARD)
                scalar_ref(ptr(a), ptr(b), wp, m, n, k, ta, tb, accumulate)
                plain_epilogue(wp, m, n, ptr(bias), relu, use_bias)
                for split in range(3):  # whole; rows in two calls; columns in two calls
                    var got = guarded(m * n)
                    for i in range(m * n):
                        got[GUARD + i] = c0[GUARD + i]
                    var gp = ptr(got).unsafe_offset(GUARD)
                    if split == 0:
                        run_mode(fast, ptr(a), ptr(b), gp, m, n, k, ta, tb, accumulate, 0, m, 0,
                                 -1, epi)
                    elif split == 1:
                        var r = Int(random_ui64(0, UInt64(m)))
                        run_mode(fast, ptr(a), ptr(b), gp, m, n, k, ta, tb, accumulate, 0, r, 0,
                                 -1, epi)
                        run_mode(fast, ptr(a), ptr(b), gp, m, n, k, ta, tb, accumulate, r, m, 0,
                                 -1, epi)
                    else:
                        var q = Int(random_ui64(0, UInt64(n)))
                        run_mode(fast, ptr(a), ptr(b), gp, m, n, k, ta, tb, accumulate, 0, m, 0,
                                 q, epi)
                        run_mode(fast, ptr(a), ptr(b), gp, m, n, k, ta, tb, accumulate, 0, m, q,
                                 n, epi)
                    var label = String(what, " split ", split, " (whole, rows, columns)")
                    check_guards(got, m * n, label)
                    assert_bits_equal(got, want, m * n, label)


def test_shared_b_pieces_and_row_chunks_in_any_order_give_the_bits_of_gemm() raises:
    var s = run_seed()
    var tried = 0
    for shape in [(48, 10, 37), (200, 16, 1), (257, 130, 300), (75, 784, 64), (30, 1024, 9),
                  (40, 256, 784)]:
        var m = shape[0]
        var n = shape[1]
        var k = shape[2]
        if not shared_fits(n, k):
            continue
        tried += 1
        var a = List[Float32](length=m * k, fill=0.0)
        var b = List[Float32](length=k * n, fill=0.0)
        var c0 = List[Float32](length=m * n + 2 * GUARD, fill=0.0)
        var bias = List[Float32](length=n, fill=0.0)
        fill_random(a)
        fill_random(b)
        fill_random(c0)
        fill_random(bias)
        var bp = List[Float32](length=shared_b_floats(n, k) + PANEL_ALIGN // 4, fill=0.0)
        var ap = List[Float32](length=shared_a_floats(k), fill=0.0)
        for t in range(4):
            var ta = (t & 1) == 1
            var tb = (t & 2) == 2
            var accumulate = random_ui64(0, 1) == 1
            var kind = Int(random_ui64(0, 2))  # none; bias + ReLU; ReLU
            var epi = Epilogue(Int(bias.unsafe_ptr()) if kind == 1 else 0, kind >= 1)
            var what = String("seed ", s, " shape ", m, "x", n, "x", k, " ta=", ta, " tb=", tb,
                              " acc=", accumulate, " epilogue ", kind)
            var want = guarded(m * n)
            var got = guarded(m * n)
            for i in range(m * n):
                want[GUARD + i] = c0[GUARD + i]
                got[GUARD + i] = c0[GUARD + i]
            gemm(ptr(a), ptr(b), ptr(want).unsafe_offset(GUARD), m, n, k, ta, tb, accumulate, 0,
                 m, 0, -1, epi)
            var aligned = (Int(bp.unsafe_ptr()) + PANEL_ALIGN - 1) // PANEL_ALIGN * PANEL_ALIGN
            var g = SharedGemm(Int(a.unsafe_ptr()), Int(b.unsafe_ptr()),
                               Int(ptr(got).unsafe_offset(GUARD)), m, n, k, ta, tb, accumulate,
                               epi, aligned, Int(ap.unsafe_ptr()), SHARED_CHUNK)
            var pieces = shared_pieces(n, k)
            for i in range(pieces):  # last piece first
                shared_pack(g, pieces - 1 - i)
            var chunks = (m + SHARED_CHUNK - 1) // SHARED_CHUNK
            for i in range(chunks):  # last chunk first
                var r0 = (chunks - 1 - i) * SHARED_CHUNK
                shared_rows(g, r0, min(m, r0 + SHARED_CHUNK), ptr(ap))
            check_guards(got, m * n, what)
            assert_bits_equal(got, want, m * n, what)
    assert_true(tried >= 5, "shared_fits refused the shapes this test is for")


def test_loss_epilogue_equals_product_bias_then_cross_entropy() raises:
    var s = run_seed()
    var tried = 0
    for shape in [(37, 10, 50), (256, 7, 300), (5, 1, 3), (100, 16, 20), (64, 30, 9)]:
        var m = shape[0]
        var n = shape[1]
        var k = shape[2]
        if not gemm_tiles_hold_rows(n):
            continue
        tried += 1
        var a = List[Float32](length=m * k, fill=0.0)
        var b = List[Float32](length=k * n, fill=0.0)
        var bias = List[Float32](length=n, fill=0.0)
        var y = List[Int32](length=m, fill=0)
        for i in range(m * k):
            a[i] = Float32(random_float64(-2.0, 2.0))
        for i in range(k * n):
            b[i] = Float32(random_float64(-2.0, 2.0))
        for j in range(n):
            bias[j] = Float32(random_float64(-1.0, 1.0))
        for i in range(m):
            y[i] = Int32(random_ui64(0, UInt64(n - 1)))
        var yp = I32P(unsafe_from_address=Int(y.unsafe_ptr()))
        var what = String("seed ", s, " shape ", m, "x", n, "x", k)
        # The reference: the product, its bias, then the cross-entropy, one after the other.
        var want = List[Float32](length=m * n, fill=0.0)
        gemm(ptr(a), ptr(b), ptr(want), m, n, k, False, True, False, 0, m)
        for i in range(m):
            for j in range(n):
                want[i * n + j] = want[i * n + j] + bias[j]
        var want_dl = List[Float32](length=m * n, fill=0.0)
        var want_rows = List[Float32](length=m, fill=0.0)
        var want_mean = cross_entropy(ptr(want), yp, m, n, IGNORE_NOTHING, 0.0, REDUCTION_MEAN,
                                      ptr(want_rows), ptr(want_dl), True, m)
        for split in range(2):  # whole; rows in two calls
            var got = List[Float32](length=m * n, fill=0.0)
            var dl = List[Float32](length=m * n, fill=0.0)
            var rows = List[Float32](length=m, fill=0.0)
            var t = RowLosses(Int(got.unsafe_ptr()), Int(y.unsafe_ptr()), Int(dl.unsafe_ptr()),
                              Int(rows.unsafe_ptr()), n, Float32(m))
            var epi = Epilogue(Int(bias.unsafe_ptr()), False, Int(Pointer(to=t)))
            var r = m if split == 0 else Int(random_ui64(0, UInt64(m)))
            gemm(ptr(a), ptr(b), ptr(got), m, n, k, False, True, False, 0, r, 0, -1, epi)
            gemm(ptr(a), ptr(b), ptr(got), m, n, k, False, True, False, r, m, 0, -1, epi)
            var label = String(what, " split at row ", r)
            for i in range(m * n):
                assert_equal(bits(got[i]), bits(want[i]), String(label, ": logit ", i))
                assert_equal(bits(dl[i]), bits(want_dl[i]), String(label, ": dlogit ", i))
            for i in range(m):
                assert_equal(bits(rows[i]), bits(want_rows[i]), String(label, ": row loss ", i))
            assert_equal(bits(mean_of_rows(t, m)), bits(want_mean), String(label, ": mean"))
            _ = len(rows) + len(got) + len(dl)  # `t` reads them by address
    assert_true(tried >= 4, "gemm_tiles_hold_rows refused the shapes this test is for")


def test_a_buffer_of_gemm_bytes_is_enough_and_changes_no_bit() raises:
    var s = run_seed()
    var cases = shapes()
    cases.append(Case(97, 130, 600))
    cases.append(Case(256, 256, 784))
    cases.append(Case(30, 1100, 50))  # two column blocks
    for ci in range(len(cases)):
        var m = cases[ci].m
        var n = cases[ci].n
        var k = cases[ci].k
        var a = List[Float32](length=max(m * k, 1), fill=0.0)
        var b = List[Float32](length=max(k * n, 1), fill=0.0)
        var c0 = List[Float32](length=m * n + 2 * GUARD, fill=0.0)
        fill_random(a)
        fill_random(b)
        fill_random(c0)
        for variant in range(3):
            var t = Int(random_ui64(0, 3))
            var ta = (t & 1) == 1
            var tb = (t & 2) == 2
            var accumulate = random_ui64(0, 1) == 1
            var r0 = Int(random_ui64(0, UInt64(m)))
            var r1 = Int(random_ui64(UInt64(r0), UInt64(m)))
            var q0 = Int(random_ui64(0, UInt64(n)))
            var q1 = Int(random_ui64(UInt64(q0), UInt64(n)))
            if variant == 0:  # all of C
                r0, r1, q0, q1 = 0, m, 0, n
            var floats = gemm_bytes(n, k, r1 - r0, q1 - q0) // 4
            var buf = List[Float32](length=floats + 16 + GUARD, fill=0.0)
            # Start 4 bytes past a cache line: the most alignment the buffer must give up.
            var start = ((Int(buf.unsafe_ptr()) + PANEL_ALIGN - 1) // PANEL_ALIGN * PANEL_ALIGN
                         + 4 - Int(buf.unsafe_ptr())) // 4
            for i in range(GUARD):
                buf[start + floats + i] = bitcast[DType.float32, 1](SENTINEL)
            var what = String("seed ", s, " shape ", m, "x", n, "x", k, " rows ", r0, "..", r1,
                              " columns ", q0, "..", q1, " ta=", ta, " tb=", tb, " acc=",
                              accumulate)
            var want = guarded(m * n)
            var got = guarded(m * n)
            for i in range(m * n):
                want[GUARD + i] = c0[GUARD + i]
                got[GUARD + i] = c0[GUARD + i]
            gemm(ptr(a), ptr(b), ptr(want).unsafe_offset(GUARD), m, n, k, ta, tb, accumulate, r0,
                 r1, q0, q1)
            gemm(ptr(a), ptr(b), ptr(got).unsafe_offset(GUARD), m, n, k, ta, tb, accumulate, r0,
                 r1, q0, q1, Epilogue.none(), Int(ptr(buf).unsafe_offset(start)))
            for i in range(GUARD):
                assert_equal(bits(buf[start + floats + i]), SENTINEL,
                             String(what, ": packed past gemm_bytes"))
            assert_bits_equal(got, want, m * n, what)


comptime PAGE = 4096


def _room(floats: Int) -> Int:
    return (4 * floats + PAGE - 1) // PAGE * PAGE


def _guarded_end(floats: Int) raises -> Tuple[Int, Int]:
    """(mapping, address) of room for `floats` floats that end where a PROT_NONE page begins:
    a read past them faults."""
    var room = _room(floats)
    var base = external_call["mmap", Int](0, room + PAGE, 3, 0x22, -1, 0)  # RW, private|anon
    assert_true(base != -1 and base != 0, "mmap")
    assert_equal(external_call["mprotect", Int32](base + room, PAGE, 0), Int32(0), "mprotect")
    return (base, base + room - 4 * floats)


def test_operands_are_never_read_past_their_end() raises:
    """A tile's rows past the real ones (an edge tile of 1, 3 or 5 rows) read the last real
    row of an op(A) read in place, nothing after it: each operand here ends at a guard page,
    and the bits are the scalar reference's."""
    var s = run_seed()
    for m in [1, 2, 3, 5, 7, 13]:
        for t in range(4):
            var ta = (t & 1) == 1
            var tb = (t & 2) == 2
            var n = 19 + m
            var k = 37 + 3 * m
            var a_map = _guarded_end(m * k)
            var b_map = _guarded_end(k * n)
            var a = F32P(unsafe_from_address=a_map[1])
            var b = F32P(unsafe_from_address=b_map[1])
            for i in range(m * k):
                a[unsafe_offset=i] = random_f32()
            for i in range(k * n):
                b[unsafe_offset=i] = random_f32()
            var want = guarded(m * n)
            scalar_ref(a, b, ptr(want).unsafe_offset(GUARD), m, n, k, ta, tb, False)
            for variant in range(1, 8):
                var got = guarded(m * n)
                run_tile(variant, a, b, ptr(got).unsafe_offset(GUARD), m, n, k, ta, tb, False,
                         0, m)
                var what = String("seed ", s, " shape ", m, "x", n, "x", k, " ta=", ta,
                                  " tb=", tb, " variant ", variant)
                check_guards(got, m * n, what)
                assert_bits_equal(got, want, m * n, what)
            _ = external_call["munmap", Int32](a_map[0], _room(m * k) + PAGE)
            _ = external_call["munmap", Int32](b_map[0], _room(k * n) + PAGE)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
