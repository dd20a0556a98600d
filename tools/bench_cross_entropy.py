"""Benchmark `mojolearn.cross_entropy` (mean, with and without the gradient) in both numeric
modes against a NumPy float32 log-softmax baseline measured in the same run.

    python tools/bench_cross_entropy.py            # table: µs per call and ratios to NumPy

Inputs are float32 logits and int32 targets (no conversion on the mojolearn side); the fast
mode runs in a child process (the mode is fixed per process).
"""

import json
import os
import subprocess
import sys
import time

SHAPES = ((32, 3), (256, 3), (4096, 10), (1024, 1000))


def _timeit(fn, elements):
    fn()
    reps = max(5, int(3e6 / elements))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def _inputs(rows, classes):
    import random

    from mojolearn import Array

    rng = random.Random(rows * 7919 + classes)
    z = Array.from_list([rng.gauss(0, 3) for _ in range(rows * classes)], "<f4").reshape(
        (rows, classes)
    )
    t = Array.from_list([rng.randrange(classes) for _ in range(rows)], "<i4")
    return z, t


def _measure_mojolearn():
    import mojolearn

    out = {}
    for rows, classes in SHAPES:
        z, t = _inputs(rows, classes)
        for grad in (False, True):
            out[f"{rows}x{classes}/{grad}"] = _timeit(
                lambda: mojolearn.cross_entropy(z, t, return_grad=grad), rows * classes
            )
    return out


def _measure_numpy():
    try:
        import numpy as np
    except ImportError:
        return None
    out = {}
    for rows, classes in SHAPES:
        z, t = _inputs(rows, classes)
        zn, tn = np.asarray(z), np.asarray(t)

        def loss(grad):
            m = zn.max(axis=1, keepdims=True)
            e = np.exp(zn - m)
            s = e.sum(axis=1, keepdims=True)
            value = float((np.log(s[:, 0]) - (zn[np.arange(rows), tn] - m[:, 0])).mean())
            if grad:
                d = e / s
                d[np.arange(rows), tn] -= 1
                d /= rows
            return value

        for grad in (False, True):
            out[f"{rows}x{classes}/{grad}"] = _timeit(lambda: loss(grad), rows * classes)
    return out


def main():
    if "--child" in sys.argv:
        print(json.dumps(_measure_mojolearn()))
        return
    env = dict(os.environ, MOJOLEARN_NUMERIC_MODE="fast")
    fast = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--child"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    os.environ["MOJOLEARN_NUMERIC_MODE"] = "identical"
    ident = _measure_mojolearn()
    base = _measure_numpy()
    print(
        f"{'shape':>10} {'grad':>5} {'identical µs':>13} {'fast µs':>9} {'numpy µs':>9} "
        f"{'ident/numpy':>11} {'fast/numpy':>10}"
    )
    for key in ident:
        shape, grad = key.split("/")
        b = base[key] if base else float("nan")
        print(
            f"{shape:>10} {grad:>5} {ident[key]:13.1f} {fast[key]:9.1f} {b:9.1f} "
            f"{ident[key] / b:11.2f} {fast[key] / b:10.2f}"
        )


if __name__ == "__main__":
    main()
