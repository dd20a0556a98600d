"""Benchmark: microseconds per training step of SmallMLPTrainer (8→16→3, AdamW) through the
public API (its validation included), against hand-written NumPy and torch eager baselines
measured in the same run.

    python tools/bench_train.py                 # both numeric modes (one subprocess each)
    python tools/bench_train.py --quick         # fewer rounds
    python tools/bench_train.py --inputs numpy  # pass NumPy arrays instead of mojolearn.Array

Columns: `train_step` (one call per step), `steps16` / `steps256` (`train_steps(X, y, k)`, one
call for k steps, per step). Each figure is the median over rounds of the mean time per step
in a round; every process runs one thread. Ratios are baseline time / our time (> 1: we are
faster). A second table times the same calls with `lr_schedule=WarmupCosineLR(...)` (each
step's rate from the schedule: `train_step` sets the session's rate, `train_steps` hands the
binding k rates) against the unscheduled ones. Also prints the time of `import mojolearn`
(median of fresh interpreters).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BATCHES = (1, 32, 256)
GOALS = {"train_step": (2.0, 4.0, 10.0), "steps256": (0.3, 1.5, 8.0)}  # identical, µs/step
SCHED = {"sched_step": "train_step", "sched_s256": "steps256"}  # scheduled column: its baseline
HERE = os.path.dirname(os.path.abspath(__file__))


def _single_thread_env():
    env = dict(os.environ)
    for var in (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "MOJOLEARN_NUM_THREADS",
    ):
        env[var] = "1"
    return env


def timed(fn, steps_per_call, rounds, budget_s):
    """Median over `rounds` of the mean µs per step, each round lasting about budget_s."""
    fn()  # warm up
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    calls = max(1, int(budget_s / once))
    per_round = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_round.append((time.perf_counter() - t0) / (calls * steps_per_call) * 1e6)
    return statistics.median(per_round)


def _stack(batches, k):
    xs, ys = [], []
    for i in range(k):
        X, y = batches[i % len(batches)]
        xs.append(X.tobytes())
        ys += y.tolist()
    return b"".join(xs), ys


def measure_ours(mode, rounds, budget, inputs):
    """(vendor, {batch: {column: µs/step}}) for this process's numeric mode."""
    import mojolearn as ml
    from mojolearn._buffers.array import Array
    from mojolearn._mlp import rng as _rng
    from mojolearn._mlp import spec as _spec

    ml.set_numeric_mode(mode)
    out = {}
    for batch in BATCHES:
        batches = _rng.batches(11 + batch, batch, 8)
        trainer = ml.SmallMLPTrainer(
            *_spec.init_small_mlp(3), data_schedule={"bench": batch}, lr=1e-3
        )
        X, y = batches[0]
        if inputs == "numpy":
            import numpy as np

            X, y = np.asarray(X), np.asarray(y, np.int64)
        # A schedule whose rate changes every step for the whole run (total far away).
        sched = ml.SmallMLPTrainer(
            *_spec.init_small_mlp(3),
            data_schedule={"bench": batch},
            lr_schedule=ml.WarmupCosineLR(1e-3, warmup_steps=100, total_steps=1 << 30),
        )
        row = {"train_step": timed(lambda: trainer.train_step(X, y), 1, rounds, budget)}
        row["sched_step"] = timed(lambda: sched.train_step(X, y), 1, rounds, budget)
        for k in (16, 256):
            raw, labels = _stack(batches, k)
            Xs = Array.from_buffer(memoryview(raw).cast("f")).copy().reshape((k * batch, 8))
            ys = Array.from_list(labels, "<i4")
            if inputs == "numpy":
                Xs, ys = np.asarray(Xs), np.asarray(ys, np.int64)
            row[f"steps{k}"] = timed(lambda: trainer.train_steps(Xs, ys, k), k, rounds, budget)
            if k == 256:
                row["sched_s256"] = timed(lambda: sched.train_steps(Xs, ys, k), k, rounds, budget)
        out[batch] = row
    return ml.vendor_used(), out


def numpy_baseline(rounds, budget):
    """A hand-written float32 NumPy AdamW step of the same network (forward, mean
    cross-entropy, backward, AdamW with bias corrections): the fastest plain-NumPy spelling."""
    try:
        import numpy as np
    except ImportError:
        return None
    rng = np.random.default_rng(1)
    out = {}
    for batch in BATCHES:
        W1 = rng.standard_normal((16, 8), dtype=np.float32) * 0.3
        b1 = np.zeros(16, np.float32)
        W2 = rng.standard_normal((3, 16), dtype=np.float32) * 0.3
        b2 = np.zeros(3, np.float32)
        params = [W1, b1, W2, b2]
        m = [np.zeros_like(p) for p in params]
        v = [np.zeros_like(p) for p in params]
        X = rng.standard_normal((batch, 8), dtype=np.float32)
        y = rng.integers(0, 3, batch)
        rows = np.arange(batch)
        lr, b1_, b2_, eps, wd = (np.float32(a) for a in (1e-3, 0.9, 0.999, 1e-8, 0.01))
        state = {"t": 0}

        def step():
            H = X @ W1.T + b1
            np.maximum(H, 0, out=H)
            Z = H @ W2.T + b2
            Z -= Z.max(axis=1, keepdims=True)
            E = np.exp(Z)
            S = E.sum(axis=1, keepdims=True)
            loss = float(np.mean(np.log(S[:, 0]) - Z[rows, y]))
            G = E / S
            G[rows, y] -= 1
            G /= batch
            dW2 = G.T @ H
            db2 = G.sum(axis=0)
            dH = G @ W2
            dH *= H > 0
            dW1 = dH.T @ X
            db1 = dH.sum(axis=0)
            state["t"] += 1
            t = state["t"]
            bc1 = 1 - b1_**t
            bc2 = 1 - b2_**t
            for p, g, mm, vv in zip(params, (dW1, db1, dW2, db2), m, v):
                p *= 1 - lr * wd
                mm *= b1_
                mm += (1 - b1_) * g
                vv *= b2_
                vv += (1 - b2_) * g * g
                p -= (lr / bc1) * mm / (np.sqrt(vv) / np.sqrt(bc2) + eps)
            return loss

        out[batch] = timed(step, 1, rounds, budget)
    return out


