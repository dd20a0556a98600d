"""Data-parallel training where N processes give the bits of one (`DataParallel`).

It steps a `SmallMLPTrainer`, an `MLPTrainer` or a `Trainer` (any `mojolearn.nn` model,
Dropout included: a mask depends on the element's global index in the batch, never on which
process or microbatch computed it).

The global batch of R rows is split into M contiguous microbatches of R/M rows (M a power of
two). Whichever process computes microbatch i computes the same bits: its loss and gradient on
the current state, divided by f32(R) where the mean divides (so M = 1 is exactly
`train_step`). Every process gathers all M gradients (float32 buffers through one MPI
Allgatherv into a preallocated array, never pickled), combines them in the fixed balanced tree
of ascending microbatch index (`step_accumulated`'s, in the kernels) and takes the same AdamW
step. So 1, 2, 3 or 4 processes end with byte-identical state, for a fixed M.

The transport is MPI through mpi4py (`pip install mpi4py mpich`, what the `mpi` extra holds).
`import mojolearn.distributed` never needs it: without mpi4py, `comm=None` is one process.

Example (run as `mpiexec -n 2 python train.py`):
    >>> trainer = mojolearn.MLPTrainer([8, 16, 3], seed=0, data_schedule={"seed": 0})
    >>> dp = DataParallel(trainer, microbatches=4)
    >>> dp.train_step(X, y)["loss"]  # X, y: the whole batch, the same on every process

Under MPI the processes must agree, and are checked: at construction, their trainers (layer
sizes, numeric mode, hyperparameters and learning-rate schedule, step, data schedule, state
hash) and M, in one round trip; at every step, R, the step count and (with a schedule) the
step's rate, riding in the step's agreement; after a load on any process, the state hashes. A
disagreement is the same ValueError on every process, with nothing applied. And the job ends when a process does: see `DataParallel`.
"""

from __future__ import annotations

import array as _pyarray

from ._mlp.core import MLPCore
from ._model.trainer import Trainer
from ._runtime import backend as _backend
from ._runtime.world import World, guard_job, mark_cut

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import os
    from typing import Any, Literal

    from mpi4py import MPI

    from ._buffers.types import BufferLike, StepLoss
    from ._mlp.port import Port
    from ._model.port import ModelPort
    from .mlp_trainer import MLPTrainer
    from .trainer import SmallMLPTrainer

__all__ = ["DataParallel"]

# What the processes' trainers must agree on at construction (as named in messages), in the
# order a refusal names the first difference; `_facts` gives the values.
_FACTS = (
    "microbatches",
    "the trainer class",
    "layer sizes",
    "numeric mode",
    "lr",
    "betas[0]",
    "betas[1]",
    "eps",
    "weight_decay",
    "lr_schedule",
    "step",
    "data_schedule",
    "weights or optimizer moments (state hash)",
)


def _facts(
    trainer: MLPCore | Trainer, port: Port | ModelPort, m: int
) -> tuple[tuple[object, str], ...]:
    """(value compared, value shown) for each of `_FACTS` (the model's: the MLPs' layer sizes,
    a Trainer's model record)."""
    import hashlib
    import json

    c = port.config()
    schedule = json.dumps(trainer.data_schedule, sort_keys=True)
    lr_schedule = json.dumps(port.schedule_record(), sort_keys=True)  # null without a schedule
    digest = trainer.state_hash()
    values: list[tuple[object, str]] = [
        (m, str(m)),
        (port.api, port.api),
        port.model(),
        (port.mode, port.mode),
    ]
    values += [(c[k], f"{c[k]:.9g}") for k in ("lr", "beta1", "beta2", "eps", "weight_decay")]
    values += [(lr_schedule, lr_schedule[:200])]
    values += [
        (trainer.step_, str(trainer.step_)),
        (hashlib.sha256(schedule.encode()).hexdigest(), schedule[:80]),
        (digest, digest[:16]),
    ]
    return tuple(values)


def _rank_failed(rank: int, kind: str, text: str) -> BaseException:
    """The error a process raises when rank `rank` failed first with `kind: text`: a
    ValueError for a refusal (the same on every process), else RuntimeError."""
    said = f"{kind}: {text}" if kind else text
    error = ValueError if said.startswith("ValueError") else RuntimeError
    return error(f"DataParallel: rank {rank} failed: {said}"[:500])


