"""Benchmark: µs per AdamW training step of mojolearn.Trainer on the models of issue 35, beside
torch eager, JAX jit and the matmul floor, all measured in the same run, one thread.

    python tools/bench_models.py                 # the full run (about two minutes)
    python tools/bench_models.py --quick         # a smoke run: few, short rounds
    python tools/bench_models.py --json out.json # also save every figure
    python tools/bench_models.py --passes 5      # more interleaved passes (default 5)

Cells (the issue's "Real data and speed"):
- M1: Linear(64, 256), GELU, LayerNorm(256), Linear(256, 256), GELU, Linear(256, 10), mean
  cross-entropy, batch 32 and 256;
- M2: Linear(10, 64), ReLU, Linear(64, 64), ReLU, Linear(64, 1), MSE, batch 64;
- LeNet5 (issue 37): Conv2d(1, 6, 5, padding=2), ReLU, MaxPool2d(2), Conv2d(6, 16, 5), ReLU,
  MaxPool2d(2), Flatten, Linear(400, 120), ReLU, Linear(120, 84), ReLU, Linear(84, 10) on
  1×28×28 inputs, mean cross-entropy, batch 64 and 256 (ours reads the flat (B, 784) batch).
Every contender takes the same weights (Trainer's seeded initialization, by torch's state_dict
names) and the same batch, and runs forward, loss, backward and AdamW (lr 1e-3, betas (0.9,
0.999), eps 1e-8, weight decay 0.01):
- mojolearn: `Trainer.train_step`, identical and fast mode (MOJOLEARN_NUMERIC_MODE), one
  process each, MOJOLEARN_NUM_THREADS=1;
- torch eager: the same nn.Sequential, F.cross_entropy / F.mse_loss, backward,
  torch.optim.AdamW(fused=True) (foreach where fused is refused), zero_grad(set_to_none=True),
  torch.set_num_threads(1);
- JAX jit: one jitted step (optax.adamw, else AdamW by hand in jax.numpy), XLA_FLAGS for one
  thread, pinned to one core;
- floor: the step's matmul FLOPs x3 (forward and two backward products per Linear and Conv)
  at the rate of NumPy's float32 1024x1024 matmul (OpenBLAS sgemm, one thread), measured in
  this run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for that process alone (they
  slow a current OpenBLAS; see the environment notes).
Each contender runs in its own process, once per pass, in an order that rotates from pass to
pass, so that a slow spell of this shared machine falls on every contender alike; a figure is
the median over all passes' rounds of the mean µs per step in a round; a second table gives
the best round of the same run (a shared machine's noise only adds time: where the two tables
disagree, the run was disturbed). Ratios: torch / ours and JAX / ours (> 1: we are faster),
ours / floor (1: at the floor). Every contender's first loss is compared (the same problem
gives the same loss to float32 rounding; a warning names a contender that timed something
else). The package measured is this checkout's python/ unless PYTHONPATH names one; the last
lines say where it came from.

When this build's Trainer refuses GELU (a binding without its kernels), M1 is measured with ReLU
in place of GELU for every contender and its rows say so.

A line follows with the identical step in a process whose every buffer of 128 KiB or more is
mapped afresh (MALLOC_MMAP_THRESHOLD_=131072): Trainer takes fresh state-sized buffers each
step, and whether their pages are new depends on the heap's history (glibc adapts its mmap
threshold and trims the heap), so a user's process may see the table's time or this one.

A profile of the identical mode follows at the M1 cells (`--no-profile` skips it), timed
round by round beside the step: `predict_logits` (the forward alone, beside its third of the
floor); train_step of the same Linears as a ReLU MLP, with the LayerNorm (where M1 has GELU)
and without; that ReLU MLP through MLPTrainer (its resident session); and AdamW alone over the
model's parameters (the update's pinned square root and two divisions per element): what the
activations, the normalization and the general engine cost beyond the GEMMs.
"""

