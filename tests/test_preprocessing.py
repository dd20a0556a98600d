"""Preprocessing that travels with the model (issue 36): a trainer holding a standardization
scores RAW rows (predict_logits, predict, predict_proba, evaluate, export_onnx), keeps it in
its checkpoints, and trains on the network's inputs (`standardize`)."""

import array
import json
import random

import mojolearn as ml
import pytest
from mojolearn import nn
from mojolearn._runtime.backend import requested_mode
from mojolearn._runtime.portable import round_f32

N, F = 37, 5


def _rows(rng, n=N):
    # Raw scales far from standardized ones: a model fed them unscaled scores differently.
    return [[rng.uniform(-40, 90) * (j + 1) for j in range(F)] for _ in range(n)]


def _record(rows, **extra):
    means = [sum(c) / len(rows) for c in zip(*rows)]
    sds = [(sum((v - m) ** 2 for v in c) / len(rows)) ** 0.5 for c, m in zip(zip(*rows), means)]
    sds[-1] = 0.0  # a constant column standardizes to 0
    return dict(mean=means, sd=sds, **extra)


def _mlp(seed):
    return ml.MLPTrainer([F, 9, 3], seed=seed, data_schedule={"test": "pre"})


def _model(seed, loss="cross_entropy"):
    out = 1 if loss == "mse" else 3
    net = nn.Sequential(nn.Linear(F, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, out))
    return ml.Trainer(net, input_shape=(F,), loss=loss, seed=seed, data_schedule={"t": 1})


@pytest.mark.parametrize("make", [_mlp, _model])
def test_raw_rows_score_as_their_standardized_rows(make, seed):
    rng = random.Random(seed)
    rows = _rows(rng)
    y = array.array("i", [rng.randrange(3) for _ in rows])
    trainer = make(seed % 1000)
    before = trainer.state_hash()
    trainer.preprocessing = _record(rows, classes=["a", "b", "c"])
    assert trainer.state_hash() != before and trainer.preprocessing["classes"] == ["a", "b", "c"]
    X = trainer.standardize(rows)
    assert X.shape == (N, F) and {r[-1] for r in X.tolist()} == {0.0}
    raw = {
        "logits": trainer.predict_logits(rows).tolist(),
        "labels": trainer.predict(rows).tolist(),
        "proba": trainer.predict_proba(rows).tolist(),
        "eval": trainer.evaluate(rows, y),
    }
    trainer.preprocessing = None
    assert trainer.preprocessing is None
    net = {
        "logits": trainer.predict_logits(X).tolist(),
        "labels": trainer.predict(X).tolist(),
        "proba": trainer.predict_proba(X).tolist(),
        "eval": trainer.evaluate(X, y),
    }
    assert raw == net
    # Raw rows through the bare network: another answer (the trap the preprocessing closes).
    flat = ml.Array.from_list([v for r in rows for v in r], "<f4").reshape((N, F))
    assert trainer.predict_logits(flat).tolist() != net["logits"]


def test_float32_and_float64_inputs_and_the_train_step_path(seed):
    np = pytest.importorskip("numpy")
    rng = random.Random(seed)
    rows = _rows(rng)
    trainer = _mlp(seed % 1000)
    trainer.preprocessing = _record(rows)
    f64 = np.array(rows)
    assert trainer.standardize(f64).tolist() == trainer.standardize(rows).tolist()
    f32 = f64.astype(np.float32)
    # float32 rows are standardized from their float32 values (each exact in float64).
    assert trainer.standardize(f32).tolist() == trainer.standardize(f32.tolist()).tolist()
    # Training takes the network's inputs: `standardize` gives them.
    y = array.array("i", [rng.randrange(3) for _ in rows])
    before = trainer.evaluate(rows, y)["loss"]
    loss = trainer.train_step(trainer.standardize(rows), y)["loss"]
    if requested_mode() == "identical":  # evaluate's loss is the step's, bit for bit
        assert float(loss) == before


