"""Accuracy of models beyond the MLP beside torch (issue 35 "Accuracy"), as
tests/test_profile_v2.py measures the MLP: six AdamW steps (lr 1e-2, weight decay 0.01,
default betas and eps) from the same weights (a seeded torch model's `state_dict`, passed as
`weights=`) and the same fresh random batches, identical mode beside torch float32 and torch
float64 (`torch.optim.AdamW`, one thread), for

- a GELU + LayerNorm + Residual classifier: `Linear(10, 32), GELU(), Residual(LayerNorm(32),
  Linear(32, 32), GELU()), LayerNorm(32), Linear(32, 3)`, cross-entropy;
- an MSE regressor: `Linear(10, 64), Tanh(), Linear(64, 64), Sigmoid(), Linear(64, 1)`.

Distance from float64 after the steps, for the weights, the outputs on a fixed batch and the
per-row losses of that batch (each framework's float32 outputs, losses formed in binary64):
max abs difference over the elements relative to the float64 values' max magnitude, asserted
within 2x of torch float32's as the median over seeds (a single seed is noisy: Adam's first
steps move a weight by about lr whatever its gradient's size, so rounding in a gradient near
eps becomes a jump of one weight on either side by chance). Each distance is floored at half
a float32 ulp of its scale (2^-24, what rounding float64's own values to float32 costs) so that
two exact results (0 vs 0) are not a ratio. Measured (medians over 7 seeds, two seed bases):
identical / torch float32 at 1.00-1.35x (classifier) and 1.00-1.42x (regressor); every
distance 1e-7 to 3e-5 of its scale.
"""

import copy
import statistics

import mojolearn as ml
import pytest
from mojolearn import nn

needs_identical = pytest.mark.skipif(
    ml.numeric_mode_used() != "identical", reason="measures identical mode's arithmetic"
)
LR, WEIGHT_DECAY, STEPS, WITHIN, SEEDS = 1e-2, 0.01, 6, 2.0, 11
ROWS, EVAL_ROWS = 32, 256
FLOOR = 2.0**-24  # half a float32 ulp of the scale: storing float64's values in float32
MEASURES = ("weights", "outputs", "row losses")


def _models(torch):
    T = torch.nn

    class Residual(T.Sequential):
        def forward(self, x):
            return x + super().forward(x)

    return {
        "gelu-layernorm-residual": (
            nn.Sequential(
                nn.Linear(10, 32),
                nn.GELU(),
                nn.Residual(nn.LayerNorm(32), nn.Linear(32, 32), nn.GELU()),
                nn.LayerNorm(32),
                nn.Linear(32, 3),
            ),
            lambda: T.Sequential(
                T.Linear(10, 32),
                T.GELU(),
                Residual(T.LayerNorm(32), T.Linear(32, 32), T.GELU()),
                T.LayerNorm(32),
                T.Linear(32, 3),
            ),
            "cross_entropy",
        ),
        "mse-tanh-sigmoid": (
            nn.Sequential(
                nn.Linear(10, 64),
                nn.Tanh(),
                nn.Linear(64, 64),
                nn.Sigmoid(),
                nn.Linear(64, 1),
            ),
            lambda: T.Sequential(
                T.Linear(10, 64), T.Tanh(), T.Linear(64, 64), T.Sigmoid(), T.Linear(64, 1)
            ),
            "mse",
        ),
    }


