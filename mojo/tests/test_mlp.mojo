# Checks training/mlp.mojo against plain scalar references, bit for bit, on fresh random
# inputs (the seed is printed on failure): bias + activation, ReLU backward, row sums (written
# column-outer here, row-outer in the kernel: same order per column), and the fused step (the
# model runner on the MLP's program, training/model.mojo `mlp_layers_steps`) against the same
# operations composed by hand, for k = 1 and k = 3 steps.
# Run: mojo run -I mojo --fp-mode contract=off mojo/tests/test_mlp.mojo
from std.memory import bitcast
from std.testing import TestSuite, assert_equal
from std.time import perf_counter_ns

from training.config import F32P, I32P
from training.gemm import gemm_naive
from training.loss import mean_cross_entropy
from training.model import mlp_layers_steps
from training.mlp import (
    MLPDims,
    MODE_FORWARD,
    MODE_GRADS,
    MODE_TRAIN,
    adamw_flat,
    bias_activation,
    relu_backward,
    sum_rows,
)


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


def test_bias_activation() raises:
    var rng = Rng()
    for shape in [(1, 1), (7, 16), (33, 3)]:
        var rows = shape[0]
        var cols = shape[1]
        var v = Buf(rows * cols, rng, -2, 2)
        var b = Buf(cols, rng, -1, 1)
        for relu in [False, True]:
            var got = Buf(rows * cols)
            var want = Buf(rows * cols)
            bias_activation(v.p(), b.p(), got.p(), rows, cols, relu)
            for r in range(rows):
                for c in range(cols):
                    var z = v.data[r * cols + c] + b.data[c]
                    want.data[r * cols + c] = z if (not relu or z > 0) else Float32(0)
            assert_bits(got, want, "bias_activation", rng.seed)


def test_relu_backward() raises:
    var rng = Rng()
    var rows = 13
    var cols = 16
    var a = Buf(rows * cols, rng, -1, 1)
    for i in range(0, rows * cols, 5):
        a.data[i] = 0  # exactly zero activations pass no gradient
    var g = Buf(rows * cols, rng, -3, 3)
    var got = Buf(rows * cols)
    relu_backward(a.p(), g.p(), got.p(), rows, cols)
    var want = Buf(rows * cols)
    for i in range(rows * cols):
        want.data[i] = g.data[i] if a.data[i] > 0 else Float32(0)
    assert_bits(got, want, "relu_backward", rng.seed)


def test_sum_rows() raises:
    var rng = Rng()
    for shape in [(1, 3), (256, 16), (37, 5)]:
        var rows = shape[0]
        var cols = shape[1]
        var v = Buf(rows * cols, rng, -1, 1)
        var got = Buf(cols, rng, 5, 6)  # stale contents must not leak in
        sum_rows(v.p(), got.p(), rows, cols)
        var want = Buf(cols)
        for c in range(cols):
            var acc = Float32(0)
            for r in range(rows):
                acc = acc + v.data[r * cols + c]
            want.data[c] = acc
        assert_bits(got, want, "sum_rows", rng.seed)


def _composed_step(d: MLPDims, x: F32P, y: I32P, p: F32P, m: F32P, v: F32P, rows: Int, t: Int,
                   logits: F32P, grads: F32P, dx: F32P) -> Float32:
    """One training step from the separate operations, in the documented order."""
    var h = Buf(rows * d.hidden)
    var dl = Buf(rows * d.classes)
    var inc = Buf(rows * d.hidden)
    var dh = Buf(rows * d.hidden)
    gemm_naive(x, p.unsafe_offset(d.w1()), h.p(), rows, d.hidden, d.inputs, False, True, False, 0, rows)
    bias_activation(h.p(), p.unsafe_offset(d.b1()), h.p(), rows, d.hidden, True)
    gemm_naive(h.p(), p.unsafe_offset(d.w2()), logits, rows, d.classes, d.hidden, False, True, False, 0, rows)
    bias_activation(logits, p.unsafe_offset(d.b2()), logits, rows, d.classes, False)
    var loss = mean_cross_entropy(logits, y, rows, d.classes, dl.p(), True)
    gemm_naive(dl.p(), h.p(), grads.unsafe_offset(d.w2()), d.classes, d.hidden, rows, True, False, False, 0, d.classes)
    sum_rows(dl.p(), grads.unsafe_offset(d.b2()), rows, d.classes)
    gemm_naive(dl.p(), p.unsafe_offset(d.w2()), inc.p(), rows, d.hidden, d.classes, False, False, False, 0, rows)
    relu_backward(h.p(), inc.p(), dh.p(), rows, d.hidden)
    gemm_naive(dh.p(), x, grads.unsafe_offset(d.w1()), d.hidden, d.inputs, rows, True, False, False, 0, d.hidden)
    sum_rows(dh.p(), grads.unsafe_offset(d.b1()), rows, d.hidden)
    gemm_naive(dh.p(), p.unsafe_offset(d.w1()), dx, rows, d.inputs, d.hidden, False, False, False, 0, rows)
    adamw_flat(p, grads, m, v, d.total(), t, 1e-2, 0.9, 0.999, 1e-8, 0.01)
    return loss


