"""How caller memory is read: one binding call (`intake_read`, the CPython buffer protocol or a
DLPack capsule read in Mojo) per argument, for any exporter but `mojolearn.Array` (on Python
3.11 a Python class cannot export a buffer to C; `_intake` reads Arrays' own fields).

`read(obj, spec)` is the fast accept: (keep-alive, address, shape, itemsize) when `obj` is a
non-empty, C-contiguous CPU buffer meeting `spec`, else None (the caller then describes, copies,
converts or refuses). `describe(obj)` is the full `Layout`, or None when `obj` exports
nothing. torch tensors are read through torch's DLPack C exchange API (the tensor itself is
the keep-alive); other DLPack-only objects (JAX arrays) are exchanged once per call, and the
capsule returned as keep-alive holds the producer's memory until the caller drops it.

Only `_backend` is imported here: `_array` and `_intake` both build on this module.
"""

import sys
from collections import namedtuple

from . import _backend

Layout = namedtuple(
    "Layout", "format itemsize shape ndim c_contiguous readonly nbytes address device keep"
)

# Spec bits (mojo/bindings/entries/intake.mojo): dtype class, exact ndim, writable, capsule.
F32, LABELS, I32 = 1, 2, 3
WRITABLE, _CAPSULE = 256, 512
_CPU = 1


_ANY_NDIM = 15


def spec(kind, ndim=None, writable=False):
    return kind | (_ANY_NDIM if ndim is None else ndim) << 4 | (WRITABLE if writable else 0)


_raw = None
# _EXCHANGE: a torch tensor whose type has the DLPack C exchange API (torch >= 2.10), read by
# the binding itself; _TORCH: an older torch's, exported through its C exporter.
_BUFFER, _EXCHANGE, _TORCH, _DLPACK, _NONE = 0, 1, 2, 3, 4
_kinds = {}  # type -> how it exports (types are few; the dict never grows past them)


def _entry():
    global _raw
    _raw = _backend.reader()
    return _raw


def _kind(obj):
    """How objects of `obj`'s type export their memory, learnt from the first one seen: the
    buffer protocol first (NumPy arrays have both; theirs is the cheaper), else DLPack, with
    torch's C exporter called directly (its `Tensor.__dlpack__` wrapper costs ~4 µs in
    Python, the exporter ~0.3 µs)."""
    t = type(obj)
    kind = _kinds.get(t)
    if kind is None:
        torch = sys.modules.get("torch")
        if _exports_buffer(obj):
            kind = _BUFFER
        elif torch is not None and isinstance(obj, torch.Tensor):
            kind = _EXCHANGE if hasattr(t, "__dlpack_c_exchange_api__") else _TORCH
        elif hasattr(t, "__dlpack__"):
            kind = _DLPACK
        else:
            kind = _NONE
        if len(_kinds) < 256:
            _kinds[t] = kind
    return kind


_to_dlpack = None


def _torch_exporter():
    # Looked up once: the attribute chain, looked up per call, measured ~0.9 µs more a call.
    global _to_dlpack
    _to_dlpack = sys.modules["torch"].utils.dlpack.to_dlpack
    return _to_dlpack


def _exports_buffer(obj):
    # Asked of the type's protocol, not of this object's layout (a first NumPy array of 9
    # dimensions, which the binding declines, must not make every later one DLPack).
    try:
        memoryview(obj).release()
        return True
    except (TypeError, ValueError, BufferError):
        return False


def _capsule(obj, kind):
    """The DLPack capsule of a DLPack-only object, or None when it refuses (the slow path
    reports why). A torch tensor that requires grad is left to the slow path too."""
    if kind == _TORCH or kind == _EXCHANGE:
        if obj.requires_grad:
            return None
        try:
            return (_to_dlpack or _torch_exporter())(obj)
        except (RuntimeError, BufferError, ValueError, TypeError):
            return None
    try:
        try:
            return obj.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer from before DLPack 1.0
            return obj.__dlpack__()
    except (RuntimeError, BufferError, ValueError, TypeError):
        return None


def read(obj, spec_):
    """(keep, address, shape, itemsize) of `obj` when it meets `spec_` zero-copy, else None."""
    raw = _raw or _entry()
    kind = _kinds.get(type(obj))
    if kind is None:
        kind = _kind(obj)
    if kind == _BUFFER or kind == _EXCHANGE:
        r = raw(obj, spec_)
        return None if r is None else (obj, r[0], r[1], r[2])
    if kind == _NONE:
        return None
    cap = _capsule(obj, kind)
    if cap is None:
        return None
    r = raw(cap, spec_ | _CAPSULE)
    return None if r is None else (cap, r[0], r[1], r[2])


def describe(obj):
    """The `Layout` of `obj`'s memory, or None when it exports no buffer and no DLPack."""
    raw = _raw or _entry()
    kind = _kind(obj)
    keep = obj
    if kind in (_EXCHANGE, _TORCH, _DLPACK):
        keep = _capsule(obj, kind)
        r = None if keep is None else raw(keep, _CAPSULE)
    elif kind == _BUFFER:
        r = raw(obj, 0)
    else:
        r = None
    if r is None:
        return None
    addr, shape, itemsize, fmt, readonly, contiguous, device = r
    size = 1
    for d in shape:
        size *= d
    return Layout(
        fmt,
        itemsize,
        shape,
        len(shape),
        contiguous,
        readonly,
        size * itemsize,
        addr if size else 0,
        device,
        keep,
    )


def is_dlpack_only(obj):
    return _kind(obj) in (_EXCHANGE, _TORCH, _DLPACK)
