# Optimizer math: Adam/AdamW and SGD SIMD updates against plain scalar loops written from
# docs/ARITHMETIC.md (bit patterns, zero tolerance), on random sizes that leave SIMD tails,
# random hyperparameters including 0, tiny eps and subnormal gradients; bias corrections,
# sum of squares, the p-norms (1, 2, other p, inf), clip coefficient and the balanced tree sum
# against scalar references.
# Run: mojo run -I mojo --fp-mode contract=off mojo/tests/test_optim.mojo
from std.math import sqrt
from std.memory import bitcast
from std.random import random_float64, random_ui64, seed
from std.testing import TestSuite, assert_equal, assert_true
from std.time import perf_counter_ns

from training.config import F32P, I64P
from std.utils.numerics import inf, isnan, nan
from training.optim import (NORM_ABS, NORM_POWER, GradNorm, adam_scalars, adam_update,
                            adam_update_into, bias_correction, bias_corrections,
                            clip_coefficient, max_abs, pow_by_squaring, sgd_update, sum_squares,
                            sum_terms, tree_sum)
from training.portable_math import exp32_scalar, log32_scalar


def fresh_seed() -> Int:
    var s = Int(perf_counter_ns() % 1000000007)
    seed(s)
    return s


def rnd(scale: Float64) -> Float32:
    """A random float32 in (-scale, scale); one in 16 is a subnormal or a signed zero."""
    var pick = random_ui64(0, 15)
    if pick == 0:
        return bitcast[DType.float32, 1](UInt32(random_ui64(1, 0x7FFFFF)))
    if pick == 1:
        return Float32(-0.0) if random_ui64(0, 1) == 1 else Float32(0.0)
    return Float32((random_float64() * 2.0 - 1.0) * scale)


def bits(x: Float32) -> UInt32:
    return bitcast[DType.uint32, 1](x)


def fill(mut xs: List[Float32], scale: Float64, nonneg: Bool = False):
    for i in range(len(xs)):
        var x = rnd(scale)
        xs[i] = abs(x) if nonneg else x


def ptr(xs: List[Float32]) -> F32P:
    return F32P(unsafe_from_address=Int(xs.unsafe_ptr()))


def ref_pow(beta: Float64, t: Int) -> Float64:
    """beta^t in binary64, squaring over the bits of t from the least significant."""
    var r = Float64(1.0)
    var b = beta
    var k = t
    while k != 0:
        if k % 2 == 1:
            r = r * b
        b = b * b
        k = k // 2
    return r


def ref_adam(mut p: Float32, g0: Float32, mut m: Float32, mut v: Float32, lr: Float64,
             b1: Float64, b2: Float64, eps: Float64, wd: Float64, decoupled: Bool,
             maximize: Bool, t: Int):
    """Profile v2: the scalars in binary64 from the hyperparameters, each rounded once."""
    var bc1: Float64 = 1.0 - ref_pow(b1, t)
    var bc2: Float64 = 1.0 - ref_pow(b2, t)
    var g = -g0 if maximize else g0
    if wd != 0:
        if decoupled:
            var decay = Float32(1.0 - lr * wd)
            p = p * decay
        else:
            var d: Float32 = Float32(wd) * p
            g = g + d
    var a: Float32 = Float32(b1) * m
    var b: Float32 = Float32(1.0 - b1) * g
    m = a + b
    var gg: Float32 = g * g
    var c: Float32 = Float32(b2) * v
    var e: Float32 = Float32(1.0 - b2) * gg
    v = c + e
    var step_size = Float32(lr / bc1)
    var sv: Float32 = sqrt(v)
    var sb = Float32(sqrt(bc2))
    var q: Float32 = sv / sb
    var denom: Float32 = q + Float32(eps)
    var r: Float32 = m / denom
    var upd: Float32 = step_size * r
    p = p - upd


