"""Checks `mlp_layers_steps` (training/model.mojo: the model runner on an MLP program) against a plain scalar
reference written here from ARITHMETIC.md "Any layer sizes", bit for bit (float32 bit
patterns), for networks of 1 to 4 hidden layers, in modes forward, grads and train (k = 1, 2,
3 steps), on batches of 1, 17 and a random 1..17 rows of fresh pseudo-random inputs, weights,
moments and hyperparameters (one value in 8 an exact +0.0 or -0.0, so zero products and
ReLU's edge at 0 are exercised).

The reference shares nothing with the kernels but the float32 exp and log (`exp32_scalar`,
`log32_scalar` from training/portable_math.mojo, which loss.mojo's rows use; its own row
function is private): naive loops, every reduction from +0.0 in the documented order, AdamW
as one per-element formula with its own bias corrections.

Run: mojo run -I mojo -I mojo/bindings --fp-mode contract=off -D MOJOLEARN_MODE=identical
     mojo/tests/test_mlp_layers.mojo
A failure prints its seed; -D MOJOLEARN_TEST_SEED=<seed> replays it.
"""
from std.math import fma, sqrt
from std.memory import bitcast
from std.sys import get_defined_int
from std.testing import TestSuite
from std.time import perf_counter_ns

from training.config import F32P, I32P
from training.mlp import MODE_FORWARD, MODE_GRADS, MODE_TRAIN
from training.model import mlp_layers_steps
from training.portable_math import exp32_scalar, log32_scalar

comptime SEED = get_defined_int["MOJOLEARN_TEST_SEED", 0]()


struct Rng(Movable):
    """SplitMix64, seeded from the clock unless MOJOLEARN_TEST_SEED is given."""

    var state: UInt64
    var seed: UInt64

    def __init__(out self):
        # 63 bits, so that the printed seed fits the Int that -D MOJOLEARN_TEST_SEED takes.
        var clock = (UInt64(perf_counter_ns()) * 0x9E3779B97F4A7C15) >> 1
        self.seed = UInt64(SEED) if SEED != 0 else clock
        self.state = self.seed

    def next(mut self) -> UInt64:
        self.state += 0x9E3779B97F4A7C15
        var z = self.state
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        return z ^ (z >> 31)

    def below(mut self, n: Int) -> Int:
        return Int(self.next() % UInt64(n))

    def uniform(mut self, lo: Float32, hi: Float32) -> Float32:
        var u = Float32(Int(self.next() >> 40)) / Float32(16777216.0)
        return lo + (hi - lo) * u

    def value(mut self, lo: Float32, hi: Float32) -> Float32:
        """`uniform`, except that one draw in 8 is a signed zero."""
        var pick = self.below(16)
        if pick == 0:
            return Float32(0.0)
        if pick == 1:
            return Float32(-0.0)
        return self.uniform(lo, hi)

    def values(mut self, n: Int, lo: Float32, hi: Float32) -> List[Float32]:
        var out = List[Float32](length=n, fill=0)
        for i in range(n):
            out[i] = self.value(lo, hi)
        return out^


@fieldwise_init
struct Hyper(ImplicitlyCopyable):
    """As given (binary64): profile v2 forms the step's scalars from these."""

    var lr: Float64
    var beta1: Float64
    var beta2: Float64
    var eps: Float64
    var weight_decay: Float64


def ptr(xs: List[Float32]) -> F32P:
    return F32P(unsafe_from_address=Int(xs.unsafe_ptr()))


def bits(x: Float32) -> UInt32:
    return bitcast[DType.uint32, 1](x)


def assert_bits(got: List[Float32], want: List[Float32], what: String, where: String) raises:
    if len(got) != len(want):
        raise Error(what, ": ", len(got), " values, want ", len(want), "; ", where)
    for i in range(len(want)):
        if bits(got[i]) != bits(want[i]):
            raise Error(what, "[", i, "]: got ", got[i], " (", hex(bits(got[i])), ") want ",
                        want[i], " (", hex(bits(want[i])), "); ", where)


# ---------------------------------------------------------------- the scalar reference


def weight_at(sizes: List[Int], layer: Int) -> Int:
    """Offset of W_layer (0-based) in the flat buffer W1, b1, W2, b2, ..."""
    var off = 0
    for l in range(layer):
        off += sizes[l + 1] * sizes[l] + sizes[l + 1]
    return off


def ref_forward(sizes: List[Int], x: List[Float32], x_at: Int, p: List[Float32],
                rows: Int) -> List[List[Float32]]:
    """Every layer's output (rows × n_l, row-major): [0] the batch itself, [L] the logits.
    Per output: acc = +0.0, acc = fma(a, w, acc) for k ascending (profile v2), + bias, then ReLU (z > 0, else
    +0.0) on every layer but the last."""
    var layers = len(sizes) - 1
    var acts = List[List[Float32]]()
    var batch = List[Float32](length=rows * sizes[0], fill=0)
    for i in range(rows * sizes[0]):
        batch[i] = x[x_at + i]
    acts.append(batch^)
    for l in range(layers):
        var n_in = sizes[l]
        var n_out = sizes[l + 1]
        var w = weight_at(sizes, l)
        var b = w + n_out * n_in
        var z = List[Float32](length=rows * n_out, fill=0)
        for r in range(rows):
            for o in range(n_out):
                var acc = Float32(0.0)
                for k in range(n_in):
                    acc = fma(acts[l][r * n_in + k], p[w + o * n_in + k], acc)
                acc = acc + p[b + o]
                if l < layers - 1 and not (acc > 0):
                    acc = Float32(0.0)
                z[r * n_out + o] = acc
        acts.append(z^)
    return acts^


