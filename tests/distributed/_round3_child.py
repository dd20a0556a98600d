"""Processes of the round-3 MPI tests (issue 30 rows 6-9), run under `mpiexec -n 2`.

python -m tests.distributed._round3_child agree OUT_JSON CKPT
    Rows 6, 7 (R16): ranks that disagree on rows, weights, hyperparameters, M, layer
    sizes, data schedule, step or (after a load) state are refused by name, every rank
    alike, with nothing applied; then agreeing steps still give the one-process bits.
    Rank 0 writes what both ranks saw to OUT_JSON.
python -m tests.distributed._round3_child mode OUT
    Rank 1 runs the other numeric mode: refused at construction on both ranks; each rank
    writes what it saw to OUT.<rank>.
python -m tests.distributed._round3_child end PHASE
    Rows 8 (R17): rank 1 fails at PHASE; the job must end promptly, non-zero.
python -m tests.distributed._round3_child cli ABORT_AT CLI_ARGS...
    Row 9 (R17): `mojolearn train CLI_ARGS` (as the console script runs it), where rank 1
    gets SIGINT when it opens the --data CSV (ABORT_AT=csv) or once its loop's signal
    handling is on (ABORT_AT=loop).
"""

import json
import os
import signal
import sys
import threading

RANK = int(os.environ.get("PMI_RANK", "0"))


def _trainer(**kw):
    import mojolearn as ml

    args = {"seed": 3, "data_schedule": {"run": "r3"}}
    args.update(kw)
    sizes = args.pop("sizes", [8, 12, 3])
    return ml.MLPTrainer(sizes, **args)