def _check_fused(d: MLPDims, rows: Int, k: Int) raises:
    var rng = Rng()
    var n = d.total()
    var x = Buf(k * rows * d.inputs, rng, -1, 1)
    var labels = List[Int32](length=k * rows, fill=0)
    for i in range(k * rows):
        labels[i] = Int32(Int(rng.next() % UInt64(d.classes)))
    var y = I32P(unsafe_from_address=Int(labels.unsafe_ptr()))
    var p0 = Buf(n, rng, -0.5, 0.5)
    var m0 = Buf(n, rng, -0.01, 0.01)
    var v0 = Buf(n, rng, 0, 0.001)
    # fused
    var p = Buf(n)
    p.copy_from(p0)
    var m = Buf(n)
    m.copy_from(m0)
    var v = Buf(n)
    v.copy_from(v0)
    var losses = Buf(k)
    var logits = Buf(rows * d.classes)
    var grads = Buf(n)
    var dx = Buf(rows * d.inputs)
    mlp_layers_steps([d.inputs, d.hidden, d.classes], x.p(), y, p.p(), m.p(), v.p(), losses.p(), logits.p(), grads.p(), dx.p(), rows,
              MODE_TRAIN, k, 7, 1e-2, 0.9, 0.999, 1e-8, 0.01, True)
    # composed, step by step
    var rp = Buf(n)
    rp.copy_from(p0)
    var rm = Buf(n)
    rm.copy_from(m0)
    var rv = Buf(n)
    rv.copy_from(v0)
    var rlosses = Buf(k)
    var rlogits = Buf(rows * d.classes)
    var rgrads = Buf(n)
    var rdx = Buf(rows * d.inputs)
    for i in range(k):
        rlosses.data[i] = _composed_step(d, x.p().unsafe_offset(i * rows * d.inputs),
                                         y.unsafe_offset(i * rows), rp.p(), rm.p(), rv.p(), rows,
                                         7 + i, rlogits.p(), rgrads.p(), rdx.p())
    assert_bits(losses, rlosses, "losses", rng.seed)
    assert_bits(logits, rlogits, "logits", rng.seed)
    assert_bits(grads, rgrads, "grads", rng.seed)
    assert_bits(dx, rdx, "input_grad", rng.seed)
    assert_bits(p, rp, "params", rng.seed)
    assert_bits(m, rm, "m", rng.seed)
    assert_bits(v, rv, "v", rng.seed)


def test_fused_step_one() raises:
    _check_fused(MLPDims(8, 16, 3), 32, 1)


def test_fused_steps_k() raises:
    _check_fused(MLPDims(8, 16, 3), 5, 3)


def test_fused_other_widths() raises:
    # The widths are parameters: a 5 -> 7 -> 4 network goes through the same code.
    _check_fused(MLPDims(5, 7, 4), 9, 2)


def test_forward_and_grads_modes_leave_state() raises:
    var rng = Rng()
    var d = MLPDims(8, 16, 3)
    var rows = 4
    var n = d.total()
    var x = Buf(rows * d.inputs, rng, -1, 1)
    var labels = List[Int32](length=rows, fill=1)
    var y = I32P(unsafe_from_address=Int(labels.unsafe_ptr()))
    var p = Buf(n, rng, -0.5, 0.5)
    var keep = Buf(n)
    keep.copy_from(p)
    var m = Buf(n)
    var v = Buf(n)
    var losses = Buf(1)
    var logits = Buf(rows * d.classes)
    var grads = Buf(n)
    var dx = Buf(rows * d.inputs)
    for mode in [MODE_FORWARD, MODE_GRADS]:
        mlp_layers_steps([d.inputs, d.hidden, d.classes], x.p(), y, p.p(), m.p(), v.p(), losses.p(), logits.p(), grads.p(), dx.p(),
                  rows, mode, 1, 1, 1e-2, 0.9, 0.999, 1e-8, 0.01, False)
        assert_bits(p, keep, "params after a non-train mode", rng.seed)
    assert_equal(losses.data[0] > 0, True)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
