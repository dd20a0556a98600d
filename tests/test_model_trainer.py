"""`mojolearn.Trainer` (issue 35): any stack of `mojolearn.nn` layers on the model engine.

- A ReLU MLP gives `MLPTrainer`'s bits step for step (the MLP is a case of the engine).
- Steps are transactions: a refused batch or a non-finite result changes nothing.
- `train_steps(k)` equals k `train_step` calls, with and without a schedule.
- Inference: dropout off, chunks give each row's own bits, argmax/softmax as the MLP's.
- A GELU + LayerNorm + Residual model trains with the reference's bits (GELU both forms).
- Regression (MSE) learns, evaluate reports mse/mae/r2; (B, T, C) cross-entropy.
- Bad arguments and inputs are refused by name.
"""

import array
import math
import random

import mojolearn as ml
import pytest
from mojolearn import nn
from mojolearn._model.spec import ModelSpec

from tests.reference import model as ref_model
from tests.reference.f32 import f32
from tests.reference.optim import adam_step

identical = pytest.mark.skipif(
    ml.numeric_mode_used() != "identical", reason="bit-for-bit checks are identical mode's"
)


def _x(rng, n, d):
    return ml.Array.from_list([[f32(rng.gauss(0, 1)) for _ in range(d)] for _ in range(n)])


def _labels(rng, n, classes):
    return ml.Array.from_list([rng.randrange(classes) for _ in range(n)], "<i4")


def _mlp(sizes):
    layers = []
    for i, o in zip(sizes, sizes[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


@identical
@pytest.mark.parametrize("sizes", [[8, 16, 3], [6, 9, 7, 4], [64, 128, 10]])
def test_a_relu_mlp_trains_with_mlp_trainers_bits(seed, sizes):
    rng = random.Random(seed)
    s = seed % (1 << 64)
    a = ml.Trainer(_mlp(sizes), input_shape=(sizes[0],), seed=s, lr=1e-2)
    b = ml.MLPTrainer(sizes, seed=s, data_schedule={"d": 1}, lr=1e-2)
    for step in range(5):
        n = rng.randrange(1, 33)
        X, y = _x(rng, n, sizes[0]), _labels(rng, n, sizes[-1])
        ra, rb = a.train_step(X, y), b.train_step(X, y)
        assert ra["loss"] == rb["loss"] and ra["step"] == rb["step"] == step + 1
        assert ra["logits"].tobytes() == rb["logits"].tobytes()
    flat_a = b"".join(t.tobytes() for t in a.weights_.values())
    flat_b = b"".join(t.tobytes() for t in b.weights_.values())
    assert flat_a == flat_b
    X = _x(rng, 7, sizes[0])
    assert a.predict(X).tolist() == b.predict(X).tolist()
    assert a.predict_proba(X).tobytes() == b.predict_proba(X).tobytes()


@identical
def test_train_steps_equals_single_steps_with_and_without_a_schedule(seed):
    rng = random.Random(seed)
    model = nn.Sequential(
        nn.Linear(5, 12),
        nn.ReLU(),
        nn.Residual(nn.LayerNorm(12), nn.Dropout(0.2), nn.Linear(12, 12)),
        nn.Linear(12, 3),
    )
    for schedule in (None, ml.WarmupCosineLR(1e-2, warmup_steps=2, total_steps=10)):
        a = ml.Trainer(model, input_shape=(5,), seed=3, lr_schedule=schedule)
        b = ml.Trainer(model, input_shape=(5,), seed=3, lr_schedule=schedule)
        X, y = _x(rng, 12, 5), _labels(rng, 12, 3)
        r = a.train_steps(X, y, 3)
        losses = [
            b.train_step(
                ml.Array.from_list(X.tolist()[i * 4 : (i + 1) * 4]),
                ml.Array.from_list(y.tolist()[i * 4 : (i + 1) * 4], "<i4"),
            )["loss"]
            for i in range(3)
        ]
        assert r["losses"] == losses and r["step"] == 3
        assert a.state_hash() == b.state_hash()


def test_a_refused_batch_changes_nothing(seed):
    rng = random.Random(seed)
    t = ml.Trainer(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)), input_shape=(4,))
    t.train_step(_x(rng, 3, 4), _labels(rng, 3, 3))
    before = t.state_hash()
    bad = [
        (_x(rng, 3, 5), _labels(rng, 3, 3), ValueError, r"X must have shape \(n, 4\)"),
        (
            ml.Array.from_list([[1.0, float("nan"), 0, 0]]),
            _labels(rng, 1, 3),
            ValueError,
            "X must be finite: example 0, element 1",
        ),
        (_x(rng, 3, 4), ml.Array.from_list([0, 1, 3], "<i4"), ValueError, r"targets\[2\] = 3"),
        (_x(rng, 3, 4), _labels(rng, 2, 3), ValueError, r"targets must have shape \(3,\)"),
        (_x(rng, 3, 4), ml.Array.from_list([0.0, 1.0, 2.0]), TypeError, "targets"),
        (ml.Array.from_list([[1, 2, 3, 4]], "<i4"), _labels(rng, 1, 3), TypeError, "X"),
        ([[1.0, 2.0, "x", 4.0]], _labels(rng, 1, 3), TypeError, "X must hold numbers"),
        ([[1.0, 2.0, 3.0, 1e39]], _labels(rng, 1, 3), ValueError, "X must fit in float32"),
    ]
    for X, y, error, words in bad:
        with pytest.raises(error, match=words):
            t.train_step(X, y)
        assert t.state_hash() == before and t.step_ == 1


