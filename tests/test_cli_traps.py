"""The command line's silent traps (issue 36), each now refused with its fix or right: a
numeric target trained as classes, more outputs than classes, --resume forgetting options,
the fixed test split, the checkpoint cadence, and the CSV messages."""

import json
import random
from types import SimpleNamespace

from mojolearn.cli import run as _run

from tests.test_cli import (
    assert_one_line_error,
    done_record,
    json_lines,
    ok,
    random_csv,
    run_cli,
)


def _numeric_target_csv(rng, rows, values):
    lines = ["a,b,c,d,e,f,g,h,target"]
    for _ in range(rows):
        cells = [f"{rng.gauss(0, 1):.5f}" for _ in range(8)]
        lines.append(",".join(cells + [values(rng)]))
    return "\n".join(lines) + "\n"


def _start(proc):
    return json_lines(ok(proc).stdout)[0]


# -- a numeric target is not classes ---------------------------------------------------------


def test_a_numeric_target_is_refused_for_cross_entropy_with_the_fixes(tmp_path, seed):
    rng = random.Random(seed)
    # 25 integer values over 120 rows, each of them present (the --classification run below
    # asks for 25 outputs: a value that the draws missed would make it 24 classes)
    many = [str(i % 25) for i in range(120)]
    rng.shuffle(many)
    shuffled = iter(many)
    cases = {
        "float.csv": lambda r: f"{r.uniform(25, 350):.1f}",  # diabetes-like
        "many.csv": lambda r: next(shuffled),
    }
    for name, values in cases.items():
        (tmp_path / name).write_text(_numeric_target_csv(rng, 120, values))
        for net in ([], ["--model", "linear:32,relu,linear:25"]):
            proc = run_cli(["train", "--data", name, *net], tmp_path)
            assert_one_line_error(
                proc,
                "label column",
                "looks like a numeric target",
                "--loss mse",
                "--classification",
            )
        assert not (tmp_path / "mojolearn-run.ckpt").exists()
    # The user says the integers are classes: it trains (and the resume keeps the flag).
    args = ["train", "--data", "many.csv", "--layers", "8,16,25", "--classification", "--json"]
    done = done_record(run_cli([*args, "--steps", "6"], tmp_path))
    schedule = json.loads((tmp_path / "mojolearn-run.ckpt").read_bytes())["payload"]
    assert schedule["data_schedule"]["classification"] is True and done["step"] == 6
    resumed = done_record(run_cli(["train", "--resume", "--steps", "8", "--json"], tmp_path))
    assert resumed["step"] == 8
    # A few integer classes stay classes, and --loss mse takes the float target.
    (tmp_path / "few.csv").write_text(_numeric_target_csv(rng, 60, lambda r: str(r.randrange(3))))
    ok(run_cli(["train", "--data", "few.csv", "--steps", "2", "--checkpoint", "f.ckpt"], tmp_path))
    mse = ["--model", "linear:8,relu,linear:1", "--loss", "mse", "--checkpoint", "m.ckpt"]
    ok(run_cli(["train", "--data", "float.csv", "--steps", "3", *mse], tmp_path))


# -- outputs and classes ---------------------------------------------------------------------


def test_more_outputs_than_classes_is_refused_naming_the_fix(tmp_path, seed):
    rng = random.Random(seed)
    (tmp_path / "a.csv").write_text(random_csv(rng, 60))
    proc = run_cli(["train", "--data", "a.csv", "--layers", "8,64"], tmp_path)
    assert_one_line_error(
        proc, "--layers 8,64 gives 64 outputs", "3 classes", "--layers 8,3", "--layers 8,64,3"
    )
    proc = run_cli(["train", "--data", "a.csv", "--model", "linear:16,gelu,linear:10"], tmp_path)
    assert_one_line_error(proc, "gives 10 outputs", "3 classes", "end the SPEC with linear:3")
    assert not (tmp_path / "mojolearn-run.ckpt").exists()
    ok(run_cli(["train", "--data", "a.csv", "--layers", "8,64,3", "--steps", "2"], tmp_path))


# -- --resume restores what it records --------------------------------------------------------