def ref_loss(z: List[Float32], y: List[Int32], y_at: Int, rows: Int, classes: Int,
             mut dz: List[Float32]) -> Float32:
    """Mean cross-entropy of loss.mojo's header: per row the first-wins max, s = Σ exp(z - mx)
    j ascending from +0.0, loss = log(s) - (z_y - mx); dz = (exp(z - mx) / s - [j == y]) /
    rows; the mean = (Σ losses rows ascending from +0.0) / rows."""
    var n = Float32(rows)
    var total = Float32(0.0)
    for r in range(rows):
        var row = r * classes
        var mx = z[row]
        for j in range(1, classes):
            if z[row + j] > mx:
                mx = z[row + j]
        var s = Float32(0.0)
        for j in range(classes):
            s = s + exp32_scalar(z[row + j] - mx)
        var target = Int(y[y_at + r])
        total = total + (log32_scalar(s) - (z[row + target] - mx))
        for j in range(classes):
            var q = Float32(1.0) if j == target else Float32(0.0)
            dz[row + j] = (exp32_scalar(z[row + j] - mx) / s - q) / n
    return total / n


def ref_backward(sizes: List[Int], acts: List[List[Float32]], p: List[Float32],
                 dlogits: List[Float32], rows: Int, mut grads: List[Float32],
                 mut dx: List[Float32]):
    """Last layer first: dW = Gᵀ·A (rows ascending), db = Σ G rows ascending, G_below = G·W
    (outputs ascending) masked by A_below > 0 (unmasked for dX = G_1·W_1); every sum from +0.0."""
    var layers = len(sizes) - 1
    var g = dlogits.copy()
    for j in range(layers):
        var l = layers - 1 - j
        var n_in = sizes[l]
        var n_out = sizes[l + 1]
        var w = weight_at(sizes, l)
        var b = w + n_out * n_in
        for o in range(n_out):
            for i in range(n_in):
                var acc = Float32(0.0)
                for r in range(rows):
                    acc = fma(g[r * n_out + o], acts[l][r * n_in + i], acc)
                grads[w + o * n_in + i] = acc
            var acc = Float32(0.0)
            for r in range(rows):
                acc = acc + g[r * n_out + o]
            grads[b + o] = acc
        var below = List[Float32](length=rows * n_in, fill=0)
        for r in range(rows):
            for i in range(n_in):
                var acc = Float32(0.0)
                for o in range(n_out):
                    acc = fma(g[r * n_out + o], p[w + o * n_in + i], acc)
                if l > 0 and not (acts[l][r * n_in + i] > 0):
                    acc = Float32(0.0)
                below[r * n_in + i] = acc
        g = below^
    dx = g^


def ref_power(beta: Float64, t: Int) -> Float64:
    """The binary64 beta^t, by squaring over t's bits from the least significant."""
    var r = Float64(1.0)
    var b = beta
    var k = t
    while k > 0:
        if k & 1 == 1:
            r = r * b
        b = b * b
        k >>= 1
    return r


def ref_adamw(mut p: List[Float32], g: List[Float32], mut m: List[Float32],
              mut v: List[Float32], t: Int, h: Hyper):
    """AdamW step t (one-based), per element: decay (skipped at weight_decay 0), the moments,
    p = p - (lr / bc1) · (m / (sqrt(v) / sqrt(bc2) + eps)); the scalars in binary64 from
    the hyperparameters, each rounded once to float32 (profile v2)."""
    var bc1 = 1.0 - ref_power(h.beta1, t)
    var bc2 = 1.0 - ref_power(h.beta2, t)
    var step_size = Float32(h.lr / bc1)
    var sqrt_bc2 = Float32(sqrt(bc2))
    var decay = Float32(1.0 - h.lr * h.weight_decay)
    var b1 = Float32(h.beta1)
    var b2 = Float32(h.beta2)
    var one_b1 = Float32(1.0 - h.beta1)
    var one_b2 = Float32(1.0 - h.beta2)
    for i in range(len(p)):
        if h.weight_decay != 0:
            p[i] = p[i] * decay
        m[i] = b1 * m[i] + one_b1 * g[i]
        v[i] = b2 * v[i] + one_b2 * (g[i] * g[i])
        p[i] = p[i] - step_size * (m[i] / (sqrt(v[i]) / sqrt_bc2 + Float32(h.eps)))


# ---------------------------------------------------------------- kernel against reference


