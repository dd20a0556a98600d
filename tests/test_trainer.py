"""SmallMLPTrainer: construction and its refusals, the step API and its bit equalities
(train_step == loss_and_grads + apply_gradients == train_steps; fused == per-operation;
binding == pure-Python reference), transactional refusals (nothing changes), thread safety,
learning, state_dict round trips, and fast mode's same-bits-twice."""

import array
import math
import random
import threading

import mojolearn as ml
import pytest
from mojolearn._buffers.array import Array
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
from mojolearn._mlp import steps as _mlp_core
from mojolearn._runtime import backend as _backend

from tests.helpers import run_python
from tests.reference import mlp as R
from tests.reference.f32 import f32, hex_list

IDENTICAL = _backend.requested_mode() == "identical"
SCHEDULE = {"dataset": "toy", "seed": 7, "cursor": 0}


def make(seed=1, **kw):
    return ml.SmallMLPTrainer(*_spec.init_small_mlp(seed % (1 << 64)), data_schedule=SCHEDULE, **kw)


def data(seed, rows=8, count=1):
    return _rng.batches(seed % (1 << 64), rows, count)


def snapshot(t):
    sd = t.state_dict()
    return (
        t.state_hash(),
        t.step_,
        sd["optimizer"]["m"].tobytes(),
        sd["optimizer"]["v"].tobytes(),
        b"".join(w.tobytes() for w in sd["weights"].values()),
    )


# ---------------------------------------------------------------- construction


def test_constructor_copies_and_accepts_buffers():
    w1, b1, w2, b2 = _spec.init_small_mlp(3)
    src = array.array("f", w1.tobytes())
    t = ml.SmallMLPTrainer(
        memoryview(src).cast("B").cast("f", (16, 8)), b1, w2, b2, data_schedule=SCHEDULE
    )
    before = t.weights_["weight1"].tobytes()
    src[0] = 123.0  # the trainer never aliases caller memory
    b1[0] = 99.0
    assert t.weights_["weight1"].tobytes() == before == w1.tobytes()
    assert t.weights_["bias1"][0] != 99.0
    assert t.step_ == 0 and t.numeric_mode_used() in ("identical", "fast")
    assert t.vendor_used() == ml.vendor_used()  # cpu here; cuda in tools/device_extra.sh
    w = t.weights_
    w["weight2"][0, 0] = 5.0  # weights_ returns fresh objects
    assert t.weights_["weight2"][0, 0] != 5.0


def test_constructor_numpy():
    np = pytest.importorskip("numpy")
    w = [np.asarray(a) for a in _spec.init_small_mlp(4)]
    t = ml.SmallMLPTrainer(*w, data_schedule=SCHEDULE)
    w[0][0, 0] = 7.0
    assert t.weights_["weight1"][0, 0] != 7.0
    with pytest.raises(TypeError, match="weight2 must be float32, got float64"):
        ml.SmallMLPTrainer(w[0], w[1], w[2].astype(np.float64), w[3], data_schedule=SCHEDULE)
    t2 = ml.SmallMLPTrainer(*[a[::1] for a in w], data_schedule=SCHEDULE)
    X = np.asfortranarray(np.ones((4, 8), np.float32))  # strided inputs are copied
    assert t2.predict_logits(X).shape == (4, 3)


