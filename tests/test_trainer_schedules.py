"""issue 29 (part): learning-rate schedules inside both trainers.

Every scheduled step runs at `lr_at(t)` (t one-based) bit for bit as a trainer whose `lr` is set
by hand to that rate; `train_steps(k)` is k `train_step`s; the schedule is recorded, so a run
resumed mid-schedule (checkpoint file, state_dict, a fresh process) ends with the uninterrupted
run's state hash; a refused rate or schedule changes nothing; DataParallel processes must agree
on it; our step indexing against torch's schedulers is pinned (DEVIATIONS: schedule indexing).
"""

import array
import copy
import json
import math
import pickle
import random

import mojolearn as ml
import pytest
from mojolearn import checkpoint as ckpt
from mojolearn._mlp import spec as _spec
from mojolearn._mlp import state as _state
from mojolearn._runtime.world import OneProcess
from mojolearn.distributed import DataParallel

from .helpers import data_parallel_runner, run_python

SIZES = {"small": [8, 16, 3], "mlp": [8, 10, 7, 3]}
FILE_SCHEMA = {"small": ckpt.FILE_SCHEMA, "mlp": ckpt.MLP_FILE_SCHEMA}


class Halving:
    """A custom schedule: binary64 rates that are not float32 values (used as given)."""

    def __init__(self, base=0.02):
        self.base = base

    def lr_at(self, t):
        return self.base * 0.9**t


class Bad:
    """A custom schedule whose rate at step `at` is `value` (or raises it, if an exception)."""

    def __init__(self, at, value):
        self.at, self.value = at, value

    def lr_at(self, t):
        if t != self.at:
            return 0.01
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


def _cls(kind):
    return ml.SmallMLPTrainer if kind == "small" else ml.MLPTrainer


def _make(kind, seed=5, **kw):
    if kind == "small":
        return ml.SmallMLPTrainer(*_spec.init_small_mlp(seed), data_schedule={"a": 1}, **kw)
    return ml.MLPTrainer(SIZES["mlp"], seed=seed, data_schedule={"a": 1}, **kw)


def _batches(kind, rows, n, seed):
    """n (X, y) batches: float32 (rows, inputs) and int32 (rows,) Arrays, no NumPy."""
    inputs, classes = SIZES[kind][0], SIZES[kind][-1]
    r = random.Random(seed)
    out = []
    for _ in range(n):
        x = [r.uniform(-2.0, 2.0) for _ in range(rows * inputs)]
        y = [r.randrange(classes) for _ in range(rows)]
        out.append(
            (ml.Array.from_list(x, "<f4").reshape((rows, inputs)), ml.Array.from_list(y, "<i4"))
        )
    return out


def _stack(batches):
    xs = [v for x, _ in batches for v in x.tolist()]
    ys = [v for _, y in batches for v in y.tolist()]
    inputs = batches[0][0].shape[1]
    return ml.Array.from_list(xs, "<f4").reshape((len(ys), inputs)), ml.Array.from_list(ys, "<i4")


def _run(t, batches, how):
    """Train on `batches` one call per step, or in one `train_steps` call; the losses."""
    if how == "train_step":
        return [t.train_step(X, y)["loss"] for X, y in batches]
    return t.train_steps(*_stack(batches), len(batches))["losses"]


def _bits(t):
    """The trainer's numbers, not its config: weights, moments, step (bytes)."""
    sd = t.state_dict()
    opt = sd["optimizer"]
    tensors = list(sd["weights"].values()) + [opt["m"], opt["v"]]
    return b"".join(a.tobytes() for a in tensors), opt["step"]


def _cosine(seed=0):
    r = random.Random(seed)
    w = r.randint(2, 4)
    return ml.WarmupCosineLR(r.uniform(0.01, 0.05), w, w + r.randint(5, 9), r.uniform(1e-4, 1e-3))


def _seeded_schedules(seed):
    r = random.Random(seed)
    w = r.randint(1, 3)
    return [
        _cosine(seed),
        ml.WarmupLinearLR(r.uniform(0.01, 0.05), w, w + 6, 2e-4),
        ml.ConstantLR(r.uniform(0.01, 0.05), warmup_steps=w),
        Halving(r.uniform(0.01, 0.03)),
    ]