import argparse
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LR, WD, BETAS, EPS = 1e-3, 0.01, (0.9, 0.999), 1e-8
M1 = (
    ("linear", 64, 256),
    ("gelu",),
    ("layernorm", 256),
    ("linear", 256, 256),
    ("gelu",),
    ("linear", 256, 10),
)
M2 = (("linear", 10, 64), ("relu",), ("linear", 64, 64), ("relu",), ("linear", 64, 1))
LENET5 = (  # RepDL's: conv (in, out, kernel, padding), max pool (kernel = stride)
    ("conv", 1, 6, 5, 2),
    ("relu",),
    ("maxpool", 2),
    ("conv", 6, 16, 5, 0),
    ("relu",),
    ("maxpool", 2),
    ("flatten",),
    ("linear", 400, 120),
    ("relu",),
    ("linear", 120, 84),
    ("relu",),
    ("linear", 84, 10),
)
MODELS = {"M1": (M1, "cross_entropy"), "M2": (M2, "mse"), "LeNet5": (LENET5, "cross_entropy")}
SHAPES = {"M1": (64,), "M2": (10,), "LeNet5": (1, 28, 28)}  # one example's input
CELLS = [("M1", 32), ("M1", 256), ("M2", 64), ("LeNet5", 64), ("LeNet5", 256)]
GOALS = {  # cell index -> [(ratio column, comparison, bound)], from issues 35 and 37
    0: [("torch/ours", ">=", 3.0), ("jax/ours", ">=", 1.5)],
    1: [("ours/floor", "<=", 1.3)],
    3: [("ours/floor", "<=", 2.0)],
    4: [("ours/floor", "<=", 1.5)],
}
GEMM = 1024


def layers_of(name, act):
    """The cell's layer list, GELU replaced by `act`."""
    layers, loss = MODELS[name]
    return [(act,) if layer == ("gelu",) else layer for layer in layers], loss


def gemm_flops(layers, batch, shape):
    """The step's matmul FLOPs: each Linear's and Conv's forward product and its two backward
    ones (the first conv's input gradient counted too, as issue 37's floor does)."""
    macs = 0
    for lay in layers:
        if lay[0] == "linear":
            macs += lay[1] * lay[2]
        elif lay[0] == "conv":
            _, c, out, k, pad = lay
            h, w = shape[1] + 2 * pad - k + 1, shape[2] + 2 * pad - k + 1
            macs += out * h * w * c * k * k
            shape = (out, h, w)
        elif lay[0] == "maxpool":
            shape = (shape[0], shape[1] // lay[1], shape[2] // lay[1])
    return 3 * 2 * batch * macs


def problem(cell, act):
    """(names, shapes, weights, xs, targets) of a cell: the Trainer's seeded initial tensors
    (by torch's state_dict names) and one batch from seeds; read from the run's cache folder
    (BENCH_MODELS_CACHE) once `main` has written it there."""
    name, batch = CELLS[cell]
    cache = os.environ.get("BENCH_MODELS_CACHE")
    path = os.path.join(cache, f"{cell}-{act}.json") if cache else None
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    import array

    _importable()
    from mojolearn._mlp import rng as _rng
    from mojolearn._model.spec import ModelSpec

    layers, loss = layers_of(name, act)
    spec = ModelSpec(ml_model(layers), SHAPES[name], loss)
    rng = _rng.SplitMix64(7 + cell)
    features, outputs = _size(SHAPES[name]), layers[-1][2]
    # Rounded to float32 here, as every contender takes them.
    xs = array.array("f", [rng.uniform() * 2 - 1 for _ in range(batch * features)]).tolist()
    if loss == "mse":
        targets = array.array("f", [rng.uniform() * 2 - 1 for _ in range(batch * outputs)])
        targets = targets.tolist()
    else:
        targets = [rng.randbelow(outputs) for _ in range(batch)]
    out = [list(spec.names), [list(s) for s in spec.shapes], spec.init(1), xs, targets]
    if path:
        with open(path + ".part", "w") as f:
            json.dump(out, f)
        os.replace(path + ".part", path)
    return out


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _importable():
    """The package this checkout holds (its python/ folder), unless PYTHONPATH names one (as
    tools/bench_ab.py does): an editable install of another tree in the venv would otherwise
    be measured in its place. Set in the environment, so every child measures the same."""
    own = os.path.join(os.path.dirname(HERE), "python")
    if not os.environ.get("PYTHONPATH") and os.path.isdir(os.path.join(own, "mojolearn")):
        os.environ["PYTHONPATH"] = own
        sys.path.insert(0, own)
    elif importlib.util.find_spec("mojolearn") is None:
        sys.path.insert(0, own)


def ml_model(layers):
    from mojolearn import nn

    make = {
        "linear": lambda i, o: nn.Linear(i, o),
        "gelu": nn.GELU,
        "relu": nn.ReLU,
        "layernorm": lambda n: nn.LayerNorm(n),
        "conv": lambda i, o, k, pad: nn.Conv2d(i, o, k, padding=pad),
        "maxpool": nn.MaxPool2d,
        "flatten": nn.Flatten,
    }
    return nn.Sequential(*(make[lay[0]](*lay[1:]) for lay in layers))


def timed_together(fns, rounds, budget):
    """{name: [µs per call in each round]}, interleaved: every round runs each callable in
    turn for about `budget` seconds (after a warm-up)."""
    calls = {}
    for name, fn in fns.items():
        fn()  # warm up
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, int(budget / max(time.perf_counter() - t0, 1e-7)))
    per_round = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            per_round[name].append((time.perf_counter() - t0) / calls[name] * 1e6)
    return per_round


