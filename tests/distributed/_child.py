"""One process of the MPI tests (run under mpiexec, or alone as the one-process reference):
trains `steps` data-parallel steps and prints the state hash from rank 0.

    python -m tests.distributed._child TRAINER M STEPS FORM [CKPT_IN] [CKPT_OUT] [SAVE_AT]
"""

import os
import sys

import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
from mojolearn._runtime.world import OneProcess
from mojolearn.distributed import DataParallel


def make(kind):
    if kind == "small":
        return ml.SmallMLPTrainer(*_spec.init_small_mlp(5), data_schedule={"run": "dp"})
    return ml.MLPTrainer([8, 24, 16, 3], seed=5, data_schedule={"run": "dp"})


def main(argv):
    kind, m, steps, form = argv[0], int(argv[1]), int(argv[2]), argv[3]
    ckpt_in = argv[4] if len(argv) > 4 and argv[4] != "-" else None
    ckpt_out = argv[5] if len(argv) > 5 else None
    save_at = int(argv[6]) if len(argv) > 6 else None
    trainer = make(kind)
    if ckpt_in:
        trainer.load_checkpoint(ckpt_in)
    # DP_ALONE=1: the reference, one process with no MPI at all (mpi4py never imported).
    comm = OneProcess() if os.environ.get("DP_ALONE") == "1" else None
    dp = DataParallel(trainer, microbatches=m, comm=comm)
    batches = _rng.batches(11, 32, steps)
    for X, y in batches[trainer.step_ :]:
        if form == "shard":
            per = 32 // m
            mine = dp.microbatches_of(dp.rank)
            rows = [r for i in mine for r in range(i * per, (i + 1) * per)]
            xs, ys = X.tolist(), y.tolist()
            out = dp.train_step(
                ml.Array.from_list([xs[r] for r in rows], "<f4").reshape((len(rows), 8)),
                ml.Array.from_list([ys[r] for r in rows], "<i4"),
                global_rows=32,
            )
        else:
            out = dp.train_step(X, y)
        if save_at is not None and out["step"] == save_at:
            dp.save_checkpoint(ckpt_out)
            break
    if ckpt_out and save_at is None:
        dp.save_checkpoint(ckpt_out)
    if dp.rank == 0:
        print(trainer.step_, trainer.state_hash(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