@pytest.mark.parametrize(
    "index,value,exc,match",
    [
        (0, [[0.0] * 8] * 16, TypeError, "weight1 must be a float32 buffer"),
        (1, array.array("d", [0.0] * 16), TypeError, "bias1 must be float32, got float64"),
        (
            2,
            Array.from_list([0.0] * 48, "<f4").reshape((16, 3)),
            ValueError,
            r"weight2 must have shape \(3, 16\)",
        ),
        (
            3,
            Array.from_list([0.0, math.nan, 0.0], "<f4").reshape((3,)),
            ValueError,
            "bias2 must be finite",
        ),
        (
            3,
            Array.from_list([0.0, math.inf, 0.0], "<f4").reshape((3,)),
            ValueError,
            "bias2 must be finite",
        ),
    ],
)
def test_constructor_refuses_parameters(index, value, exc, match):
    w = list(_spec.init_small_mlp(1))
    w[index] = value
    with pytest.raises(exc, match=match):
        ml.SmallMLPTrainer(*w, data_schedule=SCHEDULE)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"lr": 0.0}, "learning rate"),
        ({"lr": -1e-3}, "learning rate"),
        ({"lr": 1e-50}, "learning rate"),  # rounds to 0 in float32, then refused
        ({"lr": 1e39}, "finite float32"),
        ({"lr": math.nan}, "finite float32"),
        ({"lr": "0.1"}, "real number"),
        ({"lr": True}, "real number"),
        ({"eps": 0.0}, "eps"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"betas": (1.0, 0.999)}, "beta at index 0"),
        ({"betas": (0.9, 0.99999999)}, "beta at index 1"),
        ({"betas": (-0.1, 0.9)}, "beta at index 0"),
        ({"betas": (0.9,)}, "pair"),
        ({"betas": "ab"}, "pair"),
    ],
)
def test_constructor_refuses_hyperparameters(kw, match):
    with pytest.raises(ValueError, match=match):
        make(**kw)


def test_hyperparameters_kept_as_given_and_checked_in_float32():
    # Profile v2 forms each step's scalars from the values as given (binary64).
    t = make(lr=0.1, eps=1e-8, betas=(0.9, 0.999))
    cfg = t.state_dict()["config"]
    assert cfg["lr"] == 0.1 != f32(0.1) and cfg["eps"] == 1e-8 and cfg["beta2"] == 0.999
    # ... and refused when their float32 rounding is out of range.
    with pytest.raises(ValueError, match="learning rate"):
        make(lr=1e-50)  # > 0, but 0 in float32
    with pytest.raises(ValueError, match="beta at index 1"):
        make(betas=(0.9, 0.99999999))  # < 1, but 1.0 in float32


def _deep(n):
    v = 0
    for _ in range(n):
        v = [v]
    return {"a": v}


@pytest.mark.parametrize(
    "schedule,match",
    [
        ({}, "non-empty"),
        ([1], "non-empty"),
        ("x", "non-empty"),
        (_deep(8), "deeper than 8"),
        ({"a": list(range(128))}, "more than 128"),
        ({"a": "x" * 2049}, "longer than 2048"),
        ({"a": "x" * 1000, "b": "y" * 1100}, "more than 2048"),
        ({"a": math.nan}, "finite"),
        ({"a": math.inf}, "finite"),
        ({1: "a"}, "keys must be strings"),
        ({"a": {1, 2}}, "JSON values"),
        ({"a": 1 << 70}, "64 bits"),
    ],
)
def test_data_schedule_bounds(schedule, match):
    w = _spec.init_small_mlp(1)
    with pytest.raises(ValueError, match=match):
        ml.SmallMLPTrainer(*w, data_schedule=schedule)


def test_data_schedule_stored_as_copy():
    sched = {"seed": 3, "order": [1, 2], "nested": {"k": None, "b": True, "f": 0.5}}
    t = ml.SmallMLPTrainer(*_spec.init_small_mlp(1), data_schedule=sched)
    sched["order"].append(3)
    assert t.state_dict()["data_schedule"] == {
        "seed": 3,
        "order": [1, 2],
        "nested": {"k": None, "b": True, "f": 0.5},
    }
    ml.SmallMLPTrainer(*_spec.init_small_mlp(1), data_schedule=_deep(7))  # depth 8 is allowed


# ---------------------------------------------------------------- the step API


