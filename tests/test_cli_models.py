"""`mojolearn train --model SPEC [--loss mse]` (a `mojolearn.Trainer` from a one-line layer
list) and `mojolearn predict` on its checkpoints: a GELU/LayerNorm/Dropout/Residual classifier
on the bundled wine data, an MSE regressor (a CSV written here; scikit-learn's diabetes against
MLPRegressor when scikit-learn is installed), exact resume after a stop at a random step, and
SPECs refused in one line with exit 2 and nothing written."""

import csv
import json
import random

import pytest

from tests.test_cli import assert_one_line_error, done_record, json_lines, ok, run_cli

GLR = "linear:32,gelu,layernorm,dropout:0.1,residual(layernorm,linear:32,gelu:tanh),linear:3"


def _regression_csv(path, rng, rows=120):
    """y = 3·a - 2·b + 0.5·c·c + 100 plus noise, with a header; the target in column 2."""
    lines = ["a,y,b,c"]
    for _ in range(rows):
        a, b, c = (rng.uniform(-2, 2) for _ in range(3))
        y = 3 * a - 2 * b + 0.5 * c * c + 100 + rng.gauss(0, 0.1)
        lines.append(f"{a:.6f},{y:.6f},{b:.6f},{c:.6f}")
    path.write_text("\n".join(lines) + "\n")


