"""The `mojolearn` command line, driven in subprocesses as a user would.

The main job on the bundled data, exact resume after a clean stop, SIGINT and SIGKILL at random
steps (final state hash and loss history equal to an uninterrupted run), refusals (bad CSVs,
dataset and option conflicts on resume, bad arguments), `--json` output, `verify` on good and
tampered files, `info`, and `--plot` (when matplotlib is installed).
"""

import hashlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import zlib

import pytest

TIMEOUT = 120


def _env(extra=None):
    env = dict(os.environ)
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    env.update(extra or {})
    return env


def run_cli(args, cwd, env=None, timeout=TIMEOUT):
    return subprocess.run(
        [sys.executable, "-m", "mojolearn", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(env),
        timeout=timeout,
    )


def ok(proc):
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def json_lines(text):
    return [json.loads(line) for line in text.splitlines()]


def done_record(proc):
    records = json_lines(ok(proc).stdout)
    assert records[-1]["event"] == "done", records[-1]
    return records[-1]


def assert_one_line_error(proc, *parts):
    assert proc.returncode == 2, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr and "\n" not in err, proc.stderr
    for part in parts:
        assert part in err, f"{err!r} lacks {part!r}"
    return err


def random_csv(rng, rows, labels=("setosa", "versicolor", "virginica")):
    lines = ["a,b,c,d,e,f,g,h,species"]
    for _ in range(rows):
        y = rng.randrange(len(labels))
        # Separable-ish classes so training has something to learn.
        cells = [f"{rng.gauss(y * (j % 3 - 1), 1.0):.6f}" for j in range(8)]
        lines.append(",".join(cells + [labels[y]]))
    return "\n".join(lines) + "\n"


# -- the main job ----------------------------------------------------------------------------


def test_main_job_trains_well_above_chance(tmp_path):
    proc = run_cli(["train", "--json"], tmp_path)
    records = json_lines(ok(proc).stdout)
    assert records[0]["event"] == "start" and records[0]["dataset"] == "wine"
    assert records[0]["n_train"] == 144 and records[0]["end_step"] == 270
    progress = [r for r in records if r["event"] == "progress"]
    assert progress and progress[-1]["step"] == 270
    assert all(r["steps_per_s"] > 0 and 0 <= r["accuracy"] <= 1 for r in progress)
    done = records[-1]
    assert done["event"] == "done" and done["step"] == 270
    assert done["test_accuracy"] >= 0.85, done  # chance is about 0.4 (the largest class)
    ckpt = tmp_path / "mojolearn-run.ckpt"
    envelope = json.loads(ckpt.read_bytes())
    assert done["state_hash"] == envelope["payload_sha256"]
    payload = json.dumps(envelope["payload"], sort_keys=True, separators=(",", ":")).encode()
    assert hashlib.sha256(payload).hexdigest() == done["state_hash"]
    schedule = envelope["payload"]["data_schedule"]
    assert (schedule["epoch"], schedule["cursor"], schedule["batch_size"]) == (30, 0, 16)
    history = json_lines((tmp_path / "mojolearn-run.ckpt.history.jsonl").read_text())
    assert [r["step"] for r in history] == list(range(1, 271))
    assert history[-1]["loss"] == done["final_loss"]
    # The test rows are scored once, in the report (never per epoch: they choose nothing);
    # without --val-fraction there is no validation point either.
    assert [r for r in history if set(r) - {"step", "loss", "accuracy"}] == []
    # Human output: the same run without --json prints the report lines.
    text = ok(run_cli(["train", "--checkpoint", "b.ckpt"], tmp_path)).stdout
    assert f"state hash {done['state_hash']}" in text and "test accuracy" in text


# -- exact resume ----------------------------------------------------------------------------


def _uninterrupted(tmp_path, common, name="full.ckpt"):
    done = done_record(run_cli(["train", *common, "--checkpoint", name, "--json"], tmp_path))
    return done["state_hash"], (tmp_path / (name + ".history.jsonl")).read_bytes()


def test_resume_after_clean_stops_matches_uninterrupted(tmp_path, seed):
    rng = random.Random(seed)
    batch = rng.choice((7, 10, 16, 25))  # 144 rows: most leave a partial last batch
    end = 45
    common = [
        "--steps",
        str(end),
        "--batch-size",
        str(batch),
        "--seed",
        str(seed),
        "--checkpoint-every",
        "1000",
    ]
    want_hash, want_history = _uninterrupted(tmp_path, common)
    stops = sorted(rng.sample(range(1, end), 3))
    for i, stop in enumerate(stops):
        args = ["train", "--steps", str(stop), "--checkpoint", "part.ckpt", "--json"]
        if i == 0:
            args += common[2:]  # batch size, seed: the first leg sets them
        else:
            args.append("--resume")
        assert done_record(run_cli(args, tmp_path))["step"] == stop
    done = done_record(
        run_cli(
            ["train", "--resume", "--steps", str(end), "--checkpoint", "part.ckpt", "--json"],
            tmp_path,
        )
    )
    assert done["state_hash"] == want_hash, f"seed {seed}: stops {stops}, batch {batch}"
    assert (tmp_path / "part.ckpt.history.jsonl").read_bytes() == want_history


def _start_child(tmp_path, common, name):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mojolearn",
            "train",
            *common,
            "--checkpoint",
            name,
            "--json",
            "--log-every",
            "1",
        ],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_until(child, step):
    for line in child.stdout:
        record = json.loads(line)
        if record["event"] == "progress" and record["step"] >= step:
            return record["step"]
    raise AssertionError(f"child ended before step {step}: {child.stderr.read()}")


