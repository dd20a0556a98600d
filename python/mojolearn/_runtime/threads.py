"""MOJOLEARN_NUM_THREADS: the thread count, and the worker pool the trainers' steps share.

With N > 1 the process gets one pool (training/pool.mojo) and N - 1 daemon threads parked in
it with the GIL released; every resident session is handed the pool, and its host steps cut
each large GEMM into N parts of its outputs (never along a sum), so the bits are those of one
thread. A forked child starts without the parent's threads: its sessions' steps then run
every part on the calling thread (the pool's parts are claimed, not assigned), and a new
pool is opened for it on first use.
"""

import atexit
import os
import threading

from . import backend as _backend

ENV = "MOJOLEARN_NUM_THREADS"
MAX_THREADS = 256

_threads = None  # the parsed value, once per process (like the numeric mode)
_pool = None  # the pool's address once opened (0: one thread, no pool)
_lock = threading.Lock()


def num_threads():
    """The thread count MOJOLEARN_NUM_THREADS asks for (default 1), read once per process at
    first use. ValueError (on every call) while the value is invalid."""
    global _threads
    if _threads is None:
        raw = os.environ.get(ENV)
        value = 1
        if raw is not None and raw.strip() != "":
            try:
                value = int(raw.strip(), 10)
            except ValueError:
                value = 0
            if not 1 <= value <= MAX_THREADS:
                raise ValueError(f"{ENV} must be an integer in [1, {MAX_THREADS}], got {raw!r}")
        _threads = value
    return _threads


def pool():
    """This process's worker pool (its address), opened with its threads on first use; 0 when
    one thread is asked for."""
    global _pool
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
    for i in range(workers):
        threading.Thread(
            target=raw.pool_serve, args=([addr], []), daemon=True, name=f"mojolearn-worker-{i}"
        ).start()
    atexit.register(raw.pool_stop, [addr], [])  # the workers return before shutdown
    return addr


def _forget():
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget)
