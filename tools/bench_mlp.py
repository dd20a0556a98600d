"""Benchmark: µs per AdamW training step of MLPTrainer at realistic sizes, beside torch eager,
JAX and NumPy by hand, all measured in the same run.

    python tools/bench_mlp.py              # every cell, both modes, 1 and 2 threads
    python tools/bench_mlp.py --quick      # fewer, shorter rounds
    python tools/bench_mlp.py --cells 2,5  # only these cells (0-based, in the table's order)
    python tools/bench_mlp.py --passes 5   # more interleaved passes (default 3)

Every contender takes the same weights (MLPTrainer's seeded initialization) and the same
batches, and runs forward, mean cross-entropy, backward and AdamW (lr 1e-3, weight decay 0.01):
- `step`: MLPTrainer.train_step, one call per step (Array inputs; a last table repeats the
  identical one-thread step with NumPy, memoryview, array.array and torch inputs); `steps64`: one
  `train_steps(X, y, 64)` call over 64 stacked batches, per step.
- torch eager: nn.Sequential of Linear/ReLU, F.cross_entropy, torch.optim.AdamW(fused=True),
  torch.set_num_threads(1).
- JAX: a jitted step (`jit`) and 64 steps in one `lax.scan` (`scan64`, per step), AdamW by
  hand, pinned to core 0 (sched_setaffinity) with XLA_FLAGS=--xla_cpu_multi_thread_eigen=false.
- NumPy by hand: the same step in float32 NumPy, OPENBLAS_NUM_THREADS=1.
Each contender runs in its own process, once per pass, in an order that rotates from pass to
pass, so a slow spell of this shared machine falls on every contender alike; a figure is the
median over all passes' rounds of the mean time per step in a round. The batches are generated
once per run and handed to the processes in files. Ratios are the peer's time / ours (> 1: we
are faster). A peer that is not installed is shown as '-'.
"""

import argparse
import array
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_intake import as_kind

HERE = os.path.dirname(os.path.abspath(__file__))
CELLS = [
    ([64, 128, 10], 32),
    ([64, 128, 10], 256),
    ([54, 256, 256, 7], 32),
    ([54, 256, 256, 7], 256),
    ([784, 256, 10], 32),
    ([784, 256, 10], 256),
]
SCAN = 64
INPUT_KINDS = ("NumPy", "memoryview", "array.array", "torch")
LR, WD, BETAS, EPS = 1e-3, 0.01, (0.9, 0.999), 1e-8


def problem(sizes, batch):
    """The cell's initial weights (flat lists, torch layout) and SCAN batches, from seeds;
    read from the run's cache folder (BENCH_MLP_CACHE) once `main` has written them there."""
    cache = os.environ.get("BENCH_MLP_CACHE")
    path = os.path.join(cache, f"{'-'.join(map(str, sizes))}-{batch}") if cache else None
    if path and os.path.exists(path + ".ys"):
        with open(path + ".json") as f:
            weights = json.load(f)
        xs, ys = array.array("f"), array.array("i")
        with open(path + ".xs", "rb") as f:
            xs.frombytes(f.read())
        with open(path + ".ys", "rb") as f:
            ys.frombytes(f.read())
        return weights, xs.tolist(), ys.tolist()
    if importlib.util.find_spec("mojolearn") is None:  # run from a checkout, not installed
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    from mojolearn._mlp import rng as _rng
    from mojolearn._mlp.spec import LayerSizes

    weights = [w.tolist() for w in LayerSizes(sizes).init(1)]
    rng = _rng.SplitMix64(7)
    # Rounded to float32 here, as every contender takes them.
    xs = array.array("f", [rng.uniform() * 2 - 1 for _ in range(SCAN * batch * sizes[0])]).tolist()
    ys = [rng.randbelow(sizes[-1]) for _ in range(SCAN * batch)]
    if path:
        with open(path + ".json", "w") as f:
            json.dump(weights, f)
        with open(path + ".xs", "wb") as f:
            f.write(array.array("f", xs).tobytes())
        with open(path + ".ys", "wb") as f:  # written last: its presence marks a whole entry
            f.write(array.array("i", ys).tobytes())
    return weights, xs, ys


def timed(fn, steps_per_call, rounds, budget_s):
    """µs per step in each of `rounds` rounds of about budget_s seconds (after a warm-up)."""
    return timed_together({"": fn}, rounds, budget_s, steps_per_call)[""]