# ------------------------------------------------------------ the rate each step uses


@pytest.mark.parametrize("fused", ["1", "0"])
@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_each_step_runs_at_the_scheduled_rate_bit_for_bit(kind, fused, seed, monkeypatch):
    monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
    for i, schedule in enumerate(_seeded_schedules(seed)):
        sched = _make(kind, lr_schedule=schedule)
        by_hand = _make(kind)
        for t, (X, y) in enumerate(_batches(kind, 6, 10, seed + i), start=1):
            want = schedule.lr_at(t)
            assert sched.lr == want  # the rate the next step uses
            by_hand.lr = want
            a, b = sched.train_step(X, y), by_hand.train_step(X, y)
            assert a["loss"] == b["loss"], (seed, i, t)
            assert _bits(sched) == _bits(by_hand), (seed, i, t)
        assert sched.state_hash() != by_hand.state_hash()  # the record is part of the state


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_apply_gradients_and_data_parallel_use_the_scheduled_rate(kind, seed):
    schedule = _cosine(seed)
    sched, by_hand, dp_sched = _make(kind, lr_schedule=schedule), _make(kind), None
    dp_trainer = _make(kind, lr_schedule=_cosine(seed))
    dp_sched = DataParallel(dp_trainer, microbatches=2, comm=OneProcess())
    dp_hand_trainer = _make(kind)
    dp_hand = DataParallel(dp_hand_trainer, microbatches=2, comm=OneProcess())
    for t, (X, y) in enumerate(_batches(kind, 8, 6, seed), start=1):
        by_hand.lr = dp_hand_trainer.lr = schedule.lr_at(t)
        sched.apply_gradients(sched.loss_and_grads(X, y)[1])
        by_hand.apply_gradients(by_hand.loss_and_grads(X, y)[1])
        assert _bits(sched) == _bits(by_hand), (seed, t)
        assert dp_sched.train_step(X, y) == dp_hand.train_step(X, y)
        assert _bits(dp_trainer) == _bits(dp_hand_trainer), (seed, t)


def test_a_regrown_session_keeps_the_scheduled_rate(seed):
    # 300 rows outgrow the first session (256): the step runs in a new one, at the rate.
    schedule = Halving()
    sched = ml.MLPTrainer(SIZES["mlp"], seed=3, data_schedule={"a": 1}, lr_schedule=schedule)
    by_hand = ml.MLPTrainer(SIZES["mlp"], seed=3, data_schedule={"a": 1})
    for t, (X, y) in enumerate(_batches("mlp", 300, 2, seed), start=1):
        by_hand.lr = schedule.lr_at(t)
        sched.train_step(X, y)
        by_hand.train_step(X, y)
    assert _bits(sched) == _bits(by_hand)


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_a_rate_of_zero_moves_the_moments_not_the_weights(kind, seed):
    t = _make(kind, lr_schedule=ml.WarmupCosineLR(0.05, 1, 3))  # lr_at(3) = min_lr = 0
    batches = _batches(kind, 5, 3, seed)
    _run(t, batches[:2], "train_step")
    before = t.state_dict()
    assert t.lr == 0.0
    t.train_step(*batches[2])
    after = t.state_dict()
    assert [w.tobytes() for w in after["weights"].values()] == [
        w.tobytes() for w in before["weights"].values()
    ]
    assert after["optimizer"]["m"].tobytes() != before["optimizer"]["m"].tobytes()
    assert after["optimizer"]["step"] == 3


# ------------------------------------------------------------ train_steps == k train_step


@pytest.mark.parametrize("fused", ["1", "0"])
@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_train_steps_gives_the_bits_of_k_train_steps(kind, fused, seed, monkeypatch):
    monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
    for i, schedule in enumerate(_seeded_schedules(seed)):
        one, many = _make(kind, lr_schedule=schedule), _make(kind, lr_schedule=schedule)
        batches = _batches(kind, 4, 12, seed + i)
        k_losses = _run(many, batches[:1], "train_steps") + _run(many, batches[1:], "train_steps")
        assert _run(one, batches, "train_step") == k_losses, (seed, i)
        assert one.state_hash() == many.state_hash(), (seed, i)
        assert many.step_ == 12


