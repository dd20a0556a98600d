"""Benchmark: `clip_grad_norm_` over n float32 gradient values (4 tensors), per `norm_type`,
mojolearn vs torch.nn.utils.clip_grad_norm_ (foreach=False, when torch is installed), and the
step's own clip (`AdamW.step(grads, max_norm=...)`, always p = 2) beside a step without it.

    python tools/bench_clip_norm.py [--sizes 1000,100000,1000000] [--repeat 30]

Prints microseconds per call (median of --repeat) and the ratio torch / mojolearn (> 1:
mojolearn is faster). max_norm is large, so the coefficient is 1 and repeated calls see the
same values. The numeric mode is MOJOLEARN_NUMERIC_MODE (default identical).
"""

import argparse
import array
import math
import random
import statistics
import time

import mojolearn

NORM_TYPES = (1.0, 2.0, 3.0, 1.5, math.inf)


def _median_us(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def _grads(n, r):
    sizes = [n // 2, n // 4, n // 8, n - n // 2 - n // 4 - n // 8]
    return [array.array("f", [r.gauss(0.0, 1.0) for _ in range(k)]) for k in sizes]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    print(f"mode {mojolearn.numeric_mode_used()}, vendor {mojolearn.vendor_used()}")
    head = f"{'n':>9} {'norm_type':>9} {'mojolearn us':>13}"
    if torch is not None:
        head += f" {'torch us':>10} {'ratio':>6}"
    print(head)
    r = random.Random(0)
    for n in [int(x) for x in args.sizes.split(",")]:
        gs = _grads(n, r)
        if torch is not None:
            ts = [torch.zeros(len(g)) for g in gs]
            for t, g in zip(ts, gs):
                t.grad = torch.tensor(g.tolist())
        for p in NORM_TYPES:
            ours = _median_us(lambda: mojolearn.clip_grad_norm_(gs, 1e30, norm_type=p), args.repeat)
            line = f"{n:>9} {p:>9} {ours:>13.1f}"
            if torch is not None:
                clip = torch.nn.utils.clip_grad_norm_
                theirs = _median_us(lambda: clip(ts, 1e30, norm_type=p, foreach=False), args.repeat)
                line += f" {theirs:>10.1f} {theirs / ours:>6.2f}"
            print(line)
        ps = [array.array("f", g) for g in gs]
        opt = mojolearn.AdamW(ps, lr=1e-9)
        plain = _median_us(lambda: opt.step(gs), args.repeat)
        clipped = _median_us(lambda: opt.step(gs, max_norm=1e30), args.repeat)
        print(
            f"{n:>9} AdamW.step {plain:>8.1f} us; with max_norm {clipped:>8.1f} us "
            f"(ratio {clipped / plain:.2f})"
        )


if __name__ == "__main__":
    main()
