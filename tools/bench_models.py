"""Benchmark: µs per AdamW training step of mojolearn.Trainer on the models of issues 35, 37 and
38, beside torch eager, JAX jit and the matmul floor, all measured in the same run, at one and
two threads.

    python tools/bench_models.py                 # the full run (about ten minutes)
    python tools/bench_models.py --quick         # a smoke run: few, short rounds
    python tools/bench_models.py --cells GPT     # the transformer's cells alone (or indices: 0,1)
    python tools/bench_models.py --threads 1     # one thread only (the run of before issue 39)
    python tools/bench_models.py --json out.json # also save every figure
    python tools/bench_models.py --passes 5      # more interleaved passes (default 5)

Cells (index: model, batch) -- the issues' "Real data and speed":
- 0, 1: M1: Linear(64, 256), GELU, LayerNorm(256), Linear(256, 256), GELU, Linear(256, 10),
  mean cross-entropy, batch 32 and 256;
- 2: M2: Linear(10, 64), ReLU, Linear(64, 64), ReLU, Linear(64, 1), MSE, batch 64;
- 3, 4: LeNet5 (issue 37): Conv2d(1, 6, 5, padding=2), ReLU, MaxPool2d(2), Conv2d(6, 16, 5),
  ReLU, MaxPool2d(2), Flatten, Linear(400, 120), ReLU, Linear(120, 84), ReLU, Linear(84, 10) on
  1×28×28 inputs, mean cross-entropy, batch 64 and 256 (ours reads the flat (B, 784) batch);
- 5, 6: GPT (issue 38): nanoGPT's CPU configuration, `nn.gpt(65, 64, 4, 4, 128)` (vocabulary
  65, block 64, 4 layers, 4 heads, width 128), int32 token ids (B, 64) with the next ids as
  targets, mean cross-entropy over every position, batch 12 and 64. Trainer is asked for
  `max_rows=batch`: a build whose bound is below it reports the cell as refused.
Every contender takes the same weights (Trainer's seeded initialization, by torch's state_dict
names) and the same batch, and runs forward, loss, backward and AdamW (lr 1e-3, betas (0.9,
0.999), eps 1e-8, weight decay 0.01):
- mojolearn: `Trainer.train_step`, identical and fast mode (MOJOLEARN_NUMERIC_MODE), one
  process each, MOJOLEARN_NUM_THREADS=n;
- torch eager: the same nn.Sequential (GPT: `Trainer.to_torch()`, torch's Embedding and
  nanoGPT's attention with the causal scaled_dot_product_attention), F.cross_entropy (GPT:
  over (B·T, vocab)) / F.mse_loss, backward, torch.optim.AdamW(fused=True) (foreach where
  fused is refused), zero_grad(set_to_none=True), torch.set_num_threads(n);
- JAX jit: one jitted step (optax.adamw, else AdamW by hand in jax.numpy), XLA_FLAGS for one
  thread (n > 1: Eigen's pool of n), pinned to n cores; the GPT forward written in jax.numpy
  from the same weights (`jax_gpt`: LayerNorm eps 1e-5, causal softmax attention scaled by
  1/sqrt(head_dim), erf GELU);
- floor: the step's matmul FLOPs x3 (forward and two backward products per Linear and Conv;
  GPT: every Linear, and attention's q·kᵀ and att·v over the full T × T, `gpt_macs`) at the
  rate of NumPy's float32 1024x1024 matmul (OpenBLAS sgemm, one thread), measured in this run
  with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for that process alone (they slow a
  current OpenBLAS; see the environment notes).
Threads (issue 39): every contender runs at each count of `--threads` (default 1,2; the
children's OMP/OpenBLAS/MKL thread counts follow). The first table is the one-thread run with
the floor and the goals; a second table per further count gives each contender's time, the
speed-up "1t/2t" (the one-thread time over the two-thread one: > 1, two threads help), and
torch/ours at two threads. The floor stays the one-thread rate.
Each contender (and thread count) runs in its own process, once per pass, in an order that
rotates from pass to pass, so that a slow spell of this shared machine falls on every contender
alike; a figure is the median over all passes' rounds of the mean µs per step in a round; a
second set of tables gives the best round of the same run (a shared machine's noise only adds
time: where the two disagree, the run was disturbed). Ratios: torch / ours and JAX / ours (> 1:
we are faster), ours / floor (1: at the floor). Goals (issues 35, 37, 38): M1 b32 torch/ours >=
3 and jax/ours >= 1.5; M1 b256 ours/floor <= 1.3; LeNet5 b64 / b256 ours/floor <= 2 / 1.5; GPT
b12 torch/ours >= 1.2; GPT b64 ours/floor <= 1.25. Every contender's first loss is compared
(the same problem gives the same loss to float32 rounding; a warning names a contender that
timed something else). The package measured is this checkout's python/ unless PYTHONPATH names
one; the last lines say where it came from. A full default run takes about ten minutes (the
transformer's steps at two thread counts); `--cells` and `--threads` shorten it.

When this build's Trainer refuses GELU (a binding without its kernels), M1 is measured with ReLU
in place of GELU for every contender and its rows say so.

A line follows with the identical step in a process whose every buffer of 128 KiB or more is
mapped afresh (MALLOC_MMAP_THRESHOLD_=131072): Trainer takes fresh state-sized buffers each
step, and whether their pages are new depends on the heap's history (glibc adapts its mmap
threshold and trims the heap), so a user's process may see the table's time or this one.

A profile of the identical mode at the first thread count follows at the M1 and GPT cells
(`--no-profile` skips it), timed round by round beside the step: `predict_logits` (the forward
alone, beside its third of the floor); at M1, train_step of the same Linears as a ReLU MLP, with
the LayerNorm (where M1 has GELU) and without, that ReLU MLP through MLPTrainer (its resident
session), and AdamW alone over the model's parameters (the update's pinned square root and two
divisions per element): what the activations, the normalization and the general engine cost
beyond the GEMMs; at GPT, the step without the attention blocks (beside its own floor), so the
blocks' share (c_attn, the attention kernel, c_proj, their LayerNorm and Residual) is the
difference.
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
# nanoGPT's CPU configuration (issue 38): nn.gpt(vocab, block, layers, heads, width), one "layer"
# of its own here, since nn.gpt is the model.
GPT = (("gpt", 65, 64, 4, 4, 128),)
MODELS = {
    "M1": (M1, "cross_entropy"),
    "M2": (M2, "mse"),
    "LeNet5": (LENET5, "cross_entropy"),
    "GPT": (GPT, "cross_entropy"),
}
SHAPES = {"M1": (64,), "M2": (10,), "LeNet5": (1, 28, 28), "GPT": (64,)}  # one example's input
CELLS = [
    ("M1", 32),
    ("M1", 256),
    ("M2", 64),
    ("LeNet5", 64),
    ("LeNet5", 256),
    ("GPT", 12),
    ("GPT", 64),
]
GOALS = {  # cell index -> [(ratio column, comparison, bound)], from issues 35, 37 and 38
    0: [("torch/ours", ">=", 3.0), ("jax/ours", ">=", 1.5)],
    1: [("ours/floor", "<=", 1.3)],
    3: [("ours/floor", "<=", 2.0)],
    4: [("ours/floor", "<=", 1.5)],
    5: [("torch/ours", ">=", 1.2)],
    6: [("ours/floor", "<=", 1.25)],
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
        if lay[0] == "gpt":
            macs += gpt_macs(*lay[1:])
        elif lay[0] == "linear":
            macs += lay[1] * lay[2]
        elif lay[0] == "conv":
            _, c, out, k, pad = lay
            h, w = shape[1] + 2 * pad - k + 1, shape[2] + 2 * pad - k + 1
            macs += out * h * w * c * k * k
            shape = (out, h, w)
        elif lay[0] == "maxpool":
            shape = (shape[0], shape[1] // lay[1], shape[2] // lay[1])
    return 3 * 2 * batch * macs


def gpt_macs(vocab, block, n_layer, n_head, width, attention=True):
    """One sequence's forward multiply-adds in nn.gpt's products: every Linear (c_attn, c_proj
    and the MLP's two per block, the vocabulary head) on its `block` rows, and attention's q·kᵀ
    and att·v over the full T × T (the causal mask's zeros counted, as a GEMM computes them);
    `attention=False`: the model without its attention blocks."""
    d = width
    per_block = (3 * d * d + d * d if attention else 0) + 2 * d * 4 * d
    products = 2 * block * block * d if attention else 0  # q·kᵀ and att·v, all heads
    return block * (n_layer * per_block + d * vocab) + n_layer * products


def gpt_without_attention(model):
    """nn.gpt's Sequential without its attention blocks (the profile's second step)."""
    from mojolearn import nn

    def is_attention(layer):
        return any(isinstance(x, nn.CausalSelfAttention) for x in getattr(layer, "layers", ()))

    return nn.Sequential(*(layer for layer in model.layers if not is_attention(layer)))


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
    features, outputs = _size(SHAPES[name]), _outputs(layers)
    if name == "GPT":  # token ids, and each window's next tokens as its targets
        ids = [[rng.randbelow(outputs) for _ in range(features + 1)] for _ in range(batch)]
        xs = [t for row in ids for t in row[:-1]]
        targets = [t for row in ids for t in row[1:]]
    else:  # rounded to float32 here, as every contender takes them
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


def _outputs(layers):
    """The model's outputs per position: the last Linear's, or nn.gpt's vocabulary."""
    return layers[-1][1] if layers[-1][0] == "gpt" else layers[-1][2]


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

    if layers[0][0] == "gpt":
        return nn.gpt(*layers[0][1:])
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
    features, outputs = _size(SHAPES[name]), _outputs(layers)
    # The transformer's activations outgrow Trainer's default bound (256 MiB until issue 38's
    # 2 GiB guard) at batch 64: ask for the batch, and report a refusal as such.
    rows = {"max_rows": batch} if name == "GPT" else {}

    def trainer_of(model, weights=None):
        return ml.Trainer(
            model,
            input_shape=SHAPES[name],
            loss=loss,
            weights=weights,
            seed=1,
            lr=LR,
            betas=BETAS,
            eps=EPS,
            weight_decay=WD,
            **rows,
        )

    w = {n: Array.from_list(v, "<f4").reshape(tuple(s)) for n, s, v in zip(names, shapes, weights)}
    try:
        trainer = trainer_of(ml_model(layers), w)
    except ValueError as e:
        if "max_rows" not in str(e):
            raise
        return {"_refused": str(e)}
    if name == "GPT":  # token ids (B, T) and the next ids as targets
        X = Array.from_list(xs, "<i4").reshape((batch, features))
        y = Array.from_list(targets, "<i4").reshape((batch, features))
    else:
        X = Array.from_list(xs, "<f4").reshape((batch, features))
        if loss == "mse":
            y = Array.from_list(targets, "<f4").reshape((batch, outputs))
        else:
            y = Array.from_list(targets, "<i4")
    first = trainer.train_step(X, y)["loss"]
    fns = {"step": lambda: trainer.train_step(X, y)}
    profile = os.environ.get("BENCH_MODELS_PROFILE") == "1"
    if name == "GPT" and profile:
        # The forward alone, and the step without the attention blocks: the blocks' share
        # (c_attn, the attention kernel, c_proj, their LayerNorm and Residual) is the difference.
        fns["predict_logits"] = lambda: trainer.predict_logits(X)
        plain = trainer_of(gpt_without_attention(ml_model(layers)))
        fns["step without attention blocks"] = lambda: plain.train_step(X, y)
    if name == "M1" and profile:
        fns["predict_logits"] = lambda: trainer.predict_logits(X)
        linears = [lay for lay in layers if lay[0] == "linear"]
        relu_mlp = [linears[0], ("relu",), linears[1], ("relu",), linears[2]]
        with_ln = [linears[0], ("relu",), ("layernorm", linears[0][2]), *relu_mlp[2:]]
        variants = {"ReLU MLP": relu_mlp}
        if act != "relu":  # else it is the timed model itself
            variants["ReLU+LayerNorm"] = with_ln
        for title, lay in variants.items():
            t = trainer_of(ml_model(lay))
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

    torch.set_num_threads(threads())
    name, batch = CELLS[cell]
    layers, loss = layers_of(name, act)
    names, shapes, weights, xs, targets = problem(cell, act)
    if name == "GPT":
        net = torch_gpt(layers, names, shapes, weights)
    else:
        net = torch_sequential(torch, layers)
    net.load_state_dict(
        {n: torch.tensor(v).view(*s) for n, s, v in zip(names, shapes, weights)}, strict=True
    )
    kw = dict(lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    try:
        opt, how = torch.optim.AdamW(net.parameters(), fused=True, **kw), "fused"
    except (RuntimeError, ValueError):  # a build without CPU fused AdamW
        opt, how = torch.optim.AdamW(net.parameters(), foreach=True, **kw), "foreach"
    F = torch.nn.functional
    if name == "GPT":  # int32 ids as ours takes; cross_entropy over (B·T, vocab)
        X = torch.tensor(xs, dtype=torch.int32).view(batch, *SHAPES[name])
        y = torch.tensor(targets).view(-1)
        vocab = _outputs(layers)

        def loss_fn(z, y):
            return F.cross_entropy(z.reshape(-1, vocab), y)
    elif loss == "mse":
        X = torch.tensor(xs).view(batch, *SHAPES[name])
        y = torch.tensor(targets).view(batch, _outputs(layers))
        loss_fn = F.mse_loss
    else:
        X = torch.tensor(xs).view(batch, *SHAPES[name])
        y = torch.tensor(targets)
        loss_fn = F.cross_entropy

    def step():
        opt.zero_grad(set_to_none=True)
        value = loss_fn(net(X), y)
        value.backward()
        opt.step()
        return value.item()

    first = step()
    return {f"torch ({how})": timed_together({"": step}, rounds, budget)[""], "_loss": first}


def threads():
    """The thread count this child runs with (run_child sets it; 1 by default)."""
    return int(os.environ.get("BENCH_MODELS_THREADS", "1"))


def torch_gpt(layers, names, shapes, weights):
    """nn.gpt's torch module with the cell's weights, as `Trainer.to_torch()` makes it (torch's
    Embedding, nanoGPT's attention with torch's causal scaled_dot_product_attention)."""
    import mojolearn as ml

    w = {
        n: ml.Array.from_list(v, "<f4").reshape(tuple(s)) for n, s, v in zip(names, shapes, weights)
    }
    # Given weights spare Trainer its seeded initialization (seconds of Python at this size).
    trainer = ml.Trainer(ml_model(layers), input_shape=SHAPES["GPT"], max_rows=1, weights=w)
    return trainer.to_torch()


def torch_sequential(torch, layers):
    make = {
        "linear": torch.nn.Linear,
        "gelu": torch.nn.GELU,
        "relu": torch.nn.ReLU,
        "layernorm": torch.nn.LayerNorm,
        "conv": lambda i, o, k, pad: torch.nn.Conv2d(i, o, k, padding=pad),
        "maxpool": torch.nn.MaxPool2d,
        "flatten": torch.nn.Flatten,
    }
    return torch.nn.Sequential(*(make[lay[0]](*lay[1:]) for lay in layers))


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
        if name == "GPT":
            return jax_gpt(jax, jnp, p, h, layers[0][1:])
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
                h = jax_layernorm(jnp, p, h, i)
        return h

    def loss_fn(p, X, y):
        z = forward(p, X)
        if loss == "mse":
            return jnp.mean((z - y) ** 2)
        logp = jax.nn.log_softmax(z)  # over the last axis: (B, classes) or (B, T, vocab)
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))

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
    if name == "GPT":
        X = jnp.asarray(xs, jnp.int32).reshape(batch, *SHAPES[name])
        y = jnp.asarray(targets, jnp.int32).reshape(batch, *SHAPES[name])
    elif loss == "mse":
        X = jnp.asarray(xs, jnp.float32).reshape(batch, *SHAPES[name])
        y = jnp.asarray(targets, jnp.float32).reshape(batch, _outputs(layers))
    else:
        X = jnp.asarray(xs, jnp.float32).reshape(batch, *SHAPES[name])
        y = jnp.asarray(targets, jnp.int32)
    box = {"p": params, "s": state}

    def one():
        box["p"], box["s"], value = jstep(box["p"], box["s"], X, y)
        value.block_until_ready()

    box["p"], box["s"], first = jstep(box["p"], box["s"], X, y)
    first = float(first)
    return {f"jax ({how})": timed_together({"": one}, rounds, budget)[""], "_loss": first}