def test_a_non_finite_result_changes_nothing():
    t = ml.Trainer(
        nn.Sequential(nn.Linear(2, 2)),
        input_shape=(2,),
        loss="mse",
        weights={
            "0.weight": ml.Array.from_list([[3e38, 3e38], [1.0, 1.0]]),
            "0.bias": ml.Array.from_list([0.0, 0.0]),
        },
    )
    before = t.state_hash()
    with pytest.raises(RuntimeError, match="non-finite"):
        t.train_step(ml.Array.from_list([[2.0, 2.0]]), ml.Array.from_list([[0.0, 0.0]]))
    assert t.state_hash() == before and t.step_ == 0
    with pytest.raises(ValueError, match="overflow float32"):
        t.predict_logits(ml.Array.from_list([[2.0, 2.0]]))


def test_regression_learns_and_evaluate_reports_its_metrics(seed):
    rng = random.Random(seed)
    X = _x(rng, 128, 6)
    Y = ml.Array.from_list([[r[0] - 2 * r[1] + 0.5 * r[2]] for r in X.tolist()])
    t = ml.Trainer(
        nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1)),
        input_shape=(6,),
        loss="mse",
        lr=1e-2,
        seed=seed % (1 << 64),
    )
    first = t.evaluate(X, Y)
    for _ in range(300):
        t.train_step(X, Y)
    report = t.evaluate(X, Y)
    assert report["loss"] == report["mse"] < first["mse"] / 20
    assert report["r2"] > 0.95 and report["mae"] < 0.5
    z = t.predict(X).tolist()
    mse = math.fsum((a[0] - b[0]) ** 2 for a, b in zip(z, Y.tolist())) / 128
    assert abs(mse - report["mse"]) <= 1e-5 * max(1.0, mse)
    with pytest.raises(TypeError, match="predict_proba needs a cross_entropy model"):
        t.predict_proba(X)
    # (n,) targets for a one-output regressor
    assert t.evaluate(X, ml.Array.from_list([r[0] for r in Y.tolist()]))["mse"] == report["mse"]


def test_cross_entropy_over_positions(seed):
    rng = random.Random(seed)
    t = ml.Trainer(
        nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5)), input_shape=(3, 4), seed=1
    )
    X = ml.Array.from_list(
        [[[f32(rng.gauss(0, 1)) for _ in range(4)] for _ in range(3)] for _ in range(6)]
    )
    y = ml.Array.from_list([[rng.randrange(5) for _ in range(3)] for _ in range(6)], "<i4")
    out = t.train_step(X, y)
    assert out["logits"].shape == (6, 3, 5)
    assert t.predict(X).shape == (6, 3) and t.predict_proba(X).shape == (6, 3, 5)
    report = t.evaluate(X, y)
    assert sum(report["per_class"]["support"]) == 18
    flat = ml.Array.from_list([[v for row in ex for v in row] for ex in X.tolist()])
    assert (
        t.predict_logits(flat).tobytes() == t.predict_logits(X).tobytes()
    )  # (n, T·D) read as (n, T, D)
    with pytest.raises(ValueError, match=r"targets must have shape \(6, 3\)"):
        t.train_step(X, ml.Array.from_list([0] * 6, "<i4"))


