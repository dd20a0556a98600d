"""A user's day with the command line (issue 29): `mojolearn predict` on raw rows, `train
--val-fraction` (a stratified, seeded, recorded validation split), `--patience` (early stopping
that keeps CHECKPOINT.best), the test rows scored once at the end, and every refusal (exit 2,
one line, nothing written).

Predictions are held against the library in this process: the rows `train` standardized
(`cli.data.load_csv`) through the checkpoint's trainer (`predict`, `predict_proba`), so a wrong
column order, standardization, class name or probability shows up as a difference.
"""

import csv
import io
import json
import math
import random
import statistics

import mojolearn as ml
import pytest
from mojolearn import Array, checkpoint, cli
from mojolearn._mlp import state as _S
from mojolearn._runtime.portable import round_f32
from mojolearn.cli import data as _data
from mojolearn.cli import run as _run

from tests.test_cli import assert_one_line_error, done_record, json_lines, ok, run_cli

LABELS = ("quark", "alpha", "Zeta")  # not in sorted order: names are numbered sorted
# Per-column centres and scales far from 0 and 1: a missed or wrong standardization matters.
CENTRES = (1000.0, -3.5, 0.002, 250.0, 7.0, -40000.0, 12.5, 3.0)
SCALES = (300.0, 0.5, 0.001, 90.0, 2.0, 8000.0, 4.0, 0.75)
COLUMNS = tuple(f"x{j}" for j in range(8))


def _wine_like_csv(rng, rows, label_first=True):
    """A header, the label column first (not train's default), 8 unstandardized features."""
    header = ["kind", *COLUMNS] if label_first else [*COLUMNS, "kind"]
    lines = [",".join(header)]
    for _ in range(rows):
        y = rng.randrange(3)
        cells = [
            f"{CENTRES[j] + SCALES[j] * rng.gauss(y * (j % 3 - 1), 1.0):.6g}" for j in range(8)
        ]
        lines.append(",".join([LABELS[y], *cells] if label_first else [*cells, LABELS[y]]))
    return "\n".join(lines) + "\n"


def _identical():
    """This process in identical mode, as the CLI runs below are (skip when it runs fast)."""
    try:
        ml.set_numeric_mode("identical")
    except RuntimeError:
        pytest.skip("this process runs fast mode; the CLI runs here are identical-mode runs")


def _read_table(text):
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def _array(dataset, rows):
    x, y = dataset.gather(rows)
    X = Array.from_list(list(x), "<f4").reshape((len(rows), dataset.n_features))
    return X, Array.from_list(list(y), "<i4")


def _raw(dataset, rows):
    """The raw rows (what a checkpoint's trainer, holding train's standardization, takes)."""
    return [list(dataset._raw[r]) for r in rows], _array(dataset, rows)[1]


def _trained(tmp_path, rng, *extra, rows=150, name="c.ckpt"):
    (tmp_path / "data.csv").write_text(_wine_like_csv(rng, rows))
    args = ["train", "--data", "data.csv", "--label-column", "kind", "--checkpoint", name]
    done = done_record(run_cli([*args, *extra, "--json"], tmp_path))
    return done, tmp_path / name


# -- predict --------------------------------------------------------------------------------


