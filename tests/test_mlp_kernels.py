"""The MLP binding entries against the pure-Python reference, bit for bit (identical mode),
on fresh random inputs (the seed is printed on failure), and every entry refusal."""

import random

import pytest
from mojolearn._buffers.alloc import zeros
from mojolearn._buffers.array import Array
from mojolearn._mlp.spec import SMALL
from mojolearn._runtime import backend as _backend

from tests.reference import mlp as R
from tests.reference.f32 import f32, hex_list
from tests.reference.optim import adam_step

pytestmark = pytest.mark.skipif(
    _backend.requested_mode() != "identical", reason="bit comparisons hold in identical mode"
)


def b():
    return _backend.binding()


def f32s(rng, n, lo=-1.0, hi=1.0):
    return Array.from_list([f32(rng.uniform(lo, hi)) for _ in range(n)], "<f4").reshape((n,))


def hexes(arr):
    return hex_list(arr.tolist() if arr.ndim == 1 else [x for r in arr.tolist() for x in r])


@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 16), (33, 3)])
@pytest.mark.parametrize("relu", [0, 1])
def test_bias_activation(seed, rows, cols, relu):
    rng = random.Random(seed)
    v, bias = f32s(rng, rows * cols, -2, 2), f32s(rng, cols)
    out = zeros((rows * cols,))
    assert (
        b().mlp_bias_activation([v._addr, bias._addr, out._addr], [rows, cols, relu]) == rows * cols
    )
    want = []
    for r in range(rows):
        for c in range(cols):
            z = f32(v[r * cols + c] + bias[c])
            want.append(z if not relu or z > 0 else 0.0)
    assert hexes(out) == hex_list(want), f"seed {seed}"


def test_relu_backward(seed):
    rng = random.Random(seed)
    rows, cols = 11, 16
    act = Array.from_list([max(0.0, f32(rng.uniform(-1, 1))) for _ in range(rows * cols)], "<f4")
    g = f32s(rng, rows * cols, -3, 3)
    out = zeros((rows * cols,))
    b().mlp_relu_backward([act._addr, g._addr, out._addr], [rows, cols])
    want = [gv if a > 0 else 0.0 for a, gv in zip(act.tolist(), g.tolist())]
    assert hexes(out) == hex_list(want), f"seed {seed}"


@pytest.mark.parametrize("rows,cols", [(1, 3), (256, 16), (37, 5)])
def test_sum_rows(seed, rows, cols):
    rng = random.Random(seed)
    v = f32s(rng, rows * cols)
    out = f32s(rng, cols, 5, 6)  # stale contents must not leak in
    b().mlp_sum_rows([v._addr, out._addr], [rows, cols])
    want = []
    for c in range(cols):
        acc = 0.0
        for r in range(rows):
            acc = f32(acc + v[r * cols + c])
        want.append(acc)
    assert hexes(out) == hex_list(want), f"seed {seed}"


def test_adamw(seed):
    rng = random.Random(seed)
    n, t = 195, rng.randint(1, 5000)
    p, g, m = f32s(rng, n), f32s(rng, n), f32s(rng, n, -0.01, 0.01)
    v = f32s(rng, n, 0, 1e-3)
    hyper = [f32(1e-2), f32(0.9), f32(0.999), f32(1e-8), f32(0.01)]
    (rp,), _, (rm,), (rv,), _, _ = adam_step(
        [p.tolist()],
        [g.tolist()],
        [m.tolist()],
        [v.tolist()],
        t,
        *hyper,
        decoupled=True,
        maximize=False,
    )
    b().mlp_adamw([p._addr, g._addr, m._addr, v._addr], [n, t, *hyper])
    assert (hexes(p), hexes(m), hexes(v)) == (hex_list(rp), hex_list(rm), hex_list(rv)), (
        f"seed {seed}"
    )


def _problem(rng, rows, k=1):
    x = f32s(rng, k * rows * 8)
    y = Array.from_list([rng.randrange(3) for _ in range(k * rows)], "<i4").reshape((k * rows,))
    p = f32s(rng, 195, -0.5, 0.5)
    m = f32s(rng, 195, -0.01, 0.01)
    v = f32s(rng, 195, 0, 1e-3)
    return x, y, p, m, v


def _call(x, y, p, m, v, rows, mode, k=1, t=1, want_dx=1, hyper=None):
    outs = [zeros((195,)) for _ in range(3)]
    losses, logits, grads, dx = zeros((k,)), zeros((rows * 3,)), zeros((195,)), zeros((rows * 8,))
    hyper = hyper or [f32(1e-2), f32(0.9), f32(0.999), f32(1e-8), f32(0.01)]
    n = b().mlp_train_step(
        [
            x._addr,
            y._addr,
            p._addr,
            m._addr,
            v._addr,
            *(o._addr for o in outs),
            losses._addr,
            logits._addr,
            grads._addr,
            dx._addr,
            SMALL.sizes_addr,
        ],
        [2, rows, mode, k, t, *hyper, want_dx],
    )
    assert n == rows * 3
    return outs, losses, logits, grads, dx