# ------------------------------------------------------------ resume mid-schedule


@pytest.mark.parametrize("via", ["checkpoint", "state_dict"])
@pytest.mark.parametrize("how", ["train_step", "train_steps"])
@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_resumed_mid_schedule_gives_the_uninterrupted_hash(kind, how, via, seed, tmp_path):
    schedule = _cosine(seed)  # warmup 2..4 steps, then decay: the cut at 5 is mid-decay
    batches = _batches(kind, 6, 10, seed)
    full = _make(kind, lr_schedule=schedule)
    losses = _run(full, batches, how)
    half = _make(kind, lr_schedule=schedule)
    first = _run(half, batches[:5], how)
    if via == "checkpoint":
        path = tmp_path / "half.ckpt"
        half.save_checkpoint(path)
        resumed = _cls(kind).from_checkpoint(path)
    else:
        resumed = _make(kind, seed=9).load_state_dict(half.state_dict())  # no schedule of its own
    assert type(resumed.lr_schedule) is type(schedule) and resumed.lr == schedule.lr_at(6)
    assert first + _run(resumed, batches[5:], how) == losses, seed
    assert resumed.state_hash() == full.state_hash(), seed
    plain = _make(kind)
    _run(plain, batches, how)
    assert plain.state_hash() != full.state_hash()  # the schedule changed the run


RESUME = """
import json, sys
import mojolearn as ml
cls = getattr(ml, sys.argv[1])
t = cls.from_checkpoint(sys.argv[2])
X = ml.Array.from_list(json.loads(sys.argv[3]), "<f4").reshape((int(sys.argv[5]), {inputs}))
y = ml.Array.from_list(json.loads(sys.argv[4]), "<i4")
losses = t.train_steps(X, y, int(sys.argv[5]) // {rows})["losses"]
print(json.dumps({{"losses": [x.hex() for x in losses], "hash": t.state_hash(),
                  "schedule": repr(t.lr_schedule)}}))
"""


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_resume_mid_schedule_in_a_fresh_process(kind, seed, tmp_path):
    schedule = ml.WarmupLinearLR(0.03, 3, 11, 1e-3)
    batches = _batches(kind, 4, 10, seed)
    full = _make(kind, lr_schedule=schedule)
    losses = _run(full, batches, "train_step")
    half = _make(kind, lr_schedule=schedule)
    _run(half, batches[:4], "train_step")
    path = tmp_path / "half.ckpt"
    half.save_checkpoint(path)
    X, y = _stack(batches[4:])
    argv = [_cls(kind).__name__, str(path), json.dumps(X.tolist()), json.dumps(y.tolist())]
    argv.append(str(len(y.tolist())))
    code = RESUME.format(inputs=SIZES[kind][0], rows=4)
    out = json.loads(run_python(f"import sys; sys.argv[1:] = {argv!r}\n" + code))
    assert [float.fromhex(x) for x in out["losses"]] == losses[4:]
    assert out["hash"] == full.state_hash()
    assert out["schedule"] == repr(schedule)


