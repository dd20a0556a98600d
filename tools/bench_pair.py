"""Benchmark: what two cores give this machine, with no splitting at all (issue 39's ceiling).

    python tools/bench_pair.py                        # mlp5,lenet256,gpt64, 9 rounds
    python tools/bench_pair.py --cells mlp5 --rounds 15 --budget 0.5

Two processes each train the same cell on one thread (MOJOLEARN_NUM_THREADS=1), pinned to
CPUs of their own. Each round times one of them alone, then both at once, `--budget` seconds
each; the figure is the steps both made together over the steps one made alone in the same
time: 2.0 when the cores are independent, less when running both slows each (a shared
physical core or cache on the host, memory bandwidth, a lower clock with both busy). No
split can beat it: tools/bench_threads.py's ratio for the same cell is that ceiling less the
cost of splitting the step. Cells are tools/bench_threads.py's.
"""

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WAIT_S = 600.0  # the longest a worker or the controller waits for the other side


def _worker(cell, cpu, conn):
    """Build the cell on one thread, pinned to `cpu`; then for each budget received, step for
    that many seconds and send back the steps made a second (None ends it)."""
    os.sched_setaffinity(0, {cpu})
    import bench_threads

    step, per_call = bench_threads.make(cell)
    for _ in range(5):
        step()
    conn.send("ready")
    while conn.poll(WAIT_S):
        budget = conn.recv()
        if budget is None:
            return
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < budget:
            step()
            n += per_call
        conn.send(n / (time.perf_counter() - start))
    raise SystemExit("bench_pair: the controller went quiet")


def _ask(conns, budget):
    for c in conns:
        c.send(budget)
    rates = []
    for c in conns:
        if not c.poll(WAIT_S):
            raise SystemExit("bench_pair: a worker went quiet")
        rates.append(c.recv())
    return rates


def pair(cell, rounds, budget):
    """The median over rounds of (steps of both together) / (steps of one alone), its lowest
    and highest round, and one's µs a step alone."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("bench_pair: this process may use one CPU only")
    os.environ["MOJOLEARN_NUM_THREADS"] = "1"
    ctx = mp.get_context("spawn")
    ends = [ctx.Pipe() for _ in range(2)]
    procs = [ctx.Process(target=_worker, args=(cell, cpus[i], ends[i][1])) for i in range(2)]
    for p in procs:
        p.start()
    conns = [e[0] for e in ends]
    try:
        for c in conns:
            if not c.poll(WAIT_S) or c.recv() != "ready":
                raise SystemExit("bench_pair: a worker did not start")
        ratios, alone = [], []
        for r in range(rounds):
            one = conns[r % 2]  # each CPU alone in turn
            solo = _ask([one], budget)[0]
            both = _ask(conns, budget)
            ratios.append(sum(both) / solo)
            alone.append(1e6 / solo)
    finally:
        for c in conns:
            c.send(None)
        for p in procs:
            p.join(WAIT_S)
    return statistics.median(ratios), min(ratios), max(ratios), statistics.median(alone)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="mlp5,lenet256,gpt64")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--budget", type=float, default=0.4, help="seconds a round a side")
    args = ap.parse_args()
    print(f"{'cell':12} {'1t µs':>9} {'both/one':>9}  (lowest, highest round)")
    for cell in args.cells.split(","):
        med, lo, hi, us = pair(cell, args.rounds, args.budget)
        print(f"{cell:12} {us:9.1f} {med:9.3f}  ({lo:.3f}, {hi:.3f})", flush=True)


if __name__ == "__main__":
    main()