def ours(sizes, batch, rounds, budget):
    import mojolearn as ml
    from mojolearn._buffers.array import Array

    weights, xs, ys = problem(sizes, batch)
    shapes = []
    for i in range(len(sizes) - 1):
        shapes += [(sizes[i + 1], sizes[i]), (sizes[i + 1],)]
    w = [Array.from_list(t, "<f4").reshape(s) for t, s in zip(weights, shapes)]
    trainer = ml.MLPTrainer(sizes, w, data_schedule={"bench": batch}, lr=LR, weight_decay=WD)
    X = Array.from_list(xs[: batch * sizes[0]], "<f4").reshape((batch, sizes[0]))
    y = Array.from_list(ys[:batch], "<i4")
    Xs = Array.from_list(xs, "<f4").reshape((SCAN * batch, sizes[0]))
    Ys = Array.from_list(ys, "<i4")
    out = {"steps64": timed(lambda: trainer.train_steps(Xs, Ys, SCAN), SCAN, rounds, budget)}
    # The Array step and (identical mode, one thread) every other buffer kind a user may pass,
    # round by round, so a slow spell of the machine falls on all of them alike (one after
    # another, the later kinds read up to 1.1x slower in some runs).
    steps = {"step": lambda: trainer.train_step(X, y)}
    every_kind = (
        ml.numeric_mode_used() == "identical"
        and ml.vendor_used() == "cpu"
        and os.environ.get("MOJOLEARN_NUM_THREADS", "1") == "1"
    )
    for kind in INPUT_KINDS if every_kind else ():
        try:
            Xk, yk = as_kind(kind, xs[: batch * sizes[0]], ys[:batch], batch, sizes[0])
        except ImportError:
            continue
        steps[f"step {kind}"] = lambda Xk=Xk, yk=yk: trainer.train_step(Xk, yk)
    out.update(timed_together(steps, rounds, budget))
    return out


def timed_together(fns, rounds, budget, steps_per_call=1):
    """`timed` for several callables, interleaved: every round runs each in turn for about
    `budget` seconds. {name: [µs per step in each round]}."""
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
            per_round[name].append(
                (time.perf_counter() - t0) / (calls[name] * steps_per_call) * 1e6
            )
    return per_round


def torch_peer(sizes, batch, rounds, budget, device="cpu"):
    import torch

    torch.set_num_threads(1)
    if device != "cpu" and not torch.cuda.is_available():
        raise SystemExit(f"torch {torch.__version__} finds no {device} device")
    weights, xs, ys = problem(sizes, batch)
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():
            lin.weight.copy_(torch.tensor(weights[2 * i]).view(sizes[i + 1], sizes[i]))
            lin.bias.copy_(torch.tensor(weights[2 * i + 1]))
        layers += [lin, torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers[:-1]).to(device)
    opt = torch.optim.AdamW(
        net.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, fused=True
    )
    X = torch.tensor(xs[: batch * sizes[0]]).view(batch, sizes[0]).to(device)
    y = torch.tensor(ys[:batch]).to(device)

    def step():  # `.item()` waits for the device
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(X), y)
        loss.backward()
        opt.step()
        return loss.item()

    return {"torch": timed(step, 1, rounds, budget)}


def jax_peer(sizes, batch, rounds, budget):
    import jax
    import jax.numpy as jnp

    weights, xs, ys = problem(sizes, batch)
    params = []
    for i in range(len(sizes) - 1):
        params.append(
            (
                jnp.asarray(weights[2 * i], jnp.float32).reshape(sizes[i + 1], sizes[i]),
                jnp.asarray(weights[2 * i + 1], jnp.float32),
            )
        )
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (params, zeros, zeros, jnp.int32(0))

    def loss_fn(p, X, y):
        h = X
        for i, (w, b) in enumerate(p):
            h = h @ w.T + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def step(state, batch_xy):
        p, m, v, t = state
        X, y = batch_xy
        loss, g = jax.value_and_grad(loss_fn)(p, X, y)
        t = t + 1
        b1, b2 = BETAS
        bc1 = 1 - b1**t
        bc2 = 1 - b2**t
        m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
        p = jax.tree_util.tree_map(
            lambda p_, m_, v_: p_ * (1 - LR * WD) - LR / bc1 * m_ / (jnp.sqrt(v_ / bc2) + EPS),
            p,
            m,
            v,
        )
        return (p, m, v, t), loss

    X = jnp.asarray(xs, jnp.float32).reshape(SCAN, batch, sizes[0])
    y = jnp.asarray(ys, jnp.int32).reshape(SCAN, batch)
    jstep = jax.jit(step)
    scan = jax.jit(lambda s: jax.lax.scan(step, s, (X, y)))
    box = {"s": state}
    first = (X[0], y[0])  # sliced once: a slice per call would time a dispatch of its own

    def one():
        box["s"], loss = jstep(box["s"], first)
        loss.block_until_ready()

    def many():
        box["s"], losses = scan(box["s"])
        losses.block_until_ready()

    return {"jit": timed(one, 1, rounds, budget), "scan64": timed(many, SCAN, rounds, budget)}