def _refusal(call):
    """(exception type name, message) of `call()`, or None when it returned."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test compares what every rank saw
        return [type(exc).__name__, str(exc)]
    return None


def agree(out, ckpt):
    import mojolearn as ml
    from mojolearn._mlp import rng as _rng
    from mojolearn._runtime.world import OneProcess
    from mojolearn.distributed import DataParallel
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    seen = {}
    batches = _rng.batches(7, 64, 4)
    X64, y64 = batches[0]
    X32, y32 = _rng.batches(8, 32, 1)[0]

    # Row 6: the batch's rows. M = 4: rank 0 passes 32 rows, rank 1 passes 64.
    t = _trainer()
    dp = DataParallel(t, microbatches=4)
    before = t.state_hash()
    X, y = (X32, y32) if RANK == 0 else (X64, y64)
    seen["rows"] = _refusal(lambda: dp.train_step(X, y))
    # The shard form: each rank passes a true shard, of R = 32 on rank 0 and 64 on rank 1.
    R = 32 if RANK == 0 else 64
    per, xs, ys = R // 4, X64.tolist(), y64.tolist()
    rows = [r for i in dp.microbatches_of(RANK) for r in range(i * per, (i + 1) * per)]
    Xs = ml.Array.from_list([xs[r] for r in rows], "<f4").reshape((len(rows), 8))
    ys_ = ml.Array.from_list([ys[r] for r in rows], "<i4")
    seen["shard_rows"] = _refusal(lambda: dp.train_step(Xs, ys_, global_rows=R))
    seen["unchanged_after_rows"] = t.state_hash() == before and t.step_ == 0
    # Agreeing steps afterwards: the one-process bits.
    ref = _trainer()
    one = DataParallel(ref, microbatches=4, comm=OneProcess())
    for Xb, yb in batches[:2]:
        dp.train_step(Xb, yb)
        one.train_step(Xb, yb)
    seen["then_one_process_bits"] = t.state_hash() == ref.state_hash()

    # Row 7: trainers built differently, one difference at a time.
    cases = {
        "weights": {"seed": RANK},
        "lr": {"lr": 1e-3 * (1 + RANK)},
        "betas": {"betas": (0.9, 0.999 if RANK == 0 else 0.99)},
        "weight_decay": {"weight_decay": 0.01 * (1 + RANK)},
        "layer_sizes": {"sizes": [8, 12 + RANK, 3]},
        "data_schedule": {"data_schedule": {"run": "r3", "rank": RANK}},
    }
    for name, kw in cases.items():
        seen[name] = _refusal(lambda kw=kw: DataParallel(_trainer(**kw), microbatches=2))
    seen["microbatches"] = _refusal(lambda: DataParallel(_trainer(), microbatches=2 << RANK))
    stepped = _trainer()
    if RANK == 1:
        stepped.train_step(*batches[2])
    seen["step"] = _refusal(lambda: DataParallel(stepped, microbatches=2))

    # Row 7: a load (or a step outside dp) on one rank after construction.
    t = _trainer()
    dp = DataParallel(t, microbatches=2)
    dp.train_step(*batches[0])
    other = _trainer(seed=11)
    other.train_step(*batches[0])  # the same step count, other weights
    if RANK == 1:
        t.load_state_dict(other.state_dict())
    before = t.state_hash()
    seen["after_load"] = _refusal(lambda: dp.train_step(*batches[1]))
    seen["save_after_load"] = _refusal(lambda: dp.save_checkpoint(ckpt))
    seen["nothing_written"] = not os.path.exists(ckpt)
    seen["unchanged_after_load"] = t.state_hash() == before and t.step_ == 1
    t.load_state_dict(other.state_dict())  # every rank loads the same state: steps go on
    dp.train_step(*batches[1])
    DataParallel(other, microbatches=2, comm=OneProcess()).train_step(*batches[1])
    seen["same_load_steps"] = t.state_hash() == other.state_hash()
    if RANK == 1:
        t.train_step(*batches[2])  # a step outside dp on one rank
    seen["step_outside"] = _refusal(lambda: dp.train_step(*batches[2]))
    seen["rank"] = RANK
    everyone = comm.gather(seen, root=0)
    if RANK == 0:
        with open(out, "w") as f:
            json.dump(everyone, f)


def mode(out):
    import mojolearn as ml
    from mojolearn.distributed import DataParallel

    ml.set_numeric_mode("identical" if RANK == 0 else "fast")
    seen = _refusal(lambda: DataParallel(_trainer(), microbatches=2))
    with open(f"{out}.{RANK}", "w") as f:
        json.dump(seen, f)


def end(phase):
    """Rank 1 fails at `phase`; rank 0 steps on as if nothing happened."""
    import time

    from mojolearn._mlp import rng as _rng
    from mojolearn.distributed import DataParallel

    t = _trainer()
    m = 3 if phase == "construct" and RANK == 1 else 2
    dp = DataParallel(t, microbatches=m)
    if phase == "midloop" and RANK == 1:  # SIGINT at any instant of a run of steps
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    batches = _rng.batches(2, 16, 8)
    for i in range(100000):
        dp.train_step(*batches[i % 8])
        if i == 2 and RANK == 1:
            if phase == "raise":
                raise RuntimeError("rank 1's own code failed between two steps")
            if phase == "sigint":
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the signal arrives here
            if phase == "exit3":
                sys.exit(3)
            if phase == "systemexit":
                raise SystemExit(3)
            if phase == "exit0":
                sys.exit(0)
        if i == 2 and RANK == 0:
            print("rank 0 at step 3", flush=True)


def cli(abort_at, args):
    """`mojolearn train ARGS`, as the console script runs it (`sys.exit(main())`), with
    SIGINT to rank 1 at `abort_at`."""
    from mojolearn import cli
    from mojolearn.cli import run as C

    if RANK == 1 and abort_at == "csv":
        data = os.path.abspath(args[args.index("--data") + 1])

        def on_open(event, what):  # the CSV is being loaded: SIGINT now
            if event == "open" and isinstance(what[0], str) and os.path.abspath(what[0]) == data:
                os.kill(os.getpid(), signal.SIGINT)

        sys.addaudithook(on_open)
    if RANK == 1 and abort_at == "loop":
        enter = C.Interrupt.__enter__

        def entered(self):
            out = enter(self)
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            return out

        C.Interrupt.__enter__ = entered
    sys.exit(cli.main(["train", *args]))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "agree":
        agree(*sys.argv[2:4])
    elif what == "mode":
        mode(sys.argv[2])
    elif what == "end":
        end(sys.argv[2])
    else:
        cli(sys.argv[2], sys.argv[3:])