def ours(cell, act, rounds, budget):
    import mojolearn as ml
    from mojolearn._buffers.array import Array

    name, batch = CELLS[cell]
    layers, loss = layers_of(name, act)
    names, shapes, weights, xs, targets = problem(cell, act)
    features, outputs = _size(SHAPES[name]), layers[-1][2]

    def trainer_of(layers, weights=None):
        return ml.Trainer(
            ml_model(layers),
            input_shape=SHAPES[name],
            loss=loss,
            weights=weights,
            seed=1,
            lr=LR,
            betas=BETAS,
            eps=EPS,
            weight_decay=WD,
        )

    w = {n: Array.from_list(v, "<f4").reshape(tuple(s)) for n, s, v in zip(names, shapes, weights)}
    trainer = trainer_of(layers, w)
    X = Array.from_list(xs, "<f4").reshape((batch, features))
    if loss == "mse":
        y = Array.from_list(targets, "<f4").reshape((batch, outputs))
    else:
        y = Array.from_list(targets, "<i4")
    first = trainer.train_step(X, y)["loss"]
    fns = {"step": lambda: trainer.train_step(X, y)}
    if name == "M1" and os.environ.get("BENCH_MODELS_PROFILE") == "1":
        fns["predict_logits"] = lambda: trainer.predict_logits(X)
        linears = [lay for lay in layers if lay[0] == "linear"]
        relu_mlp = [linears[0], ("relu",), linears[1], ("relu",), linears[2]]
        with_ln = [linears[0], ("relu",), ("layernorm", linears[0][2]), *relu_mlp[2:]]
        variants = {"ReLU MLP": relu_mlp}
        if act != "relu":  # else it is the timed model itself
            variants["ReLU+LayerNorm"] = with_ln
        for title, lay in variants.items():
            t = trainer_of(lay)
            fns[f"step {title}"] = lambda t=t: t.train_step(X, y)
        # The ReLU MLP again through MLPTrainer (the MLP's own entry): what the general
        # engine costs beyond it on the same GEMMs.
        sizes = [linears[0][1], *(lay[2] for lay in linears)]
        mlp = ml.MLPTrainer(sizes, data_schedule={"bench": batch}, lr=LR, weight_decay=WD)
        fns["MLPTrainer step"] = lambda: mlp.train_step(X, y)
        # AdamW alone over the model's parameters (the step's update, the same kernel): its
        # square root and two divisions per element are pinned, and no GEMM hides them.
        total = sum(math.prod(s) for s in shapes)
        bufs = [Array.from_list([0.01] * total, "<f4") for _ in range(4)]
        adam = ml._runtime.backend.binding().mlp_adamw
        addrs = [b._addr for b in bufs]
        fns["AdamW alone"] = lambda: adam(addrs, [total, 1, LR, *BETAS, EPS, WD])
    return {**timed_together(fns, rounds, budget), "_loss": first}


