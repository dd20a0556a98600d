"""DataParallel (issue 18): N = 1, 2, 3, 4 processes under `mpiexec` end with the bits of the
one-process run for a fixed M; M = 1 is plain `train_step`; the shard form equals the global
form; a checkpoint saved under N = 4 resumes under N = 2 to the uninterrupted hash; a rank
killed with SIGKILL ends the job promptly, non-zero, and the last checkpoint loads. The MPI
tests skip with a printed reason where mpi4py or mpiexec is absent (CI installs both)."""

import os
import shutil
import subprocess
import sys
import time

import mojolearn as ml
import pytest
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
from mojolearn.distributed import DataParallel

from ..helpers import PKG_PARENT

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIEXEC = shutil.which(
    "mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
)


def _mpi_or_skip():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (the 'mpi' extra; CI installs it)")
    if MPIEXEC is None:
        pytest.skip("mpiexec is not on PATH (the mpich wheel provides it)")


def _run(n, *args, timeout=180):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, PKG_PARENT]))
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "tests.distributed._child", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    step, digest = proc.stdout.split()[-2:]
    return int(step), digest


def _alone(*args):
    """The reference: one process, no MPI at all."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, PKG_PARENT]), DP_ALONE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.distributed._child", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    step, digest = proc.stdout.split()[-2:]
    return int(step), digest


# -- one process (no MPI needed) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: ml.SmallMLPTrainer(*_spec.init_small_mlp(2), data_schedule={"a": 1}),
        lambda: ml.MLPTrainer([8, 12, 5, 3], seed=2, data_schedule={"a": 1}),
    ],
)
def test_one_microbatch_is_train_step_bit_for_bit(make):
    a, b = make(), make()
    dp = DataParallel(b, microbatches=1, comm=_one())
    for X, y in _rng.batches(3, 24, 5):
        ra, rb = a.train_step(X, y), dp.train_step(X, y)
        assert ra["loss"] == rb["loss"] and ra["step"] == rb["step"]
    assert a.state_hash() == b.state_hash()


def _one():
    from mojolearn._runtime.world import OneProcess

    return OneProcess()


def test_refusals_name_both_numbers_and_change_nothing():
    t = ml.MLPTrainer([8, 6, 3], seed=1, data_schedule={"a": 1})
    with pytest.raises(ValueError, match=r"microbatches must be a power of two >= 1 .* got 3"):
        DataParallel(t, microbatches=3, comm=_one())
    with pytest.raises(
        TypeError, match=r"trainer must be a Trainer, SmallMLPTrainer or MLPTrainer, got object"
    ):
        DataParallel(object(), comm=_one())
    dp = DataParallel(t, microbatches=4, comm=_one())
    before = t.state_hash()
    X, y = next(iter(_rng.batches(4, 30, 1)))
    with pytest.raises(
        ValueError,
        match=r"the batch has 30 rows, not a multiple of "
        r"microbatches=4",
    ):
        dp.train_step(X, y)
    with pytest.raises(
        ValueError,
        match=r"X has 30 rows; the shard of rank 0 is 4 "
        r"microbatches of 8 rows",
    ):
        dp.train_step(X, y, global_rows=32)
    assert t.state_hash() == before and t.step_ == 0
    assert dp.microbatches_of(0) == [0, 1, 2, 3] and dp.rank == 0 and dp.size == 1


@pytest.mark.parametrize("sizes", [[8, 16, 3], [6, 9, 5, 4]])
def test_a_port_microbatch_is_loss_and_grads_laid_out_as_result_layout(seed, sizes):
    """The port's microbatch over the whole batch (divided by its own rows) is
    `loss_and_grads` bit for bit, at the offsets ResultLayout gives; reading and labels
    refuse as the trainer does."""
    if sizes == [8, 16, 3]:
        t = ml.SmallMLPTrainer(*_spec.init_small_mlp(seed % (1 << 64)), data_schedule={"a": 1})
    else:
        t = ml.MLPTrainer(sizes, seed=seed % (1 << 64), data_schedule={"a": 1})
    rows = 1 + seed % 37
    ((X, y),) = _rng.batches(seed % (1 << 64), rows, 1, sizes[0], sizes[-1])
    port = t._port()
    before = port.mark()
    x, xa, got_rows = port.read(X)
    yk, ya, itemsize = port.read_labels(y, rows)
    assert got_rows == rows and port.spec.sizes == tuple(sizes)
    with port.lock:
        buf = port.microbatch(xa, ya, itemsize, rows, rows)
    at = _spec.ResultLayout(1, rows, port.spec, False)
    loss, grads = t.loss_and_grads(X, y)
    n = port.spec.total
    assert len(buf) == at.size and buf[at.losses] == loss
    assert buf[at.grads : at.grads + n].tobytes() == b"".join(g.tobytes() for g in grads)
    assert port.mark() == before and before[1] == 0  # no step
    t.train_step(X, y)
    assert port.mark() == (before[0], 1)  # a step: the same session, one more step
    t.lr = 0.5
    assert port.mark()[0] is not before[0]  # a setting: a new session
    assert port.config()["lr"] == 0.5 and port.schedule_record() is None
    with pytest.raises(
        ValueError, match=rf"{port.api}: targets must have shape \({rows + 1},\) to match X"
    ):
        port.read_labels(y, rows + 1)


def test_data_parallel_reaches_the_trainer_only_through_its_port():
    """distributed.py names no private attribute of anything but itself, except the one
    `trainer._port()`; the checker flags a reach-in."""
    import ast

    from mojolearn import distributed

    def reach_ins(source):
        found = []
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") or (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            ):
                continue
            found.append(ast.unparse(node))
        return found

    with open(distributed.__file__, encoding="utf-8") as f:
        assert reach_ins(f.read()) == ["trainer._port"]
    assert sorted(reach_ins("n = self.trainer._spec.total\nt._lock")) == [
        "self.trainer._spec",
        "t._lock",
    ]


def test_asking_for_mpi_without_mpi4py_names_what_to_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_mpi(name, *a, **k):
        if name.startswith("mpi4py"):
            raise ImportError("no mpi4py here")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpi)
    t = ml.MLPTrainer([8, 6, 3], data_schedule={"a": 1})
    with pytest.raises(ImportError, match=r"pip install mpi4py mpich$"):
        DataParallel(t, comm="mpi")
    assert DataParallel(t, microbatches=2).size == 1  # None without mpi4py: one process


# -- several processes ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["small", "mlp"])
def test_one_to_four_processes_give_the_bits_of_one(kind):
    _mpi_or_skip()
    want = _alone(kind, "4", "30", "global")
    assert want[0] == 30
    for n in (1, 2, 3, 4):
        assert _run(n, kind, "4", "30", "global") == want, f"{kind}, {n} processes"


def test_one_microbatch_under_two_processes_is_plain_train_step():
    _mpi_or_skip()
    t = ml.SmallMLPTrainer(*_spec.init_small_mlp(5), data_schedule={"run": "dp"})
    for X, y in _rng.batches(11, 32, 30):
        t.train_step(X, y)
    assert _run(2, "small", "1", "30", "global") == (30, t.state_hash())


def test_the_shard_form_equals_the_global_form():
    _mpi_or_skip()
    assert _run(3, "mlp", "4", "30", "shard") == _run(2, "mlp", "4", "30", "global")


def test_a_checkpoint_saved_under_four_resumes_under_two(tmp_path):
    _mpi_or_skip()
    want = _alone("mlp", "4", "30", "global")
    ckpt = str(tmp_path / "dp.ckpt")
    assert _run(4, "mlp", "4", "30", "global", "-", ckpt, "12")[0] == 12
    assert _run(2, "mlp", "4", "30", "global", ckpt) == want


def test_a_rank_killed_mid_run_ends_the_job_promptly_and_the_checkpoint_loads(tmp_path):
    _mpi_or_skip()
    ckpt = tmp_path / "k.ckpt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, PKG_PARENT]))
    script = (
        "import os, signal, sys\n"
        "import mojolearn as ml\n"
        "from mojolearn._mlp import rng as _rng\nfrom mojolearn._mlp import spec as _spec\n"
        "from mojolearn.distributed import DataParallel\n"
        "t = ml.MLPTrainer([8, 24, 3], seed=1, data_schedule={'a': 1})\n"
        "dp = DataParallel(t, microbatches=2)\n"
        f"path = {str(ckpt)!r}\n"
        "for X, y in _rng.batches(2, 16, 100000):\n"
        "    out = dp.train_step(X, y)\n"
        "    if out['step'] % 10 == 0:\n"
        "        dp.save_checkpoint(path)\n"
        "    if out['step'] == 25 and dp.rank == 1:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0, proc.stdout
    assert elapsed < 60, f"the job took {elapsed:.0f} s to end after a rank died"
    resumed = ml.MLPTrainer.from_checkpoint(ckpt)
    assert resumed.step_ == 20


# -- the command line --------------------------------------------------------------------------


def _cli(args, cwd, n=None):
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    cmd = [sys.executable, "-m", "mojolearn", "train", *args, "--json"]
    if n is not None:
        cmd = [MPIEXEC, "-n", str(n)] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    return proc


def _done(proc):
    import json

    assert proc.returncode == 0, (
        f"rc {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    done = [l for l in lines if l.get("event") == "done"]
    assert len(done) == 1, "rank 0 alone reports"
    return done[0]


@pytest.mark.parametrize(
    "args",
    [
        ["--steps", "24", "--microbatches", "4"],
        ["--dataset", "digits", "--steps", "30", "--microbatches", "2"],
        # any model (issue 35), Dropout's mask drawn at each element's index in the batch
        ["--model", "linear:16,gelu,dropout:0.25,residual(layernorm,linear:16),linear:3"]
        + ["--steps", "24", "--microbatches", "4"],
        # a CNN on the digits as 1x8x8 images (issue 37)
        ["--dataset", "digits", "--model", "conv:8:3:1:1,relu,maxpool:2,flatten,linear:10"]
        + ["--steps", "30", "--batch-size", "32", "--microbatches", "2"],
    ],
)
def test_the_cli_under_mpiexec_equals_one_process(tmp_path, args):
    _mpi_or_skip()
    one = _done(_cli([*args, "--checkpoint", "one.ckpt"], tmp_path))
    two = _done(_cli([*args, "--checkpoint", "two.ckpt"], tmp_path, n=2))
    assert two["state_hash"] == one["state_hash"]
    assert (tmp_path / "two.ckpt.history.jsonl").read_bytes() == (
        tmp_path / "one.ckpt.history.jsonl"
    ).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["one.ckpt", "one.ckpt.history.jsonl", "two.ckpt", "two.ckpt.history.jsonl"]
    )


def test_validation_and_patience_under_mpiexec_equal_one_process(tmp_path):
    # Every process scores the validation rows and takes rank 0's figure: all stop together.
    _mpi_or_skip()
    args = ["--val-fraction", "0.2", "--patience", "2", "--lr", "0.05", "--microbatches", "1"]
    one = _done(_cli([*args, "--epochs", "60", "--checkpoint", "one.ckpt"], tmp_path))
    two = _done(_cli([*args, "--epochs", "60", "--checkpoint", "two.ckpt"], tmp_path, n=2))
    assert one["stopped_early"] and one["step"] < 60 * 8, one
    for key in ("state_hash", "step", "best_step", "best_val_loss", "val_loss", "test_loss"):
        assert two[key] == one[key], key
    for suffix in (".best", ".history.jsonl"):
        two_file, one_file = tmp_path / f"two.ckpt{suffix}", tmp_path / f"one.ckpt{suffix}"
        assert two_file.read_bytes() == one_file.read_bytes(), suffix


def test_the_cli_resumes_under_another_process_count(tmp_path):
    _mpi_or_skip()
    whole = _done(
        _cli(["--steps", "40", "--microbatches", "4", "--checkpoint", "w.ckpt"], tmp_path)
    )
    _done(_cli(["--steps", "15", "--microbatches", "4", "--checkpoint", "r.ckpt"], tmp_path, n=4))
    again = _done(_cli(["--resume", "--steps", "40", "--checkpoint", "r.ckpt"], tmp_path, n=3))
    assert again["state_hash"] == whole["state_hash"]
    assert (tmp_path / "r.ckpt.history.jsonl").read_bytes() == (
        tmp_path / "w.ckpt.history.jsonl"
    ).read_bytes()


def test_cli_refusals_are_one_line_from_rank_zero(tmp_path):
    _mpi_or_skip()
    proc = _cli(["--microbatches", "32"], tmp_path, n=2)
    assert proc.returncode == 2
    err = [l for l in proc.stderr.splitlines() if l.startswith("mojolearn")]
    assert err == [
        "mojolearn train: error: --microbatches 32 must divide every batch: "
        "--batch-size 16 and the epoch's last batch of 16 rows (144 training rows)"
    ]
    assert list(tmp_path.iterdir()) == []
    proc = _cli(["--microbatches", "3"], tmp_path)
    assert proc.returncode == 2 and "--microbatches: expected a power of two" in proc.stderr