def _describe(sizes: List[Int], mode: Int, k: Int, rows: Int, want_dx: Bool, seed: UInt64) -> String:
    var s = String("sizes [")
    for i in range(len(sizes)):
        s += String(sizes[i]) + (", " if i < len(sizes) - 1 else "]")
    return String(s, " mode ", mode, " k ", k, " rows ", rows, " want_dx ", want_dx, " seed ",
                  seed)


def check_case(sizes: List[Int], mode: Int, k: Int, rows: Int, mut rng: Rng) raises:
    var layers = len(sizes) - 1
    var inputs = sizes[0]
    var classes = sizes[layers]
    var n = weight_at(sizes, layers)
    var want_dx = rng.below(2) == 1
    var where = _describe(sizes, mode, k, rows, want_dx, rng.seed)
    var x = rng.values(k * rows * inputs, -1, 1)
    var labels = List[Int32](length=k * rows, fill=0)
    for i in range(k * rows):
        labels[i] = Int32(rng.below(classes))
    var p0 = rng.values(n, -0.7, 0.7)
    var m0 = rng.values(n, -0.01, 0.01)
    var v0 = rng.values(n, 0, 0.001)
    var h = Hyper(Float64(rng.uniform(1e-4, 0.05)) * 1.0000001, Float64(rng.uniform(0.8, 0.95)),
                  0.999 if rng.below(2) == 0 else Float64(rng.uniform(0.99, 0.9999)), 1e-8,
                  0.0 if rng.below(3) == 0 else Float64(rng.uniform(0, 0.1)))
    var t0 = 1 + rng.below(1000)

    var p = p0.copy()
    var m = m0.copy()
    var v = v0.copy()
    # Outputs a mode does not produce (losses and gradients in forward mode, dX unless
    # asked) must keep what the caller left there.
    var sentinel = Float32(7.0)
    var losses = List[Float32](length=k, fill=sentinel)
    var logits = List[Float32](length=rows * classes, fill=sentinel)
    var grads = List[Float32](length=n, fill=sentinel)
    var dx = List[Float32](length=rows * inputs, fill=sentinel)
    mlp_layers_steps(sizes, ptr(x), I32P(unsafe_from_address=Int(labels.unsafe_ptr())), ptr(p),
                     ptr(m), ptr(v), ptr(losses), ptr(logits), ptr(grads), ptr(dx), rows, mode,
                     k, t0, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, want_dx)

    var rp = p0.copy()
    var rm = m0.copy()
    var rv = v0.copy()
    var rlosses = List[Float32](length=k, fill=sentinel)
    var rlogits = List[Float32]()
    var rgrads = List[Float32](length=n, fill=sentinel)
    var rdx = List[Float32](length=rows * inputs, fill=sentinel)
    for i in range(k):
        var acts = ref_forward(sizes, x, i * rows * inputs, rp, rows)
        rlogits = acts[layers].copy()
        if mode == MODE_FORWARD:
            break
        var dlogits = List[Float32](length=rows * classes, fill=0)
        rlosses[i] = ref_loss(acts[layers], labels, i * rows, rows, classes, dlogits)
        var input_grad = List[Float32]()
        ref_backward(sizes, acts, rp, dlogits, rows, rgrads, input_grad)
        if want_dx:
            rdx = input_grad^
        if mode == MODE_TRAIN:
            ref_adamw(rp, rgrads, rm, rv, t0 + i, h)

    assert_bits(logits, rlogits, "logits", where)
    assert_bits(losses, rlosses, "losses", where)
    assert_bits(grads, rgrads, "gradients", where)
    assert_bits(dx, rdx, "input gradient", where)
    assert_bits(p, rp, "parameters", where)
    assert_bits(m, rm, "first moments", where)
    assert_bits(v, rv, "second moments", where)


def check_sizes(sizes: List[Int]) raises:
    """Every mode (train for k = 1, 2, 3) on 1, 17 and a random 1..17 rows."""
    var rng = Rng()
    for c in range(5):
        var mode = MODE_FORWARD if c == 0 else MODE_GRADS if c == 1 else MODE_TRAIN
        var k = 1 if c < 2 else c - 1
        check_case(sizes, mode, k, 1, rng)
        check_case(sizes, mode, k, 17, rng)
        check_case(sizes, mode, k, 1 + rng.below(17), rng)


def test_one_hidden_layer() raises:
    # The [I, H, O] case the fused one-hidden-layer step also takes: the reference agrees
    # with test_mlp.mojo's composed operations there.
    check_sizes([5, 7, 3])


def test_two_hidden_layers() raises:
    check_sizes([6, 9, 4, 3])


def test_two_hidden_layers_one_wide() raises:
    # A hidden layer of width 1: most rows' ReLU is 0, so whole gradients are masked to +0.0.
    check_sizes([10, 1, 6, 5])


def test_three_hidden_layers() raises:
    check_sizes([3, 8, 8, 8, 2])


def test_four_hidden_layers_eleven_classes() raises:
    # Eleven classes: loss.mojo's rows take its 8-lane exp path and the scalar tail.
    check_sizes([4, 6, 5, 7, 3, 11])


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
