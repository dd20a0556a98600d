"""Write the identical-mode goldens: tests/golden/small_mlp_identical.json (SmallMLPTrainer
state hashes), tests/golden/mlp_identical.json (MLPTrainer state hashes for several layer
sizes) and tests/golden/kernels_identical.json (kernel outputs, tools/golden_kernels.py).

    python tools/make_golden.py            # compute, cross-check, write
    python tools/make_golden.py --check    # compute, cross-check, compare with the file

The hashes come from the pure-Python reference (tests/reference/mlp.py), which is the
executable form of docs/ARITHMETIC.md; before writing, the same run is made with the compiled
binding (identical mode) and the script refuses to write when any hash differs. Regenerate
only when the arithmetic profile changes on purpose (new profile version, new goldens).
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

GOLDEN = os.path.join(ROOT, "tests", "golden", "small_mlp_identical.json")
KERNEL_GOLDEN = os.path.join(ROOT, "tests", "golden", "kernels_identical.json")
FORMAT = "mojolearn.small-mlp-golden.v1"
INIT_SEED, DATA_SEED = 1, 2
BATCHES = (1, 32)
CHECKPOINTS = (1, 10, 100)
RECIPE = {
    "init": f"mojolearn._rng.init_small_mlp({INIT_SEED})",
    "data": f"mojolearn._rng.batches({DATA_SEED}, batch, {max(CHECKPOINTS)}); step i "
    f"(one-based) trains on batch i-1",
    "trainer": "SmallMLPTrainer(*init, data_schedule=schedule) with the default lr, betas, eps, "
    'weight_decay; schedule = {"batch": batch, "generator": "mojolearn._rng.'
    'batches", "seed": 2}',
    "hash": "SmallMLPTrainer.state_hash(): SHA-256 of the canonical checkpoint payload",
}


MLP_GOLDEN = os.path.join(ROOT, "tests", "golden", "mlp_identical.json")
MLP_FORMAT = "mojolearn.mlp-golden.v1"
# (layer sizes, batch rows, steps whose state hash is pinned): 1 to 3 hidden layers.
MLP_CASES = (
    ([8, 16, 3], 8, (1, 3)),
    ([64, 128, 10], 8, (1, 3)),
    ([784, 256, 10], 4, (1, 2)),
    ([16, 32, 32, 32, 4], 8, (1, 3)),
)
MLP_RECIPE = {
    "init": f"MLPTrainer(sizes, seed={INIT_SEED}): _layers.LayerSizes(sizes).init({INIT_SEED})",
    "data": f"mojolearn._rng.batches({DATA_SEED}, batch, max(steps), features=sizes[0], "
    f"classes=sizes[-1]); step i (one-based) trains on batch i-1",
    "trainer": "MLPTrainer(sizes, seed=1, data_schedule=schedule) with the default lr, betas, "
    'eps, weight_decay; schedule = {"batch": batch, "generator": "mojolearn.'
    '_rng.batches", "seed": 2}',
    "hash": "MLPTrainer.state_hash(): SHA-256 of the canonical checkpoint payload",
}


def schedule(batch):
    return {"batch": batch, "generator": "mojolearn._rng.batches", "seed": DATA_SEED}


def _reference_steps(p, batches, cfg, *dims):
    """(step, params, m, v) after each step of the pure-Python reference from params `p`
    (m = v = 0), one batch a step; `dims` as `tests.reference.mlp.train_step` takes them."""
    from tests.reference import mlp as R

    m, v, step = [0.0] * len(p), [0.0] * len(p), 0
    hyper = [cfg[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay")]
    for X, y in batches:
        r = R.train_step(p, m, v, step, X.tolist(), y.tolist(), *hyper, *dims)
        p, m, v, step = r["params"], r["m"], r["v"], r["step"]
        yield step, p, m, v


def reference_hashes(batch):
    from mojolearn import checkpoint
    from mojolearn._buffers.array import Array
    from mojolearn._mlp import rng as _rng
    from mojolearn._mlp import spec as _spec
    from mojolearn._mlp import state as S

    cfg = S.check_config(1e-3, (0.9, 0.999), 1e-8, 0.01)
    p0 = [x for w in _spec.init_small_mlp(INIT_SEED) for x in w._mv.tolist()]
    out = {}
    batches = _rng.batches(DATA_SEED, batch, max(CHECKPOINTS))
    for step, p, m, v in _reference_steps(p0, batches, cfg):
        if step in CHECKPOINTS:
            f = lambda xs: Array.from_list(xs, "<f4").reshape((S.TOTAL,))
            state = {
                "schema": S.SCHEMA,
                "architecture": S.ARCHITECTURE,
                "numeric_mode": "identical",
                "parameter_order": list(S.NAMES),
                "weights": S.split(f(p)),
                "optimizer": {
                    "kind": S.OPTIMIZER,
                    "step": step,
                    "m": f(m),
                    "v": f(v),
                    "flags": Array.from_list([0, 0, 0, 0], "<i4").reshape((4,)),
                },
                "config": cfg,
                "data_schedule": schedule(batch),
            }
            out[str(step)] = checkpoint.state_hash(checkpoint.encode_state(state))
    return out


def binding_hashes(batch):
    import mojolearn as ml
    from mojolearn._mlp import rng as _rng
    from mojolearn._mlp import spec as _spec

    ml.set_numeric_mode("identical")
    trainer = ml.SmallMLPTrainer(*_spec.init_small_mlp(INIT_SEED), data_schedule=schedule(batch))
    out = {}
    for X, y in _rng.batches(DATA_SEED, batch, max(CHECKPOINTS)):
        step = trainer.train_step(X, y)["step"]
        if step in CHECKPOINTS:
            out[str(step)] = trainer.state_hash()
    return out


def _mlp_data(sizes, batch, steps):
    from mojolearn._mlp import rng as _rng

    return _rng.batches(DATA_SEED, batch, max(steps), features=sizes[0], classes=sizes[-1])


def reference_mlp_hashes(sizes, batch, steps):
    from mojolearn import checkpoint
    from mojolearn._buffers.array import Array
    from mojolearn._mlp import spec as _layers
    from mojolearn._mlp import state as S

    from tests.reference import mlp as R

    spec = _layers.LayerSizes(sizes)
    cfg = S.check_config(1e-3, (0.9, 0.999), 1e-8, 0.01)
    p0 = [x for w in spec.init(INIT_SEED) for x in w._mv.tolist()]
    out = {}
    batches = _mlp_data(sizes, batch, steps)
    for step, p, m, v in _reference_steps(p0, batches, cfg, R.Dims(sizes=sizes)):
        if step in steps:
            f = lambda xs: Array.from_list(xs, "<f4").reshape((spec.total,))
            state = {
                "schema": S.MLP_SCHEMA,
                "architecture": list(sizes),
                "numeric_mode": "identical",
                "parameter_order": list(spec.names),
                "weights": S.split(f(p), spec),
                "optimizer": {"kind": S.OPTIMIZER, "step": step, "m": f(m), "v": f(v)},
                "config": cfg,
                "data_schedule": schedule(batch),
            }
            out[str(step)] = checkpoint.state_hash(checkpoint.encode_state(state))
    return out


def binding_mlp_hashes(sizes, batch, steps):
    import mojolearn as ml

    ml.set_numeric_mode("identical")
    trainer = ml.MLPTrainer(sizes, seed=INIT_SEED, data_schedule=schedule(batch))
    out = {}
    for X, y in _mlp_data(sizes, batch, steps):
        step = trainer.train_step(X, y)["step"]
        if step in steps:
            out[str(step)] = trainer.state_hash()
    return out


def build_mlp():
    from mojolearn._mlp import state as S
    from mojolearn.checkpoint import PROFILE

    cases = []
    for sizes, batch, steps in MLP_CASES:
        ref = reference_mlp_hashes(sizes, batch, steps)
        got = binding_mlp_hashes(sizes, batch, steps)
        if ref != got:
            sys.exit(
                f"make_golden: the binding disagrees with the pure-Python reference for "
                f"{sizes} at batch {batch}:\n  reference {ref}\n  binding   {got}\n"
                f"not writing goldens"
            )
        cases.append({"layer_sizes": sizes, "batch": batch, "state_hash_after_steps": ref})
    doc = {
        "format": MLP_FORMAT,
        "profile": PROFILE,
        "numeric_mode": "identical",
        "recipe": MLP_RECIPE,
        "cases": cases,
    }
    return S.canonical(doc) + b"\n"


def build():
    from mojolearn._mlp import state as S
    from mojolearn.checkpoint import PROFILE

    cases = []
    for batch in BATCHES:
        ref = reference_hashes(batch)
        got = binding_hashes(batch)
        if ref != got:
            sys.exit(
                f"make_golden: the binding disagrees with the pure-Python reference at "
                f"batch {batch}:\n  reference {ref}\n  binding   {got}\nnot writing goldens"
            )
        cases.append({"batch": batch, "state_hash_after_steps": ref})
    doc = {
        "format": FORMAT,
        "profile": PROFILE,
        "numeric_mode": "identical",
        "recipe": RECIPE,
        "cases": cases,
    }
    return S.canonical(doc) + b"\n"


def main():
    import golden_kernels
    from mojolearn.checkpoint import PROFILE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the file, write nothing")
    args = parser.parse_args()
    files = [
        (GOLDEN, build()),
        (KERNEL_GOLDEN, golden_kernels.build(PROFILE)),
        (MLP_GOLDEN, build_mlp()),
    ]
    if args.check:
        same = True
        for path, data in files:
            with open(path, "rb") as f:
                same &= f.read() == data
        print("goldens match" if same else "goldens DIFFER from a fresh computation")
        return 0 if same else 1
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    for path, data in files:
        with open(path, "wb") as f:
            f.write(data)
        print(f"wrote {os.path.relpath(path, ROOT)}")
    print(files[0][1].decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