def jax_layernorm(jnp, p, h, i):
    """LayerNorm (eps 1e-5) over the last axis with the weight and bias named `i`."""
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    return (h - mean) / jnp.sqrt(var + 1e-5) * p[f"{i}.weight"] + p[f"{i}.bias"]


def jax_gpt(jax, jnp, p, ids, config):
    """nn.gpt's forward in jax.numpy, by its state_dict names: token and position embedding
    (0, 1); per block a Residual of LayerNorm and attention (2 + 2l: .0, .1.c_attn, .1.c_proj)
    and one of LayerNorm, Linear(d, 4d), GELU (erf), Linear(4d, d) (3 + 2l: .0, .1, .3); the
    final LayerNorm and the vocabulary head."""
    _, _, n_layer, n_head, d = config
    b, t = ids.shape
    hd = d // n_head

    def linear(h, i):
        return h @ p[f"{i}.weight"].T + p[f"{i}.bias"]

    def heads(z):  # (B, T, d) -> (B, heads, T, head_dim)
        return z.reshape(b, t, n_head, hd).transpose(0, 2, 1, 3)

    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    h = p["0.weight"][ids] + p["1.weight"][:t]
    for layer in range(n_layer):
        a, m = 2 + 2 * layer, 3 + 2 * layer
        qkv = linear(jax_layernorm(jnp, p, h, f"{a}.0"), f"{a}.1.c_attn")
        q, k, v = (heads(z) for z in jnp.split(qkv, 3, axis=-1))
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hd))
        att = jax.nn.softmax(jnp.where(causal, att, -jnp.inf), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        h = h + linear(y, f"{a}.1.c_proj")
        z = jax.nn.gelu(linear(jax_layernorm(jnp, p, h, f"{m}.0"), f"{m}.1"), approximate=False)
        h = h + linear(z, f"{m}.3")
    return linear(jax_layernorm(jnp, p, h, 2 + 2 * n_layer), 3 + 2 * n_layer)


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
    if kind == "jax":  # XLA's CPU client keeps threads of its own: n cores for all of them
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: threads()]))
    return {
        i: PEERS[kind](i, act if CELLS[i][0] == "M1" else "relu", rounds, budget) for i in cells
    }


