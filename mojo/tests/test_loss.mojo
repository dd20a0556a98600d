"""Checks the cross-entropy kernels against a plain scalar reference written here from the
formulas in training/loss.mojo's header (List-based, one row at a time): mean_cross_entropy
and every reduction of cross_entropy, with ignore_index and label smoothing, softmax_rows
(also against the gradient's p_j) and argmax_rows, on random shapes and logits (extreme ±80 rows, equal logits
included). Comparison is on float32 bits.

Run: mojo run -I mojo --fp-mode contract=off mojo/tests/test_loss.mojo
"""
from std.memory import bitcast
from std.testing import TestSuite, assert_equal, assert_true

from training.config import F32P, I32P
from training.loss import (IGNORE_NOTHING, REDUCTION_MEAN, REDUCTION_NONE, REDUCTION_SUM,
                           argmax_rows, count_kept, cross_entropy, first_bad_target, mean_cross_entropy,
                           softmax_rows)
from training.portable_math import exp32_scalar, log32_scalar


struct Rng(Movable):
    """An xorshift64* generator; each test seeds it from the clock and prints the seed."""

    var state: UInt64

    def __init__(out self, seed: UInt64):
        self.state = seed | 1

    def next(mut self) -> UInt64:
        self.state ^= self.state >> 12
        self.state ^= self.state << 25
        self.state ^= self.state >> 27
        return self.state * 0x2545F4914F6CDD1D

    def below(mut self, n: Int) -> Int:
        return Int((self.next() >> 33) % UInt64(n))

    def uniform(mut self, lo: Float32, hi: Float32) -> Float32:
        var u = Float32(Float64(self.next() >> 40) / 16777216.0)
        return lo + (hi - lo) * u


def _seed() -> UInt64:
    from std.time import perf_counter_ns
    return UInt64(perf_counter_ns())


def _bits(x: Float32) -> UInt32:
    return bitcast[DType.uint32, 1](x)


def _ref_row(z: List[Float32], y: Int, eps: Float32, mut grad: List[Float32]) -> Float32:
    """Plain reference of one row: loss and the (undivided) gradient p - q."""
    var c = len(z)
    var mx = z[0]
    for j in range(c):
        if z[j] > mx:
            mx = z[j]
    var e = List[Float32]()
    var s = Float32(0.0)
    for j in range(c):
        e.append(exp32_scalar(z[j] - mx))
        s = s + e[j]
    var ls = log32_scalar(s)
    var nll = ls - (z[y] - mx)
    var keep = Float32(1.0)
    var spread = Float32(0.0)
    var loss = nll
    if eps > 0.0:
        keep = Float32(1.0) - eps
        spread = eps / Float32(c)
        var smooth = Float32(0.0)
        for j in range(c):
            smooth = smooth + (ls - (z[j] - mx))
        loss = keep * nll + spread * smooth
    grad = List[Float32]()
    for j in range(c):
        var q = (keep + spread) if j == y else spread
        grad.append(e[j] / s - q)
    return loss


def _fill(mut rng: Rng, mut z: List[Float32], mut t: List[Int32], rows: Int, classes: Int,
          ignore: Int):
    z = List[Float32]()
    t = List[Int32]()
    for r in range(rows):
        var kind = rng.below(5)
        for j in range(classes):
            if kind == 0:
                z.append(Float32(80.0) if rng.below(2) == 0 else Float32(-80.0))
            elif kind == 1:
                z.append(Float32(1.5))  # equal logits
            else:
                z.append(rng.uniform(-10.0, 10.0))
        if ignore != IGNORE_NOTHING and rng.below(4) == 0:
            t.append(Int32(ignore))
        else:
            t.append(Int32(rng.below(classes)))


