"""Reproduce the identical-mode golden hashes with the binding this process loads (any vendor)
and print a table; exit 1 on any difference. Used by tools/device_check.sh on a GPU machine
(MOJOLEARN_VENDOR=cuda), and runnable anywhere: `python tools/device_golden.py`."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import make_golden  # noqa: E402  (the recipe: seeds, batches, checkpoints)


def main():
    import mojolearn

    with open(make_golden.GOLDEN) as f:
        golden = json.load(f)
    ok = True
    print(f"vendor {mojolearn.vendor_used()}, mode {mojolearn.numeric_mode_used()}")
    print(f"{'batch':>5} {'step':>5}  {'state hash (this vendor)':<64}  match")
    for case in golden["cases"]:
        got = make_golden.binding_hashes(case["batch"])
        for step, want in case["state_hash_after_steps"].items():
            same = got.get(step) == want
            ok &= same
            print(f"{case['batch']:>5} {step:>5}  {got.get(step, '-'):<64}  {'yes' if same else 'NO'}")
    with open(make_golden.MLP_GOLDEN) as f:
        mlp = json.load(f)
    print(f"{'MLPTrainer layer sizes':<24} {'batch':>5} {'step':>5}  match")
    for case in mlp["cases"]:
        steps = tuple(int(s) for s in case["state_hash_after_steps"])
        got = make_golden.binding_mlp_hashes(case["layer_sizes"], case["batch"], steps)
        for step, want in case["state_hash_after_steps"].items():
            same = got.get(step) == want
            ok &= same
            print(f"{str(case['layer_sizes']):<24} {case['batch']:>5} {step:>5}  "
                  f"{'yes' if same else 'NO'}")
    print("golden hashes reproduced" if ok else "GOLDEN HASH MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
