"""Benchmark: the pool's threads against one thread, in ONE process, round by round (issue 39).

    python tools/bench_threads.py                   # every cell, 15 rounds
    python tools/bench_threads.py --cells mlp2,lenet256 --rounds 31
    MOJOLEARN_NUM_THREADS=3 python tools/bench_threads.py

tools/bench_mlp.py and tools/bench_models.py time each thread count in a process of its own. On
a shared machine two processes minutes apart differ by more than the effect a thread makes (a
2-vCPU cloud VM: the same one-thread step 1660-3280 µs within an hour), so a ratio of two such
figures says little about a 3 % change. Here one process holds two trainers of the same cell:
one made and stepped inside `mojolearn._runtime.threads.alone()` (its steps run on the calling
thread alone, the path MOJOLEARN_NUM_THREADS=1 takes: no pool), one on the process's pool
(MOJOLEARN_NUM_THREADS, default every CPU). Each round times one then the other for `--budget`
seconds (after a warm-up); a slow spell of the machine falls on both alike, and the ratio of a
round's two times (one thread / the pool: > 1, the threads help) is the figure. The table gives
its median, its lowest and highest round, and the median µs of each.

Cells (the same problems, weights and batches as the two benchmarks): mlp0..mlp5 are
bench_mlp.py's cells (MLPTrainer.train_step; `steps` appended, e.g. mlp1steps: one
`train_steps(.., 64)` call per round step, per step), m1-32, m1-256, m2-64, lenet64, lenet256,
gpt12, gpt64 bench_models.py's (Trainer.train_step, identical mode unless
MOJOLEARN_NUMERIC_MODE says otherwise); mlp:SIZES:BATCH any MLP (e.g. mlp:1024-512-10:512,
whose products' B operands are too large to share: a slow first run, drawing its batches).
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if "mojolearn" not in sys.modules and not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import bench_mlp  # noqa: E402
import bench_models  # noqa: E402

MODEL_CELLS = {
    "m1-32": 0,
    "m1-256": 1,
    "m2-64": 2,
    "lenet64": 3,
    "lenet256": 4,
    "gpt12": 5,
    "gpt64": 6,
}
MLP_CELLS = {f"mlp{i}": i for i in range(len(bench_mlp.CELLS))}
DEFAULT = "mlp0,mlp1,mlp1steps,mlp2,mlp3,mlp5,m1-32,m1-256,m2-64,lenet64,lenet256,gpt12,gpt64"


def mlp_cell(index, steps):
    """(step function, steps a call) of bench_mlp.py's cell `index`."""
    import mojolearn as ml
    from mojolearn._buffers.array import Array

    sizes, batch = bench_mlp.CELLS[index]
    weights, xs, ys = bench_mlp.problem(sizes, batch)
    shapes = []
    for i in range(len(sizes) - 1):
        shapes += [(sizes[i + 1], sizes[i]), (sizes[i + 1],)]
    w = [Array.from_list(t, "<f4").reshape(s) for t, s in zip(weights, shapes)]
    trainer = ml.MLPTrainer(sizes, w, data_schedule={"bench": batch}, lr=1e-3, weight_decay=0.01)
    if steps:
        X = Array.from_list(xs, "<f4").reshape((bench_mlp.SCAN * batch, sizes[0]))
        y = Array.from_list(ys, "<i4")
        return (lambda: trainer.train_steps(X, y, bench_mlp.SCAN)), bench_mlp.SCAN
    X = Array.from_list(xs[: batch * sizes[0]], "<f4").reshape((batch, sizes[0]))
    y = Array.from_list(ys[:batch], "<i4")
    return (lambda: trainer.train_step(X, y)), 1


