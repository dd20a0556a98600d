"""Exact resume across processes, NumPy-free operation, and the golden state hashes.

N steps uninterrupted == N/2 steps + save_checkpoint + a NEW process + from_checkpoint + N/2
steps: same weights, moments, step and losses, byte for byte."""

import json
import os

import mojolearn as ml
import pytest
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
from mojolearn._runtime import backend as _backend

from tests.helpers import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden", "small_mlp_identical.json")

RESUME = """
import json, sys
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
t = ml.SmallMLPTrainer.from_checkpoint(sys.argv[1] if len(sys.argv) > 1 else {path!r})
sched = t.state_dict()["data_schedule"]
batches = _rng.batches(sched["seed"], sched["batch"], {total})
losses = [t.train_step(X, y)["loss"] for X, y in batches[t.step_:]]
sd = t.state_dict()
print(json.dumps({{"losses": [x.hex() for x in losses], "step": t.step_, "hash": t.state_hash(),
                  "state": [sd["optimizer"]["m"].tobytes().hex(), sd["optimizer"]["v"].tobytes().hex()]
                  + [w.tobytes().hex() for w in sd["weights"].values()],
                  "numpy": "numpy" in sys.modules}}))
"""


def _state(t):
    sd = t.state_dict()
    return [sd["optimizer"]["m"].tobytes().hex(), sd["optimizer"]["v"].tobytes().hex()] + [
        w.tobytes().hex() for w in sd["weights"].values()
    ]


@pytest.mark.parametrize("n", [2, 10, 40])
def test_exact_resume_in_new_process(tmp_path, seed, n):
    seed %= 1 << 32
    sched = {"seed": seed, "batch": 8, "generator": "mojolearn._rng.batches"}
    batches = _rng.batches(seed, 8, n)
    full = ml.SmallMLPTrainer(*_spec.init_small_mlp(seed), data_schedule=sched, lr=5e-3)
    losses = [full.train_step(X, y)["loss"] for X, y in batches]
    half = ml.SmallMLPTrainer(*_spec.init_small_mlp(seed), data_schedule=sched, lr=5e-3)
    first = [half.train_step(X, y)["loss"] for X, y in batches[: n // 2]]
    path = tmp_path / "half.json"
    half.save_checkpoint(path)
    out = json.loads(run_python(RESUME.format(path=str(path), total=n)))
    assert first + [float.fromhex(x) for x in out["losses"]] == losses, f"seed {seed}"
    assert out["step"] == full.step_ == n
    assert out["state"] == _state(full), f"seed {seed}"
    assert out["hash"] == full.state_hash()


NUMPY_FREE = """
import json, os, sys, tempfile
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
assert "numpy" not in sys.modules
t = ml.SmallMLPTrainer(*_spec.init_small_mlp(3), data_schedule={{"seed": 4, "batch": 16}})
batches = _rng.batches(4, 16, 6)
for X, y in batches[:3]:
    t.train_step(X, y)
r = t.train_step(*batches[3], return_input_grad=True)
path = os.path.join({folder!r}, "nf.json")
t.save_checkpoint(path)
u = ml.SmallMLPTrainer.from_checkpoint(path)
for X, y in batches[4:]:
    a, b = t.train_step(X, y), u.train_step(X, y)
    assert a["loss"] == b["loss"]
assert t.state_hash() == u.state_hash()
loss, grads = u.loss_and_grads(*batches[0])
u.apply_gradients(grads)
u.predict_logits_sessions([batches[0][0], batches[1][0]])
print(json.dumps({{"numpy": "numpy" in sys.modules, "step": t.step_, "hash": t.state_hash()}}))
"""


def test_numpy_free_train_checkpoint_resume(tmp_path):
    out = json.loads(run_python(NUMPY_FREE.format(folder=str(tmp_path)), block_numpy=True))
    assert out["numpy"] is False and out["step"] == 6
    # ... and a further NEW process, still without NumPy, resumes from that file.
    resumed = json.loads(
        run_python(RESUME.format(path=str(tmp_path / "nf.json"), total=6), block_numpy=True)
    )
    assert resumed["numpy"] is False and resumed["step"] == 6 and resumed["hash"] == out["hash"]


HINT = (
    "golden state hashes differ. If the identical-mode arithmetic changed ON PURPOSE, bump "
    "the profile version (docs/ARITHMETIC.md) and regenerate with `python tools/"
    "make_golden.py`; otherwise this is a reproducibility regression"
)


def _golden():
    with open(GOLDEN) as f:
        doc = json.load(f)
    assert doc["format"] == "mojolearn.small-mlp-golden.v1", HINT
    assert doc["profile"] == "mojolearn.portable-fp32.v2", HINT
    return doc


@pytest.mark.skipif(_backend.requested_mode() != "identical", reason="goldens are identical mode")
def test_golden_state_hashes_binding():
    for case in _golden()["cases"]:
        batch = case["batch"]
        sched = {"batch": batch, "generator": "mojolearn._rng.batches", "seed": 2}
        t = ml.SmallMLPTrainer(*_spec.init_small_mlp(1), data_schedule=sched)
        got = {}
        for X, y in _rng.batches(2, batch, 100):
            step = t.train_step(X, y)["step"]
            if str(step) in case["state_hash_after_steps"]:
                got[str(step)] = t.state_hash()
        assert got == case["state_hash_after_steps"], f"batch {batch}: {HINT}"


def test_golden_state_hashes_reference():
    """The pure-Python reference (no binding) reproduces the batch-1 goldens."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_golden", os.path.join(ROOT, "tools", "make_golden.py")
    )
    mg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mg)
    case = next(c for c in _golden()["cases"] if c["batch"] == 1)
    assert mg.reference_hashes(1) == case["state_hash_after_steps"], HINT
