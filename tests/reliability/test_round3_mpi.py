"""Round 3, DataParallel over MPI (issue 30 rows 6-9): one regression test per row, each
failing (or hanging, which the timeout turns into a failure) at f4f8d88. R16: ranks that
disagree on rows, weights or hyperparameters are refused by name on every rank, with nothing
applied; R17: an uncaught exception or SIGINT on one rank, at any phase, ends the job within
10 s. The processes are `tests/distributed/_round3_child.py` under `mpiexec -n 2`; the tests
skip with the reason where mpi4py or mpiexec is absent (CI installs both)."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import mojolearn as ml
import pytest

from ..distributed.test_data_parallel import MPIEXEC, _mpi_or_skip
from ..helpers import PKG_PARENT
from ._util import ROOT, record

ENDS_WITHIN_S = 10.0  # R17
HANG_S = 40  # a job still running then is a hang: killed, and the test fails


def _kill_tagged(token):
    """SIGKILL what is left of a hung job: the processes whose environment holds `token`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if token.encode() not in f.read():
                    continue
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def _job(*args, cwd=ROOT, env=None):
    """`mpiexec -n 2 python -m tests.distributed._round3_child ARGS`: (rc, stdout, stderr,
    seconds). A job still running after HANG_S fails the test, its processes killed."""
    token = uuid.uuid4().hex
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, PKG_PARENT]), R3_JOB=token)
    full.pop("MOJOLEARN_NUMERIC_MODE", None)
    full.update(env or {})
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "tests.distributed._round3_child", *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, cwd=cwd
    )
    try:
        out, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # mpiexec ends its ranks
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        _kill_tagged(token)
        pytest.fail(f"{args}: the job hung (still running after {HANG_S} s)\n{err[-3000:]}")
    return proc.returncode, out, err, time.monotonic() - t0


# -- rows 6 and 7 (R16): one job of refusals ---------------------------------------------------


@pytest.fixture(scope="module")
def agreed(tmp_path_factory):
    _mpi_or_skip()
    folder = tmp_path_factory.mktemp("agree")
    out = folder / "seen.json"
    rc, _, err, _ = _job("agree", str(out), str(folder / "dp.ckpt"))
    assert rc == 0, err[-3000:]
    rank0, rank1 = json.loads(out.read_text())
    assert (rank0["rank"], rank1["rank"]) == (0, 1)
    return rank0, rank1


def _same_refusal(agreed, case, pattern):
    """Both ranks raised the same ValueError, matching `pattern`."""
    rank0, rank1 = agreed
    assert rank0[case] is not None, f"{case}: rank 0 was not refused"
    assert rank0[case] == rank1[case], f"{case}: the ranks saw {rank0[case]} and {rank1[case]}"
    kind, message = rank0[case]
    assert kind == "ValueError", message
    assert pattern in message, message
    return message


R16_CASES = []


def test_row6_ranks_passing_other_rows_are_refused_on_every_rank_with_nothing_applied(agreed):
    want = "the processes disagree on the batch's rows R: rank 0 has 32, rank 1 has 64"
    for case in ("rows", "shard_rows"):  # the global form, and the shard form's global_rows
        _same_refusal(agreed, case, want)
        R16_CASES.append(case)
    for rank in agreed:
        assert rank["unchanged_after_rows"] and rank["then_one_process_bits"]


@pytest.mark.parametrize(
    "case, pattern",
    [
        ("weights", "disagree on weights or optimizer moments (state hash): rank 0 has "),
        ("lr", "disagree on lr: rank 0 has 0.001, rank 1 has 0.002"),  # as given (profile v2)
        ("betas", "disagree on betas[1]: rank 0 has 0.999, rank 1 has 0.99"),
        ("weight_decay", "disagree on weight_decay: rank 0 has 0.01, rank 1 has "),
        ("layer_sizes", "disagree on layer sizes: rank 0 has [8, 12, 3], rank 1 has [8, 13, 3]"),
        ("data_schedule", 'disagree on data_schedule: rank 0 has {"rank": 0, "run": "r3"}'),
        ("microbatches", "disagree on microbatches: rank 0 has 2, rank 1 has 4"),
        ("step", "disagree on step: rank 0 has 0, rank 1 has 1"),
    ],
)
def test_row7_ranks_holding_other_trainers_are_refused_at_construction(agreed, case, pattern):
    message = _same_refusal(agreed, case, pattern)
    assert "every process must build the same trainer" in message
    R16_CASES.append(case)


def test_row7_ranks_in_other_numeric_modes_are_refused_at_construction(tmp_path):
    _mpi_or_skip()
    rc, out, err, _ = _job("mode", str(tmp_path / "seen"))
    assert rc == 0, err[-3000:]
    seen = [json.loads((tmp_path / f"seen.{r}").read_text()) for r in (0, 1)]
    want = (
        "DataParallel: the processes disagree on numeric mode: rank 0 has identical, rank 1 "
        "has fast; every process must build the same trainer (the same layer sizes, weights "
        "or seed, options and checkpoint) and the same DataParallel"
    )
    assert seen[0] == seen[1] == ["ValueError", want], seen
    R16_CASES.append("numeric_mode")


