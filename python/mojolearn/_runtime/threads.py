"""The thread count (MOJOLEARN_NUM_THREADS, default every CPU the process may use), and the
worker pool the trainers' steps share.

With N > 1 the process gets one pool (training/pool.mojo) and N - 1 daemon threads parked in
it with the GIL released; every resident session is handed the pool, and its host steps cut
each large GEMM into N parts of its outputs (never along a sum), so the bits are those of one
thread (layers with parts of their own, convolutions, pools and attention, share them the
same way: training/pool.mojo `split_parts`). A forked child starts without the parent's threads: its sessions' steps then run
every part on the calling thread (the pool's parts are claimed, not assigned), and a new
pool is opened for it on first use.
"""

import atexit
import contextlib
import os
import threading

from . import backend as _backend

ENV = "MOJOLEARN_NUM_THREADS"
MAX_THREADS = 256

_threads = None  # (count, source), once per process (like the numeric mode)
_pool = None  # the pool's address once opened (0: one thread, no pool)
_lock = threading.Lock()
_alone = threading.local()  # depth of `alone()` blocks on this thread


def num_threads():
    """The thread count (`thread_choice`'s), read once per process at first use. ValueError
    (on every call) while MOJOLEARN_NUM_THREADS is invalid."""
    return thread_choice()[0]


def thread_choice():
    """(count, where it came from): MOJOLEARN_NUM_THREADS when set, else every CPU this
    process may run on (its affinity mask; os.cpu_count() where there is none), shared out
    among the MPI ranks of this machine when the process is one of them (MPICH's
    MPI_LOCALNRANKS, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE), as torch uses every core."""
    global _threads
    if _threads is None:
        raw = os.environ.get(ENV)
        if raw is not None and raw.strip() != "":
            try:
                value = int(raw.strip(), 10)
            except ValueError:
                value = 0
            if not 1 <= value <= MAX_THREADS:
                raise ValueError(f"{ENV} must be an integer in [1, {MAX_THREADS}], got {raw!r}")
            _threads = (value, ENV)
        else:
            _threads = _default()
    return _threads


def _default():
    if hasattr(os, "sched_getaffinity"):
        cpus, source = len(os.sched_getaffinity(0)), "the CPUs this process may use"
    else:
        cpus, source = os.cpu_count() or 1, "os.cpu_count()"
    ranks, name = _local_ranks()
    if ranks > 1:
        cpus //= ranks
        source += f", shared by {ranks} MPI ranks on this machine ({name})"
    return max(1, min(cpus, MAX_THREADS)), source


def _local_ranks():
    """(MPI ranks on this machine, the variable that says so): MPICH's MPI_LOCALNRANKS, Open
    MPI's OMPI_COMM_WORLD_LOCAL_SIZE; (1, None) outside mpiexec."""
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        ranks = os.environ.get(name, "")
        if ranks.isdigit() and int(ranks) > 1:
            return int(ranks), name
    return 1, None


@contextlib.contextmanager
def alone():
    """Within the block, on this thread: `pool()` is 0, so the steps started (and the MLPTrainer
    sessions opened) there run on the calling thread alone, as with MOJOLEARN_NUM_THREADS=1.
    tools/bench_threads.py times one thread against the pool in one process with it, where
    separate processes on a shared machine differ by more than the effect measured."""
    _alone.depth = getattr(_alone, "depth", 0) + 1
    try:
        yield
    finally:
        _alone.depth -= 1


def pool():
    """This process's worker pool (its address), opened with its threads on first use; 0 with
    one thread, or inside `alone()`."""
    global _pool
    if getattr(_alone, "depth", 0):
        return 0
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = _open(num_threads() - 1)
    return _pool


def _open(workers):
    if workers < 1:
        return 0
    raw = _backend.binding().raw
    addr = raw.pool_open([], [workers])
    cpus = worker_cpus(workers)
    for i in range(workers):
        worker = threading.Thread(
            target=raw.pool_serve, args=([addr], []), daemon=True, name=f"mojolearn-worker-{i}"
        )
        worker.start()
        if cpus:
            try:
                os.sched_setaffinity(worker.native_id, {cpus[i]})
            except OSError:  # (a container's policy, say): the worker stays unbound
                pass
    atexit.register(raw.pool_stop, [addr], [])  # the workers return before shutdown
    return addr


def worker_cpus(workers):
    """The CPU each of `workers` workers is bound to: the process's CPUs after its first, one
    each, when it may use enough of them and no other rank of this machine shares them; else
    none (the workers go where the scheduler puts them). Bound, a worker keeps its caches
    from task to task; unbound, on a loaded 2-vCPU VM the scheduler moved the threads between
    the CPUs, and LeNet-5 at batch 256 ran 1.32x faster on two threads than on one where it
    ran 1.49-1.53x with the worker bound (in-process alternating runs; the caller waited for
    the worker's parts ~1 ms a step against ~0.4-0.6). The calling thread, the user's, is never
    bound."""
    if not hasattr(os, "sched_getaffinity") or _local_ranks()[0] > 1:
        return []
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[1 : workers + 1] if len(cpus) > workers else []


def _forget():
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget)