def torch_peer(cell, act, rounds, budget):
    import torch

    torch.set_num_threads(1)
    name, batch = CELLS[cell]
    layers, loss = layers_of(name, act)
    names, shapes, weights, xs, targets = problem(cell, act)
    make = {
        "linear": torch.nn.Linear,
        "gelu": torch.nn.GELU,
        "relu": torch.nn.ReLU,
        "layernorm": torch.nn.LayerNorm,
        "conv": lambda i, o, k, pad: torch.nn.Conv2d(i, o, k, padding=pad),
        "maxpool": torch.nn.MaxPool2d,
        "flatten": torch.nn.Flatten,
    }
    net = torch.nn.Sequential(*(make[lay[0]](*lay[1:]) for lay in layers))
    net.load_state_dict(
        {n: torch.tensor(v).view(*s) for n, s, v in zip(names, shapes, weights)}, strict=True
    )
    kw = dict(lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    try:
        opt, how = torch.optim.AdamW(net.parameters(), fused=True, **kw), "fused"
    except (RuntimeError, ValueError):  # a build without CPU fused AdamW
        opt, how = torch.optim.AdamW(net.parameters(), foreach=True, **kw), "foreach"
    X = torch.tensor(xs).view(batch, *SHAPES[name])
    if loss == "mse":
        y = torch.tensor(targets).view(batch, layers[-1][2])
        loss_fn = torch.nn.functional.mse_loss
    else:
        y = torch.tensor(targets)
        loss_fn = torch.nn.functional.cross_entropy

    def step():
        opt.zero_grad(set_to_none=True)
        value = loss_fn(net(X), y)
        value.backward()
        opt.step()
        return value.item()

    first = step()
    return {f"torch ({how})": timed_together({"": step}, rounds, budget)[""], "_loss": first}


def jax_peer(cell, act, rounds, budget):
    import jax
    import jax.numpy as jnp

    try:
        import optax
    except ImportError:
        optax = None
    name, batch = CELLS[cell]
    layers, loss = layers_of(name, act)
    names, shapes, weights, xs, targets = problem(cell, act)
    params = {
        n: jnp.asarray(v, jnp.float32).reshape(tuple(s)) for n, s, v in zip(names, shapes, weights)
    }

    def forward(p, h):
        for i, lay in enumerate(layers):
            if lay[0] == "linear":
                h = h @ p[f"{i}.weight"].T + p[f"{i}.bias"]
            elif lay[0] == "gelu":
                h = jax.nn.gelu(h, approximate=False)  # torch's GELU(): the erf form
            elif lay[0] == "relu":
                h = jax.nn.relu(h)
            elif lay[0] == "conv":
                pad = [(lay[4], lay[4])] * 2
                dims = ("NCHW", "OIHW", "NCHW")
                h = jax.lax.conv_general_dilated(
                    h, p[f"{i}.weight"], (1, 1), pad, dimension_numbers=dims
                )
                h = h + p[f"{i}.bias"][None, :, None, None]
            elif lay[0] == "maxpool":
                k = (1, 1, lay[1], lay[1])
                h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, k, k, "VALID")
            elif lay[0] == "flatten":
                h = h.reshape(h.shape[0], -1)
            else:
                mean = jnp.mean(h, axis=-1, keepdims=True)
                var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
                h = (h - mean) / jnp.sqrt(var + 1e-5) * p[f"{i}.weight"] + p[f"{i}.bias"]
        return h

    def loss_fn(p, X, y):
        z = forward(p, X)
        if loss == "mse":
            return jnp.mean((z - y) ** 2)
        logp = jax.nn.log_softmax(z)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    if optax is not None:
        how = "optax"
        opt = optax.adamw(LR, b1=BETAS[0], b2=BETAS[1], eps=EPS, weight_decay=WD)
        state = opt.init(params)

        def update(p, s, g):
            u, s = opt.update(g, s, p)
            return optax.apply_updates(p, u), s
    else:
        how = "by hand"
        state = tuple(jax.tree_util.tree_map(jnp.zeros_like, params) for _ in "mv")
        state = (*state, jnp.int32(0))  # m and v apart: a buffer is donated once

        def update(p, s, g):
            m, v, t = s
            t = t + 1
            b1, b2 = BETAS
            m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
            v = jax.tree_util.tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
            bc1, bc2 = 1 - b1**t, 1 - b2**t
            p = jax.tree_util.tree_map(
                lambda p_, m_, v_: p_ * (1 - LR * WD) - LR / bc1 * m_ / (jnp.sqrt(v_ / bc2) + EPS),
                p,
                m,
                v,
            )
            return p, (m, v, t)

    def step(p, s, X, y):
        value, g = jax.value_and_grad(loss_fn)(p, X, y)
        p, s = update(p, s, g)
        return p, s, value

    # Donating the weights and moments lets XLA update them in place, as torch does.
    jstep = jax.jit(step, donate_argnums=(0, 1))
    X = jnp.asarray(xs, jnp.float32).reshape(batch, *SHAPES[name])
    if loss == "mse":
        y = jnp.asarray(targets, jnp.float32).reshape(batch, layers[-1][2])
    else:
        y = jnp.asarray(targets, jnp.int32)
    box = {"p": params, "s": state}

    def one():
        box["p"], box["s"], value = jstep(box["p"], box["s"], X, y)
        value.block_until_ready()

    box["p"], box["s"], first = jstep(box["p"], box["s"], X, y)
    first = float(first)
    return {f"jax ({how})": timed_together({"": one}, rounds, budget)[""], "_loss": first}


