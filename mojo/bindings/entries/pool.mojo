"""Binding entries of the worker pool (training/pool.mojo): mojolearn/_runtime/threads.py opens one
pool per process, parks its worker threads in `pool_serve`, and hands the pool to sessions."""
from std.ffi import external_call
from std.python import PythonObject

from entries.args import Args, Layout
from training.mlp_resident import S_POOL, is_session
from training.config import I64P
from training.pool import is_pool, pool_open, pool_stop, serve, worker_parts

comptime POOL_OPEN = Layout("pool_open", "", "workers")
comptime POOL_SERVE = Layout("pool_serve", "pool", "")
comptime POOL_STOP = Layout("pool_stop", "pool", "")
comptime POOL_WORKER_PARTS = Layout("pool_worker_parts", "pool", "")
comptime MLP_RESIDENT_USE_POOL = Layout("mlp_resident_use_pool", "session,pool", "")
comptime MAX_WORKERS = 255


def pool_open_entry(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """A new pool for `workers` threads (its address); it lives as long as the process."""
    var args = Args(POOL_OPEN, addrs, params)
    var workers = args.int(0, "workers", 1, MAX_WORKERS)
    var addr = pool_open(workers)
    if addr == 0:
        raise Error("MemoryError: ", POOL_OPEN.name, ": cannot allocate a pool")
    return PythonObject(addr)


def _pool(entry: StaticString, addr: Int) raises -> Int:
    if not is_pool(addr):
        raise Error("ValueError: ", entry, ": not a worker pool")
    return addr


def pool_serve_entry(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Run as one of the pool's workers, without the GIL, until `pool_stop`; returns 0."""
    var args = Args(POOL_SERVE, addrs, params)
    var pool = _pool(POOL_SERVE.name, args.addrs[0])
    var ts = external_call["PyEval_SaveThread", Int]()  # pure Mojo until restored
    serve(pool)
    external_call["PyEval_RestoreThread", NoneType](ts)
    return PythonObject(0)


def pool_stop_entry(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Ask the pool's workers to return from `pool_serve`; returns 0."""
    var args = Args(POOL_STOP, addrs, params)
    pool_stop(_pool(POOL_STOP.name, args.addrs[0]))
    return PythonObject(0)


def pool_worker_parts_entry(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """How many GEMM parts the pool's workers have run (tests check that they take part)."""
    var args = Args(POOL_WORKER_PARTS, addrs, params)
    return PythonObject(worker_parts(_pool(POOL_WORKER_PARTS.name, args.addrs[0])))


def mlp_resident_use_pool(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Let a session's host steps share their GEMMs with the pool's workers; returns 0."""
    comptime E = MLP_RESIDENT_USE_POOL.name
    var args = Args(MLP_RESIDENT_USE_POOL, addrs, params)
    if not is_session(args.addrs[0]):
        raise Error("ValueError: ", E, ": not an open session (closed or never opened)")
    I64P(unsafe_from_address=args.addrs[0])[unsafe_offset=S_POOL] = Int64(
        _pool(E, args.addrs[1]))
    return PythonObject(0)
