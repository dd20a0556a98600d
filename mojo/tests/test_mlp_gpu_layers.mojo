# Checks training/mlp_gpu_layers.mojo's `layer_steps` (the phase sequence the GPU builds launch
# as grid kernels) against training/mlp.mojo's `mlp_layers_steps`, bit for bit, on the host:
# a launcher runs each phase for every thread of a grid of STRIDE threads in turn (the outputs
# of a phase are independent, so any order gives the grid's bits). Covers 0 to 3 hidden layers,
# modes forward / grads (with dX) / train (k = 3), and the finiteness status words. What it
# cannot check: the device launches themselves (sizes, stream order) and the fused kernel.
# Run: mojo run -I mojo --fp-mode contract=off -D MOJOLEARN_MODE=identical mojo/tests/test_mlp_gpu_layers.mojo
from std.memory import bitcast
from std.testing import TestSuite, assert_equal
from std.time import perf_counter_ns

from training.checks import first_nonfinite
from training.config import F32P, I32P, I64P
from training.mlp import LayerScratch, MODE_FORWARD, MODE_GRADS, MODE_TRAIN, total_params
from training.model import mlp_layers_steps
from training.mlp_gpu import (CHECKS, adamw_phase, backward_phase, cross_entropy_phase,
                              first_seen, forward_phase, loss_mean, scan_phase, step_scalars)
from training.mlp_gpu_layers import DeviceRun, PhaseLauncher, layer_steps, scratch_floats

comptime STRIDE = 7  # threads of the emulated grid: fewer than most phases' outputs


struct HostLauncher(PhaseLauncher):
    var stride: Int

    def __init__(out self, stride: Int):
        self.stride = stride

    def forward(self, src: F32P, w: F32P, b: F32P, dst: F32P, rows: Int, n_out: Int,
                n_in: Int, relu: Bool) raises:
        for t in range(self.stride):
            forward_phase(src, w, b, dst, rows, n_out, n_in, relu, t, self.stride)

    def cross_entropy(self, logits: F32P, y: I32P, dl: F32P, row_loss: F32P, rows: Int,
                      classes: Int) raises:
        for t in range(self.stride):
            cross_entropy_phase(logits, y, dl, row_loss, rows, classes, t, self.stride)

    def loss(self, row_loss: F32P, rows: Int, losses: F32P) raises:
        losses[unsafe_offset=0] = loss_mean(row_loss, rows)

    def backward(self, g: F32P, below: F32P, w: F32P, grads: F32P, dbelow: F32P, rows: Int,
                 n_out: Int, n_in: Int, want_below: Bool, mask: Bool) raises:
        for t in range(self.stride):
            backward_phase(g, below, w, grads, dbelow, rows, n_out, n_in, want_below, mask, t,
                           self.stride)

    def adamw(self, p: F32P, grads: F32P, m: F32P, v: F32P, n: Int, t: Int, lr: Float64,
              beta1: Float64, beta2: Float64, eps: Float64, weight_decay: Float64) raises:
        var s = step_scalars(t, lr, beta1, beta2, eps, weight_decay)
        for th in range(self.stride):
            adamw_phase(p, grads, m, v, n, s, th, self.stride)

    def check(self, d: DeviceRun, n_logits: Int, n_losses: Int, n_grads: Int, n_dx: Int,
              n_state: Int) raises:
        for t in range(self.stride):
            scan_phase(d.logits(), n_logits, d.losses(), n_losses, d.grads(), n_grads, d.dx(),
                       n_dx, d.p(), d.m(), d.v(), n_state, d.seen(), t, self.stride)
        for c in range(CHECKS):
            d.status()[unsafe_offset=c] = Int32(first_seen(d.seen(), c * self.stride,
                                                           self.stride, 1))


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


def _fill(n: Int, mut rng: Rng, lo: Float32, hi: Float32) -> List[Float32]:
    var out = List[Float32](length=max(n, 1), fill=0)
    for i in range(n):
        out[i] = rng.uniform(lo, hi)
    return out^


def _at(a: List[Float32]) -> Int:
    return Int(a.unsafe_ptr())


def _same(got: List[Float32], want: List[Float32], n: Int, what: String, seed: UInt64) raises:
    for i in range(n):
        var g = bitcast[DType.uint32, 1](got[i])
        var w = bitcast[DType.uint32, 1](want[i])
        if g != w:
            raise Error(what, "[", i, "]: got ", got[i], " want ", want[i], " (seed ", seed, ")")