def test_predict_on_raw_rows_matches_the_trainer_on_trains_standardized_rows(tmp_path, seed):
    rng = random.Random(seed)
    _trained(tmp_path, rng, "--steps", "120")
    _identical()
    dataset = _data.load_csv(str(tmp_path / "data.csv"), "kind", 8, 3)
    every = list(range(len(dataset.labels)))
    X, y = _array(dataset, every)  # the very rows (and bits) train fed the network
    trainer = ml.SmallMLPTrainer.from_checkpoint(tmp_path / "c.ckpt")
    names = sorted(LABELS)
    # The checkpoint's trainer holds train's standardization: it takes the raw rows...
    raw = [list(r) for r in dataset._raw]
    want = [names[c] for c in trainer.predict(raw).tolist()]
    trainer.preprocessing = None  # ...and without it, the network's (standardized) inputs
    assert [names[c] for c in trainer.predict(X).tolist()] == want
    assert set(want) != {want[0]}, "a degenerate network: train longer"

    proc = ok(run_cli(["predict", "c.ckpt", "--data", "data.csv"], tmp_path))
    header, rows = _read_table(proc.stdout)
    assert header == ["prediction"] and [r[0] for r in rows] == want
    right = sum(a == names[b] for a, b in zip(want, y.tolist()))
    assert f"accuracy {100 * right / len(y):.1f}% ({right} of {len(y)} rows)" in proc.stderr

    # Without the label column and with the columns in another order: the same predictions,
    # here with the probabilities, written to a file.
    order = list(COLUMNS)
    rng.shuffle(order)
    source = list(csv.reader(io.StringIO((tmp_path / "data.csv").read_text())))
    where = {name: j for j, name in enumerate(source[0])}
    (tmp_path / "raw.csv").write_text(
        "\n".join(",".join(row[where[n]] for n in order) for row in source) + "\n"
    )
    out = ok(
        run_cli(["predict", "c.ckpt", "--data", "raw.csv", "--proba", "--out", "p.csv"], tmp_path)
    )
    assert out.stdout.strip() == f"wrote {len(y)} predictions to p.csv" and out.stderr == ""
    header, rows = _read_table((tmp_path / "p.csv").read_text())
    assert header == ["prediction"] + [f"proba_{n}" for n in names]
    assert [r[0] for r in rows] == want
    proba = trainer.predict_proba(X).tolist()
    for row, p in zip(rows, proba):
        got = [round_f32(float(text)) for text in row[1:]]
        assert got == p, (row, p)  # every probability reads back as its float32


def test_the_checkpoint_records_the_preprocessing(tmp_path, seed):
    rng = random.Random(seed)
    done, path = _trained(tmp_path, rng, "--steps", "3")
    record = json.loads(path.read_bytes())["payload"]["data_schedule"]["preprocessing"]
    dataset = _data.load_csv(str(tmp_path / "data.csv"), "kind", 8, 3)
    assert record["columns"] == list(COLUMNS) and record["header"] is True
    assert record["label_index"] == 0 and record["classes"] == sorted(LABELS)
    raw = list(csv.reader(io.StringIO((tmp_path / "data.csv").read_text())))[1:]
    for j in range(8):
        column = [float(raw[r][j + 1]) for r in dataset.train_rows]
        mean, sd = statistics.fmean(column), statistics.pstdev(column)
        assert math.isclose(record["mean"][j], mean, rel_tol=1e-12, abs_tol=1e-12 * SCALES[j])
        assert math.isclose(record["sd"][j], sd, rel_tol=1e-9)


def test_headerless_data_predicts_by_position(tmp_path, seed):
    rng = random.Random(seed)
    lines = _wine_like_csv(rng, 90, label_first=False).splitlines()[1:]
    lines = [
        line.replace(LABELS[0], "0").replace(LABELS[1], "1").replace(LABELS[2], "2")
        for line in lines
    ]
    (tmp_path / "n.csv").write_text("\n".join(lines) + "\n")
    ok(run_cli(["train", "--data", "n.csv", "--steps", "20", "--checkpoint", "n.ckpt"], tmp_path))
    _identical()
    dataset = _data.load_csv(str(tmp_path / "n.csv"), None, 8, 3)
    X, y = _raw(dataset, list(range(len(lines))))
    want = ml.SmallMLPTrainer.from_checkpoint(tmp_path / "n.ckpt").predict(X).tolist()
    with_label = ok(run_cli(["predict", "n.ckpt", "--data", "n.csv"], tmp_path))
    assert [int(r[0]) for r in _read_table(with_label.stdout)[1]] == want
    (tmp_path / "f.csv").write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")
    alone = ok(run_cli(["predict", "n.ckpt", "--data", "f.csv"], tmp_path))
    assert alone.stdout == with_label.stdout and alone.stderr == ""
    (tmp_path / "h.csv").write_text("a,b,c,d,e,f,g,h\n" + (tmp_path / "f.csv").read_text())
    assert_one_line_error(
        run_cli(["predict", "n.ckpt", "--data", "h.csv"], tmp_path),
        "a header row, but the checkpoint's data had none",
    )


