"""Benchmark the trainers' `predict` (and `predict_proba`) against `predict_logits`, measured in
the same run: rows per second at layer sizes [784, 256, 10], 1, 256 and 4096 rows per call.

    python tools/bench_predict.py              # both numeric modes (fast in a child process)
    python tools/bench_predict.py --reps 9     # more repetitions per median

Each figure is the median over the repetitions of the rows per second of ~0.05 s of calls; the
three calls alternate call by call (each timed on its own) so that load on the host hits them
alike.
`predict` / `logits` is the cost of the argmax and the int32 result, `proba` / `logits` that of
the softmax entry, relative to the forward pass they share.
"""

import argparse
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import time

SIZES = [784, 256, 10]
ROWS = (1, 256, 4096)
CALLS = ("predict_logits", "predict", "predict_proba")


def _alternating_seconds(fns, calls):
    """Seconds each of `fns` took over `calls` calls, the functions alternating call by call."""
    clock = time.perf_counter
    spent = [0.0] * len(fns)
    for _ in range(calls):
        for i, fn in enumerate(fns):
            t0 = clock()
            fn()
            spent[i] += clock() - t0
    return spent


def _measure(reps):
    import mojolearn as ml

    t = ml.MLPTrainer(SIZES, seed=0, data_schedule={"seed": 0})
    rng = random.Random(0)
    out = {}
    for rows in ROWS:
        X = ml.Array.from_list([[rng.uniform(-1, 1) for _ in range(SIZES[0])] for _ in range(rows)])
        fns = [functools.partial(getattr(t, name), X) for name in CALLS]
        once = _alternating_seconds(fns, 3)[0] / 3  # also the warm-up (session capacity)
        calls = max(1, int(0.05 / max(once, 1e-7)))
        samples = [_alternating_seconds(fns, calls) for _ in range(reps)]
        out[str(rows)] = {
            name: statistics.median(rows * calls / s[i] for s in samples)
            for i, name in enumerate(CALLS)
        }
    return {"mode": ml.numeric_mode_used(), "figures": out}


def _input_kinds(reps, rows=256):
    """rows/s of `predict` per input kind a user passes (identical mode, this process), beside
    an Array of the same values: Array, memoryview, NumPy and torch (those installed)."""
    import array

    import mojolearn as ml

    t = ml.MLPTrainer(SIZES, seed=0, data_schedule={"seed": 0})
    rng = random.Random(1)
    flat = array.array("f", (rng.uniform(-1, 1) for _ in range(rows * SIZES[0])))
    kinds = {
        "Array": ml.Array.from_buffer(flat).reshape((rows, SIZES[0])),
        "memoryview": memoryview(flat).cast("B").cast("f", (rows, SIZES[0])),
    }  # an array.array is 1-D: predict needs (rows, inputs), so it is refused by name
    try:
        import numpy as np

        kinds["NumPy"] = np.frombuffer(flat, np.float32).reshape(rows, SIZES[0])
    except ImportError:
        pass
    try:
        import torch

        kinds["torch"] = torch.frombuffer(bytearray(flat.tobytes()), dtype=torch.float32).reshape(
            rows, SIZES[0]
        )
    except ImportError:
        pass
    fns = [functools.partial(t.predict, x) for x in kinds.values()]
    calls = max(1, int(0.05 / max(_alternating_seconds(fns, 3)[0] / 3, 1e-7)))
    samples = [_alternating_seconds(fns, calls) for _ in range(reps)]
    return {
        name: statistics.median(rows * calls / s[i] for s in samples)
        for i, name in enumerate(kinds)
    }


def _child(mode, reps):
    env = dict(os.environ, MOJOLEARN_NUMERIC_MODE=mode)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", "--reps", str(reps)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions per median (default 7)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_measure(args.reps)))
        return
    threads = os.environ.get("MOJOLEARN_NUM_THREADS", "default")
    print(f"layer sizes {SIZES}, medians of {args.reps}, MOJOLEARN_NUM_THREADS={threads}")
    print(
        f"{'mode':>9} {'rows/call':>9} {'logits rows/s':>14} {'predict rows/s':>15} "
        f"{'proba rows/s':>13} {'predict/logits':>14} {'proba/logits':>12}"
    )
    for mode in ("identical", "fast"):
        result = _child(mode, args.reps)
        for rows, f in result["figures"].items():
            base = f["predict_logits"]
            print(
                f"{result['mode']:>9} {rows:>9} {base:14,.0f} {f['predict']:15,.0f} "
                f"{f['predict_proba']:13,.0f} {f['predict'] / base:14.3f} "
                f"{f['predict_proba'] / base:12.3f}"
            )
    kinds = _input_kinds(args.reps)
    print(
        "\npredict, 256 rows a call, by input kind (rows/s, ratio to Array, one run, interleaved):"
    )
    for name, rate in kinds.items():
        print(f"  {name:<12} {rate:12,.0f} ({rate / kinds['Array']:.3f}x)")


if __name__ == "__main__":
    main()
