"""DLPack both ways for `mojolearn.Array`: CPU memory, C-contiguous, float32 / float64 / int32 /
int64 (the Array dtypes).

Export (`Array.__dlpack__`): a capsule holding a `DLManagedTensor` (legacy, name "dltensor") or,
when the consumer asks for `max_version >= (1, 0)`, a `DLManagedTensorVersioned` ("dltensor_
versioned", with the read-only flag for read-only Arrays). The capsule keeps the Array alive
until the consumer calls the deleter (or, never consumed, until the capsule goes), so
`numpy.from_dlpack(a)` and `torch.from_dlpack(a)` share `a`'s memory and stay valid after
the last name of `a` is deleted.

Import (`import_parts`, wrapped by `array.from_dlpack`): an Array viewing the producer's
memory, which it keeps alive (the producer's deleter runs when the Array and every view of it
are gone). Non-CPU devices,
strided layouts and other dtypes are refused with a message that says which.

The structs follow dlpack.h (v1.0): ctypes is used only here, once per exchange, never on a
training step.
"""

from __future__ import annotations

import ctypes
import weakref

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from .array import Array
    from .types import DType, SupportsDLPack

_CPU = 1
_DEVICE_NAMES = {
    1: "CPU",
    2: "CUDA",
    3: "CUDA host",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    9: "VPI",
    10: "ROCm",
    11: "ROCm host",
    13: "CUDA managed",
    14: "oneAPI",
}
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_CODE_NAMES = {
    _INT: "int",
    _UINT: "uint",
    _FLOAT: "float",
    _BFLOAT: "bfloat",
    _COMPLEX: "complex",
    _BOOL: "bool",
}
_DTYPES: dict[DType, tuple[int, int]] = {
    "<f4": (_FLOAT, 32),
    "<f8": (_FLOAT, 64),
    "<i4": (_INT, 32),
    "<i8": (_INT, 64),
}
_FROM_DL = {v: k for k, v in _DTYPES.items()}
_READ_ONLY, _IS_COPIED = 1, 2
# Module constants: a capsule keeps the pointer to its name, never a copy of it.
_LEGACY, _VERSIONED = b"dltensor", b"dltensor_versioned"
_USED = {_LEGACY: b"used_dltensor", _VERSIONED: b"used_dltensor_versioned"}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_Managed._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_SetName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int

# Exported tensors by struct address: (struct, shape, strides, Array), until their deleter runs.
_LIVE: dict[int, tuple[ctypes.Structure, Any, Any, Array]] = {}


# ctypes' callback types are untyped, hence the two ignores.
@_DELETER  # type: ignore[untyped-decorator]
def _delete(address: int) -> None:
    _LIVE.pop(address, None)


@_CAPSULE_DESTRUCTOR  # type: ignore[untyped-decorator]
def _capsule_gone(capsule: int) -> None:
    # Still under its original name: nobody consumed it, so the tensor is ours to delete.
    for name in (_LEGACY, _VERSIONED):
        if _api.PyCapsule_IsValid(capsule, name):
            _LIVE.pop(_api.PyCapsule_GetPointer(capsule, name), None)
            return