@identical
def test_inference_has_no_dropout_and_chunks_keep_each_rows_bits(seed):
    rng = random.Random(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.5), nn.Linear(16, 3))
    t = ml.Trainer(model, input_shape=(5,), max_rows=4)
    X = _x(rng, 11, 5)
    z = t.predict_logits(X)
    for i in range(11):
        one = t.predict_logits(ml.Array.from_list([X.tolist()[i]]))
        assert one.tobytes() == ml.Array.from_list([z.tolist()[i]]).tobytes()
    with pytest.raises(ValueError, match="more than max_rows"):
        t.train_step(X, _labels(rng, 11, 3))


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(input_shape=(4,), loss="l1"), ValueError, "loss must be one of"),
        (dict(input_shape=(5,)), ValueError, "expects 4 input features, gets 5"),
        (dict(input_shape=(4,), lr=-1.0), ValueError, "learning rate"),
        (dict(input_shape=(4,), seed=-1), ValueError, "seed"),
        (dict(input_shape=(4,), max_rows=0), ValueError, "max_rows"),
        (dict(input_shape=(4,), weights=[1.0]), TypeError, "weights must be None or a dict"),
        (
            dict(input_shape=(4,), weights={"0.weight": ml.zeros((3, 4))}),
            ValueError,
            r"missing tensors \['0.bias'\]",
        ),
        (
            dict(
                input_shape=(4,), weights={"0.weight": ml.zeros((3, 5)), "0.bias": ml.zeros((3,))}
            ),
            ValueError,
            "shape",
        ),
        (dict(input_shape=(4,), data_schedule={}), ValueError, "data_schedule"),
        (dict(input_shape=(4,), lr_schedule=3), TypeError, "lr_schedule"),
    ],
)
def test_bad_constructor_arguments_are_refused_by_name(kwargs, error, words):
    with pytest.raises(error, match=words):
        ml.Trainer(nn.Sequential(nn.Linear(4, 3)), **kwargs)


