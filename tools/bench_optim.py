"""Benchmark: one optimizer step over n float32 parameters (2 tensors), mojolearn vs baselines
measured in the same run: NumPy float32 (the same Adam formula, vectorized, allocating
temporaries) and torch.optim (foreach=False, when torch is installed).

    python tools/bench_optim.py [--sizes 1000,100000,1000000] [--repeat 20] [--clock cpu]

Prints microseconds per step (median of --repeat) and the ratio baseline / mojolearn
(> 1: mojolearn is faster). The numeric mode is MOJOLEARN_NUMERIC_MODE (default identical).
`--clock cpu` times with the process's CPU time instead of the wall clock: on a shared
machine it leaves out the time the process waits for a core (the binding's worker threads, if
any, count in full).
"""

import argparse
import statistics
import time

import mojolearn

_clock = time.perf_counter


def _median_us(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = _clock()
        fn()
        times.append((_clock() - t0) * 1e6)
    return statistics.median(times)


def _numpy_adam(np, ps, gs, state, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    state["t"] += 1
    t = state["t"]
    bc1, bc2 = np.float32(1 - b1**t), np.float32(1 - b2**t)
    for p, g, m, v in zip(ps, gs, state["m"], state["v"]):
        m *= np.float32(b1)
        m += np.float32(1 - b1) * g
        v *= np.float32(b2)
        v += np.float32(1 - b2) * (g * g)
        p -= np.float32(lr) / bc1 * (m / (np.sqrt(v) / np.sqrt(bc2) + np.float32(eps)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = ap.parse_args()
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter
    import numpy as np

    try:
        import torch
    except ImportError:
        torch = None
    print(
        f"mode {mojolearn.numeric_mode_used()}, vendor {mojolearn.vendor_used()}, "
        f"{args.clock} clock"
    )
    head = f"{'n':>9} {'kind':>6} {'mojolearn us':>13} {'numpy us':>10} {'ratio':>6}"
    if torch is not None:
        head += f" {'torch us':>10} {'ratio':>6}"
    print(head)
    rs = np.random.default_rng(0)
    for n in [int(x) for x in args.sizes.split(",")]:
        shapes = [(n // 2,), (n - n // 2,)]
        for kind in ("Adam", "AdamW", "SGD"):
            ps = [rs.standard_normal(s).astype(np.float32) for s in shapes]
            gs = [rs.standard_normal(s).astype(np.float32) * 1e-3 for s in shapes]
            kw = dict(momentum=0.9) if kind == "SGD" else {}
            opt = getattr(mojolearn, kind)(ps, lr=1e-6, **kw)
            ours = _median_us(lambda: opt.step(gs), args.repeat)
            npp = [p.copy() for p in ps]
            st = {"t": 0, "m": [np.zeros_like(p) for p in ps], "v": [np.zeros_like(p) for p in ps]}
            base = _median_us(lambda: _numpy_adam(np, npp, gs, st, lr=1e-6), args.repeat)
            line = f"{n:>9} {kind:>6} {ours:>13.1f} {base:>10.1f} {base / ours:>6.2f}"
            if torch is not None:
                tp = [torch.tensor(p) for p in ps]
                for t, g in zip(tp, gs):
                    t.grad = torch.tensor(g)
                topt = getattr(torch.optim, kind)(tp, lr=1e-6, foreach=False, **kw)
                tt = _median_us(topt.step, args.repeat)
                line += f" {tt:>10.1f} {tt / ours:>6.2f}"
            print(line)
    print(
        "numpy column: the same Adam formula in NumPy float32 for every kind (a fixed "
        "reference cost)."
    )


if __name__ == "__main__":
    main()
