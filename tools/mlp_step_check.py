"""A/B check: the trainer's fused step (one binding call on its resident session,
`mlp_resident_step`) against the per-operation path (MOJOLEARN_MLP_FUSED=0) on random
problems, in lockstep, for many steps.

    python tools/mlp_step_check.py                 # both numeric modes, one subprocess each
    python tools/mlp_step_check.py --mode fast     # one mode, in this process
    python tools/mlp_step_check.py --steps 500 --batches 1,32,256

Each step compares the loss, logits, the four gradients, the input gradient and the whole
state (parameters, moments, step) bit for bit; prints steps, the largest ulp distance seen and
the microseconds per step of each path; exits 1 on any bit difference.
"""

import argparse
import os
import struct
import subprocess
import sys
import time


def _ordinals(raw):
    out = []
    for (u,) in struct.iter_unpack("<I", raw):
        out.append(-(u & 0x7FFFFFFF) if u & 0x80000000 else u)
    return out


def max_ulp(a, b):
    """Largest float32 ulp distance between two equal-length float32 byte strings."""
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(_ordinals(a), _ordinals(b))), default=0)


def _outputs(result):
    parts = [
        struct.pack("<f", result["loss"]),
        result["logits"].tobytes(),
        result["input_grad"].tobytes(),
    ]
    parts += [g.tobytes() for g in result["gradients"].values()]
    return b"".join(parts)


def _state_bytes(trainer):
    st = trainer._st
    return st.params.tobytes() + st.m.tobytes() + st.v.tobytes()


def check(batch, steps, seed):
    import mojolearn as ml
    from mojolearn._mlp import rng as _rng
    from mojolearn._mlp import spec as _spec

    init = _spec.init_small_mlp(seed)
    fused = ml.SmallMLPTrainer(*init, data_schedule={"seed": seed}, lr=1e-2)
    perop = ml.SmallMLPTrainer(*init, data_schedule={"seed": seed}, lr=1e-2)
    data = _rng.batches(seed + 1, batch, min(steps, 16))
    worst, time_f, time_p = 0, 0.0, 0.0
    for i in range(steps):
        X, y = data[i % len(data)]
        os.environ["MOJOLEARN_MLP_FUSED"] = "1"
        t0 = time.perf_counter()
        rf = fused.train_step(X, y, return_input_grad=True)
        time_f += time.perf_counter() - t0
        os.environ["MOJOLEARN_MLP_FUSED"] = "0"
        t0 = time.perf_counter()
        rp = perop.train_step(X, y, return_input_grad=True)
        time_p += time.perf_counter() - t0
        worst = max(
            worst,
            max_ulp(_outputs(rf), _outputs(rp)),
            max_ulp(_state_bytes(fused), _state_bytes(perop)),
        )
        if rf["step"] != rp["step"]:
            worst = float("inf")
    os.environ.pop("MOJOLEARN_MLP_FUSED", None)
    return worst, 1e6 * time_f / steps, 1e6 * time_p / steps


def run_mode(args):
    import mojolearn as ml

    ml.set_numeric_mode(args.mode)
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"mode {ml.numeric_mode_used()}, vendor {ml.vendor_used()}, seed {seed}")
    print(
        f"{'batch':>6} {'steps':>6} {'max ulp':>8} {'fused us/step':>14} "
        f"{'per-op us/step':>15} {'per-op/fused':>13}"
    )
    bad = False
    for batch in args.batches:
        worst, uf, up = check(batch, args.steps, seed + batch)
        bad |= worst != 0
        print(f"{batch:>6} {args.steps:>6} {worst:>8} {uf:>14.1f} {up:>15.1f} {up / uf:>12.2f}x")
    print(
        "BIT DIFFERENCE between the fused and the per-operation step"
        if bad
        else "fused == per-operation, bit for bit"
    )
    return 1 if bad else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("identical", "fast"))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batches", default="1,32,256")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.mode:
        return run_mode(args)
    rc = 0
    for mode in ("identical", "fast"):
        cmd = [
            sys.executable,
            __file__,
            "--mode",
            mode,
            "--steps",
            str(args.steps),
            "--batches",
            ",".join(map(str, args.batches)),
        ]
        rc |= subprocess.call(cmd)
        print()
    return rc


if __name__ == "__main__":
    sys.exit(main())
