"""R7: a 200-step `mojolearn train` run (checkpoint every step) SIGKILLed at 20 random steps
and resumed with `--resume` after each kill ends with the same state hash, checkpoint bytes
and loss history as the uninterrupted run, in `identical` and in `fast` mode."""

import json
import os
import random
import signal
import subprocess
import sys

import pytest
from mojolearn import checkpoint

from tests.helpers import PKG_PARENT

from ._util import LONG, new_seed, record

STEPS = 200
KILLS = 20


def _env():
    return dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([PKG_PARENT, os.environ.get("PYTHONPATH", "")]),
    )


def _cmd(folder, mode, resume):
    cmd = [
        sys.executable,
        "-m",
        "mojolearn",
        "train",
        "--steps",
        str(STEPS),
        "--batch-size",
        "4",
        "--checkpoint-every",
        "1",
        "--log-every",
        "1",
        "--json",
        "--checkpoint",
        os.path.join(folder, "run.ckpt"),
    ]
    return cmd + ["--resume"] if resume else cmd + ["--mode", mode, "--seed", "5"]


def _done(stdout):
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return next(e for e in events if e["event"] == "done")


def _uninterrupted(folder, mode):
    proc = subprocess.run(
        _cmd(folder, mode, False), env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _done(proc.stdout)


def _killed_leg(folder, mode, resume, target):
    """Run until the run reports step >= target, then SIGKILL. (landed, exit status): landed
    is False when the run ended first, e.g. on a machine busy enough to let it race ahead."""
    proc = subprocess.Popen(
        _cmd(folder, mode, resume),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == "progress" and event["step"] >= target:
                    proc.send_signal(signal.SIGKILL)
                    break
    finally:
        proc.kill()
        proc.wait(timeout=60)
        proc.stdout.close()
    return proc.returncode == -signal.SIGKILL, proc.returncode


def _same_as_reference(run_dir, ref_dir, ref, done, seed, at):
    assert done["state_hash"] == ref["state_hash"], f"seed {seed}: kills at {at}"
    assert (run_dir / "run.ckpt").read_bytes() == (ref_dir / "run.ckpt").read_bytes()
    history = (run_dir / "run.ckpt.history.jsonl").read_bytes()
    assert history == (ref_dir / "run.ckpt.history.jsonl").read_bytes(), f"seed {seed}: {at}"
    assert len(history.splitlines()) == STEPS
    assert not [n for n in os.listdir(run_dir) if n.endswith(checkpoint.TMP_SUFFIX)]


def _resume_to_end(run_dir, mode):
    proc = subprocess.run(
        _cmd(str(run_dir), mode, True), env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _done(proc.stdout)


@pytest.mark.parametrize("mode", ["identical", "fast"])
def test_kill_9_and_resume(tmp_path, mode):
    seed = new_seed()
    rng = random.Random(seed)
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref = _uninterrupted(str(ref_dir), mode)
    want = KILLS * (5 if LONG else 1)
    kills, runs, legs, at = 0, 0, 0, []
    run_dir, resume = None, False
    while kills < want:
        if run_dir is None:
            run_dir = tmp_path / f"run{runs}"
            run_dir.mkdir()
            resume = False
        ckpt = str(run_dir / "run.ckpt")
        start = checkpoint.verify(ckpt)["step"] if resume else 0
        if start >= STEPS - 2:  # too close to the end for another kill: finish, start anew
            _same_as_reference(run_dir, ref_dir, ref, _resume_to_end(run_dir, mode), seed, at)
            run_dir, runs = None, runs + 1
            continue
        left = want - kills
        target = min(STEPS - 1, start + rng.randint(1, max(1, (STEPS - start) // (left + 1) * 2)))
        landed, status = _killed_leg(str(run_dir), mode, resume, target)
        # A leg that failed (a refused --resume, say) would otherwise be retried forever.
        assert landed or status == 0, f"seed {seed}: a leg exited with {status} before its kill"
        legs += 1
        assert legs <= 20 * want, f"seed {seed}: {legs} legs for {kills} kills"
        info = checkpoint.verify(ckpt)  # whatever instant the kill hit, the file is whole
        assert info["numeric_mode"] == mode
        resume = True
        if landed:
            kills += 1
            at.append(info["step"])
    _same_as_reference(run_dir, ref_dir, ref, _resume_to_end(run_dir, mode), seed, at)
    record(
        f"R7_{mode}",
        steps=STEPS,
        kills=kills,
        runs=runs + 1,
        checkpoint_steps_at_kill=at,
        same_hash=True,
        seed=seed,
    )