def test_train_step_result(seed):
    t = make(seed)
    ((X, y),) = data(seed, 5)
    r = t.train_step(X, y)
    assert r["step"] == 1 == t.step_ and type(r["loss"]) is float and r["loss"] > 0
    assert r["logits"].shape == (5, 3) and "input_grad" not in r
    assert list(r["gradients"]) == ["weight1", "bias1", "weight2", "bias2"]
    assert [g.shape for g in r["gradients"].values()] == [(16, 8), (16,), (3, 16), (3,)]
    r = t.train_step(X, array.array("q", y.tolist()), return_input_grad=True)  # any int dtype
    assert r["input_grad"].shape == (5, 8) and r["step"] == 2
    r["logits"][0, 0] = 1e9  # results are fresh objects owned by the caller
    assert t.predict_logits(X)[0, 0] != 1e9


def test_step_equalities(seed):
    """train_step == loss_and_grads + apply_gradients == train_steps, bit for bit."""
    k, rows = 4, 6
    batches = data(seed, rows, k)
    a, b, c = make(seed), make(seed), make(seed)
    losses_a, losses_b = [], []
    for X, y in batches:
        r = a.train_step(X, y)
        losses_a.append(r["loss"])
        loss, grads = b.loss_and_grads(X, y)
        assert [g.tobytes() for g in grads] == [g.tobytes() for g in r["gradients"].values()]
        losses_b.append(loss)
        assert b.apply_gradients(grads) == r["step"]
    Xs = (
        Array.from_buffer(memoryview(b"".join(X.tobytes() for X, _ in batches)).cast("f"))
        .copy()
        .reshape((k * rows, 8))
    )
    ys = Array.from_list([v for _, y in batches for v in y.tolist()], "<i4").reshape((k * rows,))
    rc = c.train_steps(Xs, ys, k)
    assert rc["step"] == k and rc["losses"] == losses_a == losses_b and rc["loss"] == losses_a[-1]
    assert rc["logits"].tobytes() == r["logits"].tobytes()
    assert [g.tobytes() for g in rc["gradients"].values()] == [
        g.tobytes() for g in r["gradients"].values()
    ]
    assert a.state_hash() == b.state_hash() == c.state_hash()


def test_predict(seed):
    t = make(seed)
    batches = data(seed, 7, 3)
    X, y = batches[0]
    before = t.predict_logits(X)
    assert t.train_step(X, y)["logits"].tobytes() == before.tobytes()
    assert t.predict_logits(X).tobytes() != before.tobytes()
    got = t.predict_logits_sessions([X for X, _ in batches])
    assert got.shape == (21, 3)
    assert got.tobytes() == b"".join(t.predict_logits(X).tobytes() for X, _ in batches)
    with pytest.raises(ValueError, match="at least one batch"):
        t.predict_logits_sessions([])
    with pytest.raises(TypeError, match=r"inputs\[1\] must be a float32 buffer"):
        t.predict_logits_sessions([X, [[0.0] * 8]])


@pytest.mark.skipif(not IDENTICAL, reason="bit comparisons hold in identical mode")
def test_matches_reference(seed):
    t = make(seed, lr=1e-2, weight_decay=0.1)
    cfg = t.state_dict()["config"]
    p = [
        v
        for w in _spec.init_small_mlp(seed % (1 << 64))
        for v in w.tolist()
        for v in (v if isinstance(v, list) else [v])
    ]
    m, v, step = [0.0] * 195, [0.0] * 195, 0
    for X, y in data(seed, 4, 3):
        r = t.train_step(X, y, return_input_grad=True)
        ref = R.train_step(
            p,
            m,
            v,
            step,
            X.tolist(),
            y.tolist(),
            cfg["lr"],
            cfg["beta1"],
            cfg["beta2"],
            cfg["eps"],
            cfg["weight_decay"],
        )
        p, m, v, step = ref["params"], ref["m"], ref["v"], ref["step"]
        assert hex_list([r["loss"]]) == hex_list([ref["loss"]]), f"seed {seed}"
        assert hex_list([z for row in r["input_grad"].tolist() for z in row]) == hex_list(
            [z for row in ref["dX"] for z in row]
        )
    sd = t.state_dict()
    assert hex_list(sd["optimizer"]["m"].tolist()) == hex_list(m)
    assert hex_list([z for w in sd["weights"].values() for z in w._mv.tolist()]) == hex_list(p)


