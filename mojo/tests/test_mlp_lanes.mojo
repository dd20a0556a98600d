# Checks training/mlp_lanes.mojo (the trainer's 8→16→3 step with SIMD lanes across outputs
# and, in cross-entropy, across rows) against the step composed from the plain scalar GEMM
# reference (`gemm_naive`) and mlp.mojo / loss.mojo pieces, bit for bit, on fresh random inputs
# (the seed is printed on failure), for batch sizes around the 8-row cross-entropy blocks.
# Run: mojo run -I mojo --fp-mode contract=off mojo/tests/test_mlp_lanes.mojo
from std.memory import bitcast
from std.testing import TestSuite
from std.time import perf_counter_ns

from training.config import F32P, I32P
from training.gemm import gemm_naive
from training.loss import mean_cross_entropy
from training.mlp import MLPDims, bias_activation, relu_backward, sum_rows
from training.mlp_lanes import lanes_backward, lanes_cross_entropy, lanes_forward


struct Rng(Movable):
    var state: UInt64
    var seed: UInt64

    def __init__(out self):
        self.seed = UInt64(perf_counter_ns()) * 0x9E3779B97F4A7C15
        self.state = self.seed

    def next(mut self) -> UInt64:
        self.state += 0x9E3779B97F4A7C15
        var z = self.state
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        return z ^ (z >> 31)

    def uniform(mut self, lo: Float32, hi: Float32) -> Float32:
        var u = Float32(Int(self.next() >> 40)) / Float32(16777216.0)
        return lo + (hi - lo) * u


struct Buf(Movable):
    var data: List[Float32]

    def __init__(out self, n: Int):
        self.data = List[Float32](length=n, fill=0)

    def __init__(out self, n: Int, mut rng: Rng, lo: Float32, hi: Float32):
        self.data = List[Float32](length=n, fill=0)
        for i in range(n):
            self.data[i] = rng.uniform(lo, hi)

    def p(self) -> F32P:
        return F32P(unsafe_from_address=Int(self.data.unsafe_ptr()))

    def copy_from(mut self, other: Buf):
        for i in range(len(self.data)):
            self.data[i] = other.data[i]


def assert_bits(got: Buf, want: Buf, what: String, seed: UInt64) raises:
    for i in range(len(want.data)):
        var a = bitcast[DType.uint32, 1](got.data[i])
        var b = bitcast[DType.uint32, 1](want.data[i])
        if a != b:
            raise Error(what, "[", i, "]: got ", got.data[i], " (0x", hex(a), ") want ",
                        want.data[i], " (0x", hex(b), "), seed ", seed)


def _check(rows: Int) raises:
    var d = MLPDims(8, 16, 3)
    var rng = Rng()
    var n = d.total()
    var x = Buf(rows * 8, rng, -2, 2)
    var p = Buf(n, rng, -0.7, 0.7)
    var labels = List[Int32](length=rows, fill=0)
    for i in range(rows):
        labels[i] = Int32(Int(rng.next() % 3))
    var y = I32P(unsafe_from_address=Int(labels.unsafe_ptr()))
    # lanes kernel
    var h = Buf(rows * 16)
    var logits = Buf(rows * 3)
    var dl = Buf(rows * 3)
    var dh = Buf(rows * 16)
    var grads = Buf(n, rng, 5, 6)  # stale contents must not leak in
    var dx = Buf(rows * 8)
    lanes_forward[8, 16, 3](x.p(), p.p(), h.p(), logits.p(), rows)
    var loss = Buf(1)
    loss.data[0] = lanes_cross_entropy[3](logits.p(), y, dl.p(), rows)
    lanes_backward[8, 16, 3](x.p(), p.p(), h.p(), dl.p(), dh.p(), grads.p(), dx.p(), rows, True)
    # scalar composition
    var rh = Buf(rows * 16)
    var rlogits = Buf(rows * 3)
    var rdl = Buf(rows * 3)
    var inc = Buf(rows * 16)
    var rdh = Buf(rows * 16)
    var rgrads = Buf(n)
    var rdx = Buf(rows * 8)
    var pp = p.p()
    gemm_naive(x.p(), pp.unsafe_offset(d.w1()), rh.p(), rows, 16, 8, False, True, False, 0, rows)
    bias_activation(rh.p(), pp.unsafe_offset(d.b1()), rh.p(), rows, 16, True)
    gemm_naive(rh.p(), pp.unsafe_offset(d.w2()), rlogits.p(), rows, 3, 16, False, True, False, 0, rows)
    bias_activation(rlogits.p(), pp.unsafe_offset(d.b2()), rlogits.p(), rows, 3, False)
    var rloss = Buf(1)
    rloss.data[0] = mean_cross_entropy(rlogits.p(), y, rows, 3, rdl.p(), True)
    var g = rgrads.p()
    gemm_naive(rdl.p(), rh.p(), g.unsafe_offset(d.w2()), 3, 16, rows, True, False, False, 0, 3)
    sum_rows(rdl.p(), g.unsafe_offset(d.b2()), rows, 3)
    gemm_naive(rdl.p(), pp.unsafe_offset(d.w2()), inc.p(), rows, 16, 3, False, False, False, 0, rows)
    relu_backward(rh.p(), inc.p(), rdh.p(), rows, 16)
    gemm_naive(rdh.p(), x.p(), g.unsafe_offset(d.w1()), 16, 8, rows, True, False, False, 0, 16)
    sum_rows(rdh.p(), g.unsafe_offset(d.b1()), rows, 16)
    gemm_naive(rdh.p(), pp.unsafe_offset(d.w1()), rdx.p(), rows, 8, 16, False, False, False, 0, rows)
    assert_bits(h, rh, String("h, rows ", rows), rng.seed)
    assert_bits(logits, rlogits, String("logits, rows ", rows), rng.seed)
    assert_bits(loss, rloss, String("loss, rows ", rows), rng.seed)
    assert_bits(dl, rdl, String("dlogits, rows ", rows), rng.seed)
    assert_bits(dh, rdh, String("dh, rows ", rows), rng.seed)
    assert_bits(grads, rgrads, String("grads, rows ", rows), rng.seed)
    assert_bits(dx, rdx, String("input_grad, rows ", rows), rng.seed)


def test_lanes_step_small_batches() raises:
    for rows in [1, 2, 7, 8, 9]:
        _check(rows)


def test_lanes_step_large_batches() raises:
    for rows in [31, 64, 255, 256]:
        _check(rows)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
