"""Round 3 (issue 30), rows 5, 10, 11, 12 and 13: MLPTrainer's batch bound against what a
resident session holds, a CSV header of 100,000 names, a resume through a symlinked
checkpoint, bad MOJOLEARN_* settings under `verify`, and the README's stated limits. Each test
failed at f4f8d88 (the 13 limit test pins what already held)."""

import array
import json
import os
import re
import time

import mojolearn as ml
import pytest
from mojolearn._mlp import spec as _layers
from mojolearn.cli import data as _data
from mojolearn.cli import history as _history

from ._util import ROOT
from .test_round2 import _cli, _one_line  # the CLI as a user runs it, and one-line refusals


def _session_rows():
    """The most rows a resident session holds: the binding's bound on `capacity_rows`, read
    from its source (the number the Python side must agree with)."""
    with open(os.path.join(ROOT, "mojo", "bindings", "entries", "mlp.mojo")) as f:
        (shift,) = re.findall(r"^comptime _MAX_CAPACITY = 1 << (\d+)$", f.read(), re.M)
    return 1 << int(shift)


SESSION_ROWS = _session_rows()


def _ok(proc):
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")[-2000:]
    return proc


# -- 5. max_rows is what a session can grow to -------------------------------------------------


def _zeros_batch(rows, inputs=8):
    """A (rows, inputs) float32 batch of zeros and `rows` labels 0, without a per-row loop."""
    X = memoryview(bytearray(4 * inputs * rows)).cast("f", (rows, inputs))
    return X, array.array("i", bytes(4 * rows))


@pytest.mark.parametrize("sizes", [[8, 3], [4, 2], [2, 2]])
def test_5_max_rows_never_exceeds_what_a_session_holds(sizes):
    spec = _layers.LayerSizes(sizes)
    t = ml.MLPTrainer(sizes, data_schedule={"a": 1})
    assert spec.max_rows() > SESSION_ROWS  # these nets' memory bound alone admits more
    assert t.max_rows == SESSION_ROWS == 1 << 20


def test_5_max_rows_keeps_a_tighter_memory_bound():
    sizes = [784, 256, 10]
    assert ml.MLPTrainer(sizes, data_schedule={"a": 1}).max_rows == (
        _layers.LayerSizes(sizes).max_rows()
    )


def test_5_a_session_grows_to_every_batch_up_to_max_rows_and_refuses_one_more():
    t = ml.MLPTrainer([8, 3], data_schedule={"a": 1})
    most = t.max_rows
    for rows in (600_000, 700_000, most):  # 700k once doubled 600k's session past 2**20
        out = t.train_step(*_zeros_batch(rows))
        assert out["logits"].shape == (rows, 3)
    assert t.step_ == 3
    before, session = t.state_hash(), t._session
    for call in (
        lambda: t.train_step(*_zeros_batch(most + 1)),
        lambda: t.predict_logits(_zeros_batch(most + 1)[0]),
    ):
        with pytest.raises(ValueError, match=rf"^MLPTrainer: X must have 1 to {most} rows, got"):
            call()
    assert t.step_ == 3 and t.state_hash() == before and t._session is session
    # A fresh trainer (a 256-row session) grows to max_rows in one step.
    fresh = ml.MLPTrainer([8, 3], data_schedule={"a": 1})
    assert fresh.predict_logits(_zeros_batch(most)[0]).shape == (most, 3)


# -- 10. a wide CSV header is refused at once ----------------------------------------------------


def _wide_csv(path, names):
    path.write_text(",".join(names) + "\n" + ",".join(["1"] * len(names)) + "\n")


def test_10_a_100000_name_header_is_one_line_at_once(tmp_path):
    _wide_csv(tmp_path / "wide.csv", [f"c{j}" for j in range(100_000)])
    start = time.monotonic()
    proc = _cli(["train", "--data", "wide.csv", "--steps", "1", "--checkpoint", "c.ckpt"], tmp_path)
    took = time.monotonic() - start
    err = _one_line(proc)
    assert "row 1: 100000 columns, expected 9 (8 numeric features and 1 label" in err
    assert took < 10, f"{took:.1f} s"  # 44 s at f4f8d88
    assert sorted(os.listdir(tmp_path)) == ["wide.csv"]


def test_10_the_duplicate_name_check_is_one_pass(tmp_path):
    names = [f"c{j}" for j in range(100_000)]
    names[-1] = names[0]  # found only at the very end
    _wide_csv(tmp_path / "wide.csv", names)
    start = time.monotonic()
    with pytest.raises(
        _data.DataError,
        match=r"^row 1: the header names column 'c0' twice \(columns 1 and 100000\); column "
        r"names must be unique$",
    ):
        _data.load_csv(str(tmp_path / "wide.csv"), features=99_999)
    took = time.monotonic() - start
    assert took < 10, f"{took:.1f} s"


# -- 11. a resume through a symlink keeps one history ---------------------------------------------