def test_digits_records_64_columns_and_predicts(tmp_path):
    done = done_record(
        run_cli(["train", "--dataset", "digits", "--steps", "30", "--json"], tmp_path)
    )
    assert done["step"] == 30
    _identical()
    dataset = _data.load_digits()
    rows = dataset.test_rows[:40]
    X, y = _raw(dataset, rows)
    want = ml.MLPTrainer.from_checkpoint(tmp_path / "mojolearn-run.ckpt").predict(X).tolist()
    import gzip

    lines = gzip.decompress(open(_data.DIGITS_FILE, "rb").read()).decode().splitlines()
    (tmp_path / "d.csv").write_text("\n".join(lines[r] for r in rows) + "\n")
    proc = ok(run_cli(["predict", "mojolearn-run.ckpt", "--data", "d.csv"], tmp_path))
    assert [int(r[0]) for r in _read_table(proc.stdout)[1]] == want
    assert f"of {len(rows)} rows" in proc.stderr


PREDICT_REFUSALS = [
    (
        "extra column",
        "x0,x1,x2,x3,x4,x5,x6,x7,other\n1,2,3,4,5,6,7,8,9\n",
        "'other' is not one of them",
    ),
    ("missing column", "x0,x1,x2,x3,x4,x5,x6,kind\n1,2,3,4,5,6,7,quark\n", "no column 'x7'"),
    ("renamed column", "x0,x1,x2,x3,x4,x5,x6,y7\n1,2,3,4,5,6,7,8\n", "'y7' is not one of them"),
    ("no x7", "x0,x1,x2,x3,x4,x5,x6,kind,extra\n1,2,3,4,5,6,7,quark,1\n", "'extra' is not one"),
    ("width", "1,2,3\n", "row 1: 3 columns, expected 8"),
    (
        "short row",
        "x0,x1,x2,x3,x4,x5,x6,x7\n1,2,3,4,5,6,7,8\n1,2\n",
        "row 3: 2 columns, expected 8",
    ),
    (
        "not a number",
        "x0,x1,x2,x3,x4,x5,x6,x7\n1,2,3,4,5,6,7,nan\n",
        "'nan' is not a finite float32",
    ),
    (
        "unknown label",
        "kind,x0,x1,x2,x3,x4,x5,x6,x7\nomega,1,2,3,4,5,6,7,8\n",
        "label 'omega' is not one",
    ),
    ("no rows", "x0,x1,x2,x3,x4,x5,x6,x7\n", "no data rows after the header"),
    ("empty", "", "the file is empty"),
]


def test_predict_refusals(tmp_path, seed):
    rng = random.Random(seed)
    _trained(tmp_path, rng, "--steps", "2")
    for name, text, part in PREDICT_REFUSALS:
        (tmp_path / "bad.csv").write_text(text)
        proc = run_cli(["predict", "c.ckpt", "--data", "bad.csv", "--out", "o.csv"], tmp_path)
        assert_one_line_error(proc, "mojolearn predict: error:", part)
        assert not (tmp_path / "o.csv").exists(), name
    (tmp_path / "good.csv").write_text("x0,x1,x2,x3,x4,x5,x6,x7\n1,2,3,4,5,6,7,8\n")
    for args, part in (
        (["missing.ckpt", "--data", "good.csv"], "no checkpoint at missing.ckpt"),
        (["data.csv", "--data", "good.csv"], "data.csv is not a valid mojolearn checkpoint"),
        (["c.ckpt", "--data", "nowhere.csv"], "cannot read --data nowhere.csv"),
        (["c.ckpt", "--data", "good.csv", "--out", "no/dir/o.csv"], "does not exist"),
        (["c.ckpt"], "the following arguments are required: --data"),
    ):
        assert_one_line_error(run_cli(["predict", *args], tmp_path), part)
    # A checkpoint of another program, and one written before the preprocessing was recorded.
    w = ml.SmallMLPTrainer(*ml.init_small_mlp(1), data_schedule={"mine": 1})
    w.save_checkpoint(tmp_path / "other.ckpt")
    assert_one_line_error(
        run_cli(["predict", "other.ckpt", "--data", "good.csv"], tmp_path),
        "not written by `mojolearn train`",
    )
    _strip_preprocessing(tmp_path / "c.ckpt")
    assert_one_line_error(
        run_cli(["predict", "c.ckpt", "--data", "good.csv"], tmp_path),
        "records no preprocessing",
        "mojolearn train --resume --checkpoint c.ckpt",
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".csv") == [
        "bad.csv",
        "data.csv",
        "good.csv",
    ]