# ------------------------------------------------------------ setting the schedule


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_setting_lr_schedule_takes_effect_at_the_next_step_and_is_recorded(kind, seed, tmp_path):
    batches = _batches(kind, 5, 8, seed)
    t = _make(kind, lr=0.004)
    _run(t, batches[:2], "train_step")
    schedule = _cosine(seed)
    session = t._session
    t.lr_schedule = schedule
    assert t.lr_schedule is schedule and t._session is not session  # DataParallel notices
    assert t.lr == schedule.lr_at(3) and t.state_dict()["config"]["lr"] == 0.004
    twin = _make(kind, lr=0.004, lr_schedule=schedule).load_state_dict(t.state_dict())
    assert twin.state_hash() == t.state_hash()
    _run(t, batches[2:5], "train_step")
    _run(twin, batches[2:5], "train_steps")
    assert t.state_hash() == twin.state_hash()
    with pytest.raises(ValueError, match="lr cannot be set while lr_schedule is set"):
        t.lr = 0.5
    assert t.state_hash() == twin.state_hash()
    t.weight_decay = twin.weight_decay = 0.25  # a new session: the schedule's rate still rules
    _run(t, batches[5:6], "train_step")
    _run(twin, batches[5:6], "train_steps")
    assert t.state_hash() == twin.state_hash()
    path = tmp_path / "c.ckpt"
    t.save_checkpoint(path)
    assert json.loads(path.read_bytes())["payload"]["lr_schedule"]["kind"] == "warmup_cosine"
    t.lr_schedule = None  # back to the trainer's own lr
    assert t.lr == 0.004 and "lr_schedule" not in t.state_dict()
    by_hand = _make(kind, lr=0.004).load_state_dict(t.state_dict())
    assert _bits(by_hand) == _bits(t)
    _run(t, batches[6:], "train_step")
    _run(by_hand, batches[6:], "train_step")
    assert t.state_hash() == by_hand.state_hash()
    back = _cls(kind).from_checkpoint(path)  # the file still holds the schedule
    assert back.lr_schedule is not None and back.lr == schedule.lr_at(7)


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_copies_and_pickles_keep_the_schedule(kind, seed):
    for schedule in (_cosine(seed), Halving()):
        t = _make(kind, lr_schedule=schedule)
        batches = _batches(kind, 3, 4, seed)
        _run(t, batches[:2], "train_step")
        for clone in (copy.copy(t), copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
            assert type(clone.lr_schedule) is type(schedule)
            assert clone.state_hash() == t.state_hash()
            _run(clone, batches[2:], "train_step")
        _run(t, batches[2:], "train_step")
        assert clone.state_hash() == t.state_hash()


# ------------------------------------------------------------ custom schedules in files


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_a_custom_schedule_is_recorded_by_class_and_must_be_passed_again(kind, seed, tmp_path):
    schedule = Halving(0.02)
    batches = _batches(kind, 4, 6, seed)
    full = _make(kind, lr_schedule=schedule)
    _run(full, batches, "train_step")
    half = _make(kind, lr_schedule=schedule)
    _run(half, batches[:3], "train_step")
    record = half.state_dict()["lr_schedule"]
    assert record == {"kind": "custom", "class": f"{__name__}.Halving"}
    path = tmp_path / "custom.ckpt"
    half.save_checkpoint(path)
    cls = _cls(kind)
    with pytest.raises(ValueError, match=r"custom schedule \(.*Halving\).*pass lr_schedule="):
        cls.from_checkpoint(path)
    with pytest.raises(ValueError, match="lr_schedule= must be one too, got .*WarmupCosineLR"):
        cls.from_checkpoint(path, lr_schedule=_cosine())
    with pytest.raises(TypeError, match="lr_schedule must have a one-based lr_at"):
        cls.from_checkpoint(path, lr_schedule=3)
    resumed = cls.from_checkpoint(path, lr_schedule=Halving(0.02))
    _run(resumed, batches[3:], "train_steps")
    assert resumed.state_hash() == full.state_hash()
    # Loading into a trainer that holds a schedule of the class: it keeps its own.
    other = _make(kind, lr_schedule=Halving(0.02))
    other.load_checkpoint(path)
    _run(other, batches[3:], "train_step")
    assert other.state_hash() == full.state_hash()
    plain = _make(kind)
    h = plain.state_hash()
    with pytest.raises(ValueError, match="pass lr_schedule="):
        plain.load_checkpoint(path)
    assert plain.state_hash() == h and plain.lr_schedule is None


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_a_project_schedule_passed_again_must_equal_the_record(kind, tmp_path):
    t = _make(kind, lr_schedule=ml.WarmupCosineLR(0.02, 2, 10))
    path = tmp_path / "c.ckpt"
    t.save_checkpoint(path)
    cls = _cls(kind)
    same = ml.WarmupCosineLR(0.02, 2, 10)
    assert cls.from_checkpoint(path, lr_schedule=same).lr_schedule is same
    with pytest.raises(ValueError, match="must be the state's schedule"):
        cls.from_checkpoint(path, lr_schedule=ml.WarmupCosineLR(0.02, 2, 11))
    plain = _make(kind)
    plain.save_checkpoint(path)
    with pytest.raises(ValueError, match="the state has no schedule"):
        cls.from_checkpoint(path, lr_schedule=same)


# ------------------------------------------------------------ files: unchanged without one


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_without_a_schedule_the_file_and_state_are_as_before(kind, tmp_path):
    t = _make(kind)
    t.train_step(*_batches(kind, 3, 1, 0)[0])
    sd = t.state_dict()
    assert "lr_schedule" not in sd
    assert set(sd) == {
        "schema",
        "architecture",
        "numeric_mode",
        "parameter_order",
        "weights",
        "optimizer",
        "config",
        "data_schedule",
    }
    path = tmp_path / "p.ckpt"
    t.save_checkpoint(path)
    assert b"lr_schedule" not in path.read_bytes()
    t.lr_schedule = ml.ConstantLR(1e-3)
    t.lr_schedule = None
    t.save_checkpoint(tmp_path / "q.ckpt")
    assert (tmp_path / "q.ckpt").read_bytes() == path.read_bytes()


def _good_record():
    return {"kind": "warmup_cosine", "peak_lr": 0.5, "warmup_steps": 2, "total_steps": 9,
            "min_lr": 0.25}  # fmt: skip


BAD_RECORDS = [
    ("not a dict", [1], "must be a dict"),
    ("unknown kind", dict(_good_record(), kind="step"), "must be a record of kind"),
    ("extra field", dict(_good_record(), gamma=0.5), "must be a record of kind"),
    ("missing field", {k: v for k, v in _good_record().items() if k != "min_lr"}, "record"),
    ("int rate", dict(_good_record(), peak_lr=1), "peak_lr must be a float32 value"),
    ("not float32", dict(_good_record(), min_lr=0.1), "min_lr must be a float32 value"),
    ("float step", dict(_good_record(), warmup_steps=2.0), "warmup_steps must be a JSON int"),
    ("bool step", dict(_good_record(), total_steps=True), "total_steps must be a JSON int"),
    ("null total", dict(_good_record(), total_steps=None), "needs total_steps"),
    ("total <= warmup", dict(_good_record(), total_steps=2), "must exceed warmup_steps"),
    ("min > peak", dict(_good_record(), min_lr=0.75), "must not exceed peak_lr"),
    ("negative", dict(_good_record(), warmup_steps=-1), "warmup_steps must be >= 0"),
    ("custom extra", {"kind": "custom", "class": "a.B", "x": 1}, "exactly kind and class"),
    ("custom empty", {"kind": "custom", "class": ""}, "exactly kind and class"),
    ("custom long", {"kind": "custom", "class": "a" * 257}, "exactly kind and class"),
]


@pytest.mark.parametrize("kind", ["small", "mlp"])
@pytest.mark.parametrize(("what", "record", "match"), BAD_RECORDS, ids=[b[0] for b in BAD_RECORDS])
def test_a_bad_schedule_record_is_refused_everywhere_and_changes_nothing(
    kind, what, record, match, tmp_path
):
    t = _make(kind)
    t.train_step(*_batches(kind, 3, 1, 0)[0])
    h = t.state_hash()
    state = t.state_dict()
    state["lr_schedule"] = record
    with pytest.raises(ValueError, match=match):
        t.load_state_dict(state)
    assert t.state_hash() == h and t.lr_schedule is None
    # The same record in a well-formed file (a valid hash over it): refused on load.
    payload = ckpt.encode_state(state)
    envelope = {
        "schema": FILE_SCHEMA[kind],
        "payload": payload,
        "payload_sha256": ckpt.state_hash(payload),
        "arithmetic_profile": ckpt.PROFILE,
    }
    path = tmp_path / "bad.ckpt"
    path.write_bytes(_state.canonical(envelope) + b"\n")
    with pytest.raises(ValueError, match=match):
        _cls(kind).from_checkpoint(path)
    with pytest.raises(ValueError, match=match):
        t.load_checkpoint(path)
    assert t.state_hash() == h


def test_a_good_record_round_trips_through_a_file_exactly(tmp_path):
    t = _make("small")
    state = t.state_dict()
    state["lr_schedule"] = _good_record()
    t.load_state_dict(state)
    assert t.state_dict()["lr_schedule"] == _good_record()
    path = tmp_path / "g.ckpt"
    t.save_checkpoint(path)
    data = path.read_bytes()
    assert ckpt.dumps(ckpt.loads(data)) == data
    assert ml.SmallMLPTrainer.from_checkpoint(path).state_hash() == t.state_hash()


# ------------------------------------------------------------ refusals change nothing


BAD_RATES = [
    (RuntimeError("schedule failed"), RuntimeError, "schedule failed"),
    (math.nan, ValueError, r"lr_schedule.lr_at\(3\): nan"),
    (math.inf, ValueError, r"lr_schedule.lr_at\(3\): inf"),
    (-0.01, ValueError, r"lr_schedule.lr_at\(3\): -0.01; expected a finite value in \[0.0"),
    (1e39, ValueError, r"lr_schedule.lr_at\(3\): 1e\+39 \(it rounds to inf in float32\)"),
    ("0.01", TypeError, "lr_schedule.lr_at\\(3\\) must be a real number, got str"),
    (True, TypeError, "lr_schedule.lr_at\\(3\\) must be a real number, got bool"),
    (None, TypeError, "lr_schedule.lr_at\\(3\\) must be a real number, got NoneType"),
]


def _calls(kind, batches):
    """Each way a trainer takes step 3 (the bad one), as a function of the trainer."""
    X, y = batches[2]
    Xs, ys = _stack(batches[2:4])
    return {
        "train_step": lambda t: t.train_step(X, y),
        "train_step dx": lambda t: t.train_step(X, y, return_input_grad=True),
        "train_steps": lambda t: t.train_steps(Xs, ys, 2),
        "apply_gradients": lambda t: t.apply_gradients(t.loss_and_grads(X, y)[1]),
        "data parallel": lambda t: DataParallel(t, microbatches=1, comm=OneProcess()).train_step(
            X, y
        ),
        "lr": lambda t: t.lr,
    }


@pytest.mark.parametrize("fused", ["1", "0"])
@pytest.mark.parametrize("kind", ["small", "mlp"])
@pytest.mark.parametrize(("value", "exc", "match"), BAD_RATES, ids=[repr(b[0]) for b in BAD_RATES])
def test_a_refused_rate_changes_nothing(kind, value, exc, match, fused, monkeypatch):
    monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
    api = "SmallMLPTrainer" if kind == "small" else "MLPTrainer"
    batches = _batches(kind, 4, 4, 7)
    t = _make(kind, lr_schedule=Bad(3, value))
    _run(t, batches[:2], "train_step")
    h, bits = t.state_hash(), _bits(t)
    for name, call in _calls(kind, batches).items():
        with pytest.raises(exc, match=match) as got:
            call(t)
        if exc is not RuntimeError:
            assert str(got.value).startswith(f"{api}: "), name
        assert t.state_hash() == h and _bits(t) == bits and t.step_ == 2, name
    t.lr_schedule = Bad(99, 0.0)  # mend it: the step runs as if nothing had happened
    twin = _make(kind, lr_schedule=Bad(99, 0.0)).load_state_dict(t.state_dict())
    t.train_step(*batches[2])
    twin.train_step(*batches[2])
    assert t.state_hash() == twin.state_hash()


@pytest.mark.parametrize("kind", ["small", "mlp"])
@pytest.mark.parametrize("bad", [3, "cosine", object(), type("NoCall", (), {"lr_at": 1})()])
def test_a_bad_schedule_object_is_refused_by_name_and_changes_nothing(kind, bad):
    api = "SmallMLPTrainer" if kind == "small" else "MLPTrainer"
    with pytest.raises(TypeError, match=f"^{api}: lr_schedule must have a one-based lr_at"):
        _make(kind, lr_schedule=bad)
    t = _make(kind, lr_schedule=ml.ConstantLR(0.01))
    t.train_step(*_batches(kind, 3, 1, 0)[0])
    h, session, schedule = t.state_hash(), t._session, t.lr_schedule
    with pytest.raises(TypeError, match=f"^{api}: lr_schedule must have a one-based lr_at"):
        t.lr_schedule = bad
    assert t.state_hash() == h and t._session is session and t.lr_schedule is schedule
    with pytest.raises(AttributeError):
        del t.lr_schedule
    if kind == "mlp":
        torch = pytest.importorskip("torch")
        net = torch.nn.Sequential(torch.nn.Linear(8, 3))
        with pytest.raises(TypeError, match="lr_schedule must have a one-based lr_at"):
            ml.MLPTrainer.from_torch(net, lr_schedule=bad)
        made = ml.MLPTrainer.from_torch(net, lr_schedule=ml.ConstantLR(0.01, 2))
        assert made.lr == ml.ConstantLR(0.01, 2).lr_at(1)


# ------------------------------------------------------------ torch's step indexing


def _torch_rates(torch, peak, warmup, total, lo, steps, cosine):
    """The lr each of `steps` optimizer steps uses under torch's warmup-then-decay: LinearLR
    from peak/warmup to peak over the warmup, then CosineAnnealingLR / LinearLR to `lo`."""
    S = torch.optim.lr_scheduler
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    if cosine:
        decay = S.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=lo)
    else:
        decay = S.LinearLR(opt, 1.0, lo / peak, total_iters=total - warmup)
    sched = decay
    if warmup:
        warm = S.LinearLR(opt, 1.0 / warmup, 1.0, total_iters=warmup - 1)
        sched = S.SequentialLR(opt, [warm, decay], milestones=[warmup])
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