def numpy_peer(sizes, batch, rounds, budget):
    import numpy as np

    weights, xs, ys = problem(sizes, batch)
    params = []
    for i in range(len(sizes) - 1):
        params += [
            np.asarray(weights[2 * i], np.float32).reshape(sizes[i + 1], sizes[i]),
            np.asarray(weights[2 * i + 1], np.float32),
        ]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    X = np.asarray(xs[: batch * sizes[0]], np.float32).reshape(batch, sizes[0])
    y = np.asarray(ys[:batch])
    rows = np.arange(batch)
    lr, b1, b2, eps, wd = (np.float32(a) for a in (LR, BETAS[0], BETAS[1], EPS, WD))
    box = {"t": 0}
    layers = len(sizes) - 1

    def step():
        acts = [X]
        for i in range(layers):
            z = acts[-1] @ params[2 * i].T + params[2 * i + 1]
            if i < layers - 1:
                np.maximum(z, 0, out=z)
            acts.append(z)
        z = acts[-1]
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = float(np.mean(np.log(s[:, 0]) - z[rows, y]))
        g = e / s
        g[rows, y] -= 1
        g /= batch
        grads = [None] * len(params)
        for i in reversed(range(layers)):
            grads[2 * i] = g.T @ acts[i]
            grads[2 * i + 1] = g.sum(axis=0)
            if i > 0:
                g = (g @ params[2 * i]) * (acts[i] > 0)
        box["t"] += 1
        bc1 = 1 - b1 ** box["t"]
        bc2 = 1 - b2 ** box["t"]
        for p, gr, mm, vv in zip(params, grads, m, v):
            p *= 1 - lr * wd
            mm *= b1
            mm += (1 - b1) * gr
            vv *= b2
            vv += (1 - b2) * gr * gr
            p -= (lr / bc1) * mm / (np.sqrt(vv / bc2) + eps)
        return loss

    return {"numpy": timed(step, 1, rounds, budget)}


def torch_cuda_peer(sizes, batch, rounds, budget):
    """torch eager on the GPU (tools/device_bench_mlp.py): {"torch cuda": [µs...]}."""
    return {"torch cuda": torch_peer(sizes, batch, rounds, budget, "cuda")["torch"]}


PEERS = {
    "ours": ours,
    "torch": torch_peer,
    "torch_cuda": torch_cuda_peer,
    "jax": jax_peer,
    "numpy": numpy_peer,
}


def child(kind, cells, rounds, budget):
    if kind == "jax":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    out = {}
    for i in cells:
        sizes, batch = CELLS[i]
        out[i] = PEERS[kind](sizes, batch, rounds, budget)
    return out