def _steps(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_11_a_resume_through_a_symlink_appends_to_the_real_history(tmp_path):
    (tmp_path / "link").mkdir()
    run = ["train", "--json", "--batch-size", "8"]
    _ok(_cli(run + ["--steps", "12", "--checkpoint", "whole.ckpt"], tmp_path))
    _ok(_cli(run + ["--steps", "4", "--checkpoint", "real.ckpt"], tmp_path))
    os.symlink("../real.ckpt", tmp_path / "link" / "link.ckpt")
    _ok(_cli(run + ["--resume", "--steps", "8", "--checkpoint", "link/link.ckpt"], tmp_path))
    _ok(_cli(run + ["--resume", "--steps", "12", "--checkpoint", "real.ckpt"], tmp_path))
    assert os.listdir(tmp_path / "link") == ["link.ckpt"]
    assert _steps(tmp_path / "real.ckpt.history.jsonl") == list(range(1, 13))
    assert (tmp_path / "real.ckpt.history.jsonl").read_bytes() == (
        tmp_path / "whole.ckpt.history.jsonl"
    ).read_bytes()
    assert (tmp_path / "real.ckpt").read_bytes() == (tmp_path / "whole.ckpt").read_bytes()


def test_11_the_history_path_follows_the_link_and_keeps_a_plain_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink("real.ckpt", "link.ckpt")
    real = os.path.realpath("real.ckpt")
    assert _history.path_for("link.ckpt") == real + _history.SUFFIX
    assert _history.History("link.ckpt").path == real + _history.SUFFIX
    assert _history.path_for("real.ckpt") == "real.ckpt" + _history.SUFFIX


# -- 12. a bad MOJOLEARN_* setting is a usage error, never a verdict -----------------------------


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verify")
    _ok(_cli(["train", "--steps", "3", "--checkpoint", "good.ckpt"], folder))
    _ok(_cli(["verify", "good.ckpt"], folder))
    return folder


@pytest.mark.parametrize(
    "name, value",
    [
        ("MOJOLEARN_NUM_THREADS", "abc"),
        ("MOJOLEARN_NUM_THREADS", "0"),
        ("MOJOLEARN_CPU_LEVEL", "bogus"),
        ("MOJOLEARN_VENDOR", "bogus"),
        ("MOJOLEARN_NUMERIC_MODE", "x"),
    ],
)
def test_12_verify_with_a_bad_setting_is_a_usage_error(good_ckpt, name, value):
    before = (good_ckpt / "good.ckpt").read_bytes()
    for args in (["verify", "good.ckpt"], ["verify", "--json", "good.ckpt"]):
        proc = _cli(args, good_ckpt, env={name: value})
        err = _one_line(proc)
        assert err.startswith(f"mojolearn verify: error: {name} must be ") and repr(value) in err
        assert b"INVALID" not in proc.stdout and b'"ok"' not in proc.stdout
    assert (good_ckpt / "good.ckpt").read_bytes() == before


def test_12_train_resume_names_the_setting_not_the_checkpoint(good_ckpt):
    before = sorted(os.listdir(good_ckpt)), (good_ckpt / "good.ckpt").read_bytes()
    proc = _cli(
        ["train", "--resume", "--steps", "5", "--checkpoint", "good.ckpt"],
        good_ckpt,
        env={"MOJOLEARN_NUM_THREADS": "abc"},
    )
    err = _one_line(proc)
    assert err == (
        "mojolearn train: error: MOJOLEARN_NUM_THREADS must be an integer in [1, 256], got 'abc'\n"
    )
    assert (sorted(os.listdir(good_ckpt)), (good_ckpt / "good.ckpt").read_bytes()) == before


# -- 13. the README's limits are the code's ------------------------------------------------------


def test_13_fifteen_hidden_layers_train_and_sixteen_are_refused_by_name():
    assert _layers.MAX_LAYERS - 1 == 15
    t = ml.MLPTrainer([8] + [4] * 15 + [3], data_schedule={"a": 1})
    assert t.train_step(*_zeros_batch(4))["step"] == 1
    with pytest.raises(
        ValueError, match=r"^MLPTrainer: layer_sizes describes 17 layers, at most 16 are allowed$"
    ):
        ml.MLPTrainer([8] + [4] * 16 + [3], data_schedule={"a": 1})


def _readme_paragraph():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("Any layer sizes (")
    return " ".join(text[start : text.index("```", start)].split())


def test_13_readme_states_the_code_limits_and_mlp_checkpoints():
    para = _readme_paragraph()
    low, high = map(int, re.search(r"(\d+) to (\d+) hidden layers", para).groups())
    assert (low, high) == (0, _layers.MAX_LAYERS - 1)
    assert "at most 2²⁰" in para and SESSION_ROWS == 1 << 20
    assert "not there yet" not in para
    assert "MLPTrainer.from_checkpoint(path)" in para and "save_checkpoint(path)" in para


def test_13_mlp_checkpoint_files_work_as_the_readme_says(tmp_path):
    net = ml.MLPTrainer([8, 32, 32, 3], seed=0, data_schedule={"dataset": "toy"}, lr=1e-2)
    net.train_step(*_zeros_batch(4))
    net.save_checkpoint(tmp_path / "net.ckpt")
    back = ml.MLPTrainer.from_checkpoint(tmp_path / "net.ckpt")
    assert back.state_hash() == net.state_hash() and back.layer_sizes == [8, 32, 32, 3]