@pytest.mark.parametrize("cosine", [True, False])
def test_schedule_indexing_against_torch(cosine, seed):
    """DEVIATIONS (schedule indexing): our warmup is torch's LinearLR warmup step for step,
    but our decay is one step ahead of torch's CosineAnnealingLR / LinearLR after it: torch's
    first decay step repeats the peak (its decay scheduler starts at its epoch 0), ours starts
    at progress 1/(T - W) and reaches min_lr exactly at step T (torch: T + 1)."""
    torch = pytest.importorskip("torch")
    # torch's optimizers probe for NumPy when built (torch._dynamo): none in the NumPy-free pass.
    pytest.importorskip("numpy")
    import warnings

    r = random.Random(seed)
    for warmup in (0, r.randint(2, 6)):
        total = warmup + r.randint(3, 30)
        cls = ml.WarmupCosineLR if cosine else ml.WarmupLinearLR
        ours = cls(r.uniform(0.01, 1.0), warmup, total, r.uniform(0.0, 0.005))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SequentialLR's epoch deprecation notice
            theirs = _torch_rates(
                torch, ours.peak_lr, warmup, total, ours.min_lr, total + 1, cosine
            )

        def close(a, b):
            return abs(a - b) <= 1e-6 * abs(b) + 1e-12

        for t in range(1, total + 1):
            want = theirs[t - 1] if t <= warmup else theirs[t]  # torch's step t + 1
            assert close(ours.lr_at(t), want), (seed, warmup, total, t)
        if total > warmup + 1:  # one step off indeed: torch's step W + 1 is the peak again
            assert theirs[warmup] == pytest.approx(ours.peak_lr, rel=1e-6)
            assert not close(ours.lr_at(warmup + 1), theirs[warmup])


