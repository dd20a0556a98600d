"""Benchmark: data-parallel steps per second of MLPTrainer [784, 256, 10] (DataParallel, M = 4)
for N = 1 and 2 processes at global batches 256 and 1024, beside plain `train_step` in one
process, with where the time goes on rank 0 (microbatch gradients, the gather, the tree sum
and the AdamW step). Runs the workers itself under the mpich wheel's `mpiexec`.

    python tools/bench_distributed.py [--steps 6] [--sizes 784,256,10]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r"""
import json, sys, time
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn import distributed as D
sizes, batch, steps, m = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = ml.MLPTrainer(sizes, seed=0, data_schedule={"bench": 1})
data = _rng.batches(1, batch, steps + 1, features=sizes[0], classes=sizes[-1])
if m == 0:  # plain train_step, one process
    t.train_step(*data[0])
    t0 = time.perf_counter()
    for X, y in data[1:]:
        t.train_step(X, y)
    print(json.dumps({"s_per_step": (time.perf_counter() - t0) / steps}))
    sys.exit()
dp = D.DataParallel(t, microbatches=m)
parts = {"grads": 0.0, "gather": 0.0, "combine+step": 0.0}
def timed(name, fn):
    def run(*a, **k):
        t1 = time.perf_counter(); r = fn(*a, **k); parts[name] += time.perf_counter() - t1; return r
    return run
dp._gather = timed("gather", dp._gather)
dp._port.apply = timed("combine+step", dp._port.apply)  # the trainer's port: plain attributes
dp._port.microbatch = timed("grads", dp._port.microbatch)
dp.train_step(*data[0])
for k in parts: parts[k] = 0.0
t0 = time.perf_counter()
for X, y in data[1:]:
    dp.train_step(X, y)
total = time.perf_counter() - t0
if dp.rank == 0:
    print(json.dumps({"s_per_step": total / steps, **{k: v / steps for k, v in parts.items()}}))
"""


def run(n, sizes, batch, steps, m):
    env = dict(
        os.environ,
        PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    cmd = [sys.executable, "-c", WORKER, json.dumps(sizes), str(batch), str(steps), str(m)]
    if n:
        mpiexec = shutil.which(
            "mpiexec",
            path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        )
        cmd = [mpiexec, "-n", str(n)] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode:
        sys.exit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--sizes", default="784,256,10")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"MLPTrainer {sizes}, M = 4, {args.steps} timed steps, cpu cores: {os.cpu_count()}")
    print(f"{'batch':>6} {'what':<22} {'steps/s':>8} {'vs N=1':>7}  where the time goes (ms/step)")
    for batch in (256, 1024):
        plain = run(0, sizes, batch, args.steps, 0)
        print(f"{batch:>6} {'train_step, 1 process':<22} {1 / plain['s_per_step']:>8.1f} {'':>7}")
        base = None
        for n in (1, 2):
            r = run(n, sizes, batch, args.steps, 4)
            rate = 1 / r["s_per_step"]
            base = base or rate
            where = ", ".join(f"{k} {1000 * v:.1f}" for k, v in r.items() if k != "s_per_step")
            print(
                f"{batch:>6} {f'DataParallel N={n}':<22} {rate:>8.1f} {rate / base:>6.2f}x  {where}"
            )


if __name__ == "__main__":
    main()