def test_checkpoint_carries_it_and_refusals_change_nothing(tmp_path, seed):
    rng = random.Random(seed)
    rows = _rows(rng)
    for make, cls in ((_mlp, ml.MLPTrainer), (_model, ml.Trainer)):
        trainer = make(seed % 1000)
        trainer.preprocessing = _record(rows)
        path = tmp_path / f"{cls.__name__}.ckpt"
        trainer.save_checkpoint(path)
        back = cls.from_checkpoint(path)
        assert back.preprocessing == trainer.preprocessing
        assert back.predict_logits(rows).tolist() == trainer.predict_logits(rows).tolist()
        held = back.state_hash()
        for bad, why in (
            ({"mean": [0.0] * (F - 1), "sd": [1.0] * F}, "mean must be a list of 5"),
            ({"mean": [0.0] * F, "sd": [-1.0] * F}, "sd must be a list of 5 finite numbers >= 0"),
            ({"mean": [0.0] * F, "sd": [1.0] * F, "classes": list("abcd")}, "at most 3"),
            ([1, 2], "must be a dict"),
        ):
            with pytest.raises(ValueError, match=why):
                back.preprocessing = bad
        with pytest.raises(ValueError, match="X must be rows of 5 numbers"):
            back.predict([[1.0, 2.0]])
        with pytest.raises(ValueError, match="column 0"):
            back.predict([[1.0e300] + [0.0] * (F - 1)])
        assert back.state_hash() == held
    with pytest.raises(ValueError, match="needs a preprocessing"):
        _mlp(1).standardize(rows)


def test_regressor_predicts_and_evaluates_in_the_targets_units(seed):
    rng = random.Random(seed)
    rows = _rows(rng)
    t = [rng.uniform(100, 300) for _ in rows]
    trainer = _model(seed % 1000, "mse")
    trainer.preprocessing = _record(rows, target_mean=200.0, target_sd=50.0)
    z = trainer.predict_logits(rows).tolist()
    units = trainer.predict(rows).tolist()
    assert units == [[round_f32(v[0] * 50.0 + 200.0)] for v in z]
    raw = trainer.evaluate(rows, t)
    X = trainer.standardize(rows)
    zt = array.array("f", [(v - 200.0) / 50.0 for v in t])
    trainer.preprocessing = None
    net = trainer.evaluate(X, ml.Array.from_list(list(zt), "<f4").reshape((N, 1)))
    assert raw["r2"] == pytest.approx(net["r2"], abs=1e-6) and raw["loss"] == net["loss"]


def test_onnx_scores_raw_rows_and_safetensors_names_it(tmp_path, seed):
    np = pytest.importorskip("numpy")
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    rng = random.Random(seed)
    rows = _rows(rng)
    X = np.array(rows, dtype=np.float32)
    cases = [(_mlp(seed % 1000), {}), (_model(seed % 1000), {})]
    cases.append((_model(seed % 1000, "mse"), dict(target_mean=-3.0, target_sd=7.5)))
    for i, (trainer, extra) in enumerate(cases):
        trainer.preprocessing = _record(rows, **extra)
        path = str(tmp_path / f"{i}.onnx")
        trainer.export_onnx(path)
        got = ort.InferenceSession(path).run(None, {"input": X})[0]
        want = np.array(
            trainer.predict(rows).tolist() if extra else trainer.predict_logits(rows).tolist()
        )
        # float32 in the graph against float64-then-round in mojolearn: a few ulps apart.
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4), (i, np.abs(got - want).max())
        if not extra:
            assert (got.argmax(1) == np.array(trainer.predict(rows).tolist())).mean() >= 0.97
    pytest.importorskip("safetensors")
    trainer = cases[0][0]
    trainer.save_safetensors(tmp_path / "w.safetensors")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "w.safetensors"), "np") as f:
        meta = f.metadata()
    assert json.loads(meta["preprocessing"]) == trainer.preprocessing
