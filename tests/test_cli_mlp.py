"""`mojolearn train` with MLPTrainer (`--layers`, `--dataset digits`, CSVs of any width):
the digits job's accuracy, exact resume after SIGKILL at a random step, all 13 wine
attributes, a CSV with other widths, and the refusals of networks that do not fit the data."""

import json
import random
import signal

from tests.test_cli import (
    _stop_at,
    assert_one_line_error,
    done_record,
    json_lines,
    ok,
    run_cli,
)

DIGITS = ["--dataset", "digits", "--layers", "64,128,10"]


def test_digits_reaches_95_percent_with_default_epochs(tmp_path):
    records = json_lines(ok(run_cli(["train", *DIGITS, "--json"], tmp_path)).stdout)
    start, done = records[0], records[-1]
    assert start["dataset"] == "digits" and start["network"] == [64, 128, 10]
    assert start["n_train"] + start["n_test"] == 1797 and start["end_step"] == 30 * 91
    assert done["event"] == "done" and done["test_accuracy"] >= 0.95, done
    report = json.loads(ok(run_cli(["verify", "mojolearn-run.ckpt", "--json"], tmp_path)).stdout)
    assert report["schema"] == "mojolearn.mlp-checkpoint.v1"
    assert report["architecture"] == [64, 128, 10] and report["state_hash"] == done["state_hash"]
    assert (
        report["next_step"].startswith("finite") and "the run's next batch" in report["next_step"]
    )


def test_digits_resumes_after_sigkill_at_a_random_step_to_the_same_bits(tmp_path, seed):
    rng = random.Random(seed)
    end, every = 400, rng.choice((7, 11, 16))
    common = [
        *DIGITS,
        "--steps",
        str(end),
        "--seed",
        str(seed % 1000),
        "--checkpoint-every",
        str(every),
    ]
    done = done_record(run_cli(["train", *common, "--checkpoint", "full.ckpt", "--json"], tmp_path))
    want_history = (tmp_path / "full.ckpt.history.jsonl").read_bytes()
    _, child = _stop_at(tmp_path, common, "run.ckpt", rng.randint(20, 300))
    assert child.returncode == -signal.SIGKILL
    resumed = done_record(
        run_cli(
            ["train", "--resume", "--checkpoint", "run.ckpt", "--steps", str(end), "--json"],
            tmp_path,
        )
    )
    assert resumed["state_hash"] == done["state_hash"], f"seed {seed}"
    assert (tmp_path / "run.ckpt.history.jsonl").read_bytes() == want_history


def test_wine_with_all_13_attributes(tmp_path):
    done = done_record(
        run_cli(["train", "--layers", "13,32,3", "--steps", "40", "--json"], tmp_path)
    )
    envelope = json.loads((tmp_path / "mojolearn-run.ckpt").read_bytes())
    schedule = envelope["payload"]["data_schedule"]
    assert schedule["layers"] == [13, 32, 3] and schedule["dataset"] == "wine"
    assert envelope["payload"]["architecture"] == [13, 32, 3]
    ok(
        run_cli(
            ["train", "--layers", "13,32,3", "--steps", "15", "--checkpoint", "p.ckpt"], tmp_path
        )
    )
    again = done_record(
        run_cli(
            ["train", "--resume", "--steps", "40", "--checkpoint", "p.ckpt", "--json"], tmp_path
        )
    )
    assert again["state_hash"] == done["state_hash"]
    assert_one_line_error(
        run_cli(["train", "--resume", "--checkpoint", "p.ckpt", "--layers", "13,16,3"], tmp_path),
        "--layers [13, 16, 3] (checkpoint: [13, 32, 3])",
    )


def test_a_csv_of_other_widths_and_classes(tmp_path):
    rng = random.Random(5)
    names = ("ant", "bee", "cat", "dog", "eel")
    lines = ["a,b,c,d,e,kind"] + [
        ",".join(f"{rng.gauss(i % 5, 1):.4f}" for _ in range(5)) + f",{names[i % 5]}"
        for i in range(80)
    ]
    (tmp_path / "z.csv").write_text("\n".join(lines) + "\n")
    done = done_record(
        run_cli(
            ["train", "--data", "z.csv", "--layers", "5,12,5", "--steps", "30", "--json"], tmp_path
        )
    )
    assert done["step"] == 30 and 0 <= done["test_accuracy"] <= 1
    assert_one_line_error(
        run_cli(["train", "--data", "z.csv", "--checkpoint", "x.ckpt"], tmp_path),
        "row 1: 6 columns, expected 9",
        "--layers",
    )
    assert_one_line_error(
        run_cli(
            ["train", "--data", "z.csv", "--layers", "5,12,4", "--checkpoint", "x.ckpt"], tmp_path
        ),
        "a 5th class (expected at most 4",
    )
    assert not (tmp_path / "x.ckpt").exists()


def test_networks_that_do_not_fit_the_bundled_data_are_refused(tmp_path):
    for args, part in (
        (
            ["--dataset", "digits", "--layers", "64,32,9"],
            "the digits data has 64 features and 10 classes",
        ),
        (["--layers", "12,32,3"], "the wine data has 13 attributes (or the 8 selected ones)"),
        (["--layers", "13,32,4"], "the wine data has 3 classes"),
        (["--layers", "13,x,3"], "--layers: expected comma-separated integers"),
        (["--layers", "13"], "at least 2 entries"),
    ):
        assert_one_line_error(run_cli(["train", *args], tmp_path), part)
    assert list(tmp_path.iterdir()) == []
