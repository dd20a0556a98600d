"""Data-parallel training where N processes give the bits of one (`DataParallel`).

The global batch of R rows is split into M contiguous microbatches of R/M rows (M a power of
two). Whichever process computes microbatch i computes the same bits: its loss and gradient on
the current state, divided by f32(R) where the mean divides (so M = 1 is exactly
`train_step`). Every process gathers all M gradients (float32 buffers through one MPI
Allgatherv into a preallocated array, never pickled), combines them in the fixed balanced tree
of ascending microbatch index (`step_accumulated`'s, in the kernels) and takes the same AdamW
step. So 1, 2, 3 or 4 processes end with byte-identical state, for a fixed M.

The transport is MPI through mpi4py (the `mpi` extra: `pip install 'mojolearn[mpi]'`).
`import mojolearn.distributed` never needs it: without mpi4py, `comm=None` is one process.

Example (run as `mpiexec -n 2 python train.py`):
    >>> trainer = mojolearn.MLPTrainer([8, 16, 3], seed=0, data_schedule={"seed": 0})
    >>> dp = DataParallel(trainer, microbatches=4)
    >>> dp.train_step(X, y)["loss"]  # X, y: the whole batch, the same on every process
"""

from __future__ import annotations

import array as _pyarray

from . import _backend
from ._mlp_core import MLPCore

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import os
    from typing import Any, Literal

    from mpi4py import MPI

    from ._types import BufferLike, StepLoss
    from .mlp_trainer import MLPTrainer
    from .trainer import SmallMLPTrainer

__all__ = ["DataParallel"]


class _OneProcess:
    """The communicator of a run without MPI: rank 0 of 1."""

    rank, size = 0, 1


def _world(comm: Any) -> tuple[Any, Any]:
    if comm is None:
        try:
            from mpi4py import MPI
        except ImportError:
            return _OneProcess(), None
        return MPI.COMM_WORLD, MPI
    if comm == "mpi":
        try:
            from mpi4py import MPI
        except ImportError:
            raise ImportError(
                "mojolearn.distributed: MPI needs mpi4py, which is not "
                "installed: pip install 'mojolearn[mpi]'"
            ) from None
        return MPI.COMM_WORLD, MPI
    if isinstance(comm, _OneProcess):
        return comm, None
    from mpi4py import MPI  # a communicator object means mpi4py is there

    if not isinstance(comm, MPI.Comm):
        raise TypeError(
            f"DataParallel: comm must be an mpi4py communicator or None, got {type(comm).__name__}"
        )
    return comm, MPI