def test_weights_by_torch_name_and_settable_attributes():
    w = {
        "0.weight": ml.Array.from_list([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
        "0.bias": ml.Array.from_list([0.0, 0.5, 1.0]),
    }
    t = ml.Trainer(nn.Sequential(nn.Linear(2, 3)), input_shape=(2,), weights=w)
    assert t.predict_logits(ml.Array.from_list([[2.0, 3.0]])).tolist() == [[2.0, 3.5, 6.0]]
    assert t.weights_["0.bias"].tolist() == [0.0, 0.5, 1.0]
    t.lr, t.weight_decay = 5e-3, 0.0
    assert (t.lr, t.weight_decay) == (5e-3, 0.0)
    with pytest.raises(ValueError, match="learning rate"):
        t.lr = 0.0
    assert t.lr == 5e-3
    with pytest.raises(AttributeError):
        t.step_ = 4
    assert t.state_dict()["model"]["model"] == t.model.to_json()


def test_a_gpu_install_says_once_that_the_engine_runs_on_the_cpu_kernels(monkeypatch):
    import warnings

    from mojolearn._model import trainer as T

    real = T._backend.binding()

    class OnCuda:
        vendor = "cuda"

        def __getattr__(self, name):
            return getattr(real, name)

    class Backend:
        binding = staticmethod(lambda: OnCuda())

    monkeypatch.setattr(T, "_backend", Backend)
    monkeypatch.setattr(T, "_warned_device", False)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = ml.Trainer(model, input_shape=(3,))
        ml.Trainer(model, input_shape=(3,))
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert said == [
        f"mojolearn.Trainer runs on the {T.engine_device('cuda')}; MLPTrainer and SmallMLPTrainer run on the device"
    ]
    assert "no cuda kernels" in said[0]
    monkeypatch.undo()
    b = ml.Trainer(model, input_shape=(3,))
    X, y = ml.Array.from_list([[0.5, -1.0, 2.0]]), ml.Array.from_list([1], "<i4")
    assert a.train_step(X, y)["loss"] == b.train_step(X, y)["loss"]
    assert a.state_hash() == b.state_hash()


def test_info_says_where_the_model_engine_runs():
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "mojolearn", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert (
        info["model_engine"] == "cpu kernels"
        if info["vendor"] == "cpu"
        else "the same bits" in info["model_engine"]
    )


def _flat(t):
    """The trainer's weights as one float list in the spec's (torch's) order."""
    out = array.array("f")
    for a in t.weights_.values():
        out.frombytes(a.tobytes())
    return list(out)


@identical
def test_a_gelu_layernorm_residual_model_trains_with_the_references_bits(seed):
    rng = random.Random(seed)
    model = nn.Sequential(
        nn.Linear(6, 16),
        nn.GELU(),
        nn.Residual(nn.LayerNorm(16), nn.Linear(16, 16), nn.GELU(approximate="tanh")),
        nn.LayerNorm(16),
        nn.Linear(16, 3),
    )
    s = seed % (1 << 64)
    t = ml.Trainer(model, input_shape=(6,), seed=s, lr=1e-2)
    spec = ModelSpec(model, (6,), "cross_entropy")
    X = _x(rng, 24, 6)
    rows = X.tolist()
    y = ml.Array.from_list([int(r[0] + r[1] > 0) + int(r[2] > 0.5) for r in rows], "<i4")
    flat_x, labels = [v for r in rows for v in r], y.tolist()
    p, m, v = _flat(t), [0.0] * spec.total, [0.0] * spec.total
    first = t.evaluate(X, y)["loss"]
    for step in range(1, 4):
        got = t.train_step(X, y)
        loss, out, g = ref_model.step(spec, p, flat_x, labels, 24, s, step, True)
        assert got["loss"] == loss
        assert [v for r in got["logits"].tolist() for v in r] == out
        (p,), _, (m,), (v,), _, _ = adam_step(
            [p], [g], [m], [v], step, 1e-2, 0.9, 0.999, 1e-8, 0.01, decoupled=True, maximize=False
        )
        assert _flat(t) == p
    for _ in range(40):
        t.train_step(X, y)
    assert t.evaluate(X, y)["loss"] < first / 2


_MODEL_PASS = """
import json, random, sys
import mojolearn as ml
from mojolearn import nn
seed, loss = int(sys.argv[1]), sys.argv[2]
rng = random.Random(seed)
model = nn.Sequential(nn.Linear(12, 48), nn.GELU(), nn.Residual(nn.LayerNorm(48), nn.Linear(48, 48),
    nn.Tanh(), nn.Dropout(0.1)), nn.LayerNorm(48), nn.Linear(48, 6), nn.Sigmoid(), nn.Linear(6, 3))
t = ml.Trainer(model, input_shape=(12,), loss=loss, seed=seed)
X = ml.Array.from_list([[rng.gauss(0, 1) for _ in range(12)] for _ in range(32)])
if loss == "mse":
    y = ml.Array.from_list([[rng.gauss(0, 1) for _ in range(3)] for _ in range(32)])
else:
    y = ml.Array.from_list([rng.randrange(3) for _ in range(32)], "<i4")
out = t.train_step(X, y)
grads = [v for g in out["gradients"].values() for v in g.tolist() for v in (v if isinstance(v, list) else [v])]
print(json.dumps({"loss": out["loss"], "outputs": [v for r in out["outputs"].tolist() for v in r], "grads": grads}))
"""


@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
def test_fast_mode_is_within_float32_tolerance_of_identical(seed, loss):
    """docs/ARITHMETIC.md "Models": fast mode runs the same layers with the schedule free
    (contraction allowed): one pass from the same state and batch within 1e-5 relative of
    identical mode, every layer of the engine in it (Dropout's mask is the same function)."""
    import json
    import os
    import subprocess
    import sys

    got = {}
    for mode in ("identical", "fast"):
        proc = subprocess.run(
            [sys.executable, "-c", _MODEL_PASS, str(seed % 10**6), loss],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, MOJOLEARN_NUMERIC_MODE=mode),
        )
        assert proc.returncode == 0, proc.stderr
        got[mode] = json.loads(proc.stdout)
    a, b = got["identical"], got["fast"]
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * (1 + abs(a["loss"]))
    assert all(abs(x - y) <= 1e-5 * (1 + abs(x)) for x, y in zip(a["outputs"], b["outputs"]))
    scale = max(abs(g) for g in a["grads"])
    assert all(abs(x - y) <= 1e-5 * scale for x, y in zip(a["grads"], b["grads"]))