def test_gelu_layernorm_residual_classifier_on_wine_then_predict(tmp_path):
    records = json_lines(ok(run_cli(["train", "--model", GLR, "--json"], tmp_path)).stdout)
    start, done = records[0], records[-1]
    assert start["model"] == GLR and start["loss"] == "cross_entropy"
    assert start["network"].startswith("Sequential(Linear(8, 32), GELU(), LayerNorm(32)")
    assert done["event"] == "done" and done["test_accuracy"] >= 0.9, done
    report = json.loads(ok(run_cli(["verify", "mojolearn-run.ckpt", "--json"], tmp_path)).stdout)
    assert report["schema"] == "mojolearn.model-checkpoint.v1"
    assert report["state_hash"] == done["state_hash"] and report["next_step"].startswith("finite")
    schedule = json.loads((tmp_path / "mojolearn-run.ckpt").read_bytes())["payload"]
    assert schedule["data_schedule"]["model"] == GLR
    # predict: the wine rows by column name, the label column kept (accuracy reported).
    from mojolearn.cli import data as _data

    wine = _data.load_bundled()
    with open(tmp_path / "rows.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*wine.columns, "class"])
        for row, y in zip(wine._raw, wine.labels):
            writer.writerow([repr(v) for v in row] + [y])
    proc = ok(run_cli(["predict", "mojolearn-run.ckpt", "--data", "rows.csv", "--proba"], tmp_path))
    out = list(csv.reader(proc.stdout.splitlines()))
    assert out[0] == ["prediction", "proba_class_0", "proba_class_1", "proba_class_2"]
    assert len(out) == 1 + len(wine.labels) and {r[0] for r in out[1:]} <= set(wine.class_names)
    right = sum(r[0] == wine.class_names[y] for r, y in zip(out[1:], wine.labels))
    assert f"accuracy {100 * right / len(wine.labels):.1f}%" in proc.stderr
    assert right / len(wine.labels) >= 0.9


def test_mse_regressor_reports_in_target_units_and_predicts(tmp_path, seed):
    rng = random.Random(seed)
    _regression_csv(tmp_path / "reg.csv", rng)
    args = ["train", "--data", "reg.csv", "--label-column", "y", "--loss", "mse", "--json"]
    args += ["--model", "linear:32,gelu,linear:1", "--epochs", "60", "--seed", str(seed % 100)]
    done = done_record(run_cli(args, tmp_path))
    assert "test_accuracy" not in done and done["test_r2"] > 0.9, done
    ckpt = json.loads((tmp_path / "mojolearn-run.ckpt").read_bytes())["payload"]
    pre = ckpt["data_schedule"]["preprocessing"]
    assert ckpt["model"]["loss"] == "mse" and "classes" not in pre
    ys = [float(line.split(",")[1]) for line in (tmp_path / "reg.csv").read_text().split()[1:]]
    assert 95 < pre["target_mean"] < 105 and pre["target_sd"] > 1  # training rows, raw units
    # The test MSE is in the target's units: R² = 1 - MSE / var(test targets) over the same rows.
    from mojolearn.cli import data as _data

    test_rows = _data.split_rows([0] * len(ys), 1)[1]
    t = [ys[r] for r in test_rows]
    var = sum((v - sum(t) / len(t)) ** 2 for v in t) / len(t)
    assert done["test_mse"] == pytest.approx((1 - done["test_r2"]) * var, rel=1e-4)
    # predict: numbers in the target's units, MSE and R² against the label column.
    proc = ok(run_cli(["predict", "mojolearn-run.ckpt", "--data", "reg.csv"], tmp_path))
    lines = proc.stdout.split()
    assert lines[0] == "prediction" and len(lines) == 1 + len(ys)
    errors = [float(p) - y for p, y in zip(lines[1:], ys)]
    assert sum(e * e for e in errors) / len(ys) < 0.1 * var
    assert "MSE " in proc.stderr and "R² 0.9" in proc.stderr
    assert_one_line_error(
        run_cli(["predict", "mojolearn-run.ckpt", "--data", "reg.csv", "--proba"], tmp_path),
        "--proba",
        "regressor",
    )


def test_resume_at_a_random_step_equals_an_uninterrupted_run(tmp_path, seed):
    rng = random.Random(seed)
    _regression_csv(tmp_path / "reg.csv", rng, rows=60)
    end, cut = 90, rng.randint(1, 89)
    for spec, data in ((GLR, []), ("linear:16,tanh,dropout:0.2,linear:1", ["reg.csv"])):
        again = ["--data", "reg.csv", "--label-column", "y"] if data else []  # a CSV run's
        common = ["--model", spec, "--seed", str(seed % 1000), "--checkpoint-every", "7"]
        common += again + (["--loss", "mse"] if data else [])
        full = done_record(
            run_cli(
                ["train", *common, "--steps", str(end), "--checkpoint", "f.ckpt", "--json"],
                tmp_path,
            )
        )
        ok(run_cli(["train", *common, "--steps", str(cut), "--checkpoint", "r.ckpt"], tmp_path))
        resumed = run_cli(
            ["train", "--resume", "--checkpoint", "r.ckpt", "--steps", str(end), "--json", *again],
            tmp_path,
        )
        assert done_record(resumed)["state_hash"] == full["state_hash"], (spec, cut)
        history = (tmp_path / "r.ckpt.history.jsonl").read_bytes()
        assert history == (tmp_path / "f.ckpt.history.jsonl").read_bytes()
        # Another SPEC or loss on resume is refused by name, nothing changed.
        before = (tmp_path / "r.ckpt").read_bytes()
        other = run_cli(
            ["train", "--resume", "--checkpoint", "r.ckpt", "--model", "linear:3", *again], tmp_path
        )
        assert_one_line_error(other, "--model linear:3 (checkpoint: ")
        assert (tmp_path / "r.ckpt").read_bytes() == before


@pytest.mark.parametrize(
    "spec,parts",
    [
        ("linear:64,gelu,linear:x", ["at character 16", "'linear:x'", "linear:N"]),
        ("linear:0", ["at character 1", "N an integer in [1, 1048576]"]),
        ("linear:8,dropout:1.0,linear:3", ["at character 10", "dropout:P", "[0, 1)"]),
        ("linear:8,swish,linear:3", ["at character 10", "'swish'", "a layer: linear:N"]),
        ("linear:8,,linear:3", ["at character 10", "a layer"]),
        ("gelu,layernorm", ["a linear:N outside residual"]),
        ("residual(linear:8,linear:3", ["a ')' closing 'residual('"]),
        ("linear:3)", ["at character 9", "closes no 'residual('"]),
        ("linear:8,residual(linear:4),linear:3", ["at character 10", "keep the width 8"]),
        ("linear:8:bias,linear:3", ["at character 1", "linear:N:nobias"]),
    ],
)
def test_bad_specs_exit_2_one_line_nothing_written(tmp_path, spec, parts):
    err = assert_one_line_error(run_cli(["train", "--model", spec], tmp_path), "--model", *parts)
    assert spec[:20] in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_option_refusals(tmp_path):
    rng = random.Random(0)
    _regression_csv(tmp_path / "reg.csv", rng, rows=30)
    (tmp_path / "words.csv").write_text("a,b,y\n1,2,low\n3,4,high\n5,6,low\n")
    mse = ["train", "--loss", "mse", "--label-column", "y"]
    cases = [
        (["train", "--layers", "8,16,3", "--model", "linear:3"], ["not allowed with argument"]),
        (["train", "--loss", "mse"], ["--loss mse needs --model SPEC"]),
        (["train", "--model", "linear:3", "--loss", "mse"], ["gives 3 outputs", "linear:1"]),
        (["train", "--loss", "mse", "--model", "linear:1"], ["--loss mse needs --data CSV"]),
        ([*mse, "--model", "linear:1", "--data", "words.csv"], ["'low'", "numeric targets"]),
    ]
    for args, parts in cases:
        assert_one_line_error(run_cli(args, tmp_path), *parts)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reg.csv", "words.csv"]


def test_diabetes_r2_at_least_mlpregressor_on_the_same_split(tmp_path):
    datasets = pytest.importorskip("sklearn.datasets")
    neural = pytest.importorskip("sklearn.neural_network")
    import warnings

    from mojolearn.cli import data as _data

    X, y = datasets.load_diabetes(return_X_y=True)
    with open(tmp_path / "diabetes.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"x{j}" for j in range(10)] + ["target"])
        writer.writerows([repr(float(v)) for v in row] + [repr(float(t))] for row, t in zip(X, y))
    # The CLI's split and standardization (X and the target), for MLPRegressor too.
    train, test = _data.split_rows([0] * len(y), 1)
    mean, sd = X[train].mean(0), X[train].std(0)
    ym, ys = y[train].mean(), y[train].std()
    spec = ["--model", "linear:64,gelu,linear:1", "--lr", "0.001", "--epochs", "60"]
    for seed in range(5):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # MLPRegressor's ConvergenceWarning
            reg = neural.MLPRegressor(random_state=seed).fit(
                (X[train] - mean) / sd, (y[train] - ym) / ys
            )
        pred = reg.predict((X[test] - mean) / sd) * ys + ym
        bar = 1 - ((pred - y[test]) ** 2).sum() / ((y[test] - y[test].mean()) ** 2).sum()
        args = ["train", "--data", "diabetes.csv", "--label-column", "target", "--loss", "mse"]
        done = done_record(run_cli([*args, *spec, "--seed", str(seed), "--json"], tmp_path))
        assert done["test_r2"] >= bar, (seed, done["test_r2"], bar)
