"""On a GPU machine (tools/device_check.sh runs it): µs per AdamW training step of MLPTrainer at
[784,256,10] batch 256 on the GPU and on the CPU binding, beside torch eager on the same GPU
(fused AdamW) when torch is importable there and finds the device; otherwise it says why.

    python tools/device_bench_mlp.py [--rounds 5] [--budget 0.3] [--vendor cuda]

The same weights, batches, rounds and medians as tools/bench_mlp.py (whose children it runs),
identical mode. Ratios are torch's time / ours (> 1: we are faster).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mlp  # noqa: E402

CELL = 5  # [784, 256, 10], batch 256


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per round")
    parser.add_argument("--vendor", default="cuda", help="the GPU vendor of our binding")
    args = parser.parse_args()
    sizes, batch = bench_mlp.CELLS[CELL]
    cache = tempfile.mkdtemp(prefix="device_bench_mlp.")
    os.environ["BENCH_MLP_CACHE"] = cache  # the children read the batches made here
    rows = []  # (label, µs) of what ran
    try:
        bench_mlp.problem(sizes, batch)
        for vendor in (args.vendor, "cpu"):
            env = {"MOJOLEARN_VENDOR": vendor, "MOJOLEARN_NUMERIC_MODE": "identical"}
            res, err = bench_mlp.run_child("ours", env, [CELL], args.rounds, args.budget)
            if err:
                print(f"mojolearn on {vendor}: not measured ({err})")
                continue
            for name in ("step", "steps64"):
                label = "train_step" if name == "step" else "train_steps(64), per step"
                rows.append((f"mojolearn {vendor} {label}", statistics.median(res[CELL][name])))
        res, err = bench_mlp.run_child("torch_cuda", {}, [CELL], args.rounds, args.budget)
        torch_us = None
        if err:
            print(f"torch eager on the GPU: not measured ({err})")
        else:
            torch_us = statistics.median(res[CELL]["torch cuda"])
            rows.append(("torch eager cuda, fused AdamW", torch_us))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"µs per AdamW step, {sizes} batch {batch}, identical mode (median of rounds)")
    for label, us in rows:
        ratio = f"  torch / this {torch_us / us:.2f}" if torch_us and "mojolearn" in label else ""
        print(f"  {label:<44}{us:>10.1f}{ratio}")


if __name__ == "__main__":
    main()
