"""A/B: run one benchmark script of two source trees, interleaved, and compare their figures.

    python tools/bench_ab.py BEFORE_TREE AFTER_TREE --runs 3 -- bench_train.py --quick

Each run executes `tools/<script> <args>` of tree A and of tree B (each with its own
`python/` first on PYTHONPATH, so each measures its own package and its own script), `--runs`
times, alternating, so that the machine's drift falls on both alike; the order flips every run
(A B, B A, ...), since the second script of a pair measured up to 30 % faster on this host
(identical code, a warmer machine). `--stat min` reports the best run instead of the median:
a shared host's noise only adds time, and its processes run in a fast or a slow mode (the same
call timed 2.5 or 4 µs a step, process by process), which a median of a few runs mixes. Every output line is cut
into a label (its text before the first number) and its numbers; lines whose labels match in
both trees are compared: the median of each figure over the runs, and B / A (for times, < 1 is
faster after). A line that starts with a number (a table row) is labelled by that number, one
that starts with a bracketed cell (`[64, 128, 10]  32 ...`) by the cell and its next column; the
first line of a label in a run counts; lines without numbers are skipped.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
CELL = re.compile(r"^\s*(\[[^\]]*\])\s+(\S+)")  # a bracketed cell and its next column


def _parse(text: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        cell = CELL.match(line)
        if cell:  # a table row labelled by a cell: "[64, 128, 10]  32  ..."
            label = f"row {cell.group(1)} {cell.group(2)}"
            out.setdefault(label, [float(x) for x in NUMBER.findall(line[cell.end() :])])
            continue
        m = NUMBER.search(line)
        if not m:
            continue
        label = " ".join(line[: m.start()].split())
        values = [float(x) for x in NUMBER.findall(line[m.start() :])]
        if not label:  # a table row: its first column and its words (e.g. "1000 Adam") label it
            words = [w for w in NUMBER.sub(" ", line[m.end() :]).split() if w.isalpha()]
            label, values = " ".join(["row", m.group(), *words]), values[1:]
        if label in out:
            continue
        out[label] = values
    return out


def _run(tree: str, script: str, args: list[str]) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "python"))
    cmd = [sys.executable, os.path.join(tree, "tools", script), *args]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"{tree}: {script} failed\n{done.stdout}\n{done.stderr}")
    return _parse(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stat", choices=("median", "min"), default="median")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    opts = ap.parse_args()
    runs: dict[str, list[dict[str, list[float]]]] = {opts.a: [], opts.b: []}
    for i in range(opts.runs):
        for tree in (opts.a, opts.b) if i % 2 == 0 else (opts.b, opts.a):
            runs[tree].append(_run(tree, opts.script, opts.args))
    stat = statistics.median if opts.stat == "median" else min

    def medians(tree: str, label: str) -> list[float] | None:
        rows = [r[label] for r in runs[tree] if label in r]
        if len(rows) != opts.runs or len({len(r) for r in rows}) != 1:
            return None
        return [stat(col) for col in zip(*rows)]

    what = "medians" if opts.stat == "median" else "best (min)"
    print(f"{opts.script} {' '.join(opts.args)}: {what} of {opts.runs} interleaved runs")
    print(f"A = {opts.a}\nB = {opts.b}")
    for label in runs[opts.a][0]:
        ma, mb = medians(opts.a, label), medians(opts.b, label)
        if ma is None or mb is None or len(ma) != len(mb):
            continue
        ratios = " ".join(f"{b / a:5.3f}" if a else "  -  " for a, b in zip(ma, mb))
        print(f"{label[:40]:<40} A {' '.join(f'{x:g}' for x in ma)}")
        print(f"{'':<40} B {' '.join(f'{x:g}' for x in mb)}   B/A {ratios}")


if __name__ == "__main__":
    main()
