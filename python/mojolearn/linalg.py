"""`mojolearn.matmul`: float32 matrix products computed by the binding's `neural_gemm`.

The arithmetic is docs/ARITHMETIC.md's "GEMM" (profile v2), the same in both numeric modes:
every output is one chain of correctly rounded fma, k ascending from +0.0 (or from C), the
same bits for any thread count, SIMD width and machine with a hardware fma.

Threads: MOJOLEARN_NUM_THREADS (a positive integer; default every CPU the process may use)
Python threads split the rows of C; the kernel releases the GIL, so they run in parallel.
Small products run on the calling thread whatever the setting (a thread hand-off costs more
than they take). The variable is read once per process, at the first call.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from ._buffers.alloc import ZERO_F32 as _ZERO_F32
from ._buffers.array import Array, _result_view
from ._buffers.intake import f32
from ._runtime import backend as _backend
from ._runtime import threads as _threads
from ._runtime.threads import num_threads

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Future
    from typing import Any

    from ._buffers.types import BufferLike

    # A `neural_gemm` entry: (addresses [a, b, c], parameters [m, n, k, ta, tb, 0, row0, row1]).
    _Entry = Callable[[list[int], list[int]], object]

# Rows go to extra threads only when each thread gets at least this many multiply-adds (~45 µs
# of work): handing rows to a Python thread costs tens of µs, and under 2**18 a 256x10x256
# product took ~120 µs on two threads against ~36 µs on one (tools/bench_gemm.py).
_MIN_MACS_PER_THREAD = 1 << 21
_SPLIT_MACS = 2 * _MIN_MACS_PER_THREAD  # below it, one thread whatever the setting

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_raw: Any = None  # the loaded binding module


def _load() -> Any:
    """The binding module, loaded and kept in `_raw`."""
    global _raw
    _raw = _backend.binding().raw  # the binding never changes once loaded
    return _raw


def _flag(value: object, name: str) -> bool:
    if type(value) is not bool:
        raise TypeError(
            f"matmul: {name} must be True or False, got {type(value).__name__} {value!r}"
        )
    return value


def matmul(
    a: BufferLike, b: BufferLike, *, transpose_a: bool = False, transpose_b: bool = False
) -> Array:
    """op(a) @ op(b), the float32 matrix product, computed by the binding.

    The arithmetic is the numeric mode's (module docstring); a strided operand is copied,
    never modified.

    Args:
        a: float32 2-D buffer, (m, k), or (k, m) when `transpose_a`.
        b: float32 2-D buffer, (k, n), or (n, k) when `transpose_b`.
        transpose_a, transpose_b: use the transpose of the stored matrix (bool only).

    Returns:
        A new float32 `Array` of shape (m, n) (zeros when k is 0).

    Raises:
        TypeError: an operand is not a float32 buffer, or a flag is not a bool.
        ValueError: an operand is not 2-D, the contracted dimensions differ, or
            MOJOLEARN_NUM_THREADS is invalid.
        RuntimeError: the product holds a NaN or an infinity.

    Example:
        >>> a = mojolearn.Array.from_list([[1.0, 2.0], [3.0, 4.0]])
        >>> mojolearn.matmul(a, a, transpose_b=True).tolist()
        [[5.0, 11.0], [11.0, 25.0]]
    """
    ta, tb = transpose_a, transpose_b
    if type(ta) is not bool or type(tb) is not bool:
        _flag(ta, "transpose_a")
        _flag(tb, "transpose_b")
    # The quick way, one binding call that makes C: an Array as its address and shape, any
    # other operand as itself (the binding reads it). It declines with None what needs the
    # checked way: another dtype or ndim, a copy, an empty or mismatched or threaded product.
    a_in: object  # an address, or the operand itself
    b_in: object
    if type(a) is Array and a._dtype == "<f4" and len(a_shape := a._shape) == 2:
        a_in, ar, ac = a._addr, a_shape[0], a_shape[1]
    else:
        a_in, ar, ac = a, 0, 0
    if type(b) is Array and b._dtype == "<f4" and len(b_shape := b._shape) == 2:
        b_in, br, bc = b._addr, b_shape[0], b_shape[1]
    else:
        b_in, br, bc = b, 0, 0
    threads = _threads._threads or num_threads()  # the read value, else read (or refused)
    try:
        r = (_raw or _load()).matmul(
            a_in, b_in, _ZERO_F32, ar, ac, br, bc, ta, tb, 0 if threads == 1 else _SPLIT_MACS
        )
    except Exception as exc:
        raise _backend.translate(exc) from None
    if r is None:
        return _checked(a, b, ta, tb)
    buf, addr, m, n = r
    return _result_view(buf, (m, n), addr, m * n)


def _checked(a: BufferLike, b: BufferLike, ta: bool, tb: bool) -> Array:
    """`matmul` through the intake: operands borrowed, copied (strided) or refused by name;
    empty products; rows split over MOJOLEARN_NUM_THREADS threads."""
    # The keep-alives (operands, DLPack capsules or C-order copies) live until the call ends.
    a_kept, a_at, a_shape = f32(a, "a", 2)
    b_kept, b_at, b_shape = f32(b, "b", 2)
    threads = num_threads()
    k, m = a_shape if ta else a_shape[::-1]
    n, kb = b_shape if tb else b_shape[::-1]
    if k != kb:
        raise ValueError(
            f"matmul: contracted dimensions disagree: a has shape {a_shape}"
            f"{' (transposed)' if ta else ''} and b has shape {b_shape}"
            f"{' (transposed)' if tb else ''}, so op(a) is {m}x{k} but op(b) is {kb}x{n}"
        )
    buf = _ZERO_F32 * (m * n)
    out = _result_view(buf, (m, n), buf.buffer_info()[0], m * n)
    if m == 0 or n == 0 or k == 0:
        return out  # the empty sum is +0.0 (and zero-size buffers have no address to pass)
    raw = _raw if _raw is not None else _load()
    parts = min(threads, m, max(1, m * n * k // _MIN_MACS_PER_THREAD))
    try:
        if parts == 1:
            raw.neural_gemm([a_at, b_at, out._addr], [m, n, k, int(ta), int(tb), 0, 0, m])
        else:
            _run_split(
                raw.neural_gemm,
                [a_at, b_at, out._addr],
                m,
                n,
                k,
                ta,
                tb,
                parts,
                (buf, a_kept, b_kept),
            )
    except Exception as exc:
        raise _backend.translate(exc) from None
    return out


def _run_split(
    entry: _Entry,
    addrs: list[int],
    m: int,
    n: int,
    k: int,
    ta: bool,
    tb: bool,
    parts: int,
    keep_alive: object,
) -> None:
    """Rows of C in `parts` contiguous blocks, the first on this thread, the rest pooled.
    Every block is waited for before this returns or raises (KeyboardInterrupt included), and
    each job holds `keep_alive` (the result and operand buffers), so no worker ever writes to
    freed memory."""
    bounds = [m * i // parts for i in range(parts + 1)]
    jobs = [[m, n, k, int(ta), int(tb), 0, bounds[i], bounds[i + 1]] for i in range(parts)]
    pool = _executor()
    futures: list[Future[object]] = []
    first: BaseException | None = None
    try:
        for params in jobs[1:]:
            futures.append(pool.submit(_job, entry, addrs, params, keep_alive))
        entry(addrs, jobs[0])
    except Exception as exc:
        first = exc
    finally:
        for future in futures:
            err = future.exception()  # waits
            if first is None and err is not None:
                first = err
    if first is not None:
        raise first


def _job(entry: _Entry, addrs: list[int], params: list[int], keep_alive: object) -> object:
    """One pooled block; `keep_alive` rides along so the buffers outlive the job."""
    return entry(addrs, params)


def _executor() -> ThreadPoolExecutor:
    """One pool per process, sized once from MOJOLEARN_NUM_THREADS (never replaced, so a
    concurrent caller's submissions never meet a pool that is shutting down)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(1, num_threads() - 1), thread_name_prefix="mojolearn-gemm"
            )
        return _pool