def _check_case(mut rng: Rng, seed: UInt64, rows: Int, classes: Int, reduction: Int,
                eps: Float32, ignore: Int) raises:
    var z = List[Float32]()
    var t = List[Int32]()
    _fill(rng, z, t, rows, classes, ignore)
    if count_kept(I32P(unsafe_from_address=Int(t.unsafe_ptr())), rows, ignore) == 0:
        t[0] = 0
    var zp = F32P(unsafe_from_address=Int(z.unsafe_ptr()))
    var tp = I32P(unsafe_from_address=Int(t.unsafe_ptr()))
    var losses = List[Float32](length=rows, fill=-1.0)
    var grad = List[Float32](length=rows * classes, fill=-1.0)
    var kept = count_kept(tp, rows, ignore)
    assert_equal(first_bad_target(tp, rows, classes, ignore), -1)
    var got = cross_entropy(zp, tp, rows, classes, ignore, eps, reduction,
                            F32P(unsafe_from_address=Int(losses.unsafe_ptr())),
                            F32P(unsafe_from_address=Int(grad.unsafe_ptr())), True, kept)
    var total = Float32(0.0)
    var divisor = Float32(kept)
    for r in range(rows):
        var row = List[Float32]()
        for j in range(classes):
            row.append(z[r * classes + j])
        var g = List[Float32]()
        var want = Float32(0.0)
        if Int(t[r]) != ignore:
            want = _ref_row(row, Int(t[r]), eps, g)
            total = total + want
        else:
            for _ in range(classes):
                g.append(0.0)
        if _bits(losses[r]) != _bits(want):
            raise Error(String("row ", r, " loss ", losses[r], " != ref ", want, " seed=", seed))
        for j in range(classes):
            var d = g[j] / divisor if reduction == REDUCTION_MEAN and Int(t[r]) != ignore else g[j]
            if _bits(grad[r * classes + j]) != _bits(d):
                raise Error(String("dlogits[", r, ",", j, "] ", grad[r * classes + j], " != ref ",
                                   d, " seed=", seed))
    var want_total = total / divisor if reduction == REDUCTION_MEAN else total
    if _bits(got) != _bits(want_total):
        raise Error(String("reduced loss ", got, " != ref ", want_total, " seed=", seed))


def test_cross_entropy_matches_reference() raises:
    var seed = _seed()
    var rng = Rng(seed)
    for k in range(300):
        var rows = 1 + rng.below(20)
        var classes = 1 + rng.below(12)
        var eps = Float32(0.0) if k % 2 == 0 else rng.uniform(0.0, 1.0)
        var ignore = IGNORE_NOTHING if k % 3 == 0 else -100 + 100 * rng.below(2)
        _check_case(rng, seed, rows, classes, k % 3, eps, ignore)


def test_mean_cross_entropy_equals_general_mean() raises:
    var seed = _seed()
    var rng = Rng(seed)
    for _ in range(200):
        var rows = 1 + rng.below(33)
        var classes = 1 + rng.below(10)
        var z = List[Float32]()
        var t = List[Int32]()
        _fill(rng, z, t, rows, classes, IGNORE_NOTHING)
        var zp = F32P(unsafe_from_address=Int(z.unsafe_ptr()))
        var tp = I32P(unsafe_from_address=Int(t.unsafe_ptr()))
        var g1 = List[Float32](length=rows * classes, fill=0.0)
        var g2 = List[Float32](length=rows * classes, fill=0.0)
        var losses = List[Float32](length=rows, fill=0.0)
        var a = mean_cross_entropy(zp, tp, rows, classes,
                                   F32P(unsafe_from_address=Int(g1.unsafe_ptr())), True)
        var b = cross_entropy(zp, tp, rows, classes, IGNORE_NOTHING, 0.0, REDUCTION_MEAN,
                              F32P(unsafe_from_address=Int(losses.unsafe_ptr())),
                              F32P(unsafe_from_address=Int(g2.unsafe_ptr())), True, rows)
        var c = mean_cross_entropy(zp, tp, rows, classes,
                                   F32P(unsafe_from_address=Int(g2.unsafe_ptr())), False)
        assert_equal(_bits(a), _bits(b), String("seed=", seed))
        assert_equal(_bits(a), _bits(c), String("seed=", seed))
        for i in range(rows * classes):
            assert_equal(_bits(g1[i]), _bits(g2[i]), String("seed=", seed))