def floor_peer(rounds, budget):
    """{"sgemm": [µs per 1024³ matmul in each round], "blas": what OpenBLAS runs}."""
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        threadpool_info = threadpool_limits = None
    import numpy as np

    limit = threadpool_limits(1) if threadpool_limits else None
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (GEMM, GEMM)).astype(np.float32)
    b = rng.uniform(-1, 1, (GEMM, GEMM)).astype(np.float32)
    out = np.empty((GEMM, GEMM), np.float32)
    rounds_us = timed_together({"": lambda: np.matmul(a, b, out=out)}, rounds, budget)[""]
    blas = "threadpoolctl not installed"
    if threadpool_info:
        blas = "; ".join(
            f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
            f"{i.get('num_threads')} thread(s)"
            for i in threadpool_info()
            if i.get("user_api") == "blas"
        )
    del limit
    return {"sgemm": rounds_us, "blas": blas}


PEERS = {"ours": ours, "torch": torch_peer, "jax": jax_peer}


def child(kind, cells, act, rounds, budget):
    if kind == "floor":
        return floor_peer(rounds, budget)
    _importable()
    if kind == "probe":
        return gelu_probe()
    if kind == "jax":  # XLA's CPU client keeps threads of its own: one core for all of them
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return {
        i: PEERS[kind](i, act if CELLS[i][0] == "M1" else "relu", rounds, budget) for i in cells
    }


def run_child(kind, env, cells, act, rounds, budget):
    full = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        kind,
        "--cells",
        ",".join(map(str, cells)),
        "--act",
        act,
        "--rounds",
        str(rounds),
        "--budget",
        str(budget),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        where = [w.strip() for w in lines if w.strip().startswith("File ")][-1:]
        return None, " ".join([*(lines[-1:] or ["failed"]), *(f"({w})" for w in where)])
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def gelu_probe():
    """One step of a GELU model on two rows: raises where this build's Trainer refuses GELU."""
    import mojolearn as ml
    from mojolearn import nn
    from mojolearn._buffers.array import Array

    t = ml.Trainer(nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 2)), input_shape=(2,))
    X = Array.from_list([0.5, -1.0, 0.25, 2.0], "<f4").reshape((2, 2))
    t.train_step(X, Array.from_list([0, 1], "<i4"))
    return {"mojolearn": os.path.dirname(ml.__file__)}