def ref_sgd(mut p: Float32, g0: Float32, mut buf: Float32, lr: Float64, mu: Float64,
            damp: Float64, wd: Float64, nesterov: Bool, maximize: Bool, initialized: Bool):
    var g = -g0 if maximize else g0
    if wd != 0:
        var d: Float32 = Float32(wd) * p
        g = g + d
    if mu != 0:
        if initialized:
            var a: Float32 = Float32(mu) * buf
            var b: Float32 = Float32(1.0 - damp) * g
            buf = a + b
        else:
            buf = g
        if nesterov:
            var c: Float32 = Float32(mu) * buf
            g = g + c
        else:
            g = buf
    var u: Float32 = Float32(lr) * g
    p = p - u


def pick_hyper(choices: List[Float64]) -> Float64:
    return choices[Int(random_ui64(0, UInt64(len(choices) - 1)))]


def test_adam_matches_scalar_reference() raises:
    var s = fresh_seed()
    for trial in range(300):
        var n = Int(random_ui64(0, 37))
        var p = List[Float32](length=n, fill=0)
        var g = List[Float32](length=n, fill=0)
        var m = List[Float32](length=n, fill=0)
        var v = List[Float32](length=n, fill=0)
        fill(p, 3.0)
        fill(g, 1.0)
        fill(m, 0.5)
        fill(v, 0.5, nonneg=True)
        # Binary64 hyperparameters, most not float32 values (profile v2 keeps them as given).
        var lr = pick_hyper([0.0, 1e-3, 0.1, 3.0, random_float64(0.0, 0.1)])
        var b1 = pick_hyper([0.0, 0.9, 0.5, random_float64(0.8, 1.0)])
        var b2 = pick_hyper([0.0, 0.999, 0.9, random_float64(0.99, 1.0)])
        var eps = pick_hyper([1e-8, 1e-30, 0.1])
        var wd = pick_hyper([0.0, 0.01, 10.0])
        var decoupled = random_ui64(0, 1) == 1
        var maximize = random_ui64(0, 1) == 1
        var t = Int(random_ui64(1, 3000))
        var ep = p.copy()
        var em = m.copy()
        var ev = v.copy()
        for i in range(n):
            ref_adam(ep[i], g[i], em[i], ev[i], lr, b1, b2, eps, wd, decoupled, maximize, t)
        var g_before = g.copy()
        adam_update(ptr(p), ptr(g), ptr(m), ptr(v), n, lr, b1, b2, eps, wd, decoupled,
                    maximize, t)
        for i in range(n):
            var where = String("seed ", s, " trial ", trial, " n ", n, " index ", i)
            assert_equal(bits(p[i]), bits(ep[i]), String("p: ", where))
            assert_equal(bits(m[i]), bits(em[i]), String("m: ", where))
            assert_equal(bits(v[i]), bits(ev[i]), String("v: ", where))
            assert_equal(bits(g[i]), bits(g_before[i]), String("g was written: ", where))


def test_adam_into_separate_outputs_equals_in_place() raises:
    var s = fresh_seed()
    var n = 29
    var p = List[Float32](length=n, fill=0)
    var g = List[Float32](length=n, fill=0)
    var m = List[Float32](length=n, fill=0)
    var v = List[Float32](length=n, fill=0)
    fill(p, 2.0)
    fill(g, 2.0)
    fill(m, 1.0)
    fill(v, 1.0, nonneg=True)
    var po = List[Float32](length=n, fill=0)
    var mo = List[Float32](length=n, fill=0)
    var vo = List[Float32](length=n, fill=0)
    var sc = adam_scalars(0.01, 0.9, 0.999, 1e-8, 0.1, True, False, 7)
    _ = adam_update_into(ptr(p), ptr(g), ptr(m), ptr(v), ptr(po), ptr(mo), ptr(vo), n, sc)
    adam_update(ptr(p), ptr(g), ptr(m), ptr(v), n, 0.01, 0.9, 0.999, 1e-8, 0.1, True, False, 7)
    for i in range(n):
        assert_equal(bits(po[i]), bits(p[i]), String("seed ", s, " index ", i))
        assert_equal(bits(mo[i]), bits(m[i]), String("seed ", s, " index ", i))
        assert_equal(bits(vo[i]), bits(v[i]), String("seed ", s, " index ", i))