def _ref_softmax(z: List[Float32]) -> List[Float32]:
    """Plain reference of one row's softmax: e_j / s with `_ref_row`'s e_j and s."""
    var mx = z[0]
    for j in range(len(z)):
        if z[j] > mx:
            mx = z[j]
    var e = List[Float32]()
    var s = Float32(0.0)
    for j in range(len(z)):
        e.append(exp32_scalar(z[j] - mx))
        s = s + e[j]
    var p = List[Float32]()
    for j in range(len(z)):
        p.append(e[j] / s)
    return p^


def test_softmax_rows_matches_reference_and_the_gradient() raises:
    var seed = _seed()
    var rng = Rng(seed)
    for _ in range(200):
        var rows = 1 + rng.below(20)
        var classes = 1 + rng.below(25)  # past two SIMD blocks of 8
        var z = List[Float32]()
        var t = List[Int32]()
        _fill(rng, z, t, rows, classes, IGNORE_NOTHING)
        var zp = F32P(unsafe_from_address=Int(z.unsafe_ptr()))
        var tp = I32P(unsafe_from_address=Int(t.unsafe_ptr()))
        var probs = List[Float32](length=rows * classes, fill=-1.0)
        var grad = List[Float32](length=rows * classes, fill=-1.0)
        var losses = List[Float32](length=rows, fill=-1.0)
        softmax_rows(zp, rows, classes, F32P(unsafe_from_address=Int(probs.unsafe_ptr())))
        _ = cross_entropy(zp, tp, rows, classes, IGNORE_NOTHING, 0.0, REDUCTION_SUM,
                          F32P(unsafe_from_address=Int(losses.unsafe_ptr())),
                          F32P(unsafe_from_address=Int(grad.unsafe_ptr())), True, rows)
        for r in range(rows):
            var row = List[Float32]()
            for j in range(classes):
                row.append(z[r * classes + j])
            var want = _ref_softmax(row)
            for j in range(classes):
                var got = probs[r * classes + j]
                if _bits(got) != _bits(want[j]):
                    raise Error(String("probs[", r, ",", j, "] ", got, " != ref ", want[j],
                                       " seed=", seed))
                # Off the target the gradient is p_j - 0: the same bits.
                if j != Int(t[r]) and _bits(got) != _bits(grad[r * classes + j]):
                    raise Error(String("probs[", r, ",", j, "] ", got, " != dlogits ",
                                       grad[r * classes + j], " seed=", seed))


def test_argmax_rows_picks_the_first_maximum() raises:
    var seed = _seed()
    var rng = Rng(seed)
    for _ in range(200):
        var rows = 1 + rng.below(20)
        var classes = 1 + rng.below(25)
        var z = List[Float32]()
        var t = List[Int32]()
        _fill(rng, z, t, rows, classes, IGNORE_NOTHING)  # equal-logit rows test the ties
        var labels = List[Int32](length=rows, fill=-1)
        argmax_rows(F32P(unsafe_from_address=Int(z.unsafe_ptr())), rows, classes,
                    I32P(unsafe_from_address=Int(labels.unsafe_ptr())))
        for r in range(rows):
            var mx = z[r * classes]
            for j in range(classes):
                mx = max(mx, z[r * classes + j])
            var want = 0
            while z[r * classes + want] != mx:
                want += 1
            assert_equal(Int(labels[r]), want, String("row ", r, " seed=", seed))


def test_first_bad_target_and_count() raises:
    var t: List[Int32] = [0, 2, -100, 3, 1]
    var tp = I32P(unsafe_from_address=Int(t.unsafe_ptr()))
    assert_equal(first_bad_target(tp, 5, 3, -100), 3)
    assert_equal(first_bad_target(tp, 5, 4, -100), -1)
    assert_equal(first_bad_target(tp, 5, 4, IGNORE_NOTHING), 2)
    assert_equal(count_kept(tp, 5, -100), 4)
    assert_equal(count_kept(tp, 5, 2), 4)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