class DataParallel:
    """Data-parallel steps of a Trainer, SmallMLPTrainer or MLPTrainer over `comm`'s processes.

    Construction is collective (every process of `comm` builds its DataParallel): in one round
    trip the processes check that they agree on M and on their trainers (class, layer sizes or
    a Trainer's model, numeric mode, lr, betas, eps, weight_decay, lr_schedule, step,
    data_schedule and state hash); the first difference is the same ValueError on every process, naming it and two
    ranks' values. With a learning-rate schedule, every step's rate also rides in the step's
    agreement (a custom schedule's record is only its class), and the step applies it.

    Under MPI with more than one process in the job, constructing a DataParallel also makes
    sure the job ends when one process does (once per process): an uncaught exception,
    KeyboardInterrupt included, prints its traceback and calls MPI_Abort (status 1, or 130
    for KeyboardInterrupt), as `python -m mpi4py` does, so no process waits for another
    forever; its atexit handlers do not run. A process that exits otherwise (sys.exit with any
    status, or the end of its program) first meets its peers once more: if all are leaving,
    MPI finalizes as usual; if any is still stepping, that one raises RuntimeError ("rank r
    failed: its process is exiting ...") and the leaving one aborts the job (status 1). Not
    covered: a failure before the DataParallel is built (run the program as `python -m mpi4py
    train.py` for that), or processes waiting in collectives of their own.

    Attributes:
        trainer: the trainer it steps.
        microbatches: M.

    Args:
        trainer: the trainer every process holds with the same state (e.g. loaded from the
            same checkpoint); `dp` steps it, so its `step_`, `state_hash()` and checkpoints
            follow every step. A load or a step on it outside `dp` is noticed at the next
            `dp` call: the processes then compare their state hashes.
        microbatches: M, a power of two; the global batch's rows must be a multiple of it.
        comm: an mpi4py communicator; None means `MPI.COMM_WORLD` when mpi4py is importable
            and one process when it is not; "mpi" requires mpi4py (ImportError naming the
            extra otherwise).

    Raises:
        ValueError: a refused M, or processes that disagree (on every process alike).
        TypeError: a trainer that is not a Trainer, SmallMLPTrainer or MLPTrainer, or a comm
            that is not a communicator.
        RuntimeError: another process failed (every process raises).
    """

    trainer: SmallMLPTrainer | MLPTrainer | Trainer
    microbatches: int

    def __init__(
        self,
        trainer: SmallMLPTrainer | MLPTrainer | Trainer,
        microbatches: int = 1,
        comm: MPI.Comm | Literal["mpi"] | None = None,
    ) -> None:
        guard_job()  # mpi4py loaded already: a refusal below still ends the job
        self._world = World(comm)
        self._comm, self._mpi = self._world.comm, self._world.mpi
        if self._mpi is not None:
            guard_job()
        self._cut = False
        problem, facts, m = None, None, microbatches
        try:
            if not isinstance(trainer, (MLPCore, Trainer)):
                raise TypeError(
                    f"DataParallel: trainer must be a Trainer, SmallMLPTrainer or MLPTrainer, "
                    f"got {type(trainer).__name__}"
                )
            if isinstance(m, bool) or type(m) is not int or m < 1 or m & (m - 1):
                raise ValueError(
                    f"DataParallel: microbatches must be a power of two >= 1 (1, 2, 4, ...), "
                    f"got {m!r}"
                )
            port = trainer._port()
            if self._mpi is not None:
                facts = _facts(trainer, port, m)
        except Exception as exc:  # noqa: BLE001 - every process must hear of it
            problem = exc
        said = self._gathered(problem, facts)
        self._same_trainers([s[1] for s in said], port.model_fact)
        self.trainer = trainer
        self.microbatches = m
        self._port = port  # the trainer's one way in (`_mlp/port.py`, `_model/port.py`)
        n = port.total
        self._grads = _pyarray.array("f", bytes(4 * m * n))  # all M gradients, in order
        self._losses = _pyarray.array("f", bytes(4 * m))
        self._sum = _pyarray.array("f", bytes(4 * max(n, 1)))
        self._loss = _pyarray.array("f", [0.0])
        g, l = self._grads.buffer_info()[0], self._losses.buffer_info()[0]
        self._grad_srcs = _pyarray.array("q", [g + 4 * i * n for i in range(m)])
        self._loss_srcs = _pyarray.array("q", [l + 4 * i for i in range(m)])
        self._counts = [len(self.microbatches_of(r)) for r in range(self.size)]
        self._seen = port.mark()  # the state last agreed on
        if self._mpi is not None:
            guard_job(self._comm)

    @property
    def rank(self) -> int:
        """This process's rank in `comm` (0 without MPI)."""
        return self._world.rank

    @property
    def size(self) -> int:
        """The number of processes in `comm` (1 without MPI)."""
        return self._world.size

    def microbatches_of(self, rank: int) -> list[int]:
        """The microbatches a process computes.

        Args:
            rank: a process's rank, in [0, size).

        Returns:
            Its microbatch indices: a contiguous block, in order.

        Raises:
            ValueError: `rank` is not an int in [0, size).
        """
        if isinstance(rank, bool) or type(rank) is not int or not 0 <= rank < self.size:
            raise ValueError(f"DataParallel: rank must be an int in [0, {self.size}), got {rank!r}")
        m, n = self.microbatches, self.size
        return list(range(rank * m // n, (rank + 1) * m // n))

    # ------------------------------------------------------------ steps

    def _gathered(self, problem: BaseException | None, *facts: object) -> list[tuple[Any, ...]]:
        """One round trip: every process's (problem, *facts). Every process learns whether any
        failed (so none waits in a collective forever) and raises the same error if one did;
        otherwise returns the list, in rank order."""
        return self._world.gather(problem, *facts, failed=_rank_failed)

    def _agree(self, problem: BaseException | None) -> None:
        """Every process learns whether any failed; raises the same error on all of them."""
        self._gathered(problem)

    @staticmethod
    def _differ(name: str, said: list[Any], fix: str) -> None:
        """The first rank whose (key, shown) differs from rank 0's: the same ValueError on
        every process, naming both."""
        for r, (key, shown) in enumerate(said):
            if key != said[0][0]:
                raise ValueError(
                    f"DataParallel: the processes disagree on {name}: rank 0 has "
                    f"{said[0][1]}, rank {r} has {shown}; {fix}"[:600]
                )

    def _same_trainers(self, facts: list[Any], model_fact: str) -> None:
        """Construction: the processes' trainers and M agree (see the class docstring); the
        model fact's name is the port's (the classes agree before it is compared)."""
        if self._mpi is None:
            return
        for i, name in enumerate(_FACTS):
            self._differ(
                model_fact if name == "layer sizes" else name,
                [f[i] for f in facts],
                "every process must build the same trainer (the same layer sizes, weights "
                "or seed, options and checkpoint) and the same DataParallel",
            )

    def _changed(self) -> bool:
        """Whether this process's trainer was loaded or stepped outside `dp` since the last
        agreement on its state."""
        return self._port.changed(self._seen)

    def _same_state(self, said: list[Any], at: int) -> None:
        """R (`said[r][at]`), the step count (`at + 1`) and, after a load on any process, the
        state hashes (`at + 2`: the hash where this process's state changed, else None)
        agree; a second round trip only when some processes' states changed and not others'."""
        if self._mpi is None:
            return
        if at:
            self._differ(
                "the batch's rows R",
                [(s[at], str(s[at])) for s in said],
                "every process passes the same global batch (or its shard of it, with the "
                "same global_rows)",
            )
        self._differ(
            "the step count",
            [(s[at + 1], str(s[at + 1])) for s in said],
            "a step or load on one process's trainer outside dp; load the same checkpoint "
            "on every process",
        )
        digests = [s[at + 2] for s in said]
        if all(d is None for d in digests):
            return
        if any(d is None for d in digests):
            mine = digests[self.rank] or self.trainer.state_hash()
            digests = [s[1] for s in self._gathered(None, mine)]
        self._differ(
            "the trainer's state (state hash) after a load or a setting",
            [(d, d[:16]) for d in digests],
            "load the same checkpoint, or set the same lr and weight_decay, on every process",
        )
        self._seen = self._port.mark()

    def _usable(self) -> None:
        """Refuse a call after a step was cut off on this process (its collectives no longer
        match its peers')."""
        if self._cut:
            raise RuntimeError(
                "DataParallel: a step was cut off on this process (an exception left it "
                "between two collectives), so the processes no longer meet in the same "
                "collectives: end the job and resume from the last checkpoint"
            )

    def train_step(
        self, X: BufferLike, targets: BufferLike, *, global_rows: int | None = None
    ) -> StepLoss:
        """One data-parallel AdamW step.

        Global form (`global_rows` None): X and targets are the whole batch of R rows, the same
        on every process; each process computes its own microbatches of it. Shard form: X and
        targets hold only this process's microbatches (`microbatches_of(rank)`, stacked in
        order) and `global_rows` is R. Both give the same bits.

        The processes' R and step counts ride in the step's agreement (no extra round trip);
        after a load or step outside `dp` on any process, their state hashes are compared.

        Args:
            X: float32 (rows, inputs) (a Trainer's: (rows, *input_shape)): the batch, or
                this process's shard of it.
            targets: integer (rows,): the class of each row (a Trainer's: as its
                `train_step` takes them, e.g. float32 outputs for MSE).
            global_rows: R in the shard form; None in the global form.

        Returns:
            {"step": the new count, "loss": the batch's mean loss (the microbatch losses
            combined in the same tree, the same on every process)}.

        Raises:
            ValueError: rows that do not split into the microbatches, a refused input on any
                process, or processes that disagree on R, the step count or (after a load)
                the state (every process raises; no process takes the step).
            RuntimeError: another process failed, or left (every process raises).
        """
        self._usable()
        t, port = self.trainer, self._port
        mine = self.microbatches_of(self.rank)
        changed = self._changed()
        problem, buffers, total, per, rate = None, [], None, 0, None
        try:
            if self._mpi is not None and t.lr_schedule is not None:
                rate = t.lr  # this step's: custom schedules can differ where records agree
            x, xa, rows = port.read(X)
            total = rows if global_rows is None else global_rows
            per = self._rows_per_microbatch(total, rows, global_rows is None, len(mine))
            y, ya, itemsize = port.read_labels(targets, rows)
            buffers = self._microbatches(xa, ya, itemsize, per, total, global_rows is None)
        except Exception as exc:  # noqa: BLE001 - every process must hear of it
            problem = exc
        if not changed:  # a session reopened larger for this batch holds the same state
            self._seen = port.mark()
        digest = None
        if changed and problem is None and self._mpi is not None:
            try:
                digest = t.state_hash()
            except Exception as exc:  # noqa: BLE001
                problem = exc
        agreed = False  # an error raised on every process alike (their collectives in step)
        self._cut = True
        try:
            try:
                said = self._gathered(problem, total, t.step_, digest, rate)
                self._same_state(said, 1)
                self._same_rate(said)
            except Exception:
                agreed = True
                raise
            step, problem = self._combine_and_apply(buffers, per)
            self._seen = port.mark()
            agreed = True  # an error of _agree is raised on every process alike
            self._agree(problem)
        finally:
            self._cut = not agreed
            if self._cut:  # e.g. KeyboardInterrupt between two collectives: see mark_cut
                mark_cut()
        return {"step": step, "loss": self._loss[0]}

    def _microbatches(
        self, xa: int, ya: int, itemsize: int, per: int, total: int, whole: bool
    ) -> list[Any]:
        """This process's microbatch results ([loss | gradients] each), in order; `whole`: X
        holds the whole batch (the global form), else only this process's shard."""
        port, out = self._port, []
        with port.lock:
            for j, i in enumerate(self.microbatches_of(self.rank)):
                k = i if whole else j  # the microbatch's place in X
                at = k * per
                # i * per: its first row in the batch, Dropout's global index
                out.append(
                    port.microbatch(
                        xa + 4 * at * port.inputs, ya + itemsize * at, itemsize, per, total, i * per
                    )
                )
        return out

    def _same_rate(self, said: list[Any]) -> None:
        """The processes' rates of this step (None without a schedule) must agree."""
        self._differ(
            f"the learning rate of step {self.trainer.step_ + 1} (lr_schedule)",
            [(s[4], repr(s[4])) for s in said],
            "every process must set the same lr_schedule",
        )

    def _combine_and_apply(self, buffers: list[Any], per: int) -> tuple[int, Exception | None]:
        """Gather every microbatch's gradients and loss, combine them in the fixed tree and
        apply the sum: (the new step count, or the trainer's step and the refusal that every
        process then raises alike)."""
        port = self._port
        self._gather(buffers, per)
        b = _backend.binding()
        m, n = self.microbatches, port.total
        srcs, sums = self._grad_srcs.buffer_info()[0], self._sum.buffer_info()[0]
        b.optim_tree_sum([srcs, sums], [m, n])
        srcs, sums = self._loss_srcs.buffer_info()[0], self._loss.buffer_info()[0]
        b.optim_tree_sum([srcs, sums], [m, 1])
        with port.lock:
            try:
                return port.apply(self._sum.buffer_info()[0]), None
            except Exception as exc:  # noqa: BLE001 - the same on every process
                return self.trainer.step_, exc

    def _rows_per_microbatch(self, total: object, rows: int, whole: bool, shards: int) -> int:
        """R / M, the batch's R checked against M, the trainer's max_rows and X's rows (the
        whole batch, or this process's `shards` microbatches)."""
        m = self.microbatches
        if isinstance(total, bool) or type(total) is not int or total < 1 or total % m:
            raise ValueError(
                f"DataParallel: the batch has {total!r} rows, not a multiple "
                f"of microbatches={m} (R/M rows each)"
            )
        per = total // m
        if not 1 <= per <= self.trainer.max_rows:
            raise ValueError(
                f"DataParallel: microbatches of {per} rows (R={total}, M={m}) "
                f"exceed the trainer's {self.trainer.max_rows}"
            )
        if rows != (total if whole else per * shards):
            raise ValueError(
                f"DataParallel: X has {rows} rows; the shard of rank "
                f"{self.rank} is {shards} microbatches of {per} rows"
            )
        return per

    def _gather(self, buffers: list[Any], per: int) -> None:
        """All M gradients (and losses) into the preallocated arrays, microbatch order: this
        process's block is copied in place (memoryview slices: one memcpy each), then one
        in-place Allgatherv fills in the others'."""
        n = self._port.total
        loss_at, start = self._port.result_at(per)  # in `microbatch`'s buffers
        first = self.microbatches_of(self.rank)[:1]
        grads, losses = memoryview(self._grads), memoryview(self._losses)
        for j, buf in enumerate(buffers):
            i = first[0] + j
            grads[i * n : (i + 1) * n] = memoryview(buf)[start : start + n]
            losses[i] = buf[loss_at]
        if self._mpi is None:
            return
        F, IN_PLACE = self._mpi.FLOAT, self._mpi.IN_PLACE
        counts = [c * n for c in self._counts]
        displs = [sum(counts[:r]) for r in range(self.size)]
        self._comm.Allgatherv(IN_PLACE, [self._grads, (counts, displs), F])
        lcounts = list(self._counts)
        ldispls = [sum(lcounts[:r]) for r in range(self.size)]
        self._comm.Allgatherv(IN_PLACE, [self._losses, (lcounts, ldispls), F])

    # ------------------------------------------------------------ checkpoints

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Rank 0 writes the trainer's checkpoint (atomically, as always).

        First the processes check that their trainers agree (the step count and, after a load
        or step outside `dp` on any process, the state hash): rank 0 never writes a state the
        others do not hold. Every process returns only once the file is complete, and all
        raise if the save failed.

        Args:
            path: the checkpoint file.

        Raises:
            ValueError: the processes' trainers disagree (nothing is written), or the save
                was refused (see the trainer's `save_checkpoint`).
            OSError: the file cannot be written (on rank 0; RuntimeError on the others).
        """
        self._usable()
        t = self.trainer
        problem, digest = None, None
        if self._changed() and self._mpi is not None:
            try:
                digest = t.state_hash()
            except Exception as exc:  # noqa: BLE001
                problem = exc
        self._same_state(self._gathered(problem, t.step_, digest), 0)
        problem = None
        if self.rank == 0:
            try:
                self.trainer.save_checkpoint(path)
            except Exception as exc:  # noqa: BLE001
                problem = exc
        self._agree(problem)
