"""Reproduce the identical-mode golden hashes with the binding this process loads (any vendor)
and print a table; exit 1 on any difference. Used by tools/device_check.sh on a GPU machine
(MOJOLEARN_VENDOR=cuda), and runnable anywhere: `python tools/device_golden.py`.

The goldens are the CPU's bits. SmallMLPTrainer's cases and MLPTrainer's (tests/golden/
mlp_identical.json: [8,16,3], [64,128,10], [784,256,10], [16,32,32,32,4]) run through the
trainer's resident session, which in a GPU build keeps its state on the device for every layer
sizes (the fused one-block kernel for the small [8,16,3] steps, the per-layer kernels for the
others). When the loaded binding is not the cpu one, the MLP cases also run through the
stateless `mlp_train_step` entry (k training steps, then a gradient pass with the input
gradient) of both the loaded and the cpu binding, whose outputs must be byte-equal."""

import array
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
            print(
                f"{case['batch']:>5} {step:>5}  {got.get(step, '-'):<64}  {'yes' if same else 'NO'}"
            )
    with open(make_golden.MLP_GOLDEN) as f:
        mlp = json.load(f)
    print(f"{'MLPTrainer layer sizes':<24} {'batch':>5} {'step':>5}  match")
    for case in mlp["cases"]:
        steps = tuple(int(s) for s in case["state_hash_after_steps"])
        got = make_golden.binding_mlp_hashes(case["layer_sizes"], case["batch"], steps)
        for step, want in case["state_hash_after_steps"].items():
            same = got.get(step) == want
            ok &= same
            print(
                f"{str(case['layer_sizes']):<24} {case['batch']:>5} {step:>5}  "
                f"{'yes' if same else 'NO'}"
            )
    if mojolearn.vendor_used() != "cpu":
        ok &= stateless_matches_cpu(mlp["cases"])
    print("golden hashes reproduced" if ok else "GOLDEN HASH MISMATCH")
    return 0 if ok else 1


HYPER = (1e-2, 0.9, 0.999, 1e-8, 0.01)


def _stateless(module, spec, batches, params):
    """`mlp_train_step` of one binding module: len(batches) training steps from `params`
    (zero moments, t = 1), then a gradient pass with the input gradient on the first batch
    from the new state; every output as bytes."""
    from mojolearn._buffers.array import _CODES

    rows = len(batches[0][1])
    k = len(batches)
    n = spec.total

    def buf(count):
        return array.array("f", bytes(4 * max(count, 1)))

    def labels(data):
        return array.array(_CODES["<i4"], data)

    x = array.array("f", b"".join(X.tobytes() for X, _ in batches))
    y = labels(b"".join(t.tobytes() for _, t in batches))
    p = array.array("f", b"".join(w.tobytes() for w in params))
    m, v = buf(n), buf(n)
    new = [buf(n), buf(n), buf(n)]
    outs = [buf(k), buf(rows * spec.classes), buf(n), buf(rows * spec.inputs)]

    def call(mode, k_, state, xs, ys, dest, want_dx):
        addrs = [
            xs.buffer_info()[0],
            ys.buffer_info()[0],
            *(a.buffer_info()[0] for a in state),
            *(a.buffer_info()[0] for a in dest),
            *(a.buffer_info()[0] for a in outs),
            spec.sizes_addr,
        ]
        module.mlp_train_step(addrs, [spec.layers, rows, mode, k_, 1, *HYPER, want_dx])

    call(2, k, (p, m, v), x, y, new, 0)
    result = [a.tobytes() for a in new + outs[:3]]
    call(
        1,
        1,
        new,
        array.array("f", batches[0][0].tobytes()),
        labels(batches[0][1].tobytes()),
        [buf(n), buf(n), buf(n)],
        1,
    )
    return result + [outs[0][:1].tobytes()] + [a.tobytes() for a in outs[1:]]


def stateless_matches_cpu(cases):
    """The stateless fused entry of the loaded binding against the cpu binding's, byte for
    byte, on every MLP golden case."""
    import mojolearn
    from mojolearn._mlp import spec as _layers
    from mojolearn._runtime import backend as _backend

    loaded = _backend.binding().raw
    cpu = _backend._import("cpu", mojolearn.numeric_mode_used())
    print(f"{'mlp_train_step layer sizes':<28} {'batch':>5} {'steps':>5}  same bytes as cpu")
    ok = True
    for case in cases:
        sizes = case["layer_sizes"]
        steps = max(int(s) for s in case["state_hash_after_steps"])
        spec = _layers.LayerSizes(sizes)
        batches = list(make_golden._mlp_data(sizes, case["batch"], (steps,)))
        params = spec.init(make_golden.INIT_SEED)
        same = _stateless(loaded, spec, batches, params) == _stateless(cpu, spec, batches, params)
        ok &= same
        print(f"{str(sizes):<28} {case['batch']:>5} {steps:>5}  {'yes' if same else 'NO'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