def test_fused_equals_per_operation(seed, monkeypatch):
    results = {}
    for fused in ("1", "0"):
        monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
        t = make(seed, lr=1e-2)
        out = []
        for X, y in data(seed, 9, 5):
            r = t.train_step(X, y, return_input_grad=True)
            out += [r["loss"], r["logits"].tobytes(), r["input_grad"].tobytes()]
            out += [g.tobytes() for g in r["gradients"].values()]
        Xs, ys = data(seed + 1, 12, 1)[0]
        r = t.train_steps(Xs, ys, 3)
        out += [r["losses"], r["logits"].tobytes()]
        loss, grads = t.loss_and_grads(Xs, ys)
        out += [loss, *(g.tobytes() for g in grads), t.apply_gradients(grads)]
        out += [t.predict_logits(Xs).tobytes(), t.state_hash()]
        results[fused] = out
    assert results["1"] == results["0"], f"seed {seed}"


def test_loss_decreases_on_learnable_task(seed):
    rng = random.Random(seed)
    # Labels from a fixed linear rule of the inputs: learnable by the network.
    rule = [[rng.uniform(-1, 1) for _ in range(8)] for _ in range(3)]
    batches = []
    for X, _ in data(seed, 32, 8):
        labels = [
            max(range(3), key=lambda c: sum(a * b for a, b in zip(rule[c], row)))
            for row in X.tolist()
        ]
        batches.append((X, Array.from_list(labels, "<i4").reshape((32,))))
    t = make(seed, lr=2e-2)
    first = [t.loss_and_grads(X, y)[0] for X, y in batches]
    for _epoch in range(40):
        for X, y in batches:
            t.train_step(X, y)
    last = [t.loss_and_grads(X, y)[0] for X, y in batches]
    assert sum(last) < 0.6 * sum(first), f"seed {seed}: {sum(first)} -> {sum(last)}"


# ---------------------------------------------------------------- refusals change nothing


