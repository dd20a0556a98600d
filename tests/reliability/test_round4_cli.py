"""Round 4 (issue 34), the command line's rows 2, 4, 5, 6 and 10 and three smaller findings:
`verify` on a custom lr_schedule, outputs that lead to an input, numeric header names and
columns matched by name, finite rows whose values or logits overflow, `--resume` from a best
checkpoint, `predict --out /dev/stdout` into a pipe, the hint for a v1 checkpoint without a
preprocessing record, and a header with extra columns. Each test failed at e874c97."""

import json
import os
import random
import shlex
import shutil

import mojolearn as ml
import pytest
from mojolearn import checkpoint
from mojolearn._mlp import spec as _spec
from mojolearn.cli import data as _data

from tests.test_cli import assert_one_line_error, done_record, ok, run_cli

from ._util import ROOT, record

V1_WINE = os.path.join(ROOT, "tests", "golden", "v1_wine_step5.ckpt")


def _identical():
    try:
        ml.set_numeric_mode("identical")
    except RuntimeError:
        pytest.skip("this process runs fast mode; the checkpoints here are identical-mode")


def _snapshot(folder):
    """Every file of `folder` (links as their targets' names) and its bytes."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            continue
        out[name] = os.readlink(path) if os.path.islink(path) else open(path, "rb").read()
    return out


# -- 2. verify and a custom lr_schedule -------------------------------------------------------


class _Halving:
    """A custom schedule (any object with lr_at): the file records only its class."""

    def lr_at(self, step):
        return 0.01 / (1 + step)


def test_2_verify_says_ok_for_a_custom_lr_schedule(tmp_path):
    _identical()
    held = cases = 0
    for name, trainer in (
        ("small", ml.SmallMLPTrainer(*_spec.init_small_mlp(0), data_schedule={"seed": 0})),
        ("mlp", ml.MLPTrainer([8, 5, 3], seed=1, data_schedule={"seed": 1})),
    ):
        trainer.lr_schedule = _Halving()
        X = ml.Array.from_list([0.5] * 16, "<f4").reshape((2, 8))
        trainer.train_step(X, ml.Array.from_list([0, 2], "<i4"))
        path = tmp_path / f"{name}.ckpt"
        trainer.save_checkpoint(path)
        before = path.read_bytes()
        assert checkpoint.verify(path)["step"] == 1
        back = type(trainer).from_checkpoint(path, lr_schedule=_Halving())
        assert back.state_hash() == trainer.state_hash()
        text = run_cli(["verify", path.name], tmp_path)
        report = run_cli(["verify", path.name, "--json"], tmp_path)
        for proc, good in (
            (text, f"{path.name}: OK" in text.stdout and "custom lr_schedule" in text.stdout),
            (report, report.returncode == 0 and json.loads(report.stdout)["ok"]),
        ):
            cases += 1
            held += proc.returncode == 0 and good and "INVALID" not in proc.stdout
        assert path.read_bytes() == before
    record(
        "R18_d2",
        cls="wrong verdict",
        what="verify on checkpoints with a custom lr_schedule (2 trainers x text/json)",
        cases=cases,
        held=held,
    )
    assert held == cases


# -- 4. an output that leads to an input ------------------------------------------------------


def _wine_csv(path):
    """The bundled wine rows as a user CSV with a header (8 features and a label)."""
    d = _data.load_bundled()
    lines = [",".join([*d.columns, "class"])]
    lines += [",".join([*map(repr, row), str(y)]) for row, y in zip(d._raw, d.labels)]
    path.write_text("\n".join(lines) + "\n")


def test_4_an_output_leading_to_an_input_is_refused_and_nothing_is_written(tmp_path):
    _wine_csv(tmp_path / "d.csv")
    ok(run_cli(["train", "--data", "d.csv", "--checkpoint", "c.ckpt", "--steps", "3"], tmp_path))
    os.symlink("c.ckpt", tmp_path / "link.ckpt")
    os.symlink("d.csv", tmp_path / "link.csv")
    os.link(tmp_path / "c.ckpt", tmp_path / "hard.ckpt")
    (tmp_path / "sub").mkdir()
    shutil.copy(tmp_path / "d.csv", tmp_path / "d.ckpt.history.jsonl")
    shutil.copy(tmp_path / "d.csv", tmp_path / "e.ckpt.best")
    predict = ["predict", "c.ckpt", "--data", "d.csv", "--out"]
    train = ["train", "--data", "d.csv", "--steps", "2"]
    attempts = [
        ([*predict, "c.ckpt"], "CHECKPOINT"),
        ([*predict, "link.ckpt"], "CHECKPOINT"),
        ([*predict, "hard.ckpt"], "CHECKPOINT"),
        ([*predict, "./sub/../c.ckpt"], "CHECKPOINT"),
        ([*predict, "d.csv"], "--data"),
        ([*predict, "link.csv"], "--data"),
        ([*predict, str(tmp_path / "d.csv")], "--data"),
        (["predict", "link.ckpt", "--data", "link.csv", "--out", "c.ckpt"], "CHECKPOINT"),
        ([*train, "--checkpoint", "d.csv"], "--data"),
        ([*train, "--checkpoint", "link.csv"], "--data"),
        ([*train, "--checkpoint", "sub/../d.csv"], "--data"),
        (["train", "--data", "d.ckpt.history.jsonl", "--checkpoint", "d.ckpt"], "--data"),
        (
            ["train", "--data", "e.ckpt.best", "--checkpoint", "e.ckpt", "--val-fraction", "0.2"]
            + ["--patience", "2"],
            "--data",
        ),
    ]
    try:
        import matplotlib  # noqa: F401

        attempts += [
            ([*train, "--checkpoint", "p.ckpt", "--plot", "d.csv"], "--data"),
            ([*train, "--checkpoint", "p.ckpt", "--plot", "p.ckpt"], "--checkpoint"),
        ]
    except ImportError:
        pass
    before = _snapshot(tmp_path)
    held = 0
    for argv, which in attempts:
        proc = run_cli(argv, tmp_path)
        try:
            assert_one_line_error(proc, "leads to the same file as", which)
        except AssertionError as exc:
            print(argv, exc)
            continue
        held += _snapshot(tmp_path) == before
    record(
        "R18_d4",
        cls="data loss",
        what="predict --out / train outputs leading to an input (direct, symlink, hard link, "
        "relative, absolute)",
        cases=len(attempts),
        held=held,
    )
    assert held == len(attempts)


# -- 5. header names and columns by name --------------------------------------------------------

YEARS = [str(1990 + j) for j in range(8)]


def _numeric_names_csv(rng, rows, order=range(8), extra=()):
    """A header of numeric names (years), the label last, raw values far from unit scale."""
    header = [YEARS[j] for j in order] + ["label"] + [name for name, _ in extra]
    lines = [",".join(header)]
    for _ in range(rows):
        y = rng.randrange(3)
        cells = [f"{1000 + 50 * j + 40 * rng.gauss(y * (j % 3 - 1), 1.0):.6g}" for j in range(8)]
        lines.append(",".join([cells[j] for j in order] + [str(y)] + [v for _, v in extra]))
    return "\n".join(lines) + "\n"


def _predictions(proc):
    return ok(proc).stdout.splitlines()[1:]


def test_5_numeric_header_names_are_a_header_and_columns_match_by_name(tmp_path):
    rng = random.Random(5)
    text = _numeric_names_csv(rng, 150)
    (tmp_path / "d.csv").write_text(text)
    ok(run_cli(["train", "--data", "d.csv", "--checkpoint", "c.ckpt", "--steps", "40"], tmp_path))
    header, *rows = [line.split(",") for line in text.splitlines()]
    base = _predictions(run_cli(["predict", "c.ckpt", "--data", "d.csv"], tmp_path))
    cases, held = 1, int(len(base) == 150)
    for seed in range(4):  # the same rows, columns reordered (the label too)
        order = list(range(9))
        random.Random(seed).shuffle(order)
        lines = [",".join(r[j] for j in order) for r in [header, *rows]]
        (tmp_path / "perm.csv").write_text("\n".join(lines) + "\n")
        cases += 1
        held += _predictions(run_cli(["predict", "c.ckpt", "--data", "perm.csv"], tmp_path)) == base
    # Without the label column, in another order.
    lines = [",".join(r[j] for j in (7, 6, 5, 4, 3, 2, 1, 0)) for r in [header, *rows]]
    (tmp_path / "nolabel.csv").write_text("\n".join(lines) + "\n")
    cases += 1
    held += _predictions(run_cli(["predict", "c.ckpt", "--data", "nolabel.csv"], tmp_path)) == base
    # Refusals by name: a column missing, one named twice.
    for name, cells, part in (
        ("missing", header[:3] + header[4:], "no column '1993'"),
        ("twice", header[:8] + [header[2]], "names column '1992' twice"),
    ):
        (tmp_path / f"{name}.csv").write_text(",".join(cells) + "\n" + ",".join(rows[0]) + "\n")
        cases += 1
        try:
            assert_one_line_error(
                run_cli(["predict", "c.ckpt", "--data", f"{name}.csv"], tmp_path), part
            )
            held += 1
        except AssertionError as exc:
            print(name, exc)
    record(
        "R18_d5",
        cls="silent wrong result",
        what="predict with numeric header names: as-is, 4 column orders, no label; missing and "
        "doubled columns refused by name",
        cases=cases,
        held=held,
    )
    assert held == cases


def test_extra_header_columns_are_refused_by_name(tmp_path):
    rng = random.Random(6)
    (tmp_path / "d.csv").write_text(_numeric_names_csv(rng, 60))
    ok(run_cli(["train", "--data", "d.csv", "--checkpoint", "c.ckpt", "--steps", "4"], tmp_path))
    cases = held = 0
    for extra in ([("id", "7")], [("id", "7"), ("site", "north")], [("2024", "1.5")]):
        (tmp_path / "x.csv").write_text(_numeric_names_csv(rng, 5, extra=extra))
        cases += 1
        try:
            assert_one_line_error(
                run_cli(["predict", "c.ckpt", "--data", "x.csv", "--out", "o.csv"], tmp_path),
                *(repr(name) for name, _ in extra),
                "not one of them",
            )
            held += not (tmp_path / "o.csv").exists()
        except AssertionError as exc:
            print(extra, exc)
    record(
        "R18_x_extracols",
        cls="misleading message",
        what="predict on a header with 1 or 2 extra columns (one numeric): refused naming them",
        cases=cases,
        held=held,
    )
    assert held == cases


# -- 6. finite values that overflow ----------------------------------------------------------


def test_6_rows_that_overflow_are_one_line_in_the_cli_and_a_valueerror_in_the_api(tmp_path):
    _identical()
    _wine_csv(tmp_path / "d.csv")
    ok(run_cli(["train", "--data", "d.csv", "--checkpoint", "c.ckpt", "--steps", "90"], tmp_path))
    cases = held = 0
    # The API: a finite row whose logits overflow, among good rows.
    trainer = ml.SmallMLPTrainer.from_checkpoint(tmp_path / "c.ckpt")
    before = trainer.state_hash()
    X = ml.Array.from_list([0.0] * 8 * 3 + [3e38] * 8 + [0.0] * 8, "<f4").reshape((5, 8))
    y = ml.Array.from_list([0] * 5, "<i4")
    for call in (
        trainer.predict,
        trainer.predict_proba,
        trainer.predict_logits,
        lambda X: trainer.evaluate(X, y),
    ):
        cases += 1
        try:
            call(X)
        except ValueError as exc:
            held += "X row 3" in str(exc) and "step" not in str(exc)
    assert trainer.state_hash() == before
    # The CLI: predict on a row whose logits overflow, and on one whose standardized value does.
    pre = checkpoint.load(tmp_path / "c.ckpt", schema=None)["data_schedule"]["preprocessing"]
    good = "13,15,2.8,3,5,1,3,1000"
    big = ",".join(f"{m + min(3.3e38, 3e38 * s):.6g}" for m, s in zip(pre["mean"], pre["sd"]))
    assert pre["sd"][5] < 0.9  # hue: 3.3e38 standardizes past float32's range
    past = good.replace(",1,3,", ",3.3e38,3,")
    header = ",".join(pre["columns"])
    for name, rows, part in (
        ("logits", [good, big], "row 3 of --data logits.csv"),
        ("standardized", [good, good, past], "row 4, column hue"),
    ):
        (tmp_path / f"{name}.csv").write_text("\n".join([header, *rows]) + "\n")
        cases += 1
        proc = run_cli(["predict", "c.ckpt", "--data", f"{name}.csv", "--out", "o.csv"], tmp_path)
        try:
            assert_one_line_error(proc, part)
            held += not (tmp_path / "o.csv").exists()
        except AssertionError as exc:
            print(name, exc)
    # train: a cell that standardizes past float32 in the validation rows, or the test rows.
    d = _data.load_csv(str(tmp_path / "d.csv"), "class")
    d.hold_out(0.2, 0)
    for which, row in (("validation", d.val_rows[3]), ("test", d.test_rows[2])):
        lines = (tmp_path / "d.csv").read_text().splitlines()
        cells = lines[row + 1].split(",")
        assert d.sds[5] < 0.9
        cells[5] = "3.3e38"  # hue: standardized, past float32's range
        lines[row + 1] = ",".join(cells)
        (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n")
        cases += 1
        proc = run_cli(
            ["train", "--data", "bad.csv", "--checkpoint", "b.ckpt", "--val-fraction", "0.2"]
            + ["--steps", "30"],
            tmp_path,
        )
        try:
            assert_one_line_error(proc, f"row {row + 2}, column hue")
            held += not any(n.startswith("b.ckpt") for n in os.listdir(tmp_path))
        except AssertionError as exc:
            print(which, exc)
    record(
        "R18_d6",
        cls="crash / unclear error",
        what="overflowing finite rows: 4 API calls, 2 predict CSVs, train with the row in "
        "validation or test",
        cases=cases,
        held=held,
    )
    assert held == cases


# -- 10. --resume from a best checkpoint ------------------------------------------------------

PATIENT = ["--epochs", "40", "--val-fraction", "0.3", "--patience", "2"]


def _reported_paths_exist(done, folder):
    names = [done[k] for k in ("checkpoint", "history", "best_checkpoint", "plot") if done.get(k)]
    return all(os.path.isfile(os.path.join(folder, n)) for n in names)


def _same(folder, reported, name):
    return os.path.realpath(os.path.join(folder, reported)) == os.path.realpath(folder / name)


def _patient_run(folder):
    done = done_record(run_cli(["train", *PATIENT, "--checkpoint", "r.ckpt", "--json"], folder))
    assert done["stopped_early"] and done["best_step"] < done["step"], done
    return done


def test_10_resume_from_a_best_checkpoint_continues_into_the_run_and_keeps_the_best(tmp_path):
    first = _patient_run(tmp_path)
    best = (tmp_path / "r.ckpt.best").read_bytes()
    cases = held = 0
    for how in ("direct", "symlink", "main missing"):
        if how == "symlink":
            os.symlink("r.ckpt.best", tmp_path / "best-link")
        if how == "main missing":
            os.remove(tmp_path / "r.ckpt")
        given = "best-link" if how == "symlink" else "r.ckpt.best"
        proc = run_cli(["train", "--resume", "--checkpoint", given, "--json"], tmp_path)
        cases += 1
        try:
            done = done_record(proc)
        except AssertionError as exc:
            print(how, exc)
            continue
        main = checkpoint.load(tmp_path / "r.ckpt", schema=None)
        checks = (
            (tmp_path / "r.ckpt.best").read_bytes() == best,  # no better state in the replay
            _same(tmp_path, done["checkpoint"], "r.ckpt"),  # the symlink's: its real path
            _same(tmp_path, done["best_checkpoint"], "r.ckpt.best"),
            done["state_hash"] == first["state_hash"],  # the same run, replayed exactly
            main["optimizer"]["step"] == first["step"],
            not (tmp_path / "r.ckpt.best.best").exists(),
            _reported_paths_exist(done, tmp_path),
        )
        print(how, checks)
        held += all(checks)
    # A best checkpoint beside another run's checkpoint: refused, nothing written.
    ok(run_cli(["train", "--steps", "4", "--seed", "3", "--checkpoint", "r.ckpt"], tmp_path))
    before = _snapshot(tmp_path)
    cases += 1
    try:
        assert_one_line_error(
            run_cli(["train", "--resume", "--checkpoint", "r.ckpt.best"], tmp_path),
            "not a checkpoint of the same run",
        )
        held += _snapshot(tmp_path) == before
    except AssertionError as exc:
        print("another run", exc)
    record(
        "R18_d10",
        cls="data loss + untrue report",
        what="train --resume from CHECKPOINT.best: direct, symlink, main missing; another "
        "run's main refused",
        cases=cases,
        held=held,
    )
    assert held == cases


# -- smaller findings: /dev/stdout into a pipe, the v1 hint -----------------------------------


def test_predict_out_dev_stdout_writes_into_a_pipe(tmp_path):
    _wine_csv(tmp_path / "d.csv")
    ok(run_cli(["train", "--data", "d.csv", "--checkpoint", "c.ckpt", "--steps", "3"], tmp_path))
    plain = ok(run_cli(["predict", "c.ckpt", "--data", "d.csv"], tmp_path)).stdout
    cases = held = 0
    for out in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        cases += 1
        proc = run_cli(["predict", "c.ckpt", "--data", "d.csv", "--out", out], tmp_path)
        held += proc.returncode == 0 and proc.stdout == plain and "wrote 178" in proc.stderr
    record(
        "R18_x_stdout",
        cls="crash / unclear error",
        what="predict --out /dev/stdout, /dev/fd/1, /proc/self/fd/1 into a pipe",
        cases=cases,
        held=held,
    )
    assert held == cases


def test_the_hint_for_a_v1_checkpoint_without_preprocessing_works_when_followed(tmp_path):
    shutil.copy(V1_WINE, tmp_path / "v1.ckpt")
    (tmp_path / "w.csv").write_text(",".join(_data.BUNDLED_COLUMNS) + "\n13,15,2.8,3,5,1,3,1000\n")
    err = assert_one_line_error(
        run_cli(["predict", "v1.ckpt", "--data", "w.csv"], tmp_path),
        "records no preprocessing",
        "--allow-profile-change",
    )
    command = shlex.split(err.split("`")[3])  # the second quoted command: the hint
    assert command[:2] == ["mojolearn", "train"], err
    steps = checkpoint.load(tmp_path / "v1.ckpt", schema=None)["optimizer"]["step"]
    followed = run_cli(command[1:], tmp_path)
    predicted = run_cli(["predict", "v1.ckpt", "--data", "w.csv"], tmp_path)
    held = (
        followed.returncode == 0
        and predicted.returncode == 0
        and predicted.stdout.splitlines()[0] == "prediction"
        and checkpoint.load(tmp_path / "v1.ckpt", schema=None)["optimizer"]["step"] == steps
    )
    record(
        "R18_x_v1hint",
        cls="misleading message",
        what="predict's hint for a v1 checkpoint without preprocessing, followed",
        cases=1,
        held=int(held),
    )
    assert held, (followed.stderr, predicted.stderr)