def torch_baseline(rounds, budget):
    """torch eager: nn.Sequential, F.cross_entropy, torch.optim.AdamW, one thread."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    torch.manual_seed(1)
    out = {}
    for batch in BATCHES:
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
        X = torch.randn(batch, 8)
        y = torch.randint(0, 3, (batch,))

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(X), y)
            loss.backward()
            opt.step()
            return loss.item()

        out[batch] = timed(step, 1, rounds, budget)
    return out


def import_time(runs=5):
    code = "import time; t = time.perf_counter(); import mojolearn; print(time.perf_counter() - t)"
    times = []
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=_single_thread_env(),
            check=True,
        )
        times.append(float(proc.stdout.strip()))
    return statistics.median(times)


def _child(mode, rounds, budget, inputs):
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--rounds",
        str(rounds),
        "--budget",
        str(budget),
        "--inputs",
        inputs,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_single_thread_env())
    if proc.returncode != 0:
        raise SystemExit(f"bench_train: the {mode} run failed:\n{proc.stderr}")
    vendor, rows = json.loads(proc.stdout)
    return vendor, {int(b): row for b, row in rows.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--budget", type=float, default=0.05, help="seconds per round")
    parser.add_argument("--inputs", choices=("array", "numpy"), default="array")
    parser.add_argument("--child", choices=("identical", "fast"))
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.budget = 5, 0.02
    if args.child:
        res = measure_ours(args.child, args.rounds, args.budget, args.inputs)
        print(json.dumps(res))
        return 0
    os.environ.update({k: v for k, v in _single_thread_env().items() if k.endswith("THREADS")})
    runs = {
        mode: _child(mode, args.rounds, args.budget, args.inputs) for mode in ("identical", "fast")
    }
    vendor = runs["identical"][0]
    ours = {mode: rows for mode, (_, rows) in runs.items()}
    base_np = numpy_baseline(args.rounds, args.budget)
    base_torch = torch_baseline(args.rounds, args.budget)
    print(
        f"SmallMLPTrainer 8→16→3 AdamW, µs per step (median of {args.rounds} rounds), "
        f"one thread, inputs: {args.inputs}, vendor: {vendor}"
    )
    cols = ["train_step", "steps16", "steps256"]
    head = f"{'batch':>5} " + " ".join(f"{m[:5] + ' ' + c:>20}" for m in ours for c in cols)
    head += f" {'numpy':>8} {'torch':>8} {'numpy/ident step':>17} {'numpy/ident s256':>17}"
    print(head)
    for batch in BATCHES:
        line = f"{batch:>5} " + " ".join(f"{ours[m][batch][c]:>20.2f}" for m in ours for c in cols)
        npv = base_np[batch] if base_np else float("nan")
        tv = base_torch[batch] if base_torch else float("nan")
        ident = ours["identical"][batch]
        line += (
            f" {npv:>8.1f} {tv:>8.1f} {npv / ident['train_step']:>16.1f}x "
            f"{npv / ident['steps256']:>16.1f}x"
        )
        print(line)
    print()
    print("With lr_schedule=WarmupCosineLR (a new rate every step), µs per step, and the ratio")
    print("scheduled / unscheduled (1.00: the schedule costs nothing):")
    print(f"{'batch':>5} " + " ".join(f"{m[:5] + ' ' + c:>24}" for m in ours for c in SCHED))
    for batch in BATCHES:
        cells = []
        for m in ours:
            for c, plain in SCHED.items():
                got, base = ours[m][batch][c], ours[m][batch][plain]
                cells.append(f"{got:>15.2f} ({got / base:4.2f}x)")
        print(f"{batch:>5} " + " ".join(cells))
    print()
    print(
        "Goals (identical, through the public API): train_step <= 2 / 4 / 10 µs, "
        "train_steps(k=256) <= 0.3 / 1.5 / 8 µs per step at batch 1 / 32 / 256"
    )
    if vendor != "cpu":
        print(f"  not compared: the goals are for the cpu vendor, this run used {vendor}")
    for col, goals in GOALS.items() if vendor == "cpu" else ():
        for batch, goal in zip(BATCHES, goals):
            got = ours["identical"][batch][col]
            fast = ours["fast"][batch][col]
            print(
                f"  {col:>10} batch {batch:>3}: identical {got:7.2f} µs, fast {fast:7.2f} µs, "
                f"goal {goal:5.1f} -> {'met' if got <= goal else 'MISSED'}"
            )
    if base_torch:
        print(
            "torch/identical train_step: "
            + ", ".join(
                f"batch {b}: {base_torch[b] / ours['identical'][b]['train_step']:.1f}x"
                for b in BATCHES
            )
        )
    print(f"import mojolearn: {import_time():.3f} s (goal <= 0.1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