def _refusals(t, X, y):
    big = Array.from_list([0.0] * 257 * 8, "<f4").reshape((257, 8))
    return [
        (TypeError, "X must be a float32 buffer", lambda: t.train_step(X.tolist(), y)),
        (
            TypeError,
            "X must be float32, got float64",
            lambda: t.train_step(array.array("d", [0.0] * 8), y),
        ),
        (
            ValueError,
            r"X must have shape \(batch, 8\)",
            lambda: t.train_step(Array.from_list([0.0] * 7, "<f4").reshape((1, 7)), y),
        ),
        (ValueError, "1 to 256 rows", lambda: t.train_step(big, Array.from_list([0] * 257, "<i4"))),
        (
            ValueError,
            "1 to 256 rows",
            lambda: t.train_step(
                Array.from_list([], "<f4").reshape((0, 8)), Array.from_list([], "<i4")
            ),
        ),
        (
            ValueError,
            "X must be finite",
            lambda: t.train_step(
                Array.from_list([math.nan] * 8 * len(y), "<f4").reshape((len(y), 8)), y
            ),
        ),
        (
            TypeError,
            "targets must hold integers",
            lambda: t.train_step(X, Array.from_list([0.0] * len(y), "<f4")),
        ),
        (TypeError, "targets must be an integer buffer", lambda: t.train_step(X, y.tolist())),
        (
            ValueError,
            "targets must have shape",
            lambda: t.train_step(X, Array.from_list([0], "<i4")),
        ),
        (
            ValueError,
            r"targets\[1\] = 3",
            lambda: t.train_step(X, Array.from_list([0, 3] + [0] * (len(y) - 2), "<i4")),
        ),
        (
            ValueError,
            r"targets\[0\] = -1",
            lambda: t.train_step(X, Array.from_list([-1] * len(y), "<i4")),
        ),
        (ValueError, "classes 0..2", lambda: t.train_step(X, array.array("q", [1 << 40] * len(y)))),
        (
            TypeError,
            "return_input_grad must be a bool",
            lambda: t.train_step(X, y, return_input_grad=1),
        ),
        (ValueError, "k must be a positive int", lambda: t.train_steps(X, y, 0)),
        (ValueError, "k must be a positive int", lambda: t.train_steps(X, y, "2")),
        (ValueError, "stack k=4 equal batches", lambda: t.train_steps(X, y, 4)),
        (ValueError, "exactly 4 buffers", lambda: t.apply_gradients([])),
        (TypeError, "not a dict", lambda: t.apply_gradients(t.weights_)),
        (
            ValueError,
            r"bias1 gradient must have shape \(16,\)",
            lambda: t.apply_gradients(
                [
                    Array.from_list([0.0] * 128, "<f4").reshape((16, 8)),
                    Array.from_list([0.0] * 8, "<f4"),
                ]
                + [
                    Array.from_list([0.0] * 48, "<f4").reshape((3, 16)),
                    Array.from_list([0.0] * 3, "<f4"),
                ]
            ),
        ),
        (
            ValueError,
            "weight1 gradient must be finite",
            lambda: t.apply_gradients(
                [
                    Array.from_list([math.inf] * 128, "<f4").reshape((16, 8)),
                    Array.from_list([0.0] * 16, "<f4"),
                    Array.from_list([0.0] * 48, "<f4").reshape((3, 16)),
                    Array.from_list([0.0] * 3, "<f4"),
                ]
            ),
        ),
        (
            TypeError,
            "bias2 gradient must be float32",
            lambda: t.apply_gradients(
                list(t.loss_and_grads(X, y)[1][:3]) + [array.array("d", [0.0] * 3)]
            ),
        ),
    ]


def test_refusals_change_nothing(seed):
    t = make(seed)
    ((X, y),) = data(seed, 6)
    t.train_step(X, y)
    before = snapshot(t)
    for exc, match, call in _refusals(t, X, y):
        with pytest.raises(exc, match=match):
            call()
        assert snapshot(t) == before, f"refused call changed the state ({match})"


def test_step_counter_limit():
    t = make()
    ((X, y),) = data(1, 4)
    state = t.state_dict()
    state["optimizer"]["step"] = (1 << 31) - 4
    t.load_state_dict(state)
    assert (
        t.train_steps(
            Array.from_buffer(memoryview(X.tobytes() * 2).cast("f")).copy().reshape((8, 8)),
            Array.from_list(y.tolist() * 2, "<i4"),
            2,
        )["step"]
        == (1 << 31) - 1 - 1
    )
    before = snapshot(t)
    Xs = Array.from_buffer(memoryview(X.tobytes() * 2).cast("f")).copy().reshape((8, 8))
    ys = Array.from_list(y.tolist() * 2, "<i4")
    with pytest.raises(ValueError, match="step counter is exhausted"):
        t.train_steps(Xs, ys, 2)
    assert snapshot(t) == before
    assert t.train_step(X, y)["step"] == (1 << 31) - 1
    before = snapshot(t)
    for call in (lambda: t.train_step(X, y), lambda: t.apply_gradients(t.loss_and_grads(X, y)[1])):
        with pytest.raises(ValueError, match="step counter is exhausted"):
            call()
        assert snapshot(t) == before
    t.predict_logits(X)  # steps that do not train still work


