"""The processes of a job: MPI's world (through mpi4py) or this one process, and its end.

`World` is what `DataParallel` and the command line share: the rank and size, one round trip
in which every process learns whether any failed (`gather`, `agree`), and the largest flag of
all processes (`any`). Without mpi4py (or without being asked for MPI) a World is one process
and every call is local: nothing here imports mpi4py until a caller asks for MPI's world.

The end of the job: a process that ends while the others wait for it in a collective would
leave them waiting forever (and itself in MPI_Finalize, which waits for them). So, once per
process of a job of more than one process (`guard_job`): an uncaught exception
(KeyboardInterrupt included) prints its traceback and aborts the job, as `python -m mpi4py`
does; and at exit (sys.exit with any code, or the end of the program) the process first meets
the peers of each communicator handed to `guard_job` in one more agreement: if they are all
leaving too, MPI finalizes as usual; if any is still stepping, that one raises "rank r failed:
its process is exiting" and this one aborts.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    # Builds the error a process raises when another process failed first:
    # (that rank, its error's type name, its error's message) -> the exception.
    Failed = Callable[[int, str, str], BaseException]

# What a leaving process says at exit, where a process still stepping expects (problem, *facts):
# a problem with no type name (see `gather`).
LEAVING = (
    (
        "",
        "its process is exiting (sys.exit or the end of its program) while this one "
        "still steps: every process must take the same steps",
    ),
)
_GUARD: list[object] = []  # the installed excepthook, once per process
_EXIT_COMMS: list[Any] = []  # the communicators met at exit, in order
_CUT: list[bool] = []  # a collective sequence was cut off on this process (out of step)


class OneProcess:
    """The communicator of a run without MPI: rank 0 of 1."""

    rank, size = 0, 1


def _mpi_world(comm: Any) -> tuple[Any, Any]:
    """(communicator, the mpi4py.MPI module or None) for `comm` (see `World`)."""
    if comm is None:
        try:
            from mpi4py import MPI
        except ImportError:
            return OneProcess(), None
        return MPI.COMM_WORLD, MPI
    if comm == "mpi":
        try:
            from mpi4py import MPI
        except ImportError:
            raise ImportError(
                "mojolearn.distributed: MPI needs mpi4py, which is not "
                "installed: pip install mpi4py mpich"
            ) from None
        return MPI.COMM_WORLD, MPI
    if isinstance(comm, OneProcess):
        return comm, None
    from mpi4py import MPI  # a communicator object means mpi4py is there

    if not isinstance(comm, MPI.Comm):
        raise TypeError(
            f"DataParallel: comm must be an mpi4py communicator or None, got {type(comm).__name__}"
        )
    return comm, MPI


class World:
    """The processes of a job, and the agreements between them.

    Attributes:
        comm: the mpi4py communicator, or a `OneProcess`.
        mpi: the mpi4py.MPI module, or None for one process (every call is then local).

    Args:
        comm: None means `MPI.COMM_WORLD` when mpi4py is importable and one process when it
            is not; "mpi" requires mpi4py (ImportError naming what to install otherwise); a
            `OneProcess` is one process without importing mpi4py; else an mpi4py communicator.

    Raises:
        ImportError: "mpi" without mpi4py.
        TypeError: `comm` is none of the above.
    """

    __slots__ = ("comm", "mpi")

    def __init__(self, comm: Any = None) -> None:
        self.comm, self.mpi = _mpi_world(comm)

    @property
    def rank(self) -> int:
        """This process's rank (0 for one process)."""
        return self.comm.rank  # type: ignore[no-any-return]

    @property
    def size(self) -> int:
        """The number of processes (1 for one process)."""
        return self.comm.size  # type: ignore[no-any-return]

    def gather(
        self, problem: BaseException | None, *facts: object, failed: Failed
    ) -> list[tuple[Any, ...]]:
        """One round trip: every process's (None, *facts), in rank order.

        Every process learns whether any failed, so none waits in a collective forever: when
        one did, every process raises, the first failed one its own `problem` and the others
        `failed(rank, type name, message)` of that first failure (the type name is "" for a
        process that is leaving: see `LEAVING`).

        Args:
            problem: this process's error, or None.
            *facts: what this process tells the others.
            failed: builds the error raised where another process failed first.

        Returns:
            Each process's `(None, *facts)`, in rank order.
        """
        if self.mpi is None:
            if problem:
                raise problem
            return [(None, *facts)]
        mine = None if problem is None else (type(problem).__name__, str(problem))
        said: list[tuple[Any, ...]] = self.comm.allgather((mine, *facts))
        first = next(((r, s[0]) for r, s in enumerate(said) if s[0] is not None), None)
        if first is not None:
            if problem is not None and first[0] == self.rank:
                raise problem
            raise failed(first[0], *first[1])
        return said

    def agree(self, problem: BaseException | None, failed: Failed) -> None:
        """`gather` with no facts: every process raises if any failed (see `gather`)."""
        self.gather(problem, failed=failed)

    def any(self, flag: int) -> int:
        """The largest `flag` of all processes (a signal seen by one stops all together)."""
        if self.mpi is None:
            return flag
        return self.comm.allreduce(flag, op=self.mpi.MAX)  # type: ignore[no-any-return]


# -- the end of the job --------------------------------------------------------------------


def abort(code: int) -> None:
    """End the whole MPI job now with status `code` (stdout and stderr flushed first, and a
    moment for mpiexec to forward them: it drops what is still in flight when it tears the
    job down)."""
    import os
    import time

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream cannot stop the abort
            pass
    time.sleep(0.2)
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.COMM_WORLD.Abort(code)
    finally:  # MPICH's MPI_Abort may return; an exit without MPI_Finalize ends the job too
        os._exit(code)


def mark_cut() -> None:
    """Record that this process left a sequence of collectives half done (its next
    collectives would not match its peers'): at exit it aborts the job instead of meeting
    them."""
    _CUT.append(True)


def _excepthook(previous: Any) -> Any:
    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        try:
            previous(kind, value, tb)  # the traceback, as without MPI
        finally:
            abort(130 if issubclass(kind, KeyboardInterrupt) else 1)

    return hook


def _at_exit() -> None:
    """At exit: meet the peers of each guarded communicator once more (see the module)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    if _CUT:
        abort(1)
    for comm in _EXIT_COMMS:
        if comm == mpi.COMM_NULL:  # freed by the program (on every process, or it is stuck)
            continue
        try:
            said = comm.allgather(LEAVING)
        except Exception:  # noqa: BLE001 - no agreement possible: end the job
            abort(1)
        if any(s != LEAVING for s in said):
            abort(1)


def guard_job(comm: Any = None) -> None:
    """In a job of more than one MPI process (nothing otherwise): install the excepthook and
    the exit agreement once per process; `comm` joins the communicators met at exit."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    if mpi.COMM_WORLD.Get_size() < 2:
        return
    if not _GUARD:
        import atexit

        sys.excepthook = _excepthook(sys.excepthook)
        atexit.register(_at_exit)  # after mpi4py's own: runs before MPI_Finalize
        _GUARD.append(sys.excepthook)
    if comm is not None and comm.Get_size() > 1 and not any(c == comm for c in _EXIT_COMMS):
        _EXIT_COMMS.append(comm)