# ------------------------------------------------------------ DataParallel under MPI


_DP_CHILD = """
import os, sys
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._runtime.world import OneProcess
from mojolearn.distributed import DataParallel

class Custom:
    def __init__(self, scale):
        self.scale = scale
    def lr_at(self, t):
        return 0.01 * self.scale if t >= 3 else 0.01

mode = sys.argv[1]
comm = OneProcess() if os.environ.get("DP_ALONE") == "1" else None
rank = 0 if comm else __import__("mpi4py.MPI").MPI.COMM_WORLD.rank
if mode == "same":
    schedule = ml.WarmupCosineLR(0.02, 1, 6)
elif mode == "project":
    schedule = ml.WarmupCosineLR(0.02, 1, 6 + rank)
else:
    schedule = Custom(1 + rank)
t = ml.MLPTrainer([8, 12, 3], seed=5, data_schedule={"run": "dp"}, lr_schedule=schedule)
try:
    dp = DataParallel(t, microbatches=2, comm=comm)
    for X, y in _rng.batches(11, 32, 4):
        dp.train_step(X, y)
except ValueError as e:
    sys.stdout.write(f"refused {rank} {t.step_} {e}\\n")  # one write: ranks share the pipe
    sys.stdout.flush()
    sys.exit(0)
if rank == 0:
    print(t.step_, t.state_hash(), flush=True)
"""


