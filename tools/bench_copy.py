"""Benchmark: the machine's copy bandwidth on one thread and on two, in one process (issue 39).

    python tools/bench_copy.py              # 32 MB arrays, 9 rounds
    python tools/bench_copy.py --mb 1 --rounds 15

A step's streaming work (elementwise layers, bias-gradient sums, LayerNorm, packing operands
that come from memory, AdamW) can go no faster on two threads than the memory system lets two
cores copy; this measures that ceiling beside tools/bench_threads.py's ratios. Each round copies
`--mb` MB arrays (NumPy's copyto, which releases the GIL) on one thread, then on two threads at
once (an array pair each); the table gives the median GB/s of each and of their ratio.
Needs NumPy (a benchmark's dependency, not the package's).
"""

import argparse
import statistics
import threading
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=32.0, help="MB an array")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    import numpy as np

    n = int(args.mb * (1 << 20)) // 4
    src = [np.random.default_rng(i).random(n, dtype=np.float32) for i in range(2)]
    dst = [np.empty_like(s) for s in src]
    reps = max(1, int(256 / args.mb))  # about 0.5 GB moved a thread a round

    def copy(i):
        for _ in range(reps):
            np.copyto(dst[i], src[i])

    def timed(threads):
        workers = [threading.Thread(target=copy, args=(i,)) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return 2 * 4 * n * reps * threads / (time.perf_counter() - start) / 1e9

    one, two = [], []
    for _ in range(args.rounds):
        one.append(timed(1))
        two.append(timed(2))
    ratios = [b / a for a, b in zip(one, two)]
    print(f"{args.mb:g} MB arrays, {args.rounds} rounds (read + write GB/s, medians)")
    print(
        f"1 thread {statistics.median(one):.1f}, 2 threads {statistics.median(two):.1f}, "
        f"2t/1t {statistics.median(ratios):.2f} ({min(ratios):.2f}, {max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
