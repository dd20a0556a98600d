"""The model layers' pure-Python reference (tests/reference/layers.py, the executable form of
docs/ARITHMETIC.md "Models") computes what torch computes: each layer's forward and backward,
on fresh random shapes and values, within float32 rounding of torch float64 autograd; and the
Dropout mask is a function of (seed, step, layer, element) with the stated rate."""

import random

import pytest

from tests.reference import layers as R
from tests.reference.f32 import f32

torch = pytest.importorskip("torch")


def _rand(rng, n, scale=1.0):
    return [f32(rng.gauss(0.0, scale)) for _ in range(n)]


def _close(got, want, tol=2e-5):
    want = [float(v) for v in want]
    scale = max(1.0, max(abs(v) for v in want))
    worst = max(abs(a - b) for a, b in zip(got, want))
    assert len(got) == len(want) and worst <= tol * scale, (worst, scale)


def _t(values, *shape):
    return torch.tensor(values, dtype=torch.float64).reshape(*shape).requires_grad_(True)


@pytest.mark.parametrize("trial", range(4))
def test_linear_on_the_last_axis_of_any_rank(seed, trial):
    rng = random.Random(seed + trial)
    lead = [rng.randrange(1, 4) for _ in range(rng.randrange(1, 3))]
    n_in, n_out = rng.randrange(1, 9), rng.randrange(1, 9)
    rows = 1
    for a in lead:
        rows *= a
    x, w, b, g = (
        _rand(rng, rows * n_in),
        _rand(rng, n_out * n_in),
        _rand(rng, n_out),
        _rand(rng, rows * n_out),
    )
    tx, tw, tb = _t(x, *lead, n_in), _t(w, n_out, n_in), _t(b, n_out)
    ty = torch.nn.functional.linear(tx, tw, tb)
    ty.backward(torch.tensor(g, dtype=torch.float64).reshape(ty.shape))
    _close(R.linear_forward(x, rows, w, b, n_in, n_out), ty.detach().flatten())
    dx, dw, db = R.linear_backward(g, x, rows, w, n_in, n_out, True)
    _close(dx, tx.grad.flatten())
    _close(dw, tw.grad.flatten())
    _close(db, tb.grad.flatten())


@pytest.mark.parametrize("affine", [True, False])
def test_layernorm(seed, affine):
    rng = random.Random(seed)
    rows, d = rng.randrange(1, 7), rng.randrange(2, 40)
    x = [f32(v + 3.0) for v in _rand(rng, rows * d, 2.0)]  # an offset mean: two passes matter
    w = _rand(rng, d) if affine else None
    b = _rand(rng, d) if affine else None
    g = _rand(rng, rows * d)
    tx = _t(x, rows, d)
    tw, tb = (_t(w, d), _t(b, d)) if affine else (None, None)
    ty = torch.nn.functional.layer_norm(tx, (d,), tw, tb, eps=1e-5)
    ty.backward(torch.tensor(g, dtype=torch.float64).reshape(rows, d))
    y, means, rstds = R.layernorm_forward(x, rows, d, w, b, 1e-5)
    _close(y, ty.detach().flatten(), 5e-5)
    dx, dw, db = R.layernorm_backward(g, x, rows, d, w, means, rstds)
    _close(dx, tx.grad.flatten(), 2e-4)
    if affine:
        _close(dw, tw.grad.flatten(), 5e-5)
        _close(db, tb.grad.flatten())


def test_mse_is_torchs_mean(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 50)
    y, t = _rand(rng, n), _rand(rng, n)
    ty = _t(y, n)
    loss = torch.nn.functional.mse_loss(ty, torch.tensor(t, dtype=torch.float64))
    loss.backward()
    got, dy = R.mse(y, t)
    _close([got], [loss.item()])
    _close(dy, ty.grad)


def test_residual_adds_the_two_branches_in_either_order(seed):
    rng = random.Random(seed)
    a, b = _rand(rng, 1000, 1e3), _rand(rng, 1000, 1e-3)
    assert R.residual_forward(a, b) == R.residual_forward(b, a)
    assert R.residual_backward(a, b) == R.residual_backward(b, a)


def test_relu_backward_masks_by_the_output(seed):
    rng = random.Random(seed)
    x = _rand(rng, 200) + [0.0, -0.0]
    y = R.relu_forward(x)
    assert all(v >= 0 and str(v) != "-0.0" for v in y)
    g = _rand(rng, len(x))
    assert R.relu_backward(g, y) == [gv if xv > 0 else 0.0 for gv, xv in zip(g, x)]