def _check_sizes(sizes: List[Int], rows: Int, mode: Int, k: Int, want_dx: Bool) raises:
    var rng = Rng()
    var n = total_params(sizes)
    var inputs = sizes[0]
    var classes = sizes[len(sizes) - 1]
    var x = _fill(k * rows * inputs, rng, -1, 1)
    var y = List[Int32](length=k * rows, fill=0)
    for i in range(k * rows):
        y[i] = Int32(Int(rng.next() % UInt64(classes)))
    var p = _fill(n, rng, -0.5, 0.5)
    var m = _fill(n, rng, -0.01, 0.01)
    var v = _fill(n, rng, 0, 0.01)
    # The CPU step on copies.
    var cp = p.copy()
    var cm = m.copy()
    var cv = v.copy()
    var c_losses = List[Float32](length=k, fill=0)
    var c_logits = List[Float32](length=rows * classes, fill=0)
    var c_grads = List[Float32](length=n, fill=0)
    var c_dx = List[Float32](length=rows * inputs, fill=0)
    var yp = I32P(unsafe_from_address=Int(y.unsafe_ptr()))
    mlp_layers_steps(sizes, F32P(unsafe_from_address=_at(x)), yp, F32P(unsafe_from_address=_at(cp)),
                     F32P(unsafe_from_address=_at(cm)), F32P(unsafe_from_address=_at(cv)),
                     F32P(unsafe_from_address=_at(c_losses)),
                     F32P(unsafe_from_address=_at(c_logits)),
                     F32P(unsafe_from_address=_at(c_grads)), F32P(unsafe_from_address=_at(c_dx)),
                     rows, mode, k, 1, 1e-3, 0.9, 0.999, 1e-8, 0.01, want_dx)
    # The phase sequence on one p | m | v buffer, as the device holds it.
    var state = List[Float32](length=3 * n, fill=0)
    for i in range(n):
        state[i] = p[i]
        state[n + i] = m[i]
        state[2 * n + i] = v[i]
    var losses = List[Float32](length=k, fill=0)
    var logits = List[Float32](length=rows * classes, fill=0)
    var grads = List[Float32](length=n, fill=0)
    var dx = List[Float32](length=rows * inputs, fill=0)
    var sf = scratch_floats(sizes, rows)
    var acts = List[Float32](length=sf[0], fill=0)
    var dl = List[Float32](length=sf[1], fill=0)
    var ping = List[Float32](length=sf[2], fill=0)
    var pong = List[Float32](length=sf[3], fill=0)
    var rl = List[Float32](length=sf[4], fill=0)
    var seen = List[Int64](length=CHECKS * STRIDE, fill=0)
    var status = List[Int32](length=CHECKS, fill=0)
    var at = _at(state)
    var run = DeviceRun(_at(x), Int(y.unsafe_ptr()), at, at + 4 * n, at + 8 * n, _at(losses),
                        _at(logits), _at(grads), _at(dx),
                        LayerScratch(_at(acts), _at(dl), _at(ping), _at(pong)), _at(rl),
                        Int(seen.unsafe_ptr()), Int(status.unsafe_ptr()))
    layer_steps(HostLauncher(STRIDE), sizes, run, rows, mode, k, 1, 1e-3, 0.9, 0.999, 1e-8,
                0.01, want_dx, True)
    # `run` holds bare addresses: keep the buffers alive until here.
    _ = (x^, y^, acts^, dl^, ping^, pong^, rl^, seen^)
    var what = String("sizes ", len(sizes), " layers mode ", mode, " k ", k, ": ")
    _same(logits, c_logits, rows * classes, what + "logits", rng.seed)
    for c in range(CHECKS):
        assert_equal(Int(status[c]), -1, what + "status word " + String(c))
    if mode == MODE_FORWARD:
        return
    _same(losses, c_losses, k, what + "losses", rng.seed)
    _same(grads, c_grads, n, what + "grads", rng.seed)
    if want_dx:
        _same(dx, c_dx, rows * inputs, what + "dx", rng.seed)
    var sp = List[Float32](length=n, fill=0)
    var sm = List[Float32](length=n, fill=0)
    var sv = List[Float32](length=n, fill=0)
    for i in range(n):
        sp[i] = state[i]
        sm[i] = state[n + i]
        sv[i] = state[2 * n + i]
    _same(sp, cp, n, what + "params", rng.seed)
    _same(sm, cm, n, what + "m", rng.seed)
    _same(sv, cv, n, what + "v", rng.seed)


def _all_modes(sizes: List[Int], rows: Int) raises:
    _check_sizes(sizes, rows, MODE_FORWARD, 1, False)
    _check_sizes(sizes, rows, MODE_GRADS, 1, True)
    _check_sizes(sizes, rows, MODE_TRAIN, 3, False)


def test_no_hidden_layer() raises:
    _all_modes([5, 3], 4)


def test_one_hidden_layer() raises:
    _all_modes([8, 16, 3], 5)
    _all_modes([13, 9, 6], 1)


def test_two_and_three_hidden_layers() raises:
    _all_modes([6, 9, 4, 5], 5)
    _all_modes([4, 6, 5, 7, 3], 3)


def test_status_words_find_the_first_nonfinite() raises:
    var n = 23
    var bufs = List[Float32](length=7 * n, fill=1)
    var seen = List[Int64](length=CHECKS * STRIDE, fill=0)
    var status = List[Int32](length=CHECKS, fill=0)
    var at = _at(bufs)
    # The outputs in NF_* order: logits, losses, grads, dx, params, m, v.
    var bad: List[Int] = [-1, 3, 22, -1, 0, 9, 14]
    for c in range(CHECKS):
        if bad[c] >= 0:
            bufs[c * n + bad[c]] = Float32.MAX * 2  # +inf
            bufs[c * n + n - 1] = Float32.MAX * 2 if bad[c] < n - 1 else bufs[c * n + n - 1]
    var run = DeviceRun(0, 0, at + 16 * n, at + 20 * n, at + 24 * n, at + 4 * n, at, at + 8 * n,
                        at + 12 * n, LayerScratch(0, 0, 0, 0), 0, Int(seen.unsafe_ptr()),
                        Int(status.unsafe_ptr()))
    HostLauncher(STRIDE).check(run, n, n, n, n, n)
    _ = seen^
    for c in range(CHECKS):
        assert_equal(Int(status[c]), bad[c], String("status word ", c))
        assert_equal(first_nonfinite(F32P(unsafe_from_address=at + 4 * c * n), n), bad[c])


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
