"""Print the reliability figures R1...R18 as a table.

Runs the suites in tests/reliability (CI sizes; `--long` sets MOJOLEARN_LONG_TESTS=1 for the
large runs) with MOJOLEARN_RELIABILITY_OUT pointing at a scratch folder, where each suite
writes its counts, then prints one row per figure. `--from DIR` prints a folder of figures
written by an earlier run instead of running anything.

    python tools/reliability_report.py [--long] [--from DIR] [--keep DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(folder):
    figures = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                data = json.load(f)
            figures[data["suite"]] = data
    return figures


def _ms(value):
    return "-" if value is None else f"{value:.1f} ms"


def _rows(f):
    """(figure, what, count, result, worst time) per recorded suite."""
    rows = []
    g = f.get
    if g("R1_loads"):
        r = f["R1_loads"]
        rows.append(
            (
                "R1",
                "fuzzed bytes into checkpoint.loads",
                f"{r['inputs']:,}",
                f"{r['refused']:,} ValueError, {r['accepted']:,} accepted+round-trip, "
                f"0 other; {r['seconds']} s, rss +{r['rss_growth_mb']} MB",
                _ms(r["worst_ms"]),
            )
        )
    if g("R1_mlp"):
        r = f["R1_mlp"]
        rows.append(
            (
                "R1",
                "fuzzed bytes into loads (mlp-checkpoint.v1)",
                f"{r['inputs']:,}",
                f"{r['refused']:,} ValueError, {r['accepted']:,} accepted+round-trip, 0 other",
                "-",
            )
        )
    if g("R1_load_state_dict"):
        r = f["R1_load_state_dict"]
        rows.append(
            (
                "R1",
                "fuzzed states into load_state_dict",
                f"{r['inputs']:,}",
                f"{r['refused']:,} refused unchanged, {r['accepted']:,} accepted",
                _ms(r["worst_ms"]),
            )
        )
    if g("R1_load_state_dict_mlp"):
        r = f["R1_load_state_dict_mlp"]
        rows.append(
            (
                "R1",
                "fuzzed states into MLPTrainer.load_state_dict",
                f"{r['inputs']:,}",
                f"{r['refused']:,} refused unchanged, {r['accepted']:,} accepted",
                _ms(r["worst_ms"]),
            )
        )
    if g("R2"):
        r = f["R2"]
        rows.append(
            (
                "R2",
                "single-bit flips of a valid checkpoint",
                f"{r['flips']:,}",
                f"{r['refused']:,} refused ({r['refused_pct']} %)",
                _ms(r["worst_ms"]),
            )
        )
    if g("R2_mlp"):
        r = f["R2_mlp"]
        rows.append(
            (
                "R2",
                "single-bit flips of a valid MLP checkpoint",
                f"{r['flips']:,}",
                f"{r['refused']:,} refused ({r['bytes']} bytes, mlp-checkpoint.v1)",
                "-",
            )
        )
    for key, what in (
        ("R3_corpus", "adversarial corpus files (attacks/)"),
        ("R3_corpus_mlp", "adversarial corpus files (attacks/mlp_*, mlp-checkpoint.v1)"),
    ):
        r = g(key)
        if r:
            via = (
                "" if r.get("entry_points", 1) == 1 else f" by each of {r['entry_points']} loaders"
            )
            rows.append(
                (
                    "R3",
                    what,
                    str(r["files"]),
                    f"{r['refused']} refused with the exact message{via} (< 100 ms each)",
                    _ms(r["worst_ms"]),
                )
            )
    for key, which in (("R3_paths", ""), ("R3_paths_mlp", ", MLP loaders")):
        r = g(key)
        if r:
            rows.append(
                (
                    "R3",
                    f"path attacks (1 GiB sparse, FIFO, folder, devices, socket, links{which})",
                    str(r["attacks"]),
                    "all ValueError, none blocked",
                    _ms(r["worst_ms"]),
                )
            )
    if g("R4"):
        r = f["R4"]
        rows.append(
            (
                "R4",
                "loader modules scanned for pickle/marshal/eval/exec",
                str(r["modules"]),
                f"{r['violations']} found",
                "-",
            )
        )
    for key, which in (("R5", ""), ("R5_mlp", " (MLPTrainer)")):
        r = g(key)
        if r:
            size = f" ({r['layer_sizes']}, {r['bytes']:,} bytes)" if "bytes" in r else ""
            rows.append(
                (
                    "R5",
                    f"kill -9 of a saver at random instants{which}",
                    str(r["kills"]),
                    f"{r['old_or_new']} old-or-new, {r['torn']} torn; temp left after "
                    f"{r['with_temp_left']} kills, {r['stale_after_next_save']} after next "
                    f"save{size}",
                    "-",
                )
            )
            rows.append(
                (
                    "R5",
                    f"kill -9 at each call of the save sequence{which}",
                    str(r["pause_points"]),
                    r["pause_targets"],
                    "-",
                )
            )
    for key in ("R6_faults", "R6_eintr", "R6_faults_mlp", "R6_eintr_mlp"):
        if g(key):
            r = f[key]
            which = " (MLPTrainer)" if key.endswith("_mlp") else ""
            if key.startswith("R6_faults"):
                rows.append(
                    (
                        "R6",
                        f"ENOSPC/EIO at each os call of a save{which}",
                        str(r["cases"]),
                        f"OSError; old file or complete new file, no temp ({r['sequence']})",
                        "-",
                    )
                )
            else:
                rows.append(
                    (
                        "R6",
                        f"EINTR at each retried call + short writes{which}",
                        str(r["retried"]),
                        f"all saves completed ({r['short_write_calls']} partial writes)",
                        "-",
                    )
                )
    for mode in ("identical", "fast"):
        r = g(f"R7_{mode}")
        if r:
            rows.append(
                (
                    "R7",
                    f"CLI 200-step run killed and resumed ({mode})",
                    str(r["kills"]),
                    f"{r['runs']} run(s) resumed to the end: same state hash, checkpoint "
                    f"and loss history as uninterrupted: {r['same_hash']}",
                    "-",
                )
            )
    for key in ("R8_trainer", "R8_Adam", "R8_AdamW", "R8_SGD"):
        r = g(key)
        if r:
            rows.append(
                (
                    "R8",
                    f"injected failures in {key[3:]} calls",
                    str(r["trials"]),
                    f"{r['failed_unchanged']} failed, state byte-identical "
                    f"({r['cells']} method/phase cells)",
                    "-",
                )
            )
    for key, what in (
        ("R9", "dumps(loads(f)) == f, random states"),
        ("R9_trainer", "from_checkpoint + save_checkpoint == f"),
        ("R9_mlp", "dumps(loads(f)) == f, random MLP states"),
    ):
        r = g(key)
        if r:
            rows.append(("R9", what, str(r["states"]), f"{r['byte_equal']} byte-equal", "-"))
    if g("R10_set_params_race"):
        r = f["R10_set_params_race"]
        rows.append(
            (
                "R10",
                "set_params x step from two threads, interleaved",
                f"{r['interleavings']:,}",
                f"{r['crashes']} crashes ({r['steps']:,} steps, one lock per optimizer)",
                "-",
            )
        )
    if g("R11_special_paths") and g("bad_inputs"):
        api, cli = f["R11_special_paths"]["api_cases"], f["bad_inputs"]["cli_path_rows"]
        rows.append(
            (
                "R11",
                "special files and symlinks at every written path (API + CLI)",
                str(api + cli),
                "FIFO/folder/device refused before writing; links followed",
                "-",
            )
        )
    if g("R14_inputs_mutated"):
        r = f["R14_inputs_mutated"]
        rows.append(
            (
                "R14",
                f"inputs freed or resized during a step ({r['kinds']} kinds x {r['paths']} "
                f"paths: fast, declined, strided X)",
                str(r["cells"]),
                f"{r['crashes']} crashes; {r['refused']} refused (BufferError/NumPy refcheck), "
                f"{r['harmless']} harmless (copy or capsule); same bits in {r['same_bits']}",
                "-",
            )
        )
    if g("R15_type_state"):
        r = f["R15_type_state"]
        rows.append(
            (
                "R15",
                "refuse-then-accept sequences, one type each (per-type state)",
                str(r["sequences"]),
                f"{r['poisoned']} poisoned: each outcome as in a process that never refused",
                "-",
            )
        )
    if g("R16_dp_disagree"):
        r = f["R16_dp_disagree"]
        rows.append(
            (
                "R16",
                "DataParallel ranks that disagree (rows, weights, hyperparameters, M, load)",
                str(r["cases"]),
                f"{r['refused_alike']} refused by name, the same ValueError on every rank; "
                f"{r['applied']} applied",
                "-",
            )
        )
    if g("R17_dp_job_ends"):
        r = f["R17_dp_job_ends"]
        rows.append(
            (
                "R17",
                "one rank raises, exits or gets SIGINT (construction .. mid-loop, CLI CSV load)",
                str(r["phases"]),
                f"{r['ended']} jobs ended, non-zero, within {r['limit_s']:g} s "
                f"(worst {r['worst_s']} s)",
                "-",
            )
        )
    rows.extend(_round4_rows(f))
    if g("bad_inputs"):
        r = f["bad_inputs"]
        rows.append(
            (
                "BI",
                "bad-input table rows (API)",
                str(r["rows"]),
                f"{r['entry_points']} entry points; named error, nothing changed",
                "-",
            )
        )
        rows.append(
            (
                "BI",
                "CLI bad-input table rows",
                str(r["cli_rows"]),
                "one line on stderr, exit 2, nothing written",
                "-",
            )
        )
    return rows


def _round4_rows(f):
    """R18: issue 34's defects (round 4), one row per class. Each regression test records
    `R18_<defect>` with its class, the variants it tried and how many held."""
    by_class = {}
    for key in sorted(f):
        if key.startswith("R18_"):
            r = f[key]
            by_class.setdefault(r["cls"], []).append((key[4:], r))
    rows = []
    for cls, items in sorted(by_class.items()):
        cases = sum(r["cases"] for _, r in items)
        held = sum(r["held"] for _, r in items)
        rows.append(
            (
                "R18",
                f"{cls} ({', '.join(name for name, _ in items)})",
                str(cases),
                f"{held} held: " + "; ".join(r["what"] for _, r in items),
                "-",
            )
        )
    return rows


def _table(rows):
    heads = ("fig", "what", "count", "result", "worst")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    widths[3] = min(widths[3], 90)
    line = "  ".join(h.ljust(w) for h, w in zip(heads, widths))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long", action="store_true", help="MOJOLEARN_LONG_TESTS=1 sizes")
    ap.add_argument("--from", dest="src", metavar="DIR", help="print figures from DIR")
    ap.add_argument("--keep", metavar="DIR", help="write the figures to DIR (kept)")
    args = ap.parse_args()
    if args.src:
        print(_table(_rows(_load(args.src))))
        return 0
    folder = args.keep or tempfile.mkdtemp(prefix="mojolearn-reliability-")
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ, MOJOLEARN_RELIABILITY_OUT=folder)
    if args.long:
        env["MOJOLEARN_LONG_TESTS"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            os.path.join("tests", "reliability"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t0
    summary = [l for l in proc.stdout.splitlines() if l.strip()][-1:] or ["(no output)"]
    print(_table(_rows(_load(folder))))
    print(
        f"\npytest tests/reliability: {summary[0]} ({elapsed:.0f} s wall"
        f"{', long sizes' if args.long else ', CI sizes'})"
    )
    if proc.returncode:
        print(proc.stdout[-4000:], proc.stderr[-2000:], sep="\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