def _find(name):
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else "?"


def gelu_runs():
    """(whether this build's Trainer runs GELU, the binding's refusal), from a child process
    (the parent loads no binding)."""
    res, err = run_child("probe", {"MOJOLEARN_NUM_THREADS": "1"}, [], "gelu", 1, 0.0)
    if res is not None:
        return True, res["mojolearn"]
    if "op code" in err:  # the binding names the op it does not run
        where = _find("mojolearn")
        return False, f"{err} (mojolearn from {where})"
    raise SystemExit(f"bench_models: the GELU probe failed: {err}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few, short rounds (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also save every figure to PATH")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per contender and pass")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.25, help="seconds per round")
    parser.add_argument("--cells", default=",".join(str(i) for i in range(len(CELLS))))
    parser.add_argument("--no-profile", action="store_true", help="skip the M1 profile")
    parser.add_argument("--child", choices=[*PEERS, "floor", "probe"], help=argparse.SUPPRESS)
    parser.add_argument("--act", default="gelu", choices=("gelu", "relu"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    cells = [int(c) for c in args.cells.split(",") if c]
    if args.quick:
        args.rounds, args.passes, args.budget = 2, 2, 0.05
    if args.child:
        print(json.dumps(child(args.child, cells, args.act, args.rounds, args.budget)))
        return
    _importable()
    gelu, why = gelu_runs()
    act = "gelu" if gelu else "relu"
    one = {"MOJOLEARN_NUM_THREADS": "1", "BENCH_MODELS_PROFILE": "0"}
    contenders = [  # (kind, environment, column title of our configurations or None)
        ("ours", {**one, "MOJOLEARN_NUMERIC_MODE": "identical"}, "identical"),
        ("ours", {**one, "MOJOLEARN_NUMERIC_MODE": "fast"}, "fast"),
        ("torch", {}, None),
        (
            "jax",
            {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"},
            None,
        ),
        ("floor", {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}, None),
    ]
    # Trainer takes fresh state-sized buffers every step: whether their pages are new (page
    # faults, zeroing) depends on the process's heap history (glibc's adaptive mmap threshold
    # and trimming), so a plain script may see other times than the children above. This
    # one maps every buffer of 128 KiB or more afresh (glibc's threshold before it adapts).
    fresh_pages = {**one, "MOJOLEARN_NUMERIC_MODE": "identical", "MALLOC_MMAP_THRESHOLD_": "131072"}
    contenders.append(("ours", fresh_pages, "fresh pages"))
    profiled = [c for c in cells if CELLS[c][0] == "M1"]
    if profiled and not args.no_profile:
        # A process of its own: the other trainers it holds change the heap the timed step
        # allocates its buffers from (glibc's trimming), and so the table's step times.
        env = {**one, "MOJOLEARN_NUMERIC_MODE": "identical", "BENCH_MODELS_PROFILE": "1"}
        contenders.append(("ours", env, "profile"))
    rounds = {}  # column title -> {cell: [µs per step of each round]}
    sgemm, blas = [], ""
    losses = {}  # cell -> {contender: the loss of its first step}
    missing = {}  # peer -> why it was not measured
    started = time.perf_counter()
    cache = tempfile.mkdtemp(prefix="bench_models.")
    os.environ["BENCH_MODELS_CACHE"] = cache  # the children inherit it
    try:
        for cell in cells:  # the weights and the batch, once for the whole run
            problem(cell, act if CELLS[cell][0] == "M1" else "relu")
        for p in range(args.passes):
            k = p % len(contenders)
            for kind, env, tag in contenders[k:] + contenders[:k]:
                if kind in missing:
                    continue
                mine = profiled if tag == "profile" else cells
                res, err = run_child(kind, env, mine, act, args.rounds, args.budget)
                if err and tag:
                    raise SystemExit(f"bench_models: mojolearn {tag} failed: {err}")
                if err:
                    missing[kind] = err
                    continue
                if kind == "floor":
                    sgemm += res["sgemm"]
                    blas = res["blas"]
                    continue
                for c, r in res.items():
                    losses.setdefault(int(c), {})[tag or kind] = r.pop("_loss")
                    for name, values in r.items():
                        title = f"{tag} {name}" if tag else name
                        rounds.setdefault(title, {}).setdefault(int(c), []).extend(values)
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    def f(v, spec):
        return "-" if v is None else format(v, spec)

    def table(stat, words):
        """Print the table of one statistic over the rounds; its rows, the sgemm rate."""
        med = {t: {c: stat(v) for c, v in by.items()} for t, by in rounds.items()}
        rate = 2 * GEMM**3 / stat(sgemm) / 1e3 if sgemm else None  # GFLOP/s
        torch_col = next((t for t in med if t.startswith("torch")), None)
        jax_col = next((t for t in med if t.startswith("jax")), None)
        rows = []
        for c in cells:
            name, batch = CELLS[c]
            layers, _ = layers_of(name, act if name == "M1" else "relu")
            iden = med["identical step"][c]
            fast = med.get("fast step", {}).get(c)
            tor = med[torch_col][c] if torch_col else None
            jx = med[jax_col][c] if jax_col else None
            floor = gemm_flops(layers, batch, SHAPES[name]) / rate / 1e3 if rate else None
            ratios = {
                "torch/ours": tor / iden if tor else None,
                "jax/ours": jx / iden if jx else None,
                "ours/floor": iden / floor if floor else None,
                "identical/fast": iden / fast if fast else None,
                "fast: torch/ours": tor / fast if tor and fast else None,
                "fast: jax/ours": jx / fast if jx and fast else None,
                "fast: ours/floor": fast / floor if fast and floor else None,
            }
            goals = []
            for col, op, bound in GOALS.get(c, []):
                v = ratios[col]
                ok = v is not None and (v >= bound if op == ">=" else v <= bound)
                goals.append(
                    {"ratio": col, "goal": f"{op} {bound}", "value": v, "met": ok if v else None}
                )
            note = ""
            if name == "M1" and act == "relu":
                note = "(ReLU in place of GELU: GELU kernels not in this build)"
            rows.append(
                {
                    "cell": f"{name} b{batch}",
                    "model": name,
                    "batch": batch,
                    "identical_us": iden,
                    "fast_us": fast,
                    "torch_us": tor,
                    "jax_us": jx,
                    "floor_us": floor,
                    "ratios": ratios,
                    "goals": goals,
                    "note": note,
                }
            )
        print(
            f"µs per AdamW training step ({words}), one thread; ours = Trainer.train_step; "
            f"{torch_col or 'torch'} eager, {jax_col or 'jax'} jit; floor = matmul FLOPs x3 at "
            f"{f(rate, '.1f')} GFLOP/s (NumPy float32 {GEMM}³, {blas or 'blas unknown'})."
        )
        head = (
            f"{'batch':>5} {'cell':<4}{'ours iden':>10}{'ours fast':>10}{'torch':>9}{'JAX':>9}"
            f"{'floor':>9}"
            f"{'torch/ours':>11}{'jax/ours':>9}{'ours/floor':>11}{'iden/fast':>10}"
            "   goals (issue 35; ✓ met, ✗ not)"
        )
        print(head)
        print("-" * len(head))
        for r in rows:
            q = r["ratios"]
            goals = ", ".join(
                f"goal {g['ratio']} {g['goal']} {'✓' if g['met'] else '✗'}" for g in r["goals"]
            )
            # A row starts with its batch: tools/bench_ab.py labels a row by its first number
            # and its words, so each row (and no goal's outcome) names it.
            print(
                f"{r['batch']:>5} {r['model']:<4}{f(r['identical_us'], '.1f'):>10}"
                f"{f(r['fast_us'], '.1f'):>10}"
                f"{f(r['torch_us'], '.1f'):>9}{f(r['jax_us'], '.1f'):>9}"
                f"{f(r['floor_us'], '.1f'):>9}{f(q['torch/ours'], '.2f'):>11}"
                f"{f(q['jax/ours'], '.2f'):>9}{f(q['ours/floor'], '.2f'):>11}"
                f"{f(q['identical/fast'], '.2f'):>10}   {goals}"
                + (f" {r['note']}" if r["note"] else "")
            )
        print(
            "Fast mode's ratios: "
            + "; ".join(
                f"{r['cell']} torch/ours {f(r['ratios']['fast: torch/ours'], '.2f')}, jax/ours "
                f"{f(r['ratios']['fast: jax/ours'], '.2f')}, ours/floor "
                f"{f(r['ratios']['fast: ours/floor'], '.2f')}"
                for r in rows
            )
        )
        return rows, rate, med

    rows, rate, med = table(statistics.median, "median of rounds")
    print()
    # A shared machine's noise only adds time: the best round is a second view of the same run.
    best_rows, best_rate, _ = table(min, "best round")
    if "fresh pages step" in med:
        print(
            "\nidentical train_step with every buffer >= 128 KiB mapped afresh "
            "(MALLOC_MMAP_THRESHOLD_=131072), µs (ratio to ours iden): "
            + "; ".join(
                f"{r['cell']} {med['fresh pages step'][c]:.1f} "
                f"({med['fresh pages step'][c] / r['identical_us']:.2f})"
                for c, r in zip(cells, rows)
            )
        )
    profile = {}
    for title in med:
        if title.startswith("profile "):
            profile[title[len("profile ") :]] = med[title]
    if profile:
        print(
            "\nProfile, identical mode, one process, µs (ratio to its train_step of M1; "
            "to the floor's part)"
        )
        for c in profiled:
            r = next(x for x in rows if x["cell"] == f"{CELLS[c][0]} b{CELLS[c][1]}")
            step, floor = profile["step"][c], r["floor_us"]
            parts = [f"train_step {step:.1f} ({f(floor and step / floor, '.2f')}x the floor)"]
            for title, by in profile.items():
                if title == "step":
                    continue
                v = by[c]
                # The forward is one GEMM of the three per Linear: a third of the floor.
                share = floor / 3 if title == "predict_logits" else floor
                part = f"{title} {v:.1f} ({v / step:.2f}; {f(share and v / share, '.2f')}x)"
                parts.append(part)
            print(f"{r['cell']:<9}" + "; ".join(parts))
    for c, by in sorted(losses.items()):
        # The same weights, batch and model give the same first loss to float32 rounding:
        # else a contender timed something else.
        low, high = min(by.values()), max(by.values())
        if high - low > 1e-4 * max(1.0, abs(low)):
            print(f"WARNING: {CELLS[c]} first-step losses differ: {by}")
    for kind, err in missing.items():
        title = {"jax": "JAX", "floor": "NumPy (the floor)"}.get(kind, kind)
        print(f"{title}: not installed" if "No module" in err else f"{title}: failed ({err})")
    if not gelu:
        print(f"GELU: {why}")
    else:
        print(f"mojolearn from {why}")
    wall = time.perf_counter() - started
    print(f"({args.passes} passes x {args.rounds} rounds of {args.budget}s; {wall:.0f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "rows": rows,
                    "sgemm_gflops": rate,
                    "best_round_rows": best_rows,
                    "best_round_sgemm_gflops": best_rate,
                    "blas": blas,
                    "act": act,
                    "profile": {
                        t: {CELLS[c][0] + f" b{CELLS[c][1]}": v for c, v in by.items()}
                        for t, by in profile.items()
                    },
                    "rounds": {t: {str(c): v for c, v in by.items()} for t, by in rounds.items()},
                    "sgemm_rounds_us": sgemm,
                    "first_losses": {str(c): by for c, by in losses.items()},
                    "missing": missing,
                    "args": vars(args),
                },
                fh,
                indent=1,
            )


if __name__ == "__main__":
    main()