def test_nonfinite_result_changes_nothing(monkeypatch):
    big = [
        Array.from_list([3.0e38] * 128, "<f4").reshape((16, 8)),
        Array.from_list([3.0e38] * 16, "<f4"),
        Array.from_list([3.0e38] * 48, "<f4").reshape((3, 16)),
        Array.from_list([0.0] * 3, "<f4"),
    ]
    t = ml.SmallMLPTrainer(*big, data_schedule=SCHEDULE)
    ((X, y),) = data(2, 3)
    X = Array.from_list([1.0] * 24, "<f4").reshape((3, 8))
    before = snapshot(t)
    for fused in ("1", "0"):
        monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
        with pytest.raises(RuntimeError, match="non-finite"):
            t.train_step(X, y)
        assert snapshot(t) == before
    u = make()
    before = snapshot(u)
    huge = [
        Array.from_list([3.0e38] * 128, "<f4").reshape((16, 8)),
        Array.from_list([3.0e38] * 16, "<f4"),
        Array.from_list([3.0e38] * 48, "<f4").reshape((3, 16)),
        Array.from_list([3.0e38] * 3, "<f4"),
    ]
    with pytest.raises(RuntimeError, match="non-finite"):
        u.apply_gradients(huge)  # g·g overflows in the second moment
    assert snapshot(u) == before


def test_binding_exception_changes_nothing(monkeypatch):
    t = make()
    ((X, y),) = data(3, 4)
    t.train_step(X, y)
    before = snapshot(t)
    real = _mlp_core._binding()

    class Failing:
        """Writes every output (the real entry runs), then fails."""

        def __getattr__(self, name):
            entry = getattr(real, name)

            def call(*args):
                entry(*args)
                raise RuntimeError(f"{name}: injected failure")

            return call

    failing = Failing()
    monkeypatch.setattr(_mlp_core, "_binding", lambda: failing)
    monkeypatch.setattr(t, "_run_step", failing.mlp_resident_step)  # train_step's, looked up once
    for fused in ("1", "0"):
        monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
        for call in (
            lambda: t.train_step(X, y),
            lambda: t.apply_gradients(t.weights_.values()),
            lambda: t.train_steps(X, y, 2),
        ):
            with pytest.raises(RuntimeError, match="injected failure"):
                call()
            assert snapshot(t) == before


# ---------------------------------------------------------------- threads


def test_threads_serialize():
    ((X, y),) = data(5, 16)
    shared = make(5)
    errors = []

    def work():
        try:
            for _ in range(50):
                shared.train_step(X, y)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and shared.step_ == 400
    serial = make(5)
    for _ in range(400):
        serial.train_step(X, y)
    assert snapshot(shared) == snapshot(serial)


# ---------------------------------------------------------------- state dicts


def test_state_dict_round_trip(seed):
    a = make(seed)
    for X, y in data(seed, 5, 3):
        a.train_step(X, y)
    sd = a.state_dict()
    assert sd["schema"] == "mojolearn.small-mlp-trainer.v1" and sd["architecture"] == [8, 16, 3]
    assert sd["parameter_order"] == ["weight1", "bias1", "weight2", "bias2"]
    assert sd["optimizer"]["kind"] == "AdamW" and sd["optimizer"]["step"] == 3
    assert sd["optimizer"]["flags"].tolist() == [0, 0, 0, 0]
    assert set(sd["config"]) == {"lr", "beta1", "beta2", "eps", "weight_decay"}
    b = make(seed + 1)
    assert b.load_state_dict(sd) is b
    assert snapshot(a) == snapshot(b)
    sd["optimizer"]["m"][0] = 42.0  # the loaded state is a copy
    sd["weights"]["bias2"][0] = 42.0
    assert snapshot(a) == snapshot(b)
    ((X, y),) = data(seed + 2, 5)
    assert a.train_step(X, y)["loss"] == b.train_step(X, y)["loss"]
    assert snapshot(a) == snapshot(b)