def _run(torch, model, build, loss, seed):
    """{measure: (identical mode's distance from float64, torch float32's)} for one seed."""
    F = torch.nn.functional
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        start = build()
        # LayerNorm starts at weight 1, bias 0 in torch: move it off so the affine
        # parameters' arithmetic is measured from the first step.
        with torch.no_grad():
            for name, p in start.named_parameters():
                if p.dim() == 1 and name.endswith("weight"):
                    p.add_(torch.randn(p.shape) * 0.1)
    weights = {k: ml.Array.from_list(v.tolist(), "<f4") for k, v in start.state_dict().items()}
    ours = ml.Trainer(
        model, input_shape=(10,), loss=loss, weights=weights, lr=LR, weight_decay=WEIGHT_DECAY
    )
    t32, t64 = copy.deepcopy(start), copy.deepcopy(start).double()
    opt32 = torch.optim.AdamW(t32.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    opt64 = torch.optim.AdamW(t64.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    g = torch.Generator().manual_seed(seed)

    def batch(n):
        X = torch.randn(n, 10, generator=g)
        if loss == "mse":
            return X, (
                X[:, :1] - 0.5 * X[:, 1:2] * X[:, 2:3] + 0.1 * torch.randn(n, 1, generator=g)
            )
        return X, torch.randint(0, 3, (n,), generator=g)

    def loss_fn(z, y, reduction="mean"):
        if loss == "mse":
            return F.mse_loss(z, y.to(z.dtype), reduction=reduction)
        return F.cross_entropy(z, y, reduction=reduction)

    def targets(y):
        return y if loss == "mse" else y.to(torch.int32)

    batches = [batch(ROWS) for _ in range(STEPS)]
    Xe, ye = batch(EVAL_ROWS)
    for X, y in batches:
        ours.train_step(X, targets(y))
        for net, opt, dtype in ((t32, opt32, torch.float32), (t64, opt64, torch.float64)):
            opt.zero_grad()
            loss_fn(net(X.to(dtype)), y).backward()
            opt.step()
    with torch.no_grad():
        out64, out32 = t64(Xe.double()), t32(Xe)
    out = torch.tensor(ours.predict_logits(Xe).tolist(), dtype=torch.float64)
    rows64 = loss_fn(out64, ye, "none")

    def dist(a, b):
        b = b.double()
        scale = max(float(b.abs().max()), 2.0**-126)
        return max(float((a.double() - b).abs().max()) / scale, FLOOR)

    sd64 = t64.state_dict()
    flat64 = torch.cat([v.reshape(-1) for v in sd64.values()])
    flat32 = torch.cat([v.reshape(-1) for v in t32.state_dict().values()])
    mine = ours.weights_
    flat = torch.cat(
        [torch.tensor(mine[k].tolist(), dtype=torch.float64).reshape(-1) for k in sd64]
    )
    return {
        "weights": (dist(flat, flat64), dist(flat32, flat64)),
        "outputs": (dist(out, out64), dist(out32, out64)),
        "row losses": (
            dist(loss_fn(out, ye, "none"), rows64),
            dist(loss_fn(out32.double(), ye, "none"), rows64),
        ),
    }


@needs_identical
@pytest.mark.parametrize("name", ["gelu-layernorm-residual", "mse-tanh-sigmoid"])
def test_six_adamw_steps_within_2x_of_torch_float32(seed, name):
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")  # torch.optim needs it (torch._dynamo imports it)
    model, build, loss = _models(torch)[name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's float32 sums depend on its thread count
    try:
        base = seed % (1 << 31)
        runs = [_run(torch, model, build, loss, base + i) for i in range(SEEDS)]
    finally:
        torch.set_num_threads(threads)
    failures, cells = [], []
    for measure in MEASURES:
        pairs = [r[measure] for r in runs]
        ratio = statistics.median(a / b for a, b in pairs)
        ours = statistics.median(a for a, _ in pairs)
        theirs = statistics.median(b for _, b in pairs)
        cells.append(f"{measure} {ours:.3g}/{theirs:.3g}={ratio:.2f}x")
        if not ratio <= WITHIN:
            per_seed = [f"{a:.3g}/{b:.3g}" for a, b in pairs]
            failures.append(f"{measure}: median {ratio:.2f}x ({per_seed})")
    print(f"\n{name}, batch {ROWS}, {SEEDS} seeds from {base}: " + "; ".join(cells))
    assert not failures, (
        f"{name}: identical mode drifts from float64 more than torch float32:\n"
        + ("\n".join(failures))
    )