def _strip_preprocessing(path):
    """The checkpoint as a version before issue 29 wrote it: no preprocessing record (nor
    envelope_sha256, which came later)."""
    envelope = json.loads(path.read_bytes())
    del envelope["payload"]["data_schedule"]["preprocessing"]
    envelope["payload_sha256"] = checkpoint.state_hash(envelope["payload"])
    del envelope["envelope_sha256"]
    path.write_bytes(_S.canonical(envelope) + b"\n")


def test_a_checkpoint_written_before_the_record_resumes_exactly(tmp_path, seed):
    rng = random.Random(seed)
    whole, _ = _trained(tmp_path, rng, "--steps", "14", name="whole.ckpt")
    common = ["train", "--data", "data.csv", "--label-column", "kind", "--checkpoint", "c.ckpt"]
    ok(run_cli([*common, "--steps", "6"], tmp_path))
    _strip_preprocessing(tmp_path / "c.ckpt")
    ok(run_cli(["verify", "c.ckpt"], tmp_path))
    done = done_record(run_cli([*common, "--resume", "--steps", "14", "--json"], tmp_path))
    assert done["state_hash"] == whole["state_hash"]  # and the record is back in the file
    ok(run_cli(["predict", "c.ckpt", "--data", "data.csv"], tmp_path))


# -- validation, patience, the test rows ------------------------------------------------------


def test_val_split_is_stratified_seeded_and_taken_from_the_training_rows(seed):
    rng = random.Random(seed)
    fraction = rng.choice((0.1, 0.2, 0.25, 0.5))
    dataset = _data.load_bundled()
    train = list(dataset.train_rows)
    dataset.hold_out(fraction, seed)
    assert sorted(dataset.train_rows + dataset.val_rows) == train
    assert not set(dataset.train_rows) & set(dataset.val_rows)
    for c in range(3):
        members = [r for r in train if dataset.labels[r] == c]
        held = [r for r in dataset.val_rows if dataset.labels[r] == c]
        assert len(held) == math.floor(fraction * len(members)), c
    again = _data.load_bundled()
    again.hold_out(fraction, seed)
    assert again.val_rows == dataset.val_rows and again.features == dataset.features
    other = _data.load_bundled()
    other.hold_out(fraction, seed + 1)
    assert other.val_rows != dataset.val_rows and len(other.val_rows) == len(dataset.val_rows)
    # The standardization sees the rows the network trains on, not the validation rows.
    kept = [[dataset._raw[r][j] for r in dataset.train_rows] for j in range(8)]
    assert [
        math.isclose(m, statistics.fmean(k), rel_tol=1e-12) for m, k in zip(dataset.means, kept)
    ] == [True] * 8


def test_val_fraction_run_records_scores_and_resumes_exactly(tmp_path, seed):
    rng = random.Random(seed)
    per_epoch = 8  # 144 training rows, 27 held out (floor(0.2 x 47, 57, 39)), batches of 16
    common = ["--val-fraction", "0.2", "--seed", str(rng.randrange(1 << 32)), "--steps", "40"]
    full = done_record(run_cli(["train", *common, "--checkpoint", "full.ckpt", "--json"], tmp_path))
    stop = rng.randrange(1, 40)
    ok(run_cli(["train", *common[:4], "--steps", str(stop), "--checkpoint", "leg.ckpt"], tmp_path))
    leg = done_record(
        run_cli(
            ["train", "--resume", "--steps", "40", "--checkpoint", "leg.ckpt", "--json"], tmp_path
        )
    )
    assert leg["state_hash"] == full["state_hash"], stop
    history = (tmp_path / "full.ckpt.history.jsonl").read_bytes()
    assert (tmp_path / "leg.ckpt.history.jsonl").read_bytes() == history
    schedule = json.loads((tmp_path / "full.ckpt").read_bytes())["payload"]["data_schedule"]
    assert (schedule["val_fraction"], schedule["n_val"], schedule["n_train"]) == (0.2, 27, 117)
    records = json_lines(history.decode())
    scored = [r["step"] for r in records if "val_loss" in r]
    assert scored == list(range(per_epoch, 41, per_epoch))
    assert not any("test_loss" in r for r in records)
    # The last validation point and the report's figures are the trainer's own evaluate.
    _identical()
    dataset = _data.load_bundled()
    dataset.hold_out(0.2, int(common[3]))
    trainer = ml.SmallMLPTrainer.from_checkpoint(tmp_path / "full.ckpt")
    val = trainer.evaluate(*_raw(dataset, dataset.val_rows))
    assert (records[-1]["val_loss"], records[-1]["val_accuracy"]) == (val["loss"], val["accuracy"])
    assert (full["val_loss"], full["val_accuracy"]) == (val["loss"], val["accuracy"])
    test = trainer.evaluate(*_raw(dataset, dataset.test_rows))
    assert (full["test_loss"], full["test_accuracy"]) == (test["loss"], test["accuracy"])