def _bad_states():
    def edit(fn):
        sd = make(2).state_dict()
        fn(sd)
        return sd

    return [
        (edit(lambda s: s.pop("config")), "missing fields"),
        (edit(lambda s: s.update(extra=1)), "unknown"),
        (edit(lambda s: s.update(schema="other")), "schema"),
        (edit(lambda s: s.update(architecture=[8, 32, 3])), "architecture"),
        (
            edit(lambda s: s.update(numeric_mode="fast" if IDENTICAL else "identical")),
            "saved in numeric mode",
        ),
        (
            edit(lambda s: s.update(parameter_order=["bias1", "weight1", "weight2", "bias2"])),
            "parameter_order",
        ),
        (edit(lambda s: s["weights"].pop("bias1")), "missing fields"),
        (edit(lambda s: s["optimizer"].update(kind="Adam")), "AdamW"),
        (edit(lambda s: s["optimizer"].update(step=-1)), "step must be in"),
        (edit(lambda s: s["optimizer"].update(step=True)), "step must be an integer"),
        (edit(lambda s: s["optimizer"].update(step=1 << 31)), "step must be in"),
        (edit(lambda s: s["optimizer"]["v"].__setitem__(3, -1.0)), "must be >= 0"),
        (edit(lambda s: s["optimizer"]["m"].__setitem__(3, math.nan)), "m must be finite"),
        (edit(lambda s: s["optimizer"]["flags"].__setitem__(0, 2)), "flags must be 0 or 1"),
        (
            edit(lambda s: s["weights"]["weight2"].__setitem__((0, 1), math.inf)),
            "weight2 must be finite",
        ),
        (edit(lambda s: s["config"].update(lr=-1.0)), "learning rate"),
        (edit(lambda s: s.update(data_schedule={})), "non-empty"),
        ([], "state must be a dict"),
    ]


def test_load_state_dict_refusals_change_nothing():
    t = make(9)
    ((X, y),) = data(9, 4)
    t.train_step(X, y)
    before = snapshot(t)
    for state, match in _bad_states():
        with pytest.raises(ValueError, match=match):
            t.load_state_dict(state)
        assert snapshot(t) == before, match


# ---------------------------------------------------------------- fast mode


FAST_RUN = """
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
t = ml.SmallMLPTrainer(*_spec.init_small_mlp(3), data_schedule={'s': 1})
for X, y in _rng.batches(4, 32, 20):
    t.train_step(X, y)
print(ml.numeric_mode_used(), t.numeric_mode_used(), t.state_dict()['numeric_mode'], t.state_hash())
"""


def test_fast_mode_same_bits_twice():
    env = {"MOJOLEARN_NUMERIC_MODE": "fast"}
    first = run_python(FAST_RUN, env=env).split()
    second = run_python(FAST_RUN, env=env).split()
    assert first[:3] == ["fast"] * 3
    assert first == second


def test_data_schedule_property_validates_and_changes_nothing_else():
    import mojolearn
    from mojolearn._mlp import rng as _rng
    from mojolearn._mlp import spec as _spec

    t = mojolearn.SmallMLPTrainer(*_spec.init_small_mlp(5), data_schedule={"epoch": 0})
    ((X, y),) = list(_rng.batches(6, 4, 1))
    t.train_step(X, y)
    before = t.state_dict()
    t.data_schedule = {"epoch": 1, "cursor": 8}
    assert t.data_schedule == {"epoch": 1, "cursor": 8}
    after = t.state_dict()
    assert after["data_schedule"] == {"epoch": 1, "cursor": 8}
    assert after["weights"]["weight1"].tobytes() == before["weights"]["weight1"].tobytes()
    assert after["optimizer"]["step"] == before["optimizer"]["step"] == 1
    for bad in ({}, [], {"x": float("nan")}, {"k": "s" * 3000}):
        with pytest.raises(ValueError):
            t.data_schedule = bad
    assert t.data_schedule == {"epoch": 1, "cursor": 8}
    copy = t.data_schedule
    copy["epoch"] = 99  # a copy: the trainer's schedule is unchanged
    assert t.data_schedule["epoch"] == 1