def _stop_at(tmp_path, common, name, step, sig=signal.SIGKILL):
    """Start `train *common` checkpointing to `name`, send `sig` once its progress reaches
    `step`, and wait for its end: (the step seen, the child)."""
    child = _start_child(tmp_path, common, name)
    try:
        seen = _read_until(child, step)
        child.send_signal(sig)
        _finish(child)
    finally:
        if child.poll() is None:
            child.kill()
    return seen, child


def _finish(child, timeout=TIMEOUT):
    """The child's end and the rest of its (stdout, stderr). Stdout is read on through the
    buffered reader `_read_until` used: communicate() reads the pipe itself and would drop
    what that reader had already taken in, cutting the next JSON line at its start."""
    timer = threading.Timer(timeout, child.kill)
    timer.start()
    try:
        err = []
        reader = threading.Thread(target=lambda: err.append(child.stderr.read()))
        reader.start()
        out = child.stdout.read()
        reader.join()
        child.wait()
    finally:
        timer.cancel()
    return out, err[0]


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT", "SIGTERM"])
def test_resume_after_a_signal_at_a_random_step(tmp_path, seed, how):
    rng = random.Random(seed)
    end, every = 1500, rng.choice((5, 7, 13))
    common = [
        "--steps",
        str(end),
        "--batch-size",
        "12",
        "--seed",
        str(seed),
        "--checkpoint-every",
        str(every),
    ]
    want_hash, want_history = _uninterrupted(tmp_path, common)
    at = rng.randint(20, 400)
    child = _start_child(tmp_path, common, "run.ckpt")
    try:
        seen = _read_until(child, at)
        child.send_signal(getattr(signal, how))
        out, err = _finish(child)
    finally:
        if child.poll() is None:
            child.kill()
    report = json.loads(ok(run_cli(["verify", "run.ckpt", "--json"], tmp_path)).stdout)
    if how == "SIGKILL":
        assert child.returncode == -signal.SIGKILL
        assert report["step"] % every == 0 or report["step"] == end
    else:
        assert child.returncode == 128 + getattr(signal, how), err
        stopped = json_lines(out)[-1]
        assert stopped["event"] == "interrupted" and stopped["step"] == report["step"]
        assert "Resume with: mojolearn train" in err and "--resume" in err
    assert report["step"] >= seen - every or report["step"] == end, (seen, report)
    done = done_record(
        run_cli(
            ["train", "--resume", "--checkpoint", "run.ckpt", "--steps", str(end), "--json"],
            tmp_path,
        )
    )
    assert done["state_hash"] == want_hash, f"seed {seed}: {how} after step {seen}"
    assert (tmp_path / "run.ckpt.history.jsonl").read_bytes() == want_history