def _check_pair(value: object, name: str, what: str) -> None:
    """None or a pair of ints (a tuple or list; IntEnum device types count), else TypeError
    naming the argument (the array API standard's types for max_version and dl_device)."""
    if value is None:
        return
    if not (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise TypeError(
            f"Array.__dlpack__: {name} must be None or a tuple {what} of two ints, got {value!r}"
        )


def export(
    arr: Array,
    stream: object = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> object:
    """The DLPack capsule of a mojolearn Array (see the module docstring)."""
    if stream is not None:
        raise BufferError(f"Array.__dlpack__: stream must be None for CPU memory, got {stream!r}")
    _check_pair(max_version, "max_version", "(major, minor)")
    _check_pair(dl_device, "dl_device", "(device_type, device_id)")
    if dl_device is not None and tuple(dl_device) != (_CPU, 0):
        raise BufferError(
            f"Array.__dlpack__: mojolearn Arrays live on the CPU (device (1, 0)); "
            f"dl_device={tuple(dl_device)!r} would need a copy to another device"
        )
    if copy not in (None, True, False):
        raise BufferError(f"Array.__dlpack__: copy must be None, True or False, got {copy!r}")
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    if copy:
        arr = arr.copy()
    if arr._readonly and not versioned:
        raise BufferError(
            "Array.__dlpack__: a read-only Array can only be exported to a "
            "consumer that accepts DLPack >= 1.0 (max_version), which carries "
            "the read-only flag"
        )
    code, bits = _DTYPES[arr._dtype]
    ndim = len(arr._shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*arr._shape)
    strides: Any  # the list, then the ctypes array of it
    strides, step = [], 1
    for d in reversed(arr._shape):
        strides.append(step)
        step *= d
    strides = (ctypes.c_int64 * max(ndim, 1))(*reversed(strides))
    managed = _ManagedVersioned() if versioned else _Managed()
    t = managed.dl_tensor
    # An empty Array has no address; DLPack wants a non-null pointer even for size 0.
    t.data = arr._addr or ctypes.addressof(shape)
    t.device = _Device(_CPU, 0)
    t.ndim = ndim
    t.dtype = _DataType(code, bits, 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.deleter = _delete
    if versioned:
        managed.version = _Version(1, 0)
        managed.flags = (_READ_ONLY if arr._readonly else 0) | (_IS_COPIED if copy else 0)
    address = ctypes.addressof(managed)
    _LIVE[address] = (managed, shape, strides, arr)
    return _api.PyCapsule_New(address, _VERSIONED if versioned else _LEGACY, _capsule_gone)


class _Producer:
    """Keeps an imported tensor's memory alive; runs the producer's deleter when collected."""

    raw: Any  # the ctypes array over the tensor's memory, kept with its producer

    def __init__(self, capsule: object, managed_address: int, versioned: bool) -> None:
        self.capsule = capsule  # renamed "used_...": its destructor leaves the tensor alone
        kind = _ManagedVersioned if versioned else _Managed
        managed = kind.from_address(managed_address)
        deleter = ctypes.cast(managed.deleter, ctypes.c_void_p).value
        if deleter:
            weakref.finalize(self, _DELETER(deleter), managed_address)


def _describe(dtype: _DataType) -> str:
    name = _CODE_NAMES.get(dtype.code, f"type code {dtype.code}")
    return f"{name}{dtype.bits}" + (f"x{dtype.lanes}" if dtype.lanes != 1 else "")


def import_parts(
    obj: SupportsDLPack,
) -> tuple[Any, _Producer, tuple[int, ...], DType, int, bool, int]:
    """A DLPack producer's CPU memory in raw parts, for `array.from_dlpack` to wrap:
    (the ctypes buffer, its keep-alive, shape, dtype, size, read-only, address). Raises the
    refusals that `mojolearn.from_dlpack` documents."""
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(
            f"from_dlpack: {type(obj).__name__} does not export DLPack (no __dlpack__ method)"
        )
    device_of = getattr(obj, "__dlpack_device__", None)
    if device_of is not None:
        kind, index = device_of()
        if int(kind) != _CPU:
            name = _DEVICE_NAMES.get(int(kind), f"device type {int(kind)}")
            raise ValueError(
                f"from_dlpack: the tensor lives on {name} device {index}; "
                f"mojolearn.from_dlpack takes CPU memory only (copy it to the CPU "
                f"first, e.g. tensor.cpu())"
            )
    try:
        try:
            capsule = obj.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer from before DLPack 1.0
            capsule = obj.__dlpack__()
    except (RuntimeError, BufferError, ValueError) as exc:
        raise TypeError(
            f"from_dlpack: {type(obj).__name__} refused to export its memory "
            f"({type(exc).__name__}: {str(exc)[:200]}); for a torch parameter pass "
            f"p.detach() (it shares the memory)"
        ) from None
    cap = ctypes.c_void_p(id(capsule))  # CPython: id() is the object's address
    versioned = bool(_api.PyCapsule_IsValid(cap, _VERSIONED))
    if not versioned and not _api.PyCapsule_IsValid(cap, _LEGACY):
        raise ValueError("from_dlpack: __dlpack__ did not return an unused DLPack capsule")
    address = _api.PyCapsule_GetPointer(cap, _VERSIONED if versioned else _LEGACY)
    managed = (_ManagedVersioned if versioned else _Managed).from_address(address)
    t = managed.dl_tensor
    if t.device.device_type != _CPU:
        raise ValueError(
            f"from_dlpack: the tensor lives on "
            f"{_DEVICE_NAMES.get(t.device.device_type, t.device.device_type)}; "
            f"mojolearn takes CPU memory only"
        )
    dtype = _FROM_DL.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if dtype is None:
        raise ValueError(
            f"from_dlpack: dtype {_describe(t.dtype)} is not supported (float32, "
            f"float64, int32 or int64)"
        )
    shape = tuple(t.shape[i] for i in range(t.ndim))
    size, step = 1, 1
    for d in shape:
        size *= d
    if size and not t.data:
        raise ValueError(
            f"from_dlpack: the tensor has {size} elements (shape {shape}) but a null data "
            f"pointer: its memory is gone (e.g. a torch storage resized to 0)"
        )
    if t.strides and size > 1:
        for i in range(t.ndim - 1, -1, -1):
            if shape[i] != 1 and t.strides[i] != step:
                raise ValueError(
                    f"from_dlpack: the tensor is not C-contiguous (shape {shape}, "
                    f"strides {tuple(t.strides[j] for j in range(t.ndim))} in "
                    f"elements); copy it first (e.g. .contiguous() or "
                    f"numpy.ascontiguousarray)"
                )
            step *= shape[i]
    readonly = versioned and bool(managed.flags & _READ_ONLY)
    _api.PyCapsule_SetName(cap, _USED[_VERSIONED if versioned else _LEGACY])
    keeper = _Producer(capsule, address, versioned)
    data = (t.data or 0) + t.byte_offset
    itemsize = int(dtype[2])
    raw = (ctypes.c_char * (size * itemsize)).from_address(data) if size else b""
    keeper.raw = raw
    return raw, keeper, shape, dtype, size, readonly, data if size else 0
