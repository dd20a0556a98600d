"""A newcomer's day on scikit-learn's bundled data (issue 36), the command-line part: train
with `mojolearn train`, predict with `mojolearn predict`, then use the checkpoint from Python
on RAW rows (`from_checkpoint`, `evaluate`, `predict`) and in onnxruntime (the exported graph
standardizes itself). Each step must agree with the others; the traps the trial met are
refused. (The scikit-learn estimators' part of the flow is tested with them.)"""

import csv

import mojolearn as ml
import pytest

from tests.test_cli import assert_one_line_error, done_record, ok, run_cli

datasets = pytest.importorskip("sklearn.datasets")
np = pytest.importorskip("numpy")


def _write(path, X, y, names, target):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*names, target])
        writer.writerows([*map(repr, map(float, row)), t] for row, t in zip(X, y))


def _predicted(proc):
    return [row[0] for row in list(csv.reader(proc.stdout.splitlines()))[1:]]


def _onnx(trainer, path, X):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    trainer.export_onnx(path)
    return ort.InferenceSession(str(path)).run(None, {"input": X.astype(np.float32)})[0]


@pytest.mark.parametrize(
    "name, layers, epochs, floor",
    [("iris", "4,16,3", 60, 0.9), ("breast_cancer", "30,32,2", 20, 0.93)],
)
def test_a_classifier_from_the_command_line_to_python_and_onnx(
    tmp_path, name, layers, epochs, floor
):
    data = getattr(datasets, f"load_{name}")()
    X, y = data.data, [str(data.target_names[t]) for t in data.target]
    names = [n.replace(" ", "_") for n in data.feature_names]
    _write(tmp_path / "d.csv", X, y, names, "kind")
    args = ["train", "--data", "d.csv", "--label-column", "kind", "--layers", layers]
    done = done_record(run_cli([*args, "--epochs", str(epochs), "--json"], tmp_path))
    assert done["test_accuracy"] >= floor, done
    cli = ok(run_cli(["predict", "mojolearn-run.ckpt", "--data", "d.csv"], tmp_path))
    # From Python, on the raw rows: the checkpoint's trainer standardizes them as train did.
    trainer = ml.MLPTrainer.from_checkpoint(tmp_path / "mojolearn-run.ckpt")
    classes = trainer.preprocessing["classes"]
    labels = ml.Array.from_list([classes.index(t) for t in y], "<i4")
    predicted = trainer.predict(X).tolist()
    assert [classes[c] for c in predicted] == _predicted(cli)
    accuracy = trainer.evaluate(X, labels)["accuracy"]
    assert f"accuracy {100 * accuracy:.1f}%" in cli.stderr and accuracy >= floor
    # ONNX on the raw rows: the graph's Sub/Div standardize (float32 throughout).
    logits = _onnx(trainer, tmp_path / "m.onnx", X)
    assert np.allclose(logits, np.array(trainer.predict_logits(X).tolist()), atol=1e-4)
    assert (logits.argmax(1) == np.array(predicted)).mean() >= 0.99


def test_a_regressor_from_the_command_line_to_python_and_onnx(tmp_path):
    data = datasets.load_diabetes()
    _write(tmp_path / "d.csv", data.data, data.target, data.feature_names, "target")
    # The trial's trap: a numeric target trained as 200-odd classes. Refused, with the fix.
    spec = ["--model", "linear:64,relu,linear:300"]  # room for every value as a class
    proc = run_cli(["train", "--data", "d.csv", "--label-column", "target", *spec], tmp_path)
    assert_one_line_error(proc, "looks like a numeric target", "--loss mse")
    args = ["train", "--data", "d.csv", "--label-column", "target", "--loss", "mse"]
    args += ["--model", "linear:64,gelu,linear:1", "--lr", "0.001", "--epochs", "60"]
    done = done_record(run_cli([*args, "--json"], tmp_path))
    assert done["test_r2"] >= 0.4, done
    cli = ok(run_cli(["predict", "mojolearn-run.ckpt", "--data", "d.csv"], tmp_path))
    trainer = ml.Trainer.from_checkpoint(tmp_path / "mojolearn-run.ckpt")
    units = np.array(trainer.predict(data.data).tolist())[:, 0]  # the target's units
    assert np.allclose(units, [float(v) for v in _predicted(cli)], rtol=1e-6, atol=1e-4)
    r2 = trainer.evaluate(data.data, data.target.tolist())["r2"]
    assert r2 >= 0.4 and f"R² {r2:.4f}" in cli.stderr
    out = _onnx(trainer, tmp_path / "r.onnx", data.data)[:, 0]
    assert np.allclose(out, units, rtol=1e-4, atol=1e-3)