def test_resume_cuts_history_written_past_the_checkpoint(tmp_path, seed):
    """The crash window between the history append and the checkpoint replace: the history
    holds steps the checkpoint does not (and a torn line); resume must cut them."""
    common = ["--steps", "50", "--seed", str(seed), "--batch-size", "11"]
    want_hash, want_history = _uninterrupted(tmp_path, common)
    ok(run_cli(["train", *common[2:], "--steps", "23", "--checkpoint", "c.ckpt"], tmp_path))
    saved = (tmp_path / "c.ckpt").read_bytes()
    ok(run_cli(["train", "--resume", "--steps", "31", "--checkpoint", "c.ckpt"], tmp_path))
    (tmp_path / "c.ckpt").write_bytes(saved)  # back to step 23; history has 31 steps
    with open(tmp_path / "c.ckpt.history.jsonl", "ab") as f:
        f.write(b'{"accuracy":0.5,"lo')
    done = done_record(
        run_cli(
            ["train", "--resume", "--steps", "50", "--checkpoint", "c.ckpt", "--json"], tmp_path
        )
    )
    assert done["state_hash"] == want_hash
    assert (tmp_path / "c.ckpt.history.jsonl").read_bytes() == want_history


def test_fast_mode_resume_and_mode_conflict(tmp_path, seed):
    common = ["--mode", "fast", "--steps", "40", "--seed", str(seed)]
    want, _ = _uninterrupted(tmp_path, common)
    ok(
        run_cli(
            [
                "train",
                "--mode",
                "fast",
                "--steps",
                "17",
                "--seed",
                str(seed),
                "--checkpoint",
                "f.ckpt",
            ],
            tmp_path,
        )
    )
    report = json.loads(ok(run_cli(["verify", "f.ckpt", "--json"], tmp_path)).stdout)
    assert report["numeric_mode"] == "fast"
    assert_one_line_error(
        run_cli(["train", "--resume", "--checkpoint", "f.ckpt", "--mode", "identical"], tmp_path),
        "--mode identical (checkpoint: fast)",
    )
    done = done_record(
        run_cli(
            ["train", "--resume", "--checkpoint", "f.ckpt", "--steps", "40", "--json"], tmp_path
        )
    )
    assert done["state_hash"] == want


# -- refusals ------------------------------------------------------------------------------