def test_the_test_rows_are_scored_once(tmp_path, monkeypatch, capsys):
    calls = []
    evaluate = _run.evaluate

    def counted(trainer, dataset, rows):
        calls.append("test" if rows is dataset.test_rows else "val")
        return evaluate(trainer, dataset, rows)

    monkeypatch.setattr(_run, "evaluate", counted)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--val-fraction", "0.25", "--epochs", "5", "--json"]) == 0
    assert calls == ["val"] * 5 + ["test", "val"]  # 5 epoch ends, then the report
    calls.clear()
    assert cli.main(["train", "--epochs", "3", "--checkpoint", "b.ckpt"]) == 0
    assert calls == ["test"]
    capsys.readouterr()


def _patience_run(tmp_path, name, *extra, length=("--epochs", "200")):
    args = ["train", "--val-fraction", "0.2", "--patience", "2", "--lr", "0.05", *length]
    return run_cli([*args, "--checkpoint", name, *extra, "--json"], tmp_path)


def test_patience_stops_and_keeps_the_best_checkpoint(tmp_path):
    done = done_record(_patience_run(tmp_path, "p.ckpt"))
    assert done["stopped_early"] is True and done["step"] < 200 * 8, done
    records = json_lines((tmp_path / "p.ckpt.history.jsonl").read_text())
    val = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
    best = min(v for _, v in val)
    best_step = next(s for s, v in val if v == best)
    assert (done["best_step"], done["best_val_loss"]) == (best_step, best)
    after = [s for s, _ in val if s > best_step]
    assert after == [best_step + 8, best_step + 16] and done["step"] == after[-1]
    assert done["best_checkpoint"] == "p.ckpt.best"
    kept = ml.SmallMLPTrainer.from_checkpoint(tmp_path / "p.ckpt.best")
    assert kept.step_ == best_step
    schedule = kept.data_schedule
    dataset = _data.load_bundled()
    dataset.hold_out(0.2, 0)
    assert kept.evaluate(*_raw(dataset, dataset.val_rows))["loss"] == best
    assert schedule["early_stopping"]["best_step"] == best_step
    ok(run_cli(["verify", "p.ckpt.best"], tmp_path))
    # A stopped run stays stopped; an interrupted one resumes to the same bits and best file.
    again = done_record(_patience_run(tmp_path, "p.ckpt", "--resume"))
    assert (again["step"], again["state_hash"]) == (done["step"], done["state_hash"])
    ok(_patience_run(tmp_path, "q.ckpt", length=("--steps", str(best_step - 3))))
    leg = done_record(
        run_cli(
            ["train", "--resume", "--checkpoint", "q.ckpt", "--epochs", "200", "--json"], tmp_path
        )
    )
    assert (leg["step"], leg["state_hash"]) == (done["step"], done["state_hash"])
    assert (tmp_path / "q.ckpt.best").read_bytes() == (tmp_path / "p.ckpt.best").read_bytes()


def test_patience_before_the_first_epoch_end_has_no_best_yet(tmp_path):
    (tmp_path / "mojolearn-run.ckpt.best").write_bytes(b"an earlier run's")
    args = ["train", "--val-fraction", "0.2", "--patience", "3", "--steps", "3", "--json"]
    done = done_record(run_cli(args, tmp_path))
    assert (done["best_checkpoint"], done["best_val_loss"], done["stopped_early"]) == (
        None,
        None,
        False,
    )
    assert not (tmp_path / "mojolearn-run.ckpt.best").exists()  # a fresh run replaces it
    schedule = json.loads((tmp_path / "mojolearn-run.ckpt").read_bytes())["payload"]
    stopping = schedule["data_schedule"]["early_stopping"]
    assert stopping == {"best_step": 0, "best_val_loss": None, "bad_epochs": 0}