def run_child(kind, env, cells, act, rounds, budget, threads=1):
    n = str(threads)
    full = dict(os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, MKL_NUM_THREADS=n)
    full["BENCH_MODELS_THREADS"] = n
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


def parse_cells(text):
    """Cell indices from `--cells`: indices into CELLS or model names (every cell of that model),
    comma-separated, case-insensitive; SystemExit naming --cells for anything else."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if item.isdigit() and int(item) < len(CELLS):
            found = [int(item)]
        else:
            found = [i for i, (name, _) in enumerate(CELLS) if name.lower() == item.lower()]
        if not found:
            names = sorted({name for name, _ in CELLS})
            raise SystemExit(
                f"bench_models: --cells: {item!r} is neither a cell index 0-{len(CELLS) - 1} "
                f"nor a model ({', '.join(names)})"
            )
        out += [i for i in found if i not in out]
    return out


def contenders_of(counts, cells, profile=True):
    """[(kind, environment, tag of our configurations or None, thread count)], every count's
    contenders, then the floor (one thread: its rate is the floor's definition), the fresh-pages
    step and the profile (the first count alone)."""
    out = []
    for n in counts:
        mine = {"MOJOLEARN_NUM_THREADS": str(n), "BENCH_MODELS_PROFILE": "0"}
        # XLA's flags: one Eigen thread, or its pool (on the n cores the child is pinned to).
        xla = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        if n > 1:
            xla = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={n}"
        out += [
            ("ours", {**mine, "MOJOLEARN_NUMERIC_MODE": "identical"}, "identical", n),
            ("ours", {**mine, "MOJOLEARN_NUMERIC_MODE": "fast"}, "fast", n),
            ("torch", {}, None, n),
            ("jax", {"XLA_FLAGS": xla}, None, n),
        ]
    out.append(("floor", {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}, None, 1))
    one = {"MOJOLEARN_NUM_THREADS": str(counts[0]), "BENCH_MODELS_PROFILE": "0"}
    # Trainer takes fresh state-sized buffers every step: whether their pages are new (page
    # faults, zeroing) depends on the process's heap history (glibc's adaptive mmap threshold
    # and trimming), so a plain script may see other times than the children above. This
    # one maps every buffer of 128 KiB or more afresh (glibc's threshold before it adapts).
    fresh_pages = {**one, "MOJOLEARN_NUMERIC_MODE": "identical", "MALLOC_MMAP_THRESHOLD_": "131072"}
    out.append(("ours", fresh_pages, "fresh pages", counts[0]))
    if profile and profiled_cells(cells):
        # A process of its own: the other trainers it holds change the heap the timed step
        # allocates its buffers from (glibc's trimming), and so the table's step times.
        env = {**one, "MOJOLEARN_NUMERIC_MODE": "identical", "BENCH_MODELS_PROFILE": "1"}
        out.append(("ours", env, "profile", counts[0]))
    return out


def profiled_cells(cells):
    return [c for c in cells if CELLS[c][0] in ("M1", "GPT")]


def measure(args, cells, act, counts):
    """Every contender once per pass, in a rotating order: {"rounds": {threads: {column title:
    {cell: [µs per step of each round]}}}, "sgemm", "blas", "losses", "missing", "refused"}."""
    contenders = contenders_of(counts, cells, not args.no_profile)
    out = {"rounds": {n: {} for n in counts}, "sgemm": [], "blas": "", "losses": {}}
    out["missing"] = {}  # peer -> why it was not measured
    out["refused"] = {}  # cell -> why ours refused it (Trainer's max_rows)
    for p in range(args.passes):
        k = p % len(contenders)
        for kind, env, tag, n in contenders[k:] + contenders[:k]:
            if kind in out["missing"]:
                continue
            mine = profiled_cells(cells) if tag == "profile" else cells
            res, err = run_child(kind, env, mine, act, args.rounds, args.budget, n)
            if err and tag:
                raise SystemExit(f"bench_models: mojolearn {tag} ({n}t) failed: {err}")
            if err:
                out["missing"][kind] = err
                continue
            if kind == "floor":
                out["sgemm"] += res["sgemm"]
                out["blas"] = res["blas"]
                continue
            for c, r in res.items():
                if "_refused" in r:
                    out["refused"][int(c)] = r["_refused"]
                    continue
                who = (tag or kind) + ("" if n == counts[0] else f" {n}t")
                out["losses"].setdefault(int(c), {})[who] = r.pop("_loss")
                for name, values in r.items():
                    title = f"{tag} {name}" if tag else name
                    by = out["rounds"][n].setdefault(title, {})
                    by.setdefault(int(c), []).extend(values)
    return out


def _f(v, spec):
    return "-" if v is None else format(v, spec)


def _ratio(a, b):
    return a / b if a and b else None


def _column(med, prefix):
    return next((t for t in med if t.startswith(prefix)), None)


def table(run, cells, act, counts, stat, words):
    """Print the first thread count's table of one statistic over the rounds; its rows (with
    the other counts' figures under "threads"), the sgemm rate and the medians."""
    base = counts[0]
    med = {t: {c: stat(v) for c, v in by.items()} for t, by in run["rounds"][base].items()}
    rate = 2 * GEMM**3 / stat(run["sgemm"]) / 1e3 if run["sgemm"] else None  # GFLOP/s
    torch_col, jax_col = _column(med, "torch"), _column(med, "jax")
    rows = []
    for c in cells:
        name, batch = CELLS[c]
        layers, _ = layers_of(name, act if name == "M1" else "relu")
        iden = med.get("identical step", {}).get(c)
        fast = med.get("fast step", {}).get(c)
        tor = med[torch_col].get(c) if torch_col else None
        jx = med[jax_col].get(c) if jax_col else None
        floor = gemm_flops(layers, batch, SHAPES[name]) / rate / 1e3 if rate else None
        ratios = {
            "torch/ours": _ratio(tor, iden),
            "jax/ours": _ratio(jx, iden),
            "ours/floor": _ratio(iden, floor),
            "identical/fast": _ratio(iden, fast),
            "fast: torch/ours": _ratio(tor, fast),
            "fast: jax/ours": _ratio(jx, fast),
            "fast: ours/floor": _ratio(fast, floor),
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
        if c in run["refused"]:
            note = f"(ours refused: {run['refused'][c]})"
        rows.append(
            {
                "cell": f"{name} b{batch}",
                "model": name,
                "batch": batch,
                "threads_measured": base,
                "identical_us": iden,
                "fast_us": fast,
                "torch_us": tor,
                "jax_us": jx,
                "floor_us": floor,
                "ratios": ratios,
                "goals": goals,
                "note": note,
                "threads": {},
            }
        )
    print(
        f"µs per AdamW training step ({words}), "
        f"{'one thread' if base == 1 else f'{base} threads'}; ours = Trainer.train_step; "
        f"{torch_col or 'torch'} eager, {jax_col or 'jax'} jit; floor = matmul FLOPs x3 at "
        f"{_f(rate, '.1f')} GFLOP/s (NumPy float32 {GEMM}³ on one thread, "
        f"{run['blas'] or 'blas unknown'})."
    )
    head = (
        f"{'batch':>5} {'cell':<9}{'ours iden':>10}{'ours fast':>10}{'torch':>10}{'JAX':>10}"
        f"{'floor':>10}"
        f"{'torch/ours':>11}{'jax/ours':>9}{'ours/floor':>11}{'iden/fast':>10}"
        "   goals (issues 35, 37, 38; ✓ met, ✗ not)"
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
            f"{r['batch']:>5} {r['model']:<9}{_f(r['identical_us'], '.1f'):>10}"
            f"{_f(r['fast_us'], '.1f'):>10}"
            f"{_f(r['torch_us'], '.1f'):>10}{_f(r['jax_us'], '.1f'):>10}"
            f"{_f(r['floor_us'], '.1f'):>10}{_f(q['torch/ours'], '.2f'):>11}"
            f"{_f(q['jax/ours'], '.2f'):>9}{_f(q['ours/floor'], '.2f'):>11}"
            f"{_f(q['identical/fast'], '.2f'):>10}   {goals}"
            + (f" {r['note']}" if r["note"] else "")
        )
    print(
        "Fast mode's ratios: "
        + "; ".join(
            f"{r['cell']} torch/ours {_f(r['ratios']['fast: torch/ours'], '.2f')}, jax/ours "
            f"{_f(r['ratios']['fast: jax/ours'], '.2f')}, ours/floor "
            f"{_f(r['ratios']['fast: ours/floor'], '.2f')}"
            for r in rows
        )
    )
    for n in counts[1:]:
        threads_table(run, cells, rows, med, n, stat, words, base)
    return rows, rate, med


def threads_table(run, cells, rows, med, n, stat, words, base):
    """Print the table at `n` threads: each contender's time and base/n (the speed-up: > 1, the
    n threads help), and torch/ours at n threads; record them in `rows`' "threads"."""
    at = {t: {c: stat(v) for c, v in by.items()} for t, by in run["rounds"][n].items()}
    cols = [
        ("ours iden", "identical step"),
        ("ours fast", "fast step"),
        ("torch", _column(at, "torch") or _column(med, "torch")),
        ("JAX", _column(at, "jax") or _column(med, "jax")),
    ]
    speed = f"{base}t/{n}t"
    print(
        f"\nµs per AdamW training step ({words}), {n} threads; {speed}: the {base}-thread time "
        f"over this one (> 1: {n} threads help); torch/ours at {n} threads"
    )
    head = f"{'batch':>5} {'cell':<9}" + "".join(f"{c:>10}{speed:>7}" for c, _ in cols)
    head += f"{'torch/ours':>11}{'jax/ours':>9}{'fast: torch/ours':>17}"
    print(head)
    print("-" * len(head))
    for c, r in zip(cells, rows):
        fig = {}
        line = f"{r['batch']:>5} {r['model'] + f' {n}t':<9}"
        for col, title in cols:
            v = at.get(title, {}).get(c) if title else None
            one = med.get(title, {}).get(c) if title else None
            fig[col] = (v, _ratio(one, v))
            line += f"{_f(v, '.1f'):>10}{_f(fig[col][1], '.2f'):>7}"
        iden, fast, tor, jx = (fig[col][0] for col, _ in cols)
        ratios = {
            "torch/ours": _ratio(tor, iden),
            "jax/ours": _ratio(jx, iden),
            "fast: torch/ours": _ratio(tor, fast),
        }
        line += f"{_f(ratios['torch/ours'], '.2f'):>11}{_f(ratios['jax/ours'], '.2f'):>9}"
        print(line + f"{_f(ratios['fast: torch/ours'], '.2f'):>17}")
        keys = [
            ("identical", "ours iden"),
            ("fast", "ours fast"),
            ("torch", "torch"),
            ("jax", "JAX"),
        ]
        r["threads"][str(n)] = {
            **{f"{k}_us": fig[col][0] for k, col in keys},
            "speedup": {k: fig[col][1] for k, col in keys},
            "ratios": ratios,
        }


def print_profile(profile, rows, cells):
    """The profile's lines: each part's µs, its ratio to the profile's own train_step, and to
    its part of the floor (the forward: a third; the step without attention: its own floor)."""
    print(
        "\nProfile, identical mode, one process, µs (ratio to its train_step of the cell; "
        "to the floor's part)"
    )
    for c in profiled_cells(cells):
        if c not in profile.get("step", {}):
            continue  # refused
        r = next(x for x in rows if x["cell"] == f"{CELLS[c][0]} b{CELLS[c][1]}")
        step, floor = profile["step"][c], r["floor_us"]
        parts = [f"train_step {step:.1f} ({_f(floor and step / floor, '.2f')}x the floor)"]
        for title, by in profile.items():
            if title == "step" or c not in by:
                continue
            v = by[c]
            share = floor
            if floor and title == "predict_logits":  # one GEMM of the three per product
                share = floor / 3
            elif floor and title == "step without attention blocks":
                share = floor * gpt_macs(*GPT[0][1:], attention=False) / gpt_macs(*GPT[0][1:])
            part = f"{title} {v:.1f} ({v / step:.2f}; {_f(share and v / share, '.2f')}x)"
            parts.append(part)
        print(f"{r['cell']:<9}" + "; ".join(parts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few, short rounds (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also save every figure to PATH")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per contender and pass")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.25, help="seconds per round")
    parser.add_argument(
        "--cells",
        default=",".join(str(i) for i in range(len(CELLS))),
        help="cell indices or model names, comma-separated (e.g. GPT, or 0,1): "
        + ", ".join(f"{i} {name} b{batch}" for i, (name, batch) in enumerate(CELLS)),
    )
    parser.add_argument(
        "--threads", default="1,2", help="thread counts, comma-separated (default 1,2)"
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the M1 and GPT profile")
    parser.add_argument("--child", choices=[*PEERS, "floor", "probe"], help=argparse.SUPPRESS)
    parser.add_argument("--act", default="gelu", choices=("gelu", "relu"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    cells = parse_cells(args.cells)
    if args.quick:
        args.rounds, args.passes, args.budget = 2, 2, 0.05
    if args.child:
        print(json.dumps(child(args.child, cells, args.act, args.rounds, args.budget)))
        return
    try:
        counts = sorted({int(n) for n in args.threads.split(",") if n.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise SystemExit(f"bench_models: --threads: positive integers, got {args.threads!r}")
    _importable()
    gelu, why = gelu_runs()
    act = "gelu" if gelu else "relu"
    started = time.perf_counter()
    cache = tempfile.mkdtemp(prefix="bench_models.")
    os.environ["BENCH_MODELS_CACHE"] = cache  # the children inherit it
    try:
        for cell in cells:  # the weights and the batch, once for the whole run
            problem(cell, act if CELLS[cell][0] == "M1" else "relu")
        run = measure(args, cells, act, counts)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    report(run, args, cells, act, counts, (gelu, why), time.perf_counter() - started)


def report(run, args, cells, act, counts, gelu_why, wall):
    rows, rate, med = table(run, cells, act, counts, statistics.median, "median of rounds")
    print()
    # A shared machine's noise only adds time: the best round is a second view of the same run.
    best_rows, best_rate, _ = table(run, cells, act, counts, min, "best round")
    if "fresh pages step" in med:
        print(
            "\nidentical train_step with every buffer >= 128 KiB mapped afresh "
            "(MALLOC_MMAP_THRESHOLD_=131072), µs (ratio to ours iden): "
            + "; ".join(
                f"{r['cell']} {med['fresh pages step'][c]:.1f} "
                f"({_f(_ratio(med['fresh pages step'][c], r['identical_us']), '.2f')})"
                for c, r in zip(cells, rows)
                if c in med["fresh pages step"]
            )
        )
    profile = {t[len("profile ") :]: by for t, by in med.items() if t.startswith("profile ")}
    if profile:
        print_profile(profile, rows, cells)
    for c, by in sorted(run["losses"].items()):
        # The same weights, batch and model give the same first loss to float32 rounding:
        # else a contender timed something else.
        low, high = min(by.values()), max(by.values())
        if high - low > 1e-4 * max(1.0, abs(low)):
            print(f"WARNING: {CELLS[c]} first-step losses differ: {by}")
    for kind, err in run["missing"].items():
        title = {"jax": "JAX", "floor": "NumPy (the floor)"}.get(kind, kind)
        print(f"{title}: not installed" if "No module" in err else f"{title}: failed ({err})")
    gelu, why = gelu_why
    print(f"GELU: {why}" if not gelu else f"mojolearn from {why}")
    print(
        f"({args.passes} passes x {args.rounds} rounds of {args.budget}s at "
        f"{'/'.join(map(str, counts))} thread(s); {wall:.0f} s)"
    )
    if not args.json:
        return
    with open(args.json, "w") as fh:
        json.dump(
            {
                "rows": rows,
                "sgemm_gflops": rate,
                "best_round_rows": best_rows,
                "best_round_sgemm_gflops": best_rate,
                "blas": run["blas"],
                "act": act,
                "threads": counts,
                "profile": {
                    t: {CELLS[c][0] + f" b{CELLS[c][1]}": v for c, v in by.items()}
                    for t, by in profile.items()
                },
                "rounds": {
                    t: {str(c): v for c, v in by.items()}
                    for t, by in run["rounds"][counts[0]].items()
                },
                "rounds_by_threads": {
                    str(n): {t: {str(c): v for c, v in by.items()} for t, by in r.items()}
                    for n, r in run["rounds"].items()
                },
                "sgemm_rounds_us": run["sgemm"],
                "first_losses": {str(c): by for c, by in run["losses"].items()},
                "refused": {str(c): why for c, why in run["refused"].items()},
                "missing": run["missing"],
                "args": vars(args),
            },
            fh,
            indent=1,
        )


if __name__ == "__main__":
    main()