def model_cell(index):
    """(step function, 1) of bench_models.py's cell `index` (GELU models as that tool runs them
    when the build has GELU)."""
    import mojolearn as ml
    from mojolearn._buffers.array import Array

    name, batch = bench_models.CELLS[index]
    layers, loss = bench_models.layers_of(name, "gelu")
    names, shapes, weights, xs, targets = bench_models.problem(index, "gelu")
    w = {n: Array.from_list(v, "<f4").reshape(tuple(s)) for n, s, v in zip(names, shapes, weights)}
    rows = {"max_rows": batch} if name == "GPT" else {}
    trainer = ml.Trainer(
        bench_models.ml_model(layers),
        input_shape=bench_models.SHAPES[name],
        loss=loss,
        weights=w,
        seed=1,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.01,
        **rows,
    )
    features = bench_models._size(bench_models.SHAPES[name])
    if name == "GPT":
        X = Array.from_list(xs, "<i4").reshape((batch, features))
        y = Array.from_list(targets, "<i4").reshape((batch, features))
    elif loss == "mse":
        X = Array.from_list(xs, "<f4").reshape((batch, features))
        y = Array.from_list(targets, "<f4").reshape((batch, bench_models._outputs(layers)))
    else:
        X = Array.from_list(xs, "<f4").reshape((batch, features))
        y = Array.from_list(targets, "<i4")
    return (lambda: trainer.train_step(X, y)), 1


def make(cell):
    if cell in MODEL_CELLS:
        return model_cell(MODEL_CELLS[cell])
    if cell.startswith("mlp:"):  # any MLP: mlp:SIZES:BATCH, e.g. mlp:1024-512-10:512
        _, sizes, batch = cell.split(":")
        bench_mlp.CELLS.append(([int(s) for s in sizes.split("-")], int(batch)))
        return mlp_cell(len(bench_mlp.CELLS) - 1, False)
    base = cell.removesuffix("steps")
    if base not in MLP_CELLS:
        raise SystemExit(f"unknown cell {cell!r}: one of {', '.join([*MLP_CELLS, *MODEL_CELLS])}")
    return mlp_cell(MLP_CELLS[base], cell.endswith("steps"))


def per_step(fn, steps, budget):
    """µs a step over about `budget` seconds of calls."""
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / (calls * steps) * 1e6


def measure(cell, rounds, budget):
    from mojolearn._runtime import threads

    # The one-thread trainer is made and stepped inside `alone()` (an MLPTrainer's session
    # takes the pool when it opens, a Trainer at every step), the other outside.
    with threads.alone():
        one, steps = make(cell)
    many, _ = make(cell)
    sides = ((one, threads.alone), (many, contextlib.nullcontext))
    for fn, side in sides:  # warm-up: arenas grown, pages touched, the workers started
        with side():
            per_step(fn, steps, budget / 2)
    t1, tn = [], []
    for _ in range(rounds):
        with threads.alone():
            t1.append(per_step(one, steps, budget))
        tn.append(per_step(many, steps, budget))
    ratios = [a / b for a, b in zip(t1, tn)]
    return (
        statistics.median(t1),
        statistics.median(tn),
        statistics.median(ratios),
        min(ratios),
        max(ratios),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", default=DEFAULT, help=f"comma-separated (default {DEFAULT})")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--budget", type=float, default=0.25, help="seconds a round a side")
    args = parser.parse_args()
    # bench_mlp.problem draws a cell's 64 batches in Python once and reads them back from here
    os.environ.setdefault("BENCH_MLP_CACHE", tempfile.mkdtemp(prefix="bench_threads_"))
    import mojolearn as ml
    from mojolearn._runtime import threads

    count, source = threads.thread_choice()
    print(f"mojolearn {ml.__version__}, {ml.numeric_mode_used()} mode, {count} threads ({source}),")
    print(
        f"{args.rounds} rounds of {args.budget} s a side; package from {os.path.dirname(ml.__file__)}"
    )
    if count < 2:
        raise SystemExit("one thread: nothing to compare (set MOJOLEARN_NUM_THREADS=2)")
    print(
        f"{'cell':<12} {'1t µs':>9} {f'{count}t µs':>9} {'1t/' + str(count) + 't':>8}  (lowest, highest round)"
    )
    for cell in args.cells.split(","):
        t1, tn, ratio, lo, hi = measure(cell.strip(), args.rounds, args.budget)
        print(f"{cell:<12} {t1:9.1f} {tn:9.1f} {ratio:8.3f}  ({lo:.3f}, {hi:.3f})", flush=True)


if __name__ == "__main__":
    main()