@pytest.mark.parametrize("rows,k", [(1, 1), (32, 1), (5, 3)])
def test_train_step_matches_reference(seed, rows, k):
    rng = random.Random(seed)
    x, y, p, m, v = _problem(rng, rows, k)
    before = [a.tobytes() for a in (p, m, v)]
    (np_, nm, nv), losses, logits, grads, dx = _call(x, y, p, m, v, rows, 2, k, t=41)
    assert [a.tobytes() for a in (p, m, v)] == before, "inputs must never be written"
    rp, rm, rv = p.tolist(), m.tolist(), v.tolist()
    xs, ys = x.tolist(), y.tolist()
    for i in range(k):
        X = [xs[(i * rows + r) * 8 : (i * rows + r + 1) * 8] for r in range(rows)]
        ref = R.train_step(
            rp,
            rm,
            rv,
            40 + i,
            X,
            ys[i * rows : (i + 1) * rows],
            f32(1e-2),
            f32(0.9),
            f32(0.999),
            f32(1e-8),
            f32(0.01),
        )
        assert hex_list([losses[i]]) == hex_list([ref["loss"]]), f"seed {seed}, step {i}"
        rp, rm, rv = ref["params"], ref["m"], ref["v"]
    assert hexes(logits) == hex_list([z for r in ref["logits"] for z in r]), f"seed {seed}"
    assert hexes(grads) == hex_list(ref["grads"]), f"seed {seed}"
    assert hexes(dx) == hex_list([z for r in ref["dX"] for z in r]), f"seed {seed}"
    assert (hexes(np_), hexes(nm), hexes(nv)) == (hex_list(rp), hex_list(rm), hex_list(rv))


def test_forward_and_grads_modes(seed):
    rng = random.Random(seed)
    rows = 9
    x, y, p, m, v = _problem(rng, rows)
    X = [x.tolist()[r * 8 : (r + 1) * 8] for r in range(rows)]
    outs, _, logits, _, _ = _call(x, y, p, m, v, rows, 0)
    _, ref_logits = R.forward(p.tolist(), X)
    assert hexes(logits) == hex_list([z for r in ref_logits for z in r]), f"seed {seed}"
    assert all(o.tobytes() == bytes(780) for o in outs), "forward mode writes no new state"
    outs, losses, logits, grads, dx = _call(x, y, p, m, v, rows, 1)
    loss, _, ref_grads, ref_dx = R.gradients(p.tolist(), X, y.tolist())
    assert hex_list([losses[0]]) == hex_list([loss]), f"seed {seed}"
    assert hexes(grads) == hex_list(ref_grads), f"seed {seed}"
    assert hexes(dx) == hex_list([z for r in ref_dx for z in r])
    assert all(o.tobytes() == bytes(780) for o in outs), "grads mode writes no new state"


# ---------------------------------------------------------------- refusals


def test_train_step_refusals(seed):
    rng = random.Random(seed)
    x, y, p, m, v = _problem(rng, 4)
    with pytest.raises(ValueError, match="k must be 1 outside mode train"):
        _call(x, y, p, m, v, 4, 1, k=2)
    with pytest.raises(ValueError, match="mode must be an integer in"):
        _call(x, y, p, m, v, 4, 3)
    with pytest.raises(ValueError, match=r"pass the step limit"):
        _call(x, y, p, m, v, 2, 2, k=2, t=(1 << 31) - 1)
    with pytest.raises(ValueError, match=r"t must be an integer in \[1"):
        _call(x, y, p, m, v, 4, 2, t=0)
    with pytest.raises(ValueError, match="need lr >= 0"):  # lr 0 is a step (a schedule's end)
        _call(x, y, p, m, v, 4, 2, hyper=[-1e-3, 0.9, 0.999, 1e-8, 0.01])
    with pytest.raises(ValueError, match="need lr >= 0"):
        _call(x, y, p, m, v, 4, 2, hyper=[1e-3, 1.0, 0.999, 1e-8, 0.01])
    bad_y = Array.from_list([0, 1, 3, 0], "<i4").reshape((4,))
    with pytest.raises(ValueError, match=r"targets\[2\] = 3 is not a class"):
        _call(x, bad_y, p, m, v, 4, 2)
    with pytest.raises(ValueError, match="expected 13 addresses"):
        b().mlp_train_step([1] * 12, [1] * 11)
    with pytest.raises(ValueError, match="expected 11 params"):
        b().mlp_train_step([1] * 13, [1] * 12)
    with pytest.raises(ValueError, match="address 3 is null"):
        b().mlp_train_step([1, 1, 1, 0] + [1] * 9, [1] * 11)


def test_train_step_refuses_nonfinite_result():
    x, y = zeros((8,)), Array.from_list([0], "<i4").reshape((1,))
    big = Array.from_list([3.0e38] * 195, "<f4").reshape((195,))  # logits overflow to inf
    with pytest.raises(RuntimeError, match="mlp_train_step: output 'logits' is not finite"):
        _call(x, y, big, zeros((195,)), zeros((195,)), 1, 2)


def test_piece_refusals():
    a = zeros((4,))
    with pytest.raises(ValueError, match="relu must be an integer in"):
        b().mlp_bias_activation([a._addr] * 3, [2, 2, 2])
    with pytest.raises(ValueError, match="rows must be an integer"):
        b().mlp_relu_backward([a._addr] * 3, [-1, 2])
    with pytest.raises(ValueError, match="expected 2 addresses"):
        b().mlp_sum_rows([a._addr], [2, 2])
    big = Array.from_list([3.0e38] * 4, "<f4").reshape((4,))
    with pytest.raises(RuntimeError, match="mlp_sum_rows: output 'out' is not finite"):
        b().mlp_sum_rows([big._addr, a._addr], [4, 1])
    with pytest.raises(RuntimeError, match="mlp_bias_activation: output 'out' is not finite"):
        b().mlp_bias_activation([big._addr, big._addr, a._addr], [1, 4, 0])
    with pytest.raises(ValueError, match=r"t must be an integer in \[1"):
        b().mlp_adamw([a._addr] * 4, [4, 0, 1e-3, 0.9, 0.999, 1e-8, 0.0])
    with pytest.raises(ValueError, match="need lr >= 0"):
        b().mlp_adamw([a._addr] * 4, [4, 1, 1e-3, 0.9, 0.999, 0.0, 0.0])
