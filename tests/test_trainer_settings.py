"""issue 29 (part): `lr` and `weight_decay` are settable properties of both trainers (checked as
at construction, effective at the next step, recorded); every other public attribute is
read-only."""

import array
import math
import random

import mojolearn as ml
import pytest
from mojolearn._mlp import spec as _spec

from .helpers import data_parallel_runner

SIZES = {"small": [8, 16, 3], "mlp": [8, 10, 7, 3]}


def _make(kind):
    if kind == "small":
        return ml.SmallMLPTrainer(*_spec.init_small_mlp(5), data_schedule={"a": 1})
    return ml.MLPTrainer(SIZES["mlp"], seed=5, data_schedule={"a": 1})


def _batch(kind, rows, seed=0):
    """(X, y): float32 (rows, inputs) and int32 (rows,) memoryviews, no NumPy."""
    inputs, classes = SIZES[kind][0], SIZES[kind][-1]
    r = random.Random(seed)
    x = array.array("f", [r.uniform(-2.0, 2.0) for _ in range(rows * inputs)])
    y = array.array("i", [r.randrange(classes) for _ in range(rows)])
    return memoryview(x).cast("B").cast("f", (rows, inputs)), memoryview(y)


def _twin(kind, state, **change):
    """A fresh trainer holding `state` with its config changed, through load_state_dict."""
    state = dict(state)
    state["config"] = dict(state["config"], **change)
    return _make(kind).load_state_dict(state)


def _advance(t, kind, how):
    X, y = _batch(kind, 12, seed=1)
    if how == "train_step":
        t.train_step(X, y)
    else:
        X3, y3 = _batch(kind, 3 * 4, seed=2)
        t.train_steps(X3, y3, 3)


@pytest.mark.parametrize("fused", ["1", "0"])
@pytest.mark.parametrize("how", ["train_step", "train_steps"])
@pytest.mark.parametrize("kind", ["small", "mlp"])
@pytest.mark.parametrize(("key", "value"), [("lr", 0.05), ("weight_decay", 0.0)])
def test_set_takes_effect_at_next_step(kind, how, key, value, fused, monkeypatch):
    monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
    t = _make(kind)
    X, y = _batch(kind, 12)
    t.train_step(X, y)  # nonzero moments: weight decay and lr both matter
    before = t.state_dict()
    untouched = _twin(kind, before)

    setattr(t, key, value)
    assert getattr(t, key) == value
    assert t.state_dict()["config"][key] == value
    assert t.step_ == 1

    twin = _twin(kind, before, **{key: value})
    assert t.state_hash() == twin.state_hash()
    _advance(t, kind, how)
    _advance(twin, kind, how)
    _advance(untouched, kind, how)
    assert t.state_hash() == twin.state_hash()  # bit for bit a trainer built with the value
    assert t.weights_["bias1"].tolist() == twin.weights_["bias1"].tolist()
    assert t.state_hash() != untouched.state_hash()  # and the set changed the step


BAD = [
    ("lr", -0.1, "invalid learning rate -0.1 (must be > 0 in float32)"),
    ("lr", 0.0, "invalid learning rate 0.0 (must be > 0 in float32)"),
    ("lr", 1e-50, "invalid learning rate 1e-50 (must be > 0 in float32)"),
    ("lr", math.nan, "lr must be a finite float32, got nan"),
    ("lr", "0.1", "lr must be a real number, got '0.1' (str)"),
    ("lr", True, "lr must be a real number, got True (bool)"),
    ("weight_decay", -1e-3, "invalid weight_decay -0.001 (must be >= 0)"),
    ("weight_decay", math.inf, "weight_decay must be a finite float32, got inf"),
    ("weight_decay", None, "weight_decay must be a real number, got None (NoneType)"),
]