def test_resume_refuses_another_dataset_and_conflicting_options(tmp_path, seed):
    rng = random.Random(seed)
    (tmp_path / "a.csv").write_text(random_csv(rng, 60))
    (tmp_path / "b.csv").write_text(random_csv(rng, 60))
    ok(
        run_cli(
            [
                "train",
                "--data",
                "a.csv",
                "--label-column",
                "species",
                "--steps",
                "5",
                "--batch-size",
                "8",
                "--lr",
                "0.003",
                "--weight-decay",
                "0.1",
                "--seed",
                "7",
            ],
            tmp_path,
        )
    )
    ckpt_before = (tmp_path / "mojolearn-run.ckpt").read_bytes()
    hist_before = (tmp_path / "mojolearn-run.ckpt.history.jsonl").read_bytes()
    for args, parts in [
        (["--data", "b.csv"], ["dataset sha256", "a.csv"]),
        # (Without --data the run resumes on a.csv, found by name and SHA-256: test_cli_traps.)
        (["--data", "a.csv", "--batch-size", "16"], ["--batch-size 16 (checkpoint: 8)"]),
        (["--data", "a.csv", "--seed", "8"], ["--seed 8 (checkpoint: 7)"]),
        (
            ["--data", "a.csv", "--lr", "0.01", "--weight-decay", "0"],
            ["--lr 0.01 (checkpoint: 0.003)", "--weight-decay 0.0 (checkpoint: 0.1)"],
        ),
    ]:
        proc = run_cli(["train", "--resume", "--steps", "9", *args], tmp_path)
        assert_one_line_error(proc, "--resume", *parts)
    # Equal options are fine, and a refusal changed nothing on disk.
    assert (tmp_path / "mojolearn-run.ckpt").read_bytes() == ckpt_before
    assert (tmp_path / "mojolearn-run.ckpt.history.jsonl").read_bytes() == hist_before
    done = done_record(
        run_cli(
            [
                "train",
                "--resume",
                "--data",
                "a.csv",
                "--label-column",
                "species",
                "--batch-size",
                "8",
                "--seed",
                "7",
                "--lr",
                "0.003",
                "--steps",
                "9",
                "--json",
            ],
            tmp_path,
        )
    )
    assert done["step"] == 9


BAD_CSVS = [
    ("columns", "a,b,c,d,e,f,g,h,y\n1,2,3,4,5,6,7,8,0\n1,2,3,4,5,6,7,8\n", ["row 3", "8 columns"]),
    (
        "non-numeric",
        "a,b,c,d,e,f,g,h,y\n1,2,3,4,5,6,7,8,0\n1,2,3,4,5,6,7,eight,1\n",
        ["row 3", "column 8 ('h')", "'eight' is not a number"],
    ),
    ("nan", "a,b,c,d,e,f,g,h,y\n1,2,3,NaN,5,6,7,8,0\n", ["row 2", "column 4 ('d')", "finite"]),
    (
        "classes",
        "a,b,c,d,e,f,g,h,y\n" + "".join(f"1,2,3,4,5,6,7,8,{c}\n" for c in "pqrs"),
        ["row 5", "column 9 ('y')", "4th class"],
    ),
    ("empty", "", ["empty"]),
]


@pytest.mark.parametrize("what,text,parts", BAD_CSVS, ids=[c[0] for c in BAD_CSVS])
def test_bad_csv_exit_2_one_line(tmp_path, what, text, parts):
    (tmp_path / "bad.csv").write_text(text)
    assert_one_line_error(run_cli(["train", "--data", "bad.csv"], tmp_path), *parts)
    assert not (tmp_path / "mojolearn-run.ckpt").exists()


@pytest.mark.parametrize(
    "args,part",
    [
        (["--batch-size", "0"], "--batch-size: expected an integer in [1, 256]"),
        (["--batch-size", "257"], "--batch-size: expected an integer in [1, 256]"),
        (["--lr", "-1"], "--lr: expected a finite number > 0"),
        (["--lr", "nan"], "--lr: expected a finite number > 0"),
        (["--weight-decay", "inf"], "--weight-decay: expected a finite number >= 0"),
        (["--seed", "-3"], "--seed: expected an integer in [0, 2**64)"),
        (["--steps", "5", "--epochs", "2"], "not allowed with argument"),
        (["--mode", "quick"], "invalid choice: 'quick'"),
    ],
)
def test_bad_arguments_exit_2(tmp_path, args, part):
    proc = run_cli(["train", *args], tmp_path)
    assert proc.returncode == 2 and part in proc.stderr and "Traceback" not in proc.stderr


