"""Benchmark: µs per `Array.take` (a row gather in one binding call) against baselines measured
in the same run: a pure-Python row copy (`array.array.extend` of row slices, what the command
line's `Dataset.gather` does) and NumPy fancy indexing (`x[idx]`, when NumPy is installed);
then one `Batches` batch (X and y gathered) for the same shapes.

    python tools/bench_take.py [--rounds 15] [--calls 2000]

Shapes: 16 rows of 30 float32 from a (1000, 30) source (the target: <= 5 µs), and 256 rows of
784 from a (10000, 784) one. Prints medians of interleaved rounds (each round times every
method once, so that a slow spell of a shared machine falls on all of them alike) and the
ratio method / `take(list)` (> 1: the method is slower than Array.take).
"""

import argparse
import array
import os
import random
import statistics
import sys
import time

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
)

import mojolearn as ml  # noqa: E402
from mojolearn._buffers.array import frombytes  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_intake import _time_interleaved  # noqa: E402  (one interleaved timer for tools/)

SHAPES = ((1000, 30, 16), (10000, 784, 256))  # (source rows, columns, rows gathered)


def _methods(n, cols, rows, rng):
    src = frombytes(bytes(rng.getrandbits(8) for _ in range(4 * n * cols)), "<f4", (n, cols))
    flat = array.array("f", src.tobytes())
    idx = [rng.randrange(n) for _ in range(rows)]
    idx_array = ml.Array.from_list(idx, "<i8")

    def python_rows():
        out = array.array("f")
        for r in idx:
            out.extend(flat[r * cols : (r + 1) * cols])
        return out

    fns = {
        "take(list)": lambda: src.take(idx),
        "take(int64 Array)": lambda: src.take(idx_array),
        "pure-Python row copy": python_rows,
    }
    try:
        import numpy as np
    except ImportError:
        return fns
    x = np.asarray(src)
    idx_np = np.array(idx, np.int64)
    fns["numpy x[list]"] = lambda: x[idx]
    fns["numpy x[int64 array]"] = lambda: x[idx_np]
    return fns


def _batch_cost(n, cols, rows, rounds):
    """(µs per batch over whole epochs, µs of one epoch's shuffle) of a Batches over (n, cols)
    float32 X and n int32 labels: each epoch draws its order once (n draws of SplitMix64 in
    Python), then gathers each batch's X and y (two takes)."""
    from mojolearn.cli.data import epoch_order

    X = ml.Array((n, cols))
    y = ml.Array(n, "<i4")
    batches = ml.Batches(X, y, rows, seed=0)
    per = len(batches)
    per_batch, shuffle = [], []
    for e in range(rounds):
        t0 = time.perf_counter()
        for _ in batches:
            pass
        per_batch.append((time.perf_counter() - t0) / per * 1e6)
        t0 = time.perf_counter()
        epoch_order(0, rounds + e, n)
        shuffle.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(per_batch), statistics.median(shuffle)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(0)
    results = {}
    for n, cols, rows in SHAPES:
        calls = max(1, args.calls * 16 * 30 // (rows * cols))
        results[(n, cols, rows)] = _time_interleaved(
            _methods(n, cols, rows, rng), calls, args.rounds
        )
    names = list(results[SHAPES[0]])
    heads = [f"{rows}x{cols} of {n}" for n, cols, rows in SHAPES]
    print(f"µs per call (median of {args.rounds} rounds), ratio to take(list)")
    print(f"{'method':<24}" + "".join(f"{h:>26}" for h in heads))
    for name in names:
        line = f"{name:<24}"
        for shape in SHAPES:
            us, base = results[shape][name], results[shape]["take(list)"]
            line += f"{us:>14.2f} ({us / base:6.2f}x)  "
        print(line)
    costs = [_batch_cost(n, c, r, max(3, args.rounds // 3)) for n, c, r in SHAPES]
    line = f"{'Batches, per batch':<24}"
    for shape, (us, _) in zip(SHAPES, costs):
        line += f"{us:>14.2f} ({us / results[shape]['take(list)']:6.2f}x)  "
    print(line + "  whole epochs: X and y gathered, the epoch's shuffle included")
    print(
        f"{'  of which the shuffle':<24}"
        + "".join(f"{s / (-(-n // r)):>14.2f}{'':12}" for (n, _, r), (_, s) in zip(SHAPES, costs))
        + "  one epoch's order: "
        + ", ".join(f"{s / 1000:.1f} ms for {n} rows" for (n, _, _), (_, s) in zip(SHAPES, costs))
    )


if __name__ == "__main__":
    main()