@pytest.mark.parametrize("kind", ["small", "mlp"])
@pytest.mark.parametrize(("key", "value", "message"), BAD)
def test_bad_value_refused_as_constructor_and_changes_nothing(kind, key, value, message):
    api = "SmallMLPTrainer" if kind == "small" else "MLPTrainer"
    with pytest.raises(ValueError) as built:
        if kind == "small":
            ml.SmallMLPTrainer(*_spec.init_small_mlp(5), data_schedule={"a": 1}, **{key: value})
        else:
            ml.MLPTrainer(SIZES["mlp"], seed=5, data_schedule={"a": 1}, **{key: value})
    assert str(built.value) == f"{api}: {message}"

    t = _make(kind)
    X, y = _batch(kind, 12)
    t.train_step(X, y)
    ref = _make(kind).load_state_dict(t.state_dict())
    h = t.state_hash()
    session = t._session
    with pytest.raises(ValueError) as got:
        setattr(t, key, value)
    assert str(got.value) == str(built.value)  # the constructor's message, word for word
    assert t.state_hash() == h and t._session is session
    assert getattr(t, key) == {"lr": 1e-3, "weight_decay": 0.01}[key]
    t.train_step(X, y)
    ref.train_step(X, y)
    assert t.state_hash() == ref.state_hash()  # the next step as before


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_set_is_recorded_and_resumes(kind, tmp_path):
    t = _make(kind)
    X, y = _batch(kind, 12)
    t.train_step(X, y)
    t.lr = 0.025
    t.weight_decay = 0.5
    path = tmp_path / "ck.json"
    t.save_checkpoint(path)
    back = type(t).from_checkpoint(path)
    assert (back.lr, back.weight_decay) == (0.025, 0.5)
    assert back.state_dict()["config"] == t.state_dict()["config"]
    assert back.state_hash() == t.state_hash()
    t.train_step(X, y)
    back.train_step(X, y)
    assert back.state_hash() == t.state_hash()
    other = _make(kind)
    other.load_checkpoint(path)
    assert other.lr == 0.025
    import copy
    import pickle

    for clone in (copy.copy(t), copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
        assert (clone.lr, clone.weight_decay) == (0.025, 0.5)
        assert clone.state_hash() == t.state_hash()


SETTABLE = {"lr", "weight_decay", "lr_schedule", "data_schedule", "preprocessing"}


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_every_other_public_attribute_is_read_only(kind):
    t = _make(kind)
    t.train_step(*_batch(kind, 4))
    names = sorted(n for n in dir(t) if not n.startswith("_")) + ["learning_rate", "betas"]
    assert {"layer_sizes", "max_rows", "step_", "weights_", "train_step"} <= set(names)
    assert SETTABLE <= set(names)
    h = t.state_hash()
    for name in names:
        if name in SETTABLE:
            continue
        had = getattr(t, name, None)
        with pytest.raises(AttributeError):
            setattr(t, name, 1)
        with pytest.raises(AttributeError):
            delattr(t, name)
        assert not hasattr(t, "__dict__")
        if callable(had):
            assert getattr(t, name) == had
        elif had is None:
            assert not hasattr(t, name)
    assert (t.layer_sizes, t.max_rows, t.step_) == (SIZES[kind], t.max_rows, 1)
    for name in ("lr", "weight_decay", "lr_schedule"):
        with pytest.raises(AttributeError):
            delattr(t, name)
    assert t.state_hash() == h


# DataParallel after a set: the set reopens the session, so `dp` compares the processes'
# state hashes (which hold the config) at its next step.
_DP_CHILD = """
import os, sys
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
from mojolearn._runtime.world import OneProcess
from mojolearn.distributed import DataParallel

mode = sys.argv[1]
t = ml.MLPTrainer([8, 24, 16, 3], seed=5, data_schedule={"run": "dp"})
comm = OneProcess() if os.environ.get("DP_ALONE") == "1" else None
dp = DataParallel(t, microbatches=2, comm=comm)
for i, (X, y) in enumerate(_rng.batches(11, 32, 4)):
    if i == 2 and (mode == "all" or dp.rank == 1):
        t.lr = 0.05
    try:
        dp.train_step(X, y)
    except ValueError as e:
        sys.stdout.write(f"refused {dp.rank} {e}\\n")  # one write: ranks share the pipe
        sys.stdout.flush()
        sys.exit(0)
if dp.rank == 0:
    print(t.step_, t.state_hash(), flush=True)
"""


def test_data_parallel_after_a_set():
    run = data_parallel_runner(_DP_CHILD)

    alone = run(False, "all", alone=True).split()
    assert alone[0] == "4"
    assert run(True, "all").split() == alone  # set everywhere: the same bits
    one = run(True, "one")  # set on rank 1 only: refused at the next step
    assert one.count("refused") == 2 and "the trainer's state (state hash)" in one
