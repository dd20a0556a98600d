"""Parity with torch.optim (runs when torch is installed; CI installs the CPU build).

Also: `clip_grad_norm_` for every norm_type against torch's.

100 steps of Adam, AdamW and SGD on random least-squares problems. Both optimizers get the
same gradient each step (computed from torch's parameters), so the gap measures the update
arithmetic, not the problem's sensitivity (Adam near an optimum amplifies 1-ulp differences
in a gradient into lr-sized steps). torch's `clip_grad_norm_` runs where we clip. Parameters must stay within REL of torch's (relative to the
parameter scale). The differences are the documented deviations: float32 bias corrections,
`b*m + (1-b)*g` instead of torch's lerp, float32 hyperparameter scalars, and the
sum-of-squares norm (DEVIATIONS.md).
"""

import math

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import mojolearn  # noqa: E402

# max |ours - torch| / max(|torch|, 1) over all parameters and all 100 steps; the measured worst
# was 4.6e-6 over 48 seeded runs of every case.
REL = 5e-5
STEPS = 100

CASES = [
    ("Adam", dict(lr=1e-2), None),
    ("Adam", dict(lr=1e-2, weight_decay=0.05, betas=(0.8, 0.99)), None),
    ("Adam", dict(lr=1e-3, maximize=True), None),
    ("Adam", dict(lr=1e-2, eps=1e-6), 0.5),
    ("AdamW", dict(lr=1e-2), None),
    ("AdamW", dict(lr=3e-2, weight_decay=0.1, betas=(0.5, 0.9)), 1.0),
    ("SGD", dict(lr=1e-2), None),
    ("SGD", dict(lr=1e-2, momentum=0.9), None),
    ("SGD", dict(lr=1e-2, momentum=0.9, dampening=0.1, weight_decay=1e-3), None),
    ("SGD", dict(lr=1e-2, momentum=0.9, nesterov=True), 0.5),
    ("SGD", dict(lr=1e-3, momentum=0.5, maximize=True), None),
    ("SGD", dict(lr=1e-2, weight_decay=0.1), 0.1),
]


def _problem(rs):
    shapes = [(6, 4), (4,), (3, 6)]
    a = [rs.standard_normal((8, int(np.prod(s)))) / 4 for s in shapes]
    b = [rs.standard_normal(8) for _ in shapes]
    w0 = [rs.standard_normal(s).astype(np.float32) for s in shapes]
    return shapes, a, b, w0


def _grads(ws, a, b):
    """Least-squares gradients A^T (A w - b), in float64, handed over as float32."""
    return [
        (ai.T @ (ai @ w.astype(np.float64).ravel() - bi)).reshape(w.shape).astype(np.float32)
        for w, ai, bi in zip(ws, a, b)
    ]


@pytest.mark.parametrize("kind, kwargs, max_norm", CASES)
def test_hundred_steps_track_torch(kind, kwargs, max_norm, seed):
    rs = np.random.default_rng(seed % 2**32)
    shapes, a, b, w0 = _problem(rs)
    ours = [w.copy() for w in w0]
    theirs = [torch.tensor(w.copy(), requires_grad=False) for w in w0]
    opt = getattr(mojolearn, kind)(ours, **kwargs)
    ref = getattr(torch.optim, kind)(theirs, foreach=False, **kwargs)
    worst = 0.0
    for step in range(STEPS):
        g_theirs = _grads([t.numpy() for t in theirs], a, b)
        g_ours = [g.copy() for g in g_theirs]
        for t, g in zip(theirs, g_theirs):
            t.grad = torch.from_numpy(g)
        # torch's norm of OUR gradients: the same inputs, torch's algorithm (norm of norms).
        same = float(
            torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(torch.from_numpy(g)) for g in g_ours])
            )
        )
        norm = opt.step(g_ours, max_norm=max_norm)
        if max_norm is not None:
            assert abs(norm - same) <= 1e-6 * same, (seed, step, norm, same)
            torch.nn.utils.clip_grad_norm_(theirs, max_norm)
        ref.step()
        for w, t in zip(ours, theirs):
            tw = t.detach().numpy()
            worst = max(worst, float(np.max(np.abs(w - tw)) / max(float(np.max(np.abs(tw))), 1.0)))
    print(f"{kind} {kwargs} max_norm={max_norm}: {worst:.3g}")
    assert worst <= REL, (
        f"{kind} {kwargs} max_norm={max_norm}: relative gap {worst:.3g} > {REL}; seed {seed}"
    )


def test_clip_grad_norm_matches_torch(seed):
    rs = np.random.default_rng(seed % 2**32)
    gs = [rs.standard_normal(s).astype(np.float32) * 3 for s in ((5, 7), (11,), (1,))]
    ts = [torch.zeros(g.shape) for g in gs]
    for t, g in zip(ts, gs):
        t.grad = torch.from_numpy(g.copy())
    want = float(torch.nn.utils.clip_grad_norm_(ts, 2.0))
    got = mojolearn.clip_grad_norm_(gs, 2.0)
    assert abs(got - want) <= 1e-6 * want
    for g, t in zip(gs, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("p", (math.inf, 1, 2, 3, 1.5))
def test_clip_grad_norm_p_norms_match_torch(p, seed):
    """Within 4e-6 relative of torch's float32 norm and scaled gradients (measured over 400
    seeds: inf and 1 exact, 2 1.1e-6, 3 6.1e-7, 1.5 9.6e-7)."""
    rs = np.random.default_rng(seed % 2**32)
    gs = [rs.standard_normal(s).astype(np.float32) * 3 for s in ((5, 7), (11,), (1,), (64, 33))]
    ts = [torch.zeros(g.shape) for g in gs]
    for t, g in zip(ts, gs):
        t.grad = torch.from_numpy(g.copy())
    want = float(torch.nn.utils.clip_grad_norm_(ts, 2.0, norm_type=p))
    got = mojolearn.clip_grad_norm_(gs, 2.0, norm_type=p)
    assert abs(got - want) <= 4e-6 * want, (seed, p, got, want)
    for g, t in zip(gs, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=4e-6, atol=1e-7)


@pytest.mark.parametrize("p", (math.inf, 1, 2, 3, 1.5))
def test_clip_grad_norm_non_finite_gradients_match_torch_without_the_check(p, seed):
    """error_if_nonfinite=False gives torch's norm (inf or NaN) and torch's gradients after."""
    rs = np.random.default_rng(seed % 2**32)
    for bad in (np.inf, -np.inf, np.nan):
        gs = [rs.standard_normal(s).astype(np.float32) for s in ((4, 3), (5,))]
        gs[1][rs.integers(5)] = bad
        ts = [torch.zeros(g.shape) for g in gs]
        for t, g in zip(ts, gs):
            t.grad = torch.from_numpy(g.copy())
        want = float(torch.nn.utils.clip_grad_norm_(ts, 1.0, norm_type=p))
        got = mojolearn.clip_grad_norm_(gs, 1.0, norm_type=p, error_if_nonfinite=False)
        assert got == want or (math.isnan(got) and math.isnan(want)), (p, bad, got, want)
        for g, t in zip(gs, ts):
            np.testing.assert_array_equal(g, t.grad.numpy())  # NaN where torch has NaN