def test_resume_takes_the_data_end_and_split_from_the_checkpoint(tmp_path, seed):
    rng = random.Random(seed)
    (tmp_path / "a.csv").write_text(random_csv(rng, 80))
    common = ["--data", "a.csv", "--label-column", "species", "--test-fraction", "0.3"]
    full = done_record(run_cli(["train", *common, "--steps", "12", "--json"], tmp_path))
    leg = ["train", *common, "--steps", "5", "--checkpoint", "leg.ckpt", "--json"]
    first = _start(run_cli(leg, tmp_path))
    # Nothing but --resume (and where): the data found again, its split, its end (step 5).
    again = run_cli(["train", "--resume", "--checkpoint", "leg.ckpt", "--json"], tmp_path)
    records = json_lines(ok(again).stdout)
    assert (records[0]["n_train"], records[0]["n_test"]) == (first["n_train"], first["n_test"])
    assert records[0]["end_step"] == 5 and records[-1]["step"] == 5
    # --data given, --label-column left out: the recorded label column.
    args = ["train", "--resume", "--checkpoint", "leg.ckpt", "--data", "a.csv", "--steps", "7"]
    ok(run_cli(args, tmp_path))
    # From another folder, found beside the checkpoint; the end given now is recorded.
    (tmp_path / "sub").mkdir()
    args = ["train", "--resume", "--checkpoint", "../leg.ckpt", "--steps", "12", "--json"]
    done = done_record(run_cli(args, tmp_path / "sub"))
    assert done["state_hash"] == full["state_hash"]
    # An --epochs run resumed with nothing ends at its own epochs, not the default 30.
    ep = ["train", "--dataset", "wine", "--epochs", "2", "--checkpoint", "e.ckpt", "--json"]
    end = done_record(run_cli(ep, tmp_path))["step"]
    resumed = done_record(
        run_cli(["train", "--resume", "--checkpoint", "e.ckpt", "--json"], tmp_path)
    )
    assert end == resumed["step"] == 2 * 9
    # The CSV gone: one line naming it and the fix.
    (tmp_path / "a.csv").rename(tmp_path / "moved.csv")
    proc = run_cli(["train", "--resume", "--checkpoint", "leg.ckpt"], tmp_path)
    assert_one_line_error(proc, "--resume: the run trained on --data a.csv", "pass --data PATH")


# -- the test split ----------------------------------------------------------------------------


def test_test_fraction_sets_the_held_out_rows_and_zero_holds_none(tmp_path):
    default = done_record(run_cli(["train", "--steps", "9", "--json"], tmp_path))
    same = ["train", "--test-fraction", "0.2", "--steps", "9", "--checkpoint", "s.ckpt", "--json"]
    assert done_record(run_cli(same, tmp_path))["state_hash"] == default["state_hash"]
    none = run_cli(
        ["train", "--test-fraction", "0", "--steps", "9", "--checkpoint", "z.ckpt", "--json"],
        tmp_path,
    )
    records = json_lines(ok(none).stdout)
    assert (records[0]["n_train"], records[0]["n_test"]) == (178, 0)
    assert records[-1]["test_accuracy"] is None
    half = ["train", "--test-fraction", "0.5", "--steps", "3", "--checkpoint", "h.ckpt", "--json"]
    assert _start(run_cli(half, tmp_path))["n_test"] == 59 // 2 + 71 // 2 + 48 // 2
    for bad in ("1", "-0.1", "nan"):
        proc = run_cli(["train", "--test-fraction", bad], tmp_path)
        assert_one_line_error(proc, "--test-fraction", "[0, 1)")


# -- the checkpoint cadence ----------------------------------------------------------------------


def test_saves_are_due_by_steps_when_asked_else_by_the_clock(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(_run.time, "monotonic", lambda: clock[0])
    run = SimpleNamespace(saved_at=100.0)
    by_steps = SimpleNamespace(checkpoint_every=7)
    assert [s for s in range(1, 30) if _run._save_due(by_steps, run, s)] == [7, 14, 21, 28]
    by_clock = SimpleNamespace(checkpoint_every=None)
    assert not any(_run._save_due(by_clock, run, s) for s in range(1, 1000))
    clock[0] += _run.CHECKPOINT_SECONDS
    assert _run._save_due(by_clock, run, 1000)


# -- CSV messages --------------------------------------------------------------------------------


def test_csv_messages_name_the_label_column_flag_and_text_columns(tmp_path, seed):
    rng = random.Random(seed)
    lines = random_csv(rng, 30).splitlines()
    # The label column in the middle, neither named `label` nor last.
    moved = [",".join(c[:4] + [c[8]] + c[4:8]) for c in (line.split(",") for line in lines)]
    (tmp_path / "mid.csv").write_text("\n".join(moved) + "\n")
    proc = run_cli(["train", "--data", "mid.csv"], tmp_path)
    assert_one_line_error(
        proc, "column 5 ('species')", "only numeric feature columns", "--label-column species"
    )
    # A categorical feature column where the network has room for it.
    colors = ("red", "green", "blue")
    rows = [c.split(",") for c in lines]
    cat = [",".join(rows[0][:7] + ["color", rows[0][8]])]
    cat += [",".join(r[:7] + [rng.choice(colors), r[8]]) for r in rows[1:]]
    (tmp_path / "cat.csv").write_text("\n".join(cat) + "\n")
    proc = run_cli(["train", "--data", "cat.csv"], tmp_path)
    assert_one_line_error(proc, "column 8 ('color') holds text", "only numeric feature columns")
    # ... and one more column than the network takes: the count, and which column is text.
    extra = [
        ",".join(r[:8] + [("color" if i == 0 else rng.choice(colors)), r[8]])
        for i, r in enumerate(rows)
    ]
    (tmp_path / "extra.csv").write_text("\n".join(extra) + "\n")
    proc = run_cli(["train", "--data", "extra.csv"], tmp_path)
    assert_one_line_error(proc, "10 columns, expected 9", "column 9 ('color') holds text")