def test_dropout_keeps_each_element_with_probability_one_minus_p(seed):
    rng = random.Random(seed)
    key = R.dropout_key(seed % (1 << 64), 1 + rng.randrange(1000), rng.randrange(8))
    for p in (0.1, 0.5, 0.9):
        threshold = R.dropout_threshold(p)
        n = 20000
        kept = sum(R.dropout_keep(key, i, threshold) for i in range(n))
        sd = (n * p * (1 - p)) ** 0.5
        assert abs(kept - n * (1 - p)) < 6 * sd, (p, kept)
    assert R.dropout_threshold(0.0) == 0 and all(R.dropout_keep(key, i, 0) for i in range(100))


def test_dropout_masks_depend_on_seed_step_layer_and_element_only(seed):
    s = seed % (1 << 64)
    threshold = R.dropout_threshold(0.5)
    keys = {R.dropout_key(s, t, layer) for t in (1, 2, 3) for layer in (0, 1, 2)}
    assert len(keys) == 9  # every (step, layer) its own stream
    key = R.dropout_key(s, 7, 3)
    whole = [R.dropout_keep(key, i, threshold) for i in range(64)]
    # a microbatch of rows 4..7 of 8-element rows draws the same elements as the whole batch
    x = [1.0] * 32
    y, kept = R.dropout_forward(x, 0.5, key, first=32)
    assert kept == whole[32:] and y == [2.0 if k else 0.0 for k in kept]
    assert R.dropout_backward([3.0] * 32, 0.5, kept) == [6.0 if k else 0.0 for k in kept]


def test_dropout_scale_is_formed_in_binary64_and_rounded_once():
    y, kept = R.dropout_forward([1.0] * 4, 0.1, 1, 0)
    assert {v for v, k in zip(y, kept) if k} <= {f32(1 / 0.9)}


def _wide(rng, n):
    """N(0, 3²) values plus large magnitudes where the functions saturate."""
    big = [s * m for s in (1.0, -1.0) for m in (6.0, 9.5, 20.0, 100.0, 1e3, 1e6)]
    return _rand(rng, n, 3.0) + [f32(v * (1 + rng.random())) for v in big]


def _close_each(got, want, scale, tol):
    worst = max(abs(a - float(b)) / max(s, 1e-30) for a, b, s in zip(got, want, scale))
    assert len(got) == len(want) and worst <= tol, worst


ACTIVATIONS = {
    "gelu": (
        lambda x: R.gelu_forward(x, "none"),
        lambda g, x, y: R.gelu_backward(g, x, "none"),
        lambda t: torch.nn.functional.gelu(t, approximate="none"),
    ),
    "gelu_tanh": (
        lambda x: R.gelu_forward(x, "tanh"),
        lambda g, x, y: R.gelu_backward(g, x, "tanh"),
        lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    ),
    "tanh": (R.tanh_forward, lambda g, x, y: R.tanh_backward(g, y), torch.tanh),
    "sigmoid": (R.sigmoid_forward, lambda g, x, y: R.sigmoid_backward(g, y), torch.sigmoid),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_within_float32_rounding_of_torch_float64(seed, name):
    """Tolerance, against torch float64 autograd: the output within 4 float32 ulps of 1
    (2^-21) relative to max(|y|, min(|x|, 1)), the input's gradient within 8 (2^-20) relative
    to max(|dx|, |g|). Why those scales: GELU's 1 + erf(x/√2) and 1 + tanh(·) cancel for
    x << 0, leaving a few ulps of 1 times |x|/2, and every derivative (1 − y², y(1 − y),
    GELU's) is a sum or difference of terms of order 1 (times g), which float32 torch shares.
    Measured over 2·10^4 points: at most 2.1 half-ulps of 1 (output) and 9.2 (GELU tanh's
    gradient; torch float32 17.3), 2.5 or less elsewhere."""
    forward, backward, torch_fn = ACTIVATIONS[name]
    rng = random.Random(seed)
    x = _wide(rng, 3000)
    g = _rand(rng, len(x))
    tx = _t(x, len(x))
    ty = torch_fn(tx)
    ty.backward(torch.tensor(g, dtype=torch.float64))
    y = forward(x)
    y64 = ty.detach().tolist()
    _close_each(y, y64, [max(abs(b), min(abs(v), 1.0)) for b, v in zip(y64, x)], 2.0**-21)
    d64 = tx.grad.tolist()
    _close_each(backward(g, x, y), d64, [max(abs(b), abs(v)) for b, v in zip(d64, g)], 2.0**-20)
    assert all(f32(v) == v for v in y)  # float32 values, as the kernel's
