"""Processes of the MPI tests of `DataParallel` over a `Trainer` (issue 35), run under
`mpiexec -n 2`.

python -m tests.distributed._model_child run LOSS STEPS FORM M...
    For each M: a fresh LayerNorm + Dropout + Residual Trainer (`make`; LOSS cnn: a small
    CNN classifier on 2x6x6 images) takes STEPS
    data-parallel steps on `batches`, each process passing the whole batch (FORM global) or
    its microbatches' rows (FORM shard); rank 0 prints one line, "M:step:hash" per M.
python -m tests.distributed._model_child disagree OUT_JSON
    Ranks whose trainers differ in the model or the weights, or whose states differ after a
    load on one of them, are refused by name on every rank, with nothing applied. Rank 0
    writes what both ranks saw to OUT_JSON.
"""

import json
import math
import random
import sys

import mojolearn as ml
from mojolearn import nn
from mojolearn.distributed import DataParallel

ROWS, INPUTS, OUTPUTS = 32, 6, 3
IMAGE = (2, 6, 6)  # the "cnn" model's input


def _cnn():
    """Conv2d at stride 2 (im2col) and 1 (the direct kernels), overlapping max windows, an
    average pool and Dropout: every CNN path of a step."""
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2, stride=1),
        nn.Conv2d(4, 6, 1),
        nn.Tanh(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.25),
        nn.Linear(6, OUTPUTS),
    )


def make(loss, width=16, seed=5):
    """A Trainer of `loss` (cross_entropy, mse, or cnn: a cross-entropy CNN on IMAGE)."""
    if loss == "cnn":
        return ml.Trainer(
            _cnn(), input_shape=IMAGE, seed=seed, lr=1e-2, data_schedule={"run": "dp"}
        )
    model = nn.Sequential(
        nn.Linear(INPUTS, width),
        nn.LayerNorm(width),
        nn.Dropout(0.25),
        nn.Residual(nn.Linear(width, width), nn.GELU(), nn.Dropout(0.5)),
        nn.Linear(width, OUTPUTS),
    )
    return ml.Trainer(
        model, input_shape=(INPUTS,), loss=loss, seed=seed, lr=1e-2, data_schedule={"run": "dp"}
    )


def batches(loss, steps, seed=11):
    """`steps` batches of ROWS rows: (X, targets), the same on every process."""
    rng = random.Random(seed)
    out = []
    shape = IMAGE if loss == "cnn" else (INPUTS,)
    for _ in range(steps):
        X = ml.Array.from_list([rng.gauss(0, 1) for _ in range(ROWS * math.prod(shape))], "<f4")
        if loss == "mse":
            y = ml.Array.from_list([rng.gauss(0, 1) for _ in range(ROWS * OUTPUTS)], "<f4")
            y = y.reshape((ROWS, OUTPUTS))
        else:
            y = ml.Array.from_list([rng.randrange(OUTPUTS) for _ in range(ROWS)], "<i4")
        out.append((X.reshape((ROWS, *shape)), y))
    return out


def _shard(a, rows):
    return ml.Array.from_list([a.tolist()[r] for r in rows], "<i4" if len(a.shape) == 1 else "<f4")


def run(loss, steps, form, ms):
    said = []
    for m in ms:
        trainer = make(loss)
        dp = DataParallel(trainer, microbatches=m)
        per = ROWS // m
        mine = [r for i in dp.microbatches_of(dp.rank) for r in range(i * per, (i + 1) * per)]
        for X, y in batches(loss, steps):
            if form == "shard":
                dp.train_step(_shard(X, mine), _shard(y, mine), global_rows=ROWS)
            else:
                dp.train_step(X, y)
        said.append(f"{m}:{trainer.step_}:{trainer.state_hash()}")
    if dp.rank == 0:
        print(" ".join(said), flush=True)


def _refusal(call):
    """(exception type name, message) of `call()`, or None when it returned."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test compares what every rank saw
        return [type(exc).__name__, str(exc)]
    return None


def disagree(out):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    seen = {"rank": rank}
    seen["model"] = _refusal(lambda: DataParallel(make("mse", width=16 + rank), microbatches=2))
    seen["weights"] = _refusal(lambda: DataParallel(make("mse", seed=rank), microbatches=2))
    seen["loss"] = _refusal(
        lambda: DataParallel(make("mse" if rank else "cross_entropy"), microbatches=2)
    )
    (X, y), (X2, y2) = batches("mse", 2)
    t = make("mse")
    dp = DataParallel(t, microbatches=2)
    dp.train_step(X, y)
    other = make("mse", seed=9)
    other.train_step(X, y)  # the same step count, other weights
    if rank == 1:
        t.load_state_dict(other.state_dict())
    before = t.state_hash()
    seen["after_load"] = _refusal(lambda: dp.train_step(X2, y2))
    seen["unchanged_after_load"] = t.state_hash() == before and t.step_ == 1
    everyone = comm.gather(seen, root=0)
    if rank == 0:
        with open(out, "w") as f:
            f.write(json.dumps(everyone))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), sys.argv[4], [int(m) for m in sys.argv[5:]])
    else:
        disagree(sys.argv[2])
