"""Benchmark: µs per call of SmallMLPTrainer.train_step (batch 1 and 32), `matmul` 1×8×16 and
an AdamW step over the 8→16→3 network's gradients with each input kind a user passes (mojolearn.Array, NumPy, memoryview, array.array, torch),
with the ratio to Array inputs, medians of repeated timings in one run. Kinds whose extra is
not installed, or that the package under test refuses, print "-".

    python tools/bench_intake.py [--rounds 15] [--calls 2000]

"array.array" means targets as `array.array('i')` and X as a (batch, 8) memoryview over an
`array.array('f')` (array.array itself is one-dimensional).

Then (NumPy needed; `--strided-rounds 0` skips it) what a declined X costs: ms per
`MLPTrainer([784, 256, 10]).train_step` at batch 256 with X C-order, F-order and a strided
column slice (both copied into C order in the binding), and a C-order torch X (copied with
the GIL held, since nothing pins a tensor's storage).
"""

import argparse
import array
import random
import statistics
import time


def _inputs(kind, rows, rng):
    xs = [rng.uniform(-1, 1) for _ in range(rows * 8)]
    ys = [rng.randrange(3) for _ in range(rows)]
    return as_kind(kind, xs, ys, rows, 8)


def as_kind(kind, xs, ys, rows, cols):
    """The batch (xs as rows × cols float32, ys as int32 labels) as this input kind."""
    if kind == "Array":
        import mojolearn as ml

        return ml.Array.from_list(xs, "<f4").reshape((rows, cols)), ml.Array.from_list(ys, "<i4")
    if kind == "NumPy":
        import numpy as np

        return np.array(xs, np.float32).reshape(rows, cols), np.array(ys, np.int32)
    if kind == "memoryview":
        return (
            memoryview(array.array("f", xs)).cast("B").cast("f", (rows, cols)),
            memoryview(array.array("i", ys)),
        )
    if kind == "array.array":
        x = memoryview(array.array("f", xs)).cast("B").cast("f", (rows, cols))
        return x, array.array("i", ys)
    if kind == "torch":
        import torch

        return torch.tensor(xs, dtype=torch.float32).reshape(rows, cols), torch.tensor(ys)
    raise ValueError(kind)


def _time_interleaved(fns, calls, rounds):
    """Median µs per call of each function; every round times each once, in turn, so that a
    slow spell of the shared machine falls on all kinds alike rather than on one."""
    for fn in fns.values():
        fn()
    samples = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[k].append((time.perf_counter() - t0) / calls * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def main():
    import mojolearn as ml
    from mojolearn._mlp import spec as _spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--strided-rounds", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(0)
    kinds = ("Array", "NumPy", "memoryview", "array.array", "torch")
    rows_out = []
    for what, rows in (
        ("train_step, batch 1", 1),
        ("train_step, batch 32", 32),
        ("matmul 1x8x16", 1),
        ("AdamW.step, 8-16-3 grads", 1),
    ):
        fns = {}
        for kind in kinds:
            try:
                X, y = _inputs(kind, rows, rng)
                if what.startswith("matmul"):
                    W = _matrix(kind, 8, 16)
                    fn = lambda X=X, W=W: ml.matmul(X, W)
                elif what.startswith("AdamW"):
                    params = [
                        ml.Array.from_list(w.tolist(), "<f4").reshape(w.shape)
                        for w in _spec.init_small_mlp(0)
                    ]
                    grads = [
                        _matrix(kind, *(s if len(s) == 2 else (1, s[0])))
                        for s in ((16, 8), (16,), (3, 16), (3,))
                    ]
                    opt = ml.AdamW(params, lr=1e-3)
                    shaped = [_reshape(g, p.shape) for g, p in zip(grads, params)]
                    fn = lambda opt=opt, g=shaped: opt.step(g)
                else:
                    t = ml.SmallMLPTrainer(*_spec.init_small_mlp(0), data_schedule={"bench": 1})
                    fn = lambda t=t, X=X, y=y: t.train_step(X, y)
                fn()
                fns[kind] = fn
            except ImportError:
                pass
            except (TypeError, ValueError):
                pass  # refused by this version
        timed = _time_interleaved(fns, args.calls, args.rounds)
        cells = {kind: timed.get(kind) for kind in kinds}
        rows_out.append((what, cells))
    print(
        f"mojolearn {ml.__version__}, vendor {ml.vendor_used()}, mode {ml.numeric_mode_used()}; "
        f"µs per call (median of {args.rounds} x {args.calls}), ratio to Array inputs"
    )
    print(f"{'call':<22}" + "".join(f"{k:>18}" for k in kinds))
    for what, cells in rows_out:
        base = cells["Array"]
        line = f"{what:<22}"
        for k in kinds:
            v = cells[k]
            line += f"{'-':>18}" if v is None else f"{v:>9.2f} ({v / base:4.2f}x)"
        print(line)
    if args.strided_rounds:
        _declined_x(args.strided_rounds)


def _declined_x(rounds):
    """ms per [784, 256, 10] step at batch 256, X C-order vs X that must be copied."""
    try:
        import numpy as np
    except ImportError:
        return
    import mojolearn as ml

    rng = np.random.default_rng(0)
    X = rng.random((256, 784), dtype=np.float32)
    y = rng.integers(0, 10, 256).astype(np.int32)
    wide = np.zeros((256, 2 * 784), np.float32)
    wide[:, ::2] = X
    kinds = {"C-order": X, "F-order": np.asfortranarray(X), "column slice": wide[:, ::2]}
    try:
        import torch

        kinds["torch C-order"] = torch.from_numpy(X.copy())
    except ImportError:
        pass
    net = ml.MLPTrainer([784, 256, 10], data_schedule={"bench": 1}, seed=0)
    fns = {k: (lambda x=x: net.train_step(x, y)) for k, x in kinds.items()}
    timed = _time_interleaved(fns, 3, rounds)
    base = timed["C-order"]
    print(f"\nMLPTrainer([784, 256, 10]).train_step, batch 256 (ms, median of {rounds} x 3):")
    for k, v in timed.items():
        print(f"  X {k:<14} {v / 1000:8.2f} ms ({v / base:4.2f}x)")


def _reshape(buf, shape):
    """`buf` (a 1 x n matrix of its kind, for a 1-D shape) with the parameter's shape."""
    if len(shape) == 2:
        return buf
    if hasattr(buf, "reshape"):  # NumPy, torch
        return buf.reshape(shape)
    if type(buf) is memoryview:
        return buf.cast("B").cast("f")
    return buf.reshape(shape)  # Array


def _matrix(kind, r, c):
    values = [0.5] * (r * c)
    if kind == "Array":
        import mojolearn as ml

        return ml.Array.from_list(values, "<f4").reshape((r, c))
    if kind == "NumPy":
        import numpy as np

        return np.array(values, np.float32).reshape(r, c)
    if kind == "torch":
        import torch

        return torch.tensor(values, dtype=torch.float32).reshape(r, c)
    return memoryview(array.array("f", values)).cast("B").cast("f", (r, c))


if __name__ == "__main__":
    main()
