"""DataParallel over a `Trainer` (issue 35): a LayerNorm + Dropout + Residual model, with
cross-entropy and with MSE, and a small CNN (issue 37: Conv2d at strides 2 and 1, MaxPool2d
with overlapping windows, AvgPool2d, Dropout). M = 1 is `Trainer.train_step` bit for bit; under `mpiexec -n 2`
the job ends with the bits of one process for the same M (1, 2, 4), Dropout included (a mask
follows the element's global index in the batch, not the process or microbatch); ranks whose
trainers differ (model, weights, loss, a load on one) are refused by name on every rank, with
nothing applied. The MPI tests skip with the reason where mpi4py or mpiexec is absent (CI
installs both); each job runs under a bounded timeout."""

import json
import os
import subprocess
import sys

import mojolearn as ml
import pytest
from mojolearn._runtime.world import OneProcess
from mojolearn.distributed import DataParallel

from ..helpers import PKG_PARENT
from ._model_child import batches, make
from .test_data_parallel import MPIEXEC, ROOT, _mpi_or_skip

LOSSES = ["cross_entropy", "mse"]
MODELS = [*LOSSES, "cnn"]  # cnn: a cross-entropy CNN (`_model_child._cnn`)
STEPS = 4


def _job(*args, timeout=180):
    """`mpiexec -n 2 python -m tests.distributed._model_child ARGS`: its stdout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, PKG_PARENT]))
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "tests.distributed._model_child", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _one_process(loss, m):
    """(step, state hash) of STEPS data-parallel steps in this process, no MPI."""
    trainer = make(loss)
    dp = DataParallel(trainer, microbatches=m, comm=OneProcess())
    for X, y in batches(loss, STEPS):
        dp.train_step(X, y)
    return trainer.step_, trainer.state_hash()


# -- one process (no MPI needed) ---------------------------------------------------------------


@pytest.mark.parametrize("loss", MODELS)
def test_one_microbatch_is_train_step_bit_for_bit(loss):
    a, b = make(loss), make(loss)
    dp = DataParallel(b, microbatches=1, comm=OneProcess())
    for X, y in batches(loss, STEPS):
        ra, rb = a.train_step(X, y), dp.train_step(X, y)
        assert ra["loss"] == rb["loss"] and ra["step"] == rb["step"]
        # Dropout is on in these steps: the training outputs are not inference's.
        assert ra["outputs"].tobytes() != make(loss).predict_logits(X).tobytes()
    assert a.state_hash() == b.state_hash()


@pytest.mark.parametrize("loss", MODELS)
def test_microbatches_split_the_batch_they_do_not_make_another(loss):
    """M = 2 and 4 sum per-microbatch partial sums in the fixed tree: the loss is the whole
    batch's within float32 rounding (not bit-equal: the sums are grouped differently)."""
    ((X, y),) = batches(loss, 1)
    want = make(loss).train_step(X, y)["loss"]
    for m in (2, 4):
        got = DataParallel(make(loss), microbatches=m, comm=OneProcess()).train_step(X, y)
        assert abs(got["loss"] - want) <= 1e-5 * abs(want), m


def test_the_port_refuses_as_the_trainer_does_and_changes_nothing():
    t = make("mse")
    dp = DataParallel(t, microbatches=4, comm=OneProcess())
    before = t.state_hash()
    ((X, y),) = batches("mse", 1)
    with pytest.raises(
        ValueError, match=r"the batch has 30 rows, not a multiple of microbatches=4"
    ):
        dp.train_step(_rows(X, 30), _rows(y, 30))
    with pytest.raises(ValueError, match=r"Trainer: targets must have shape \(32, 3\)"):
        dp.train_step(X, _rows(y, 16))
    bad = X.tolist()
    bad[3][2] = float("nan")
    with pytest.raises(ValueError, match=r"Trainer: X must be finite: example 3, element 2"):
        dp.train_step(ml.Array.from_list(bad, "<f4"), y)
    assert t.state_hash() == before and t.step_ == 0
    t.lr = 0.5  # a setting outside dp: the next step runs at it
    assert dp.train_step(X, y)["step"] == 1


