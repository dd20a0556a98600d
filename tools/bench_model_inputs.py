"""`Trainer.train_step` by input kind, beside torch eager, in one run (issue 35's M1 model).

Each kind a user passes (mojolearn.Array, NumPy, memoryview, array.array, a CPU torch tensor)
holds the same batch; rounds alternate between the kinds, and each figure is the median µs per
step, with its ratio to the Array's and torch eager's (fused AdamW) step on the same batch.
One thread. Needs NumPy and torch for those columns (skipped with a note without them).

    python tools/bench_model_inputs.py [--batch 32] [--rounds 7]
"""

import argparse
import array
import os
import random
import statistics
import time

os.environ.setdefault("MOJOLEARN_NUM_THREADS", "1")

import mojolearn as ml  # noqa: E402
from mojolearn import nn  # noqa: E402


def _m1():
    return nn.Sequential(
        nn.Linear(64, 256),
        nn.GELU(),
        nn.LayerNorm(256),
        nn.Linear(256, 256),
        nn.GELU(),
        nn.Linear(256, 10),
    )


def _time(step, seconds=0.25):
    step()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return (time.perf_counter() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(0)
    B = args.batch
    rows = [[rng.gauss(0, 1) for _ in range(64)] for _ in range(B)]
    labels = [rng.randrange(10) for _ in range(B)]
    flat = array.array("f", [v for r in rows for v in r])
    y32 = array.array("i", labels)
    kinds = {
        "Array": (ml.Array.from_list(rows), ml.Array.from_list(labels, "<i4")),
        "array.array": (memoryview(flat).cast("B").cast("f", (B, 64)), y32),
        "memoryview": (memoryview(bytearray(flat.tobytes())).cast("f", (B, 64)), memoryview(y32)),
    }
    notes = []
    try:
        import numpy as np

        kinds["NumPy"] = (np.asarray(rows, dtype=np.float32), np.asarray(labels))
    except ImportError:
        notes.append("NumPy: not installed")
    torch_step = None
    try:
        import torch

        torch.set_num_threads(1)
        kinds["torch"] = (torch.tensor(rows, dtype=torch.float32), torch.tensor(labels))
        model = ml.Trainer(_m1(), input_shape=(64,)).to_torch()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        tx, ty = kinds["torch"]

        def torch_step():
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(tx), ty).backward()
            opt.step()

    except ImportError:
        notes.append("torch: not installed")
    trainers = {k: ml.Trainer(_m1(), input_shape=(64,)) for k in kinds}
    times = {k: [] for k in kinds}
    times["torch eager"] = []
    for r in range(args.rounds):
        order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
        for k in order:
            X, y = kinds[k]
            times[k].append(_time(lambda t=trainers[k], X=X, y=y: t.train_step(X, y)))
        if torch_step is not None:
            times["torch eager"].append(_time(torch_step))
    med = {k: statistics.median(v) for k, v in times.items() if v}
    base = med["Array"]
    print(
        f"Trainer.train_step, M1 batch {B}, identical={ml.numeric_mode_used()}, one thread, "
        f"median of {args.rounds} rounds, µs per step"
    )
    print(f"{'input':<14}{'µs':>9}{'/ Array':>10}{'torch / it':>12}")
    for k, v in med.items():
        vs_torch = f"{med['torch eager'] / v:>12.2f}" if "torch eager" in med else ""
        print(f"{k:<14}{v:>9.1f}{v / base:>10.3f}{vs_torch}")
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