class DataParallel:
    """Data-parallel steps of a SmallMLPTrainer or MLPTrainer over `comm`'s processes.

    Attributes:
        trainer: the trainer it steps.
        microbatches: M.

    Args:
        trainer: the trainer every process holds with the same state (e.g. loaded from the
            same checkpoint); `dp` steps it, so its `step_`, `state_hash()` and checkpoints
            follow every step.
        microbatches: M, a power of two; the global batch's rows must be a multiple of it.
        comm: an mpi4py communicator; None means `MPI.COMM_WORLD` when mpi4py is importable
            and one process when it is not; "mpi" requires mpi4py (ImportError naming the
            extra otherwise).
    """

    trainer: SmallMLPTrainer | MLPTrainer
    microbatches: int

    def __init__(
        self,
        trainer: SmallMLPTrainer | MLPTrainer,
        microbatches: int = 1,
        comm: MPI.Comm | Literal["mpi"] | None = None,
    ) -> None:
        if not isinstance(trainer, MLPCore):
            raise TypeError(
                f"DataParallel: trainer must be a SmallMLPTrainer or MLPTrainer, "
                f"got {type(trainer).__name__}"
            )
        m = microbatches
        if isinstance(m, bool) or type(m) is not int or m < 1 or m & (m - 1):
            raise ValueError(
                f"DataParallel: microbatches must be a power of two >= 1 (1, 2, 4, ...), got {m!r}"
            )
        self._comm, self._mpi = _world(comm)
        self.trainer = trainer
        self.microbatches = m
        n = trainer._spec.total
        self._grads = _pyarray.array("f", bytes(4 * m * n))  # all M gradients, in order
        self._losses = _pyarray.array("f", bytes(4 * m))
        self._sum = _pyarray.array("f", bytes(4 * max(n, 1)))
        self._loss = _pyarray.array("f", [0.0])
        g, l = self._grads.buffer_info()[0], self._losses.buffer_info()[0]
        self._grad_srcs = _pyarray.array("q", [g + 4 * i * n for i in range(m)])
        self._loss_srcs = _pyarray.array("q", [l + 4 * i for i in range(m)])
        self._counts = [len(self.microbatches_of(r)) for r in range(self.size)]

    @property
    def rank(self) -> int:
        """This process's rank in `comm` (0 without MPI)."""
        return self._comm.rank  # type: ignore[no-any-return]

    @property
    def size(self) -> int:
        """The number of processes in `comm` (1 without MPI)."""
        return self._comm.size  # type: ignore[no-any-return]

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

    def _agree(self, problem: BaseException | None) -> None:
        """Every process learns whether any failed (so none waits in a collective forever);
        raises the same error on all of them."""
        if self._mpi is None:
            if problem:
                raise problem
            return
        failed = self._comm.allgather(
            None if problem is None else f"{type(problem).__name__}: {problem}"
        )
        first = next(((r, f) for r, f in enumerate(failed) if f), None)
        if first is not None:
            if problem is not None and first[0] == self.rank:
                raise problem
            kind = RuntimeError if not first[1].startswith("ValueError") else ValueError
            raise kind(f"DataParallel: rank {first[0]} failed: {first[1]}"[:500])

    def train_step(
        self, X: BufferLike, targets: BufferLike, *, global_rows: int | None = None
    ) -> StepLoss:
        """One data-parallel AdamW step.

        Global form (`global_rows` None): X and targets are the whole batch of R rows, the same
        on every process; each process computes its own microbatches of it. Shard form: X and
        targets hold only this process's microbatches (`microbatches_of(rank)`, stacked in
        order) and `global_rows` is R. Both give the same bits.

        Args:
            X: float32 (rows, inputs): the batch, or this process's shard of it.
            targets: integer (rows,): the class of each row.
            global_rows: R in the shard form; None in the global form.

        Returns:
            {"step": the new count, "loss": the batch's mean loss (the microbatch losses
            combined in the same tree, the same on every process)}.

        Raises:
            ValueError: rows that do not split into the microbatches, or a refused input on
                any process (every process raises).
            RuntimeError: another process failed (every process raises).
        """
        t: MLPCore = self.trainer  # the shared core's private entries
        m = self.microbatches
        mine = self.microbatches_of(self.rank)
        problem, buffers = None, []
        try:
            x, xa, rows = t._x_input(X, stacked=True)
            total = rows if global_rows is None else global_rows
            if isinstance(total, bool) or type(total) is not int or total < 1 or total % m:
                raise ValueError(
                    f"DataParallel: the batch has {total!r} rows, not a multiple "
                    f"of microbatches={m} (R/M rows each)"
                )
            per = total // m
            if not 1 <= per <= t.max_rows:
                raise ValueError(
                    f"DataParallel: microbatches of {per} rows (R={total}, M={m}) "
                    f"exceed the trainer's {t.max_rows}"
                )
            want = total if global_rows is None else per * len(mine)
            if rows != want:
                raise ValueError(
                    f"DataParallel: X has {rows} rows; the shard of rank "
                    f"{self.rank} is {len(mine)} microbatches of {per} rows"
                )
            y, ya, itemsize = t._y_input(targets, rows)
            inputs = t._spec.inputs
            with t._lock:
                for j, i in enumerate(mine):
                    k = i if global_rows is None else j  # the microbatch's place in X
                    buf = t._microbatch(
                        xa + 4 * k * per * inputs, ya + itemsize * k * per, itemsize, per, total
                    )
                    buffers.append(buf)
        except Exception as exc:  # noqa: BLE001 - every process must hear of it
            problem = exc
        self._agree(problem)
        self._gather(buffers, per)
        b = _backend.binding()
        n = t._spec.total
        b.optim_tree_sum([self._grad_srcs.buffer_info()[0], self._sum.buffer_info()[0]], [m, n])
        b.optim_tree_sum([self._loss_srcs.buffer_info()[0], self._loss.buffer_info()[0]], [m, 1])
        problem = None
        with t._lock:
            try:
                step = t._apply_flat(self._sum.buffer_info()[0])
            except Exception as exc:  # noqa: BLE001 - the same on every process
                problem = exc
        self._agree(problem)
        return {"step": step, "loss": self._loss[0]}

    def _gather(self, buffers: list[Any], per: int) -> None:
        """All M gradients (and losses) into the preallocated arrays, microbatch order: this
        process's block is copied in place (memoryview slices: one memcpy each), then one
        in-place Allgatherv fills in the others'."""
        t: MLPCore = self.trainer  # the shared core's private entries
        n, classes = t._spec.total, t._spec.classes
        start = 1 + per * classes  # [loss | logits | grads]
        first = self.microbatches_of(self.rank)[:1]
        grads, losses = memoryview(self._grads), memoryview(self._losses)
        for j, buf in enumerate(buffers):
            i = first[0] + j
            grads[i * n : (i + 1) * n] = memoryview(buf)[start : start + n]
            losses[i] = buf[0]
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

        Every process returns only once the file is complete, and all raise if the save
        failed.

        Args:
            path: the checkpoint file.
        """
        problem = None
        if self.rank == 0:
            try:
                self.trainer.save_checkpoint(path)
            except Exception as exc:  # noqa: BLE001
                problem = exc
        self._agree(problem)