def test_row7_a_load_or_step_on_one_rank_is_refused_at_the_next_step_and_save(agreed):
    want = "disagree on the trainer's state (state hash) after a load or a setting: rank 0 has "
    _same_refusal(agreed, "after_load", want)
    _same_refusal(agreed, "save_after_load", want)
    _same_refusal(agreed, "step_outside", "disagree on the step count: rank 0 has 2, rank 1 has 3")
    for rank in agreed:  # nothing applied, nothing written; the same load on all goes on
        assert rank["nothing_written"] and rank["unchanged_after_load"]
        assert rank["same_load_steps"]
    R16_CASES.extend(["after_load", "save_after_load", "step_outside"])


def test_r16_figures():
    _mpi_or_skip()
    if not R16_CASES:
        pytest.skip("no R16 case ran (deselected)")
    record("R16_dp_disagree", cases=len(R16_CASES), refused_alike=len(R16_CASES), applied=0)


# -- rows 8 and 9 (R17): one job per failure; each must end, non-zero, within 10 s -------------

R17 = {}


@pytest.mark.parametrize(
    "phase, stderr_says",
    [
        ("construct", "microbatches must be a power of two >= 1 (1, 2, 4, ...), got 3"),
        ("raise", "RuntimeError: rank 1's own code failed between two steps"),
        ("sigint", "KeyboardInterrupt"),
        ("midloop", "KeyboardInterrupt"),
        ("exit3", ""),
        ("systemexit", ""),
        ("exit0", ""),
    ],
)
def test_row8_one_rank_failing_at_any_phase_ends_the_job(phase, stderr_says):
    _mpi_or_skip()
    rc, out, err, seconds = _job("end", phase)
    assert rc != 0, f"{phase}: rc 0\n{err[-2000:]}"
    assert stderr_says in err, err[-3000:]
    assert seconds < ENDS_WITHIN_S, f"{phase}: the job took {seconds:.1f} s to end"
    R17[f"script {phase}"] = seconds


def _csv(folder):
    import random

    r = random.Random(1)
    lines = [",".join([f"f{i}" for i in range(8)] + ["label"])]
    for _ in range(200):
        lines.append(
            ",".join([f"{r.uniform(-1, 1):.4f}" for _ in range(8)] + [str(r.randrange(3))])
        )
    (folder / "d.csv").write_text("\n".join(lines) + "\n")


def test_row9_sigint_to_one_rank_while_the_csv_loads_ends_every_rank(tmp_path):
    _mpi_or_skip()
    _csv(tmp_path)
    args = ["--data", "d.csv", "--microbatches", "2", "--steps", "40", "--checkpoint", "c.ckpt"]
    rc, out, err, seconds = _job("cli", "csv", *args, cwd=tmp_path)
    assert rc == 130, f"rc {rc}\n{err[-3000:]}"
    assert "mojolearn train: interrupted" in err
    assert seconds < ENDS_WITHIN_S, f"the job took {seconds:.1f} s to end"
    written = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith("-lock"))
    assert written == ["d.csv"]  # no checkpoint, no history (a stale flock file is harmless)
    R17["cli SIGINT while the CSV loads"] = seconds


def test_sigint_to_one_rank_mid_loop_stops_every_rank_together(tmp_path):
    _mpi_or_skip()
    _csv(tmp_path)
    args = ["--data", "d.csv", "--microbatches", "2", "--steps", "100000", "--checkpoint"]
    rc, out, err, seconds = _job("cli", "loop", *args, "c.ckpt", "--json", cwd=tmp_path)
    assert rc == 130, f"rc {rc}\n{err[-3000:]}"
    events = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    stop = [e for e in events if e.get("event") == "interrupted"]
    assert len(stop) == 1 and stop[0]["signal"] == "SIGINT", out[-2000:]
    assert ml.SmallMLPTrainer.from_checkpoint(tmp_path / "c.ckpt").step_ == stop[0]["step"]
    assert seconds < ENDS_WITHIN_S, f"the job took {seconds:.1f} s to end"
    R17["cli SIGINT mid-loop (all stop, checkpoint saved)"] = seconds


_LOST_SIGNAL = r"""
import os, signal, sys
from mojolearn import cli
from mojolearn.cli import run as C
agree, calls = C.Group.any, [0]
def any_(self, flag):  # SIGINT lands while the processes agree on the flag (third step)
    calls[0] += 1
    if calls[0] == 3:
        os.kill(os.getpid(), signal.SIGINT)
    return agree(self, flag)
C.Group.any = any_
sys.exit(cli.main(["train", "--steps", "60", "--checkpoint", "c.ckpt", "--json"]))
"""


def test_a_sigint_during_the_loops_agreement_is_not_lost(tmp_path):
    # At f4f8d88 the loop stored the agreed flag over the handler's: a signal that landed
    # during the agreement was lost, and a run under mpiexec trained on (seen once here).
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    proc = subprocess.run(
        [sys.executable, "-c", _LOST_SIGNAL],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 130, f"rc {proc.returncode}\n{proc.stdout[-1500:]}"
    events = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert [e["step"] for e in events if e.get("event") == "interrupted"] == [4]


def test_r17_figures():
    _mpi_or_skip()
    if not R17:
        pytest.skip("no R17 case ran (deselected)")
    record(
        "R17_dp_job_ends",
        phases=len(R17),
        ended=len(R17),
        worst_s=round(max(R17.values()), 2),
        limit_s=ENDS_WITHIN_S,
    )
