"""How caller memory is read: one binding call (`intake_read`, the CPython buffer protocol or a
DLPack capsule read in Mojo) per argument, for any exporter but `mojolearn.Array` (on Python
3.11 a Python class cannot export a buffer to C; `_intake` reads Arrays' own fields).

`read(obj, spec)` is the fast accept: (keep-alive, address, shape, itemsize) when `obj` is a
non-empty, C-contiguous CPU buffer meeting `spec`, else None (the caller then describes, copies,
converts or refuses). The keep-alive pins the memory for as long as the caller holds it: for a
buffer-protocol object, a memoryview holding its export (array.array and bytearray then refuse
to resize or free it: BufferError); for a torch tensor, whose storage nothing pins (`resize_`
frees it), a C-order copy made here with the GIL held when the caller asks (`pin`; else, and
for a writable read, the tensor: its owner must not resize it meanwhile); for other
DLPack-only objects (JAX arrays), the
capsule, which holds the producer's memory until the caller drops it. torch tensors are read
through torch's DLPack C exchange API, other DLPack-only objects exchanged once per call.
`copy(obj, spec)` is a C-order copy made in the binding (any strides; integers converted to
int32 for I32). `describe(obj)` is the full `Layout`, or None when `obj` exports nothing.

How a type exports (`_kind`) is learnt once per type, from the type alone (its buffer slot,
torch, `__dlpack__`), never from an object's state: a first object that is refused (a
datetime64 array, a deleted JAX array) decides nothing for the next one.

Nothing of the package is imported here (`array` and `intake` build on this module): the
binding's entry is handed in by `_runtime.backend` when it is imported (`provide`), since the
buffers sit below the runtime.
"""

import sys
from collections import namedtuple

Layout = namedtuple(
    "Layout", "format itemsize shape ndim c_contiguous readonly nbytes address device keep"
)

# Spec bits (mojo/bindings/entries/intake.mojo): dtype class, exact ndim, writable, capsule,
# a keep-alive holding the export, a copy, the type's buffer slot.
F32, LABELS, I32 = 1, 2, 3
WRITABLE, _CAPSULE, _HOLD, _COPY, _CHECK = 256, 512, 1024, 2048, 4096
_CPU = 1


_ANY_NDIM = 15


def spec(kind, ndim=None, writable=False):
    return kind | (_ANY_NDIM if ndim is None else ndim) << 4 | (WRITABLE if writable else 0)


_raw = None
_host_entry = None  # the runtime's `host_entry(name)`, handed in by provide()
_translate = None  # the runtime's `translate(exc)`: a binding error as its typed exception
# _EXCHANGE: a torch tensor whose type has the DLPack C exchange API (torch >= 2.10), read by
# the binding itself; _TORCH: an older torch's, exported through its C exporter.
_BUFFER, _EXCHANGE, _TORCH, _DLPACK, _NONE = 0, 1, 2, 3, 4
_kinds = {}  # type -> how it exports (types are few; the dict never grows past them)


def provide(host_entry, translate):
    """Hand in the runtime's loader of host-code entries and its error translation (called once,
    when `_runtime.backend` is imported)."""
    global _host_entry, _translate
    _host_entry, _translate = host_entry, translate


def host_entry(name):
    """A raw host-code entry of the binding (`intake_read`, `array_take`), without fixing the
    process's numeric mode."""
    return _host_entry(name)


def translate(exc):
    """The typed exception a binding error stands for."""
    return _translate(exc)


def _entry():
    global _raw
    _raw = host_entry("intake_read")
    return _raw


def _kind(obj):
    """How objects of `obj`'s type export their memory, from the type alone (cached per
    type): the buffer protocol first (NumPy arrays have both; theirs is the cheaper), else
    DLPack, with torch's C exporter called directly (its `Tensor.__dlpack__` wrapper costs
    ~4 µs in Python, the exporter ~0.3 µs)."""
    t = type(obj)
    kind = _kinds.get(t)
    if kind is None:
        torch = sys.modules.get("torch")
        if (_raw or _entry())(obj, _CHECK):  # the type's buffer slot, as the binding reads
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


def read(obj, spec_, pin=False):
    """(keep, address, shape, itemsize) of `obj` when it meets `spec_`, else None; the keep
    pins the memory (the module docstring says how, per kind; a torch tensor is copied only
    with `pin`: the optimizers read gradients in place, and check their addresses apart)."""
    raw = _raw or _entry()
    kind = _kinds.get(type(obj))
    if kind is None:
        kind = _kind(obj)
    if kind == _BUFFER:
        r = raw(obj, spec_ | _HOLD)
        return None if r is None else (r[3], r[0], r[1], r[2])
    if kind == _EXCHANGE:
        if spec_ & WRITABLE or not pin:  # updated in place, or not pinned: read in place
            r = raw(obj, spec_)
            return None if r is None else (obj, r[0], r[1], r[2])
        r = raw(obj, spec_ | _COPY)
    elif kind == _NONE:
        return None
    else:
        cap = _capsule(obj, kind)
        if cap is None:
            return None
        if kind == _DLPACK or spec_ & WRITABLE or not pin:
            r = raw(cap, spec_ | _CAPSULE)
            return None if r is None else (cap, r[0], r[1], r[2])
        r = raw(cap, spec_ | _CAPSULE | _COPY)  # an older torch's capsule: copied, as above
    if r is None or type(r) is int:  # declined, or a value outside int32: the slow path says
        return None
    return r[3], r[0], r[1], r[2]


def c_order(obj, spec_, declined=False):
    """(keep, address, shape, itemsize) of `obj` in C order: read in place as `read` with `pin`
    does, else a C-order copy made in the binding when its layout is one `spec_` copies (any
    strides; integers converted to int32 for I32); None when neither (the caller describes it
    to say why). `declined`: a step entry of the binding has already declined to read `obj`
    in place by the same rule, so a buffer goes straight to the copy."""
    kind = _kinds.get(type(obj))
    if kind is None:
        kind = _kind(obj)
    if kind == _BUFFER:
        if not declined:
            r = read(obj, spec_, True)
            if r is not None:
                return r
        r = (_raw or _entry())(obj, spec_ | _COPY)
    elif kind == _DLPACK:  # the step entries read no capsule: try it in place first
        cap = _capsule(obj, kind)
        if cap is None:
            return None
        raw = _raw or _entry()
        r = raw(cap, spec_ | _CAPSULE)
        if r is not None:
            return cap, r[0], r[1], r[2]
        r = raw(cap, spec_ | _CAPSULE | _COPY)
    else:  # a torch tensor is read pinned, which is a copy (any strides) already
        return None if kind == _NONE else read(obj, spec_, True)
    return None if r is None or type(r) is int else (r[3], r[0], r[1], r[2])


def copy(src, spec_, capsule=False):
    """(bytearray, address, shape, itemsize) of a C-order copy of `src` (a buffer-protocol
    object, a torch tensor, or with `capsule` a DLPack capsule), made in the binding: float32
    for F32, int32/int64 as they are for LABELS, any integer converted to int32 for I32. An
    int: the first value outside int32. None when the layout is not one the spec copies
    (another dtype, empty, not on the CPU, a null address) or memory runs out."""
    r = (_raw or _entry())(src, spec_ | _COPY | (_CAPSULE if capsule else 0))
    return r if r is None or type(r) is int else (r[3], r[0], r[1], r[2])


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


def is_torch(obj):
    return _kind(obj) in (_EXCHANGE, _TORCH)