def test_data_parallel_processes_must_agree_on_the_schedule():
    run = data_parallel_runner(_DP_CHILD)

    alone = run(False, "same", alone=True).split()
    assert alone[0] == "4"
    assert run(True, "same").split() == alone
    project = run(True, "project")  # refused at construction, step 0
    assert project.count("refused") == 2 and "disagree on lr_schedule" in project
    assert " 0 DataParallel" in project
    custom = run(True, "custom")  # same record, different rates from step 3
    assert custom.count("refused") == 2
    assert "disagree on the learning rate of step 3 (lr_schedule)" in custom
    assert " 2 DataParallel" in custom  # steps 1 and 2 ran; step 3 was taken by no process


# ------------------------------------------------------------ the binding's own checks


def test_binding_refuses_bad_rates_for_k_steps_and_changes_nothing():
    from mojolearn._runtime import backend

    t = _make("mlp")
    raw = backend.binding().raw
    X, y = _stack(_batches("mlp", 2, 2, 0))
    out = array.array("f", bytes(4 * 4096))
    for bad in (-1.0, math.nan, math.inf, 4e38):
        lrs = array.array("d", [0.01, bad])
        with pytest.raises(Exception, match=r"mlp_resident_steps: lrs\[1\] must be finite"):
            raw.mlp_resident_steps(
                t._session.handle, X._addr, y._addr, out.buffer_info()[0],
                lrs.buffer_info()[0], 2, 2, 4, 0,
            )  # fmt: skip
        with pytest.raises(Exception, match="mlp_resident_set_lr: lr must be finite"):
            raw.mlp_resident_set_lr(t._session.handle, bad)
    with pytest.raises(Exception, match="mlp_resident_set_lr: lr must be a float"):
        raw.mlp_resident_set_lr(t._session.handle, "0.1")
    assert t.step_ == 0 and t._session.download()[3] == 0


def test_the_rate_check_is_the_optimizers_check(seed):
    """`_lr_schedule.rate`'s one-comparison path for floats accepts exactly what the
    optimizers' `_f32_hyper` accepts (and returns the value as given)."""
    from mojolearn import optim
    from mojolearn._mlp import lr_schedule

    r = random.Random(seed)
    values = [0.0, -0.0, 5e-324, 1e-50, 3.4028234663852886e38, 3.4028235677973362e38]
    values += [3.4028235677973366e38, 1e39, math.inf, -math.inf, math.nan, -1e-300]
    values += [r.uniform(-1, 1) * 10.0 ** r.randint(-60, 40) for _ in range(5000)]
    for v in values:
        try:
            want = optim._f32_hyper("lr_schedule.lr_at(1)", v)
        except ValueError:
            with pytest.raises(ValueError, match=r"^T: Invalid lr_schedule.lr_at\(1\)"):
                lr_schedule.rate(Bad(1, v), 1, "T")
            continue
        assert math.copysign(1, lr_schedule.rate(Bad(1, v), 1, "T")) == math.copysign(1, want)
        assert lr_schedule.rate(Bad(1, v), 1, "T") == want, (seed, v)