def _all_finite(xs: List[Float32]) -> Bool:
    for x in xs:
        if (bits(x) & 0x7F800000) == 0x7F800000:
            return False
    return True


def test_adam_into_reports_whether_g_and_the_new_state_are_finite() raises:
    # The flag found in the update's own pass equals a plain scan of g and the new p, m, v,
    # for a NaN/Inf placed at random in g, in an input moment, or made by an overflowing step
    # (lengths around the vector width reach both the vector and the scalar loop).
    var s = fresh_seed()
    var inf = Float32(1.0) / Float32(0.0)
    for trial in range(400):
        var n = Int(random_ui64(1, 45))
        var p = List[Float32](length=n, fill=0)
        var g = List[Float32](length=n, fill=0)
        var m = List[Float32](length=n, fill=0)
        var v = List[Float32](length=n, fill=0)
        fill(p, 2.0)
        fill(g, 2.0)
        fill(m, 1.0)
        fill(v, 1.0, nonneg=True)
        var lr = Float64(0.01)
        var at = Int(random_ui64(0, UInt64(n - 1)))
        var how = trial % 5
        if how == 1:
            g[at] = inf - inf  # NaN
        elif how == 2:
            g[at] = -inf
        elif how == 3:
            m[at] = inf
        elif how == 4:
            lr = Float64(3.0e38)  # the step itself overflows p
            p[at] = Float32(-3.0e38)
        var po = List[Float32](length=n, fill=0)
        var mo = List[Float32](length=n, fill=0)
        var vo = List[Float32](length=n, fill=0)
        var sc = adam_scalars(lr, 0.9, 0.999, 1e-8, 0.0, True, False, 3)
        var flag = adam_update_into(ptr(p), ptr(g), ptr(m), ptr(v), ptr(po), ptr(mo),
                                    ptr(vo), n, sc)
        var want = _all_finite(g) and _all_finite(po) and _all_finite(mo) and _all_finite(vo)
        assert_equal(flag, want, String("seed ", s, " trial ", trial, " n ", n, " at ", at))
        if how != 0 and how != 4:
            assert_true(not flag, String("seed ", s, " trial ", trial, ": a NaN/Inf missed"))


def test_sgd_matches_scalar_reference() raises:
    var s = fresh_seed()
    for trial in range(300):
        var n = Int(random_ui64(0, 37))
        var p = List[Float32](length=n, fill=0)
        var g = List[Float32](length=n, fill=0)
        var buf = List[Float32](length=n, fill=0)
        fill(p, 3.0)
        fill(g, 1.0)
        fill(buf, 1.0)
        var lr = pick_hyper([0.0, 1e-3, 0.5, random_float64(0.0, 0.1)])
        var mu = pick_hyper([0.0, 0.9, 0.5])
        var damp = pick_hyper([0.0, 0.1, 0.9, random_float64()])
        var wd = pick_hyper([0.0, 1e-4, 5.0])
        var nesterov = random_ui64(0, 1) == 1
        var maximize = random_ui64(0, 1) == 1
        var initialized = random_ui64(0, 1) == 1
        var ep = p.copy()
        var eb = buf.copy()
        for i in range(n):
            ref_sgd(ep[i], g[i], eb[i], lr, mu, damp, wd, nesterov, maximize, initialized)
        sgd_update(ptr(p), ptr(g), ptr(buf), n, lr, mu, damp, wd, nesterov, maximize,
                   initialized)
        for i in range(n):
            var where = String("seed ", s, " trial ", trial, " n ", n, " index ", i)
            assert_equal(bits(p[i]), bits(ep[i]), String("p: ", where))
            assert_equal(bits(buf[i]), bits(eb[i]), String("buf: ", where))