def test_usage_refusals_exit_2(tmp_path):
    assert_one_line_error(
        run_cli(["train", "--resume"], tmp_path), "--resume: no checkpoint at mojolearn-run.ckpt"
    )
    assert_one_line_error(
        run_cli(["train", "--label-column", "y"], tmp_path),
        "--label-column applies only with --data",
    )
    assert_one_line_error(
        run_cli(["train", "--data", "nowhere.csv"], tmp_path), "cannot read --data nowhere.csv"
    )
    assert_one_line_error(
        run_cli(["train", "--checkpoint", "no/such/dir/c.ckpt"], tmp_path), "does not exist"
    )
    (tmp_path / "junk.ckpt").write_text("{}\n")
    assert_one_line_error(
        run_cli(["train", "--resume", "--checkpoint", "junk.ckpt"], tmp_path),
        "not a valid mojolearn checkpoint",
    )


# -- verify, info, plot --------------------------------------------------------------------


def test_verify_good_and_tampered(tmp_path):
    done = done_record(run_cli(["train", "--steps", "12", "--json"], tmp_path))
    proc = ok(run_cli(["verify", "mojolearn-run.ckpt"], tmp_path))
    assert "OK" in proc.stdout and done["state_hash"] in proc.stdout
    assert "step          12" in proc.stdout and "mojolearn.portable-fp32.v2" in proc.stdout
    report = json.loads(ok(run_cli(["verify", "mojolearn-run.ckpt", "--json"], tmp_path)).stdout)
    assert report["ok"] and report["step"] == 12 and report["state_hash"] == done["state_hash"]
    blob = (tmp_path / "mojolearn-run.ckpt").read_bytes()
    envelope = json.loads(blob)
    hexdigits = envelope["payload"]["weights"]["weight1"]["hex"]
    flipped = hexdigits[:5] + ("0" if hexdigits[5] != "0" else "1") + hexdigits[6:]
    (tmp_path / "t.ckpt").write_bytes(blob.replace(hexdigits.encode(), flipped.encode()))
    proc = run_cli(["verify", "t.ckpt"], tmp_path)
    assert proc.returncode == 1 and "INVALID" in proc.stdout and "payload_sha256" in proc.stdout
    (tmp_path / "cut.ckpt").write_bytes(blob[:-40])
    assert run_cli(["verify", "cut.ckpt"], tmp_path).returncode == 1
    assert_one_line_error(run_cli(["verify", "missing.ckpt"], tmp_path), "no file at missing.ckpt")


def test_info_reports_binding(tmp_path):
    info = json.loads(ok(run_cli(["info", "--json"], tmp_path)).stdout)
    assert info["mode"] == "identical" and info["vendor"] in ("cpu", "cuda", "hip")
    assert "--fp-mode contract=off" in info["build_flags"] and info["version"]
    fast = json.loads(ok(run_cli(["info", "--json", "--mode", "fast"], tmp_path)).stdout)
    assert fast["mode"] == "fast" and "contract=off" not in fast["build_flags"]


def _png_size(blob):
    assert blob[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    length, kind = struct.unpack(">I4s", blob[8:16])
    assert kind == b"IHDR" and length == 13
    body = blob[16:29]
    (crc,) = struct.unpack(">I", blob[29:33])
    assert zlib.crc32(b"IHDR" + body) == crc, "IHDR CRC mismatch"
    assert blob.endswith(b"IEND\xaeB`\x82")
    return struct.unpack(">II", body[:8])


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    ok(run_cli(["train", "--steps", "30", "--checkpoint-every", "10"], tmp_path))
    done = done_record(
        run_cli(["train", "--resume", "--steps", "60", "--plot", "loss.png", "--json"], tmp_path)
    )
    assert done["plot"] == "loss.png"
    width, height = _png_size((tmp_path / "loss.png").read_bytes())
    assert width >= 300 and height >= 200


def test_plot_without_matplotlib_names_what_to_install(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from mojolearn.cli import main; "
        "sys.exit(main(['train', '--plot', 'x.png']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=TIMEOUT,
    )
    err = assert_one_line_error(proc, "--plot needs matplotlib", "pip install matplotlib")
    assert "mojolearn[" not in err  # on the package index that name is another project
    assert not (tmp_path / "mojolearn-run.ckpt").exists()