def _rows(a, n):
    return ml.Array.from_list(a.tolist()[:n], "<f4")


def test_a_trainer_port_microbatch_over_the_whole_batch_is_train_steps_gradient():
    t = make("cross_entropy")
    ((X, y),) = batches("cross_entropy", 1)
    port = t._port()
    x, xa, rows = port.read(X)
    yk, ya, row_bytes = port.read_labels(y, rows)
    assert (rows, row_bytes, port.inputs) == (32, 4, 6) and port.result_at(8) == (0, 1)
    mark = port.mark()
    with port.lock:
        buf = port.microbatch(xa, ya, row_bytes, rows, rows, 0)
    assert not port.changed(mark)
    out = make("cross_entropy").train_step(X, y)
    assert buf[0] == out["loss"]
    assert buf[1:].tobytes() == b"".join(g.tobytes() for g in out["gradients"].values())
    t.weight_decay = 0.5
    assert port.changed(mark) and port.config()["weight_decay"] == 0.5


# -- two processes -----------------------------------------------------------------------------


def _said(line):
    """{M: (step, hash)} of a run job's line."""
    return {int(m): (int(step), h) for m, step, h in (s.split(":") for s in line.split())}


@pytest.mark.parametrize("loss", MODELS)
def test_two_processes_give_the_bits_of_one(loss):
    """M = 1, 2, 4 under `mpiexec -n 2` (M = 1: rank 1 computes nothing and still steps), each
    the one-process bits; M = 1 is also plain train_step's."""
    _mpi_or_skip()
    want = {m: _one_process(loss, m) for m in (1, 2, 4)}
    assert _said(_job("run", loss, str(STEPS), "global", "1", "2", "4")) == want
    plain = make(loss)
    for X, y in batches(loss, STEPS):
        plain.train_step(X, y)
    assert want[1] == (STEPS, plain.state_hash())
    assert want[2][1] != want[1][1]  # a microbatched step is not the plain one (rounding)


@pytest.mark.parametrize("loss", MODELS)
def test_the_shard_form_gives_the_global_forms_bits(loss):
    """Each rank passing only its microbatches' rows (and global_rows): the same bits."""
    _mpi_or_skip()
    want = {m: _one_process(loss, m) for m in (2, 4)}
    assert _said(_job("run", loss, str(STEPS), "shard", "2", "4")) == want


def test_ranks_with_other_models_or_weights_are_refused_on_every_rank(tmp_path):
    _mpi_or_skip()
    out = tmp_path / "seen.json"
    _job("disagree", str(out))
    rank0, rank1 = json.loads(out.read_text())
    assert (rank0["rank"], rank1["rank"]) == (0, 1)
    wants = {
        "model": "disagree on the model (layers, input shape, loss): rank 0 has ",
        "weights": "disagree on weights or optimizer moments (state hash): rank 0 has ",
        "loss": "disagree on the model (layers, input shape, loss): rank 0 has ",
        "after_load": "disagree on the trainer's state (state hash) after a load or a setting",
    }
    for case, want in wants.items():
        assert rank0[case] is not None, f"{case}: rank 0 was not refused"
        assert rank0[case] == rank1[case], f"{case}: the ranks saw {rank0[case]}, {rank1[case]}"
        kind, message = rank0[case]
        assert kind == "ValueError" and want in message, message
    model = "Sequential(Linear(6, {w}), LayerNorm({w}), Dropout(p=0.25), Residual(Linear({w}, {w})"
    assert model.format(w=16) in rank0["model"][1] and model.format(w=17) in rank0["model"][1]
    assert "with loss 'cross_entropy'" in rank0["loss"][1] and "with loss 'mse'" in rank0["loss"][1]
    for rank in (rank0, rank1):
        assert rank["unchanged_after_load"]