def test_bias_correction_by_squaring() raises:
    var s = fresh_seed()
    # Powers of 1/2 are exact, so every t has one right answer.
    for t in range(1, 120):
        var expect = Float64(1.0)
        for _ in range(t):
            expect = expect * 0.5
        assert_equal(pow_by_squaring(Float64(0.5), t)[0], expect)
    assert_equal(bias_correction(0.9, 1), Float64(1.0) - 0.9)
    assert_equal(bias_correction(0.0, 5), Float64(1.0))
    # A scalar loop over the bits from the least significant, against random beta and t.
    for _ in range(200):
        var beta = random_float64()
        var t = Int(random_ui64(1, 1 << 20))
        assert_equal(bias_correction(beta, t), Float64(1.0) - ref_pow(beta, t),
                     String("seed ", s, " beta ", beta, " t ", t))
    # Both betas in one two-lane pass give each scalar pass's bits, up to t = 2**53 - 1.
    for _ in range(500):
        var b1 = random_float64()
        var b2 = random_float64(0.99, 1.0)
        var t = Int(random_ui64(1, (1 << 53) - 1) >> random_ui64(0, 52))
        var both = bias_corrections(b1, b2, t)
        var where = String("seed ", s, " betas ", b1, " ", b2, " t ", t)
        assert_equal(both[0], bias_correction(b1, t), where)
        assert_equal(both[1], bias_correction(b2, t), where)


def test_adam_scalars_are_formed_in_binary64_and_rounded_once() raises:
    # The accuracy fix of profile v2: 1 - beta2 from the binary64 0.999 (0.001 to float32
    # precision), not from float32(0.999) (0.00099998713: 1.3e-5 off).
    var sc = adam_scalars(1e-2, 0.9, 0.999, 1e-8, 0.01, True, False, 1)
    assert_equal(bits(sc.one_minus_beta2), bits(Float32(Float64(1.0) - 0.999)))
    assert_true(bits(sc.one_minus_beta2) != bits(Float32(1.0) - Float32(0.999)))
    assert_equal(bits(sc.one_minus_beta1), bits(Float32(Float64(1.0) - 0.9)))
    assert_equal(bits(sc.step_size), bits(Float32(1e-2 / (1.0 - 0.9))))
    assert_equal(bits(sc.sqrt_bc2), bits(Float32(sqrt(Float64(1.0) - 0.999))))
    assert_equal(bits(sc.decay), bits(Float32(1.0 - 1e-2 * 0.01)))
    assert_equal(bits(sc.beta2), bits(Float32(0.999)))


def test_sum_squares_is_sequential() raises:
    var s = fresh_seed()
    for n in range(0, 70):
        var g = List[Float32](length=n, fill=0)
        fill(g, 10.0)
        var acc = Float32(0.0)
        for i in range(n):
            var sq: Float32 = g[i] * g[i]
            acc = acc + sq
        assert_equal(bits(sum_squares(ptr(g), n)), bits(acc), String("seed ", s, " n ", n))


def ref_norm(tensors: List[List[Float32]], p: Float32) -> Float32:
    """The p-norm of docs/ARITHMETIC.md, one scalar operation at a time: per tensor a sum of
    terms ascending from +0, the sums added in tensor order from +0, then one root (inf: the
    max |g|)."""
    var total = Float32(0.0)
    for j in range(len(tensors)):
        var s = Float32(0.0)
        for i in range(len(tensors[j])):
            var x = abs(tensors[j][i])
            if p == inf[DType.float32]():
                if x > s:
                    s = x
            elif p == Float32(1.0):
                s = s + x
            elif p == Float32(2.0):
                var sq: Float32 = x * x
                s = s + sq
            else:
                var y: Float32 = p * log32_scalar(x)
                s = s + exp32_scalar(y)
        if p == inf[DType.float32]():
            if s > total:
                total = s
        else:
            total = total + s
    if p == inf[DType.float32]() or p == Float32(1.0):
        return total
    if p == Float32(2.0):
        return sqrt(total)
    var l: Float32 = log32_scalar(total) / p
    return exp32_scalar(l)