TRAIN_REFUSALS = [
    (["--val-fraction", "0"], "--val-fraction: expected a number in (0, 1), got '0'"),
    (["--val-fraction", "1"], "expected a number in (0, 1), got '1'"),
    (["--val-fraction", "nan"], "expected a number in (0, 1), got 'nan'"),
    (["--val-fraction", "x"], "expected a number in (0, 1), got 'x'"),
    (["--patience", "0"], "--patience: expected an integer in [1, 2**20], got 0"),
    (["--patience", "3"], "--patience 3 needs --val-fraction F"),
    (["--val-fraction", "0.01"], "--val-fraction 0.01 holds out no row"),
]


@pytest.mark.parametrize("args,part", TRAIN_REFUSALS, ids=[" ".join(a) for a, _ in TRAIN_REFUSALS])
def test_train_refusals(tmp_path, args, part):
    assert_one_line_error(run_cli(["train", *args], tmp_path), part)
    assert list(tmp_path.iterdir()) == []


def test_resume_refuses_another_validation_or_patience(tmp_path):
    ok(run_cli(["train", "--val-fraction", "0.2", "--steps", "3"], tmp_path))
    for args, part in (
        (["--val-fraction", "0.3"], "--val-fraction 0.3 (checkpoint: 0.2)"),
        (["--patience", "2"], "--patience 2 (checkpoint: None)"),
    ):
        assert_one_line_error(run_cli(["train", "--resume", *args], tmp_path), part)


def test_long_names_that_do_not_fit_a_small_checkpoint_are_refused_by_name(tmp_path):
    rng = random.Random(3)
    text = _wine_like_csv(rng, 30).replace("x0,", "x" * 1500 + ",", 1)
    (tmp_path / "long.csv").write_text(text)
    assert_one_line_error(
        run_cli(["train", "--data", "long.csv", "--label-column", "kind"], tmp_path),
        "data_schedule is",
        "records the data's 8 column names and 3 class names",
        "--layers 8,16,3",
    )
    assert list(tmp_path.iterdir()) == [tmp_path / "long.csv"]
    ok(
        run_cli(
            [
                "train",
                "--data",
                "long.csv",
                "--label-column",
                "kind",
                "--layers",
                "8,16,3",
                "--steps",
                "2",
            ],
            tmp_path,
        )
    )


def test_mlp_trainer_data_schedule_bounds():
    big = {"columns": [f"c{i}" for i in range(5000)], "mean": [0.5] * 5000}
    trainer = ml.MLPTrainer([8, 4, 3], seed=0, data_schedule=big)
    assert trainer.data_schedule == big
    with pytest.raises(ValueError, match="SmallMLPTrainer: data_schedule has more than 128"):
        ml.SmallMLPTrainer(*ml.init_small_mlp(0), data_schedule=big)
    with pytest.raises(ValueError, match="MLPTrainer: data_schedule has more than 65536 values"):
        ml.MLPTrainer([8, 4, 3], seed=0, data_schedule={"a": list(range(1 << 16))})
    with pytest.raises(ValueError, match="more than 524288"):
        ml.MLPTrainer([8, 4, 3], seed=0, data_schedule={"a": ["y" * 2000] * 300})


def test_mlp_trainer_checkpoint_keeps_a_large_schedule(tmp_path):
    big = {"columns": [f"column number {i}" for i in range(3000)], "sd": [1.25] * 3000}
    trainer = ml.MLPTrainer([8, 4, 3], seed=0, data_schedule=big)
    trainer.save_checkpoint(tmp_path / "big.ckpt")
    back = ml.MLPTrainer.from_checkpoint(tmp_path / "big.ckpt")
    assert back.data_schedule == big and back.state_hash() == trainer.state_hash()


def test_help_describes_the_new_options_and_command(capsys):
    for argv, parts in (
        (["train", "--help"], ("--val-fraction", "--patience", "CHECKPOINT.best", "scored once")),
        (["predict", "--help"], ("--proba", "--out", "standardized", "class")),
        (["--help"], ("predict",)),
    ):
        with pytest.raises(SystemExit):
            cli.main(argv)
        text = " ".join(capsys.readouterr().out.split())
        for part in parts:
            assert part in text, (argv, part)
