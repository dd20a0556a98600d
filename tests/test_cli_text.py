"""`mojolearn train --text` and `mojolearn sample` (issue 38): a tiny gpt trains on a text,
printing train and validation losses; the checkpoint records the vocabulary and the TextData
position; a run cut into legs, or killed with SIGKILL at a random step and resumed, ends with
the bits of one run; sampling prints the same text in two processes; every refusal is one line
(exit 2) with nothing written; the shipped text loads and trains."""

import hashlib
import json
import os
import random
import signal

import pytest

from tests.test_cli import (
    _stop_at,
    assert_one_line_error,
    done_record,
    json_lines,
    ok,
    run_cli,
)

TINY = "gpt:layers=1,heads=2,embd=16,block=16"
SHIPPED_SHA256 = "37d06970fc926e60c16dff401e441b84752446a36b6b64516c229fdec77e992c"


@pytest.fixture(scope="module")
def shipped():
    from mojolearn.text import shipped_text

    return shipped_text()


def _text_file(path, shipped, start=0, chars=20000):
    path.write_bytes(shipped[start : start + chars].encode("utf-8"))
    return path.name


def _payload(path):
    return json.loads(path.read_bytes())["payload"]


def _listing(folder):
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def test_train_prints_both_losses_and_records_vocab_and_position(tmp_path, shipped):
    name = _text_file(tmp_path / "a.txt", shipped)
    args = ["train", "--text", name, "--model", TINY, "--steps", "30", "--eval-every", "10"]
    proc = ok(run_cli([*args, "--eval-batches", "3", "--json"], tmp_path))
    records = json_lines(proc.stdout)
    evals = [r for r in records if r["event"] == "eval"]
    assert [r["step"] for r in evals] == [10, 20, 30]
    assert all(2.0 < r["train_loss"] < 6.0 and 2.0 < r["val_loss"] < 6.0 for r in evals)
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] + 0.5  # it trains, nothing diverges
    done = records[-1]
    assert done["event"] == "done" and done["step"] == 30
    assert (done["train_loss"], done["val_loss"]) == (
        evals[-1]["train_loss"],
        evals[-1]["val_loss"],
    )
    assert "step 30: train loss " in proc.stderr and ", val loss " in proc.stderr
    schedule = _payload(tmp_path / "mojolearn-run.ckpt")["data_schedule"]
    text = shipped[:20000]
    assert "".join(schedule["vocab"]) == "".join(sorted(set(text)))
    assert schedule["model"] == TINY and schedule["text"] == "a.txt"
    assert schedule["data"]["train_batches"] == 30 and schedule["data"]["val_batches"] == 0
    assert schedule["data"]["sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()
    history = [json.loads(line) for line in (tmp_path / "mojolearn-run.ckpt.history.jsonl").open()]
    assert [r["step"] for r in history if "val_loss" in r] == [10, 20, 30]
    # Without --json: the losses are lines for people on stdout.
    plain = ok(run_cli([*args, "--checkpoint", "p.ckpt"], tmp_path)).stdout
    assert "step 10: train loss " in plain and "val loss" in plain and "sample with:" in plain


def test_a_run_in_legs_ends_with_the_bits_of_one_run(tmp_path, shipped):
    name = _text_file(tmp_path / "a.txt", shipped, 1000)
    common = ["train", "--text", name, "--model", TINY, "--seed", "7", "--eval-every", "8"]
    common += ["--eval-batches", "2", "--json"]
    full = done_record(run_cli([*common, "--steps", "40", "--checkpoint", "f.ckpt"], tmp_path))
    ok(run_cli([*common, "--steps", "15", "--checkpoint", "r.ckpt"], tmp_path))
    # The text is found again beside the checkpoint by name and SHA-256 (no --text given).
    again = ["train", "--resume", "--checkpoint", "r.ckpt", "--steps", "40", "--json"]
    assert done_record(run_cli(again, tmp_path))["state_hash"] == full["state_hash"]
    assert (tmp_path / "r.ckpt").read_bytes() == (tmp_path / "f.ckpt").read_bytes()
    # The same trace, but for the losses the first leg reported at its own last step.
    legs = [json.loads(line) for line in (tmp_path / "r.ckpt.history.jsonl").open()]
    one = [json.loads(line) for line in (tmp_path / "f.ckpt.history.jsonl").open()]
    assert {"train_loss", "val_loss"} <= set(legs[14]) and "val_loss" not in one[14]
    del legs[14]["train_loss"], legs[14]["val_loss"]
    assert legs == one and [r["step"] for r in one if "val_loss" in r] == [8, 16, 24, 32, 40]


def test_sigkill_mid_run_then_resume_gives_the_uninterrupted_hash(tmp_path, shipped, seed):
    rng = random.Random(seed)
    name = _text_file(tmp_path / "a.txt", shipped, 5000)
    # More steps after any stop than the pipe holds (a progress line a step): the child is
    # still running when the signal comes.
    end, every = 1200, rng.choice((7, 11, 16))
    common = ["--text", name, "--model", TINY, "--steps", str(end), "--seed", str(seed % 1000)]
    common += ["--checkpoint-every", str(every), "--eval-every", "100", "--eval-batches", "2"]
    full = done_record(run_cli(["train", *common, "--checkpoint", "full.ckpt", "--json"], tmp_path))
    _, child = _stop_at(tmp_path, common, "run.ckpt", rng.randint(20, 300))
    assert child.returncode == -signal.SIGKILL
    stopped = _payload(tmp_path / "run.ckpt")["step"]
    assert stopped < end and stopped % every == 0
    resumed = run_cli(["train", "--resume", "--checkpoint", "run.ckpt", "--json"], tmp_path)
    assert done_record(resumed)["state_hash"] == full["state_hash"], f"seed {seed}"
    history = (tmp_path / "run.ckpt.history.jsonl").read_bytes()
    assert history == (tmp_path / "full.ckpt.history.jsonl").read_bytes()


@pytest.fixture(scope="module")
def text_ckpt(tmp_path_factory, shipped):
    folder = tmp_path_factory.mktemp("sample")
    name = _text_file(folder / "a.txt", shipped, 2000)
    args = ["train", "--text", name, "--model", TINY, "--steps", "20", "--eval-batches", "1"]
    ok(run_cli(args, folder))
    return folder


def test_sample_is_the_same_text_in_two_processes(text_ckpt):
    args = ["sample", "mojolearn-run.ckpt", "--prompt", "The ", "--tokens", "60", "--seed", "5"]
    one, two = (ok(run_cli(args, text_ckpt)).stdout for _ in range(2))
    assert one == two and one.startswith("The ") and len(one) == 4 + 60 + 1
    other = ok(run_cli([*args[:-1], "6"], text_ckpt)).stdout
    assert other != one  # the seed chooses the draws
    # The Python API gives the same characters (the default prompt: a newline).
    import mojolearn as ml

    trainer = ml.Trainer.from_checkpoint(str(text_ckpt / "mojolearn-run.ckpt"))
    vocab = "".join(trainer.data_schedule["vocab"])
    ids = trainer.generate([vocab.index("\n")], 30, temperature=0.8, top_k=5, seed=2)
    cmd = ["sample", "mojolearn-run.ckpt", "--tokens", "30", "--temperature", "0.8"]
    out = ok(run_cli([*cmd, "--top-k", "5", "--seed", "2"], text_ckpt)).stdout
    assert out == "".join(vocab[i] for i in ids) + "\n"


@pytest.mark.parametrize(
    "extra, parts",
    [
        (
            ["--prompt", "caf\u00e9"],
            ["'\u00e9' (at position 3) is not in the checkpoint's vocabulary"],
        ),
        (["--prompt", ""], ["--prompt needs at least one character"]),
        (["--tokens", "0"], ["--tokens", "[1, 2**20]"]),
        (["--temperature", "0"], ["--temperature", "> 0"]),
        (["--temperature", "-1"], ["--temperature", "> 0"]),
        (["--temperature", "inf"], ["--temperature", "finite"]),
        (["--temperature", "nan"], ["--temperature", "finite"]),
        (["--top-k", "0"], ["--top-k"]),
        (["--top-k", "100000"], ["--top-k 100000 must be in [1, "]),
    ],
)
def test_sample_refusals(text_ckpt, extra, parts):
    before = _listing(text_ckpt)
    proc = run_cli(["sample", "mojolearn-run.ckpt", *extra], text_ckpt)
    assert_one_line_error(proc, *parts)
    assert proc.stdout == "" and _listing(text_ckpt) == before


def test_sample_refuses_missing_corrupt_and_non_text_checkpoints(tmp_path, text_ckpt):
    assert_one_line_error(run_cli(["sample", "none.ckpt"], tmp_path), "no checkpoint at none.ckpt")
    good = (text_ckpt / "mojolearn-run.ckpt").read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(good[: len(good) // 2])
    assert_one_line_error(
        run_cli(["sample", "cut.ckpt"], tmp_path), "not a valid mojolearn checkpoint"
    )
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 1
    (tmp_path / "flip.ckpt").write_bytes(bytes(flipped))
    assert_one_line_error(run_cli(["sample", "flip.ckpt"], tmp_path), "flip.ckpt")
    ok(run_cli(["train", "--steps", "2", "--checkpoint", "wine.ckpt"], tmp_path))
    assert_one_line_error(
        run_cli(["sample", "wine.ckpt"], tmp_path), "is not a text model's checkpoint"
    )
    # predict refuses a text checkpoint by name, pointing at sample.
    (tmp_path / "rows.csv").write_text("1,2\n")
    proc = run_cli(
        ["predict", str(text_ckpt / "mojolearn-run.ckpt"), "--data", "rows.csv"], tmp_path
    )
    assert_one_line_error(proc, "is a text model's checkpoint", "mojolearn sample")


@pytest.mark.parametrize(
    "argv, parts",
    [
        (["--text", "bad.txt"], ["bad.txt", "is not UTF-8: byte offset 2"]),
        (["--text", "short.txt"], ["fewer than one window"]),
        (["--text", "missing.txt"], ["missing.txt", "No such file"]),
        (["--model", TINY], ["needs --text FILE"]),
        (
            ["--text", "--model", "gpt:depth=2"],
            ["'depth=2' is not KEY=N", "layers, heads, embd, block"],
        ),
        (["--text", "--model", "gpt:layers=0"], ["layers=0", "[1, "]),
        (["--text", "--model", "gpt:heads=-1"], ["heads='-1'"]),
        (["--text", "--model", "gpt:embd=30,heads=4"], ["embd=30 is not divisible by heads=4"]),
        (["--text", "--model", "gpt:block=8,block=9"], ["'block' is given twice"]),
        (["--text", "--model", "linear:3"], ["--text trains a gpt"]),
        (["--text", "--dataset", "digits"], ["--dataset", "--text"]),
        (["--text", "--epochs", "2"], ["--epochs does not apply to a text run"]),
        (["--text", "--val-fraction", "0.2"], ["--val-fraction does not apply to a text run"]),
        (["--text", "--loss", "mse"], ["--loss mse"]),
        (["--eval-every", "5"], ["--eval-every applies only to a text run"]),
        (["--text", "--eval-batches", "0"], ["--eval-batches"]),
        (
            ["--text", "--model", "gpt:layers=1,heads=1,embd=8,block=4096", "--batch-size", "64"],
            ["--batch-size 64", "windows per step", "2 GiB"],
        ),
    ],
)
def test_train_refusals_write_nothing(tmp_path, argv, parts):
    (tmp_path / "bad.txt").write_bytes(b"ab\xffcd" * 100)
    (tmp_path / "short.txt").write_text("hello world\n")
    before = _listing(tmp_path)
    steps = [] if "--epochs" in argv else ["--steps", "3"]
    assert_one_line_error(run_cli(["train", *argv, *steps], tmp_path), *parts)
    assert _listing(tmp_path) == before


def test_resume_with_another_text_is_refused_and_changes_nothing(tmp_path, shipped):
    a = _text_file(tmp_path / "a.txt", shipped, 0, 6000)
    ok(
        run_cli(
            ["train", "--text", a, "--model", TINY, "--steps", "5", "--eval-batches", "1"], tmp_path
        )
    )
    ckpt = tmp_path / "mojolearn-run.ckpt"
    before = ckpt.read_bytes()
    (tmp_path / "b.txt").write_text("zq" * 3000 + "new characters: \u00e9\u00e8")
    resume = ["train", "--resume", "--steps", "8"]
    err = assert_one_line_error(
        run_cli([*resume, "--text", "b.txt"], tmp_path), "another vocabulary"
    )
    assert "not the text the run trained on" in err
    # The same characters in another order: the content hash tells them apart.
    text = shipped[:6000]
    (tmp_path / "c.txt").write_text(text[::-1])
    assert_one_line_error(run_cli([*resume, "--text", "c.txt"], tmp_path), "differs from the text")
    os.remove(tmp_path / "a.txt")  # not found again by name and SHA-256: refused by name
    assert_one_line_error(run_cli(resume, tmp_path), "--text a.txt", "pass --text PATH")
    # Another gpt or eval setting than the checkpoint's is refused by name.
    _text_file(tmp_path / "a.txt", shipped, 0, 6000)
    other = [*resume, "--model", "gpt:layers=2,heads=2,embd=16,block=16"]
    assert_one_line_error(run_cli(other, tmp_path), "--model gpt:layers=2")
    assert_one_line_error(run_cli([*resume, "--eval-batches", "4"], tmp_path), "--eval-batches 4")
    assert ckpt.read_bytes() == before


def test_the_shipped_text_loads_and_a_one_step_run_trains_on_it(tmp_path, shipped):
    import mojolearn as ml

    assert hashlib.sha256(shipped.encode("utf-8")).hexdigest() == SHIPPED_SHA256
    data = ml.TextData.shipped(block_size=16, batch_size=2, seed=0)
    assert data.vocab_size == 103 and data.n_train + data.n_val == len(shipped) == 464970
    args = ["train", "--text", "--model", TINY, "--steps", "1", "--eval-batches", "1", "--json"]
    done = done_record(run_cli(args, tmp_path))
    assert done["step"] == 1 and done["val_loss"] > 0
    schedule = _payload(tmp_path / "mojolearn-run.ckpt")["data_schedule"]
    assert (
        schedule["text"] == "pydoc-topics (shipped)"
        and schedule["data"]["sha256"] == SHIPPED_SHA256
    )
    # A resume of a shipped-text run needs no --text.
    again = ["train", "--resume", "--steps", "2", "--json"]
    assert done_record(run_cli(again, tmp_path))["step"] == 2