def run_child(kind, env, cells, rounds, budget):
    full = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    full.update(env)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        kind,
        "--cells",
        ",".join(map(str, cells)),
        "--rounds",
        str(rounds),
        "--budget",
        str(budget),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or ["failed"]
        return None, last[0]
    return {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per contender and pass")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.2, help="seconds per round")
    parser.add_argument("--cells", default=",".join(str(i) for i in range(len(CELLS))))
    parser.add_argument("--child", choices=sorted(PEERS))
    args = parser.parse_args()
    cells = [int(c) for c in args.cells.split(",")]
    if args.quick:
        args.rounds, args.passes, args.budget = 2, 2, 0.05
    if args.child:
        print(json.dumps(child(args.child, cells, args.rounds, args.budget)))
        return
    contenders = []  # (kind, environment, tag of our configurations or None)
    for mode in ("identical", "fast"):
        for threads in (1, 2):
            env = {"MOJOLEARN_NUMERIC_MODE": mode, "MOJOLEARN_NUM_THREADS": str(threads)}
            contenders.append(("ours", env, f"{mode[:4]} t{threads}"))
    contenders += [
        ("torch", {}, None),
        ("jax", {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}, None),
        ("numpy", {}, None),
    ]
    rounds = {}  # column title -> {cell: [µs per step of each round]}
    missing = {}  # peer -> why it was not measured
    cache = tempfile.mkdtemp(prefix="bench_mlp.")
    os.environ["BENCH_MLP_CACHE"] = cache  # the children inherit it
    try:
        for cell in cells:  # the batches, once for the whole run
            problem(*CELLS[cell])
        for p in range(args.passes):
            for kind, env, tag in (
                contenders[p % len(contenders) :] + contenders[: p % len(contenders)]
            ):
                if kind in missing:
                    continue
                res, err = run_child(kind, env, cells, args.rounds, args.budget)
                if err and tag:
                    raise SystemExit(f"bench_mlp: mojolearn {tag} failed: {err}")
                if err:
                    missing[kind] = err
                    continue
                for c, r in res.items():
                    for name, values in r.items():
                        if tag:  # "step", "steps64", "step NumPy", ...
                            name = f"{tag} {name}" if name in ("step", "steps64") else name
                        rounds.setdefault(name, {}).setdefault(c, []).extend(values)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    medians = {t: {c: statistics.median(v) for c, v in by.items()} for t, by in rounds.items()}
    kinds = {k: medians.pop(f"step {k}") for k in INPUT_KINDS if f"step {k}" in medians}
    columns = medians
    notes = [f"{kind}: not measured ({err})" for kind, err in missing.items()]
    print(
        "µs per AdamW training step (median of rounds), one thread unless tN; "
        "step = train_step, steps64 = train_steps(64) per step."
    )
    titles = list(columns)
    head = f"{'layers':<18}{'batch':>6}" + "".join(f"{t:>16}" for t in titles)
    print(head)
    print("-" * len(head))
    for c in cells:
        sizes, batch = CELLS[c]
        vals = [columns[t].get(c) for t in titles]
        print(
            f"{str(sizes):<18}{batch:>6}"
            + "".join(f"{v:>16.1f}" if v is not None else f"{'-':>16}" for v in vals)
        )
    ratios = [
        ("torch", "iden t1 step"),
        ("jit", "iden t1 step"),
        ("scan64", "iden t1 steps64"),
        ("torch", "fast t1 step"),
        ("jit", "fast t1 step"),
        ("scan64", "fast t1 steps64"),
        ("iden t1 step", "iden t2 step"),
        ("iden t1 steps64", "iden t2 steps64"),
        ("iden t1 step", "fast t1 step"),
    ]
    ratios = [(a, b) for a, b in ratios if a in columns and b in columns]
    if ratios:
        print("\nRatios (left column's time / right column's: > 1 means the right one is faster)")
        head = f"{'layers':<18}{'batch':>6}" + "".join(f"{a + ' / ' + b:>34}" for a, b in ratios)
        print(head)
        print("-" * len(head))
        for c in cells:
            sizes, batch = CELLS[c]
            print(
                f"{str(sizes):<18}{batch:>6}"
                + "".join(f"{columns[a][c] / columns[b][c]:>34.2f}" for a, b in ratios)
            )
    if kinds:
        print(
            "\nIdentical train_step, one thread, by input kind: µs (ratio to Array inputs; "
            "torch eager / ours; JAX jit / ours)"
        )
        head = f"{'layers':<18}{'batch':>6}" + "".join(f"{k:>28}" for k in ["Array", *kinds])
        print(head)
        print("-" * len(head))
        for c in cells:
            sizes, batch = CELLS[c]
            base = columns["iden t1 step"][c]
            line = f"{str(sizes):<18}{batch:>6}"
            for v in [base] + [kinds[k].get(c) for k in kinds]:
                peer = "; ".join(
                    f"{columns[p][c] / v:.2f}" if p in columns else "-" for p in ("torch", "jit")
                )
                line += f"{f'{v:.1f} ({v / base:.2f}x; {peer})':>28}"
            print(line)
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