def test_grad_norm_matches_the_scalar_order() raises:
    var s = fresh_seed()
    for p in [Float32(1.0), Float32(1.5), Float32(2.0), Float32(3.0), Float32(7.25),
              inf[DType.float32]()]:
        for _ in range(20):
            var tensors = List[List[Float32]]()
            var acc = GradNorm(p)
            for _ in range(Int(random_ui64(0, 4))):
                var g = List[Float32](length=Int(random_ui64(0, 40)), fill=0)
                fill(g, 10.0)
                acc.add(ptr(g), len(g))
                tensors.append(g^)
            assert_equal(bits(acc.value()), bits(ref_norm(tensors, p)),
                         String("seed ", s, " p ", p))


def test_sum_terms_and_max_abs_per_tensor() raises:
    var s = fresh_seed()
    for n in range(0, 40):
        var g = List[Float32](length=n, fill=0)
        fill(g, 10.0)
        var one = List[List[Float32]]()
        one.append(g.copy())
        assert_equal(bits(sum_terms[NORM_ABS](ptr(g), n)), bits(ref_norm(one, 1.0)),
                     String("seed ", s, " n ", n))
        assert_equal(bits(max_abs(ptr(g), n)), bits(ref_norm(one, inf[DType.float32]())),
                     String("seed ", s, " n ", n))
        var y = List[List[Float32]]()
        y.append(g.copy())
        var t = Float32(0.0)
        for i in range(n):
            var e: Float32 = exp32_scalar(Float32(2.5) * log32_scalar(abs(g[i])))
            t = t + e
        assert_equal(bits(sum_terms[NORM_POWER](ptr(g), n, Float32(2.5))), bits(t),
                     String("seed ", s, " n ", n))


def test_norms_of_non_finite_gradients() raises:
    # A NaN anywhere makes every norm NaN (max_abs too, in any position); an inf makes it inf.
    for n in [1, 7, 8, 9, 33]:
        for at in range(n):
            var g = List[Float32](length=n, fill=Float32(0.5))
            g[at] = nan[DType.float32]()
            for p in [Float32(1.0), Float32(2.0), Float32(3.0), inf[DType.float32]()]:
                var acc = GradNorm(p)
                acc.add(ptr(g), n)
                assert_true(isnan(acc.value()), String("n ", n, " at ", at, " p ", p))
            g[at] = -inf[DType.float32]()
            for p in [Float32(1.0), Float32(2.0), Float32(3.0), inf[DType.float32]()]:
                var acc = GradNorm(p)
                acc.add(ptr(g), n)
                assert_equal(acc.value(), inf[DType.float32](), String("n ", n, " p ", p))
    var none = GradNorm(Float32(3.0))
    assert_equal(bits(none.value()), bits(Float32(0.0)))


def test_clip_coefficient_clamps() raises:
    assert_equal(clip_coefficient(Float32(1.0), Float32(0.5)), Float32(1.0))
    var expect: Float32 = Float32(1.0) / (Float32(4.0) + Float32(1e-6))
    assert_equal(bits(clip_coefficient(Float32(1.0), Float32(4.0))), bits(expect))
    assert_equal(clip_coefficient(Float32(0.0), Float32(4.0)), Float32(0.0))


def ref_tree(vals: List[Float32], lo: Int, hi: Int) -> Float32:
    if hi - lo == 1:
        return vals[lo]
    var mid = (lo + hi) // 2
    return ref_tree(vals, lo, mid) + ref_tree(vals, mid, hi)


def test_tree_sum_matches_recursive_halves() raises:
    var s = fresh_seed()
    for count in [1, 2, 4, 8, 16]:
        var n = Int(random_ui64(1, 21))
        var srcs = List[List[Float32]]()
        var table = List[Int64]()
        for _ in range(count):
            var x = List[Float32](length=n, fill=0)
            fill(x, 1e3)
            srcs.append(x^)
        for k in range(count):
            table.append(Int64(Int(srcs[k].unsafe_ptr())))
        var out = List[Float32](length=n, fill=0)
        tree_sum(I64P(unsafe_from_address=Int(table.unsafe_ptr())), count, ptr(out), n)
        for i in range(n):
            var col = List[Float32]()
            for k in range(count):
                col.append(srcs[k][i])
            assert_equal(bits(out[i]), bits(ref_tree(col, 0, count)),
                         String("seed ", s, " count ", count, " index ", i))


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
