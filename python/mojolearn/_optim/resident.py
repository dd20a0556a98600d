"""Device residency: the parameters (and a gradient) kept in binding-owned memory between
steps, so `step_device` updates them with no host copy of parameters or moments. On a GPU
vendor that memory is host-side too: the optimizer math runs on the host in every build.
`DeviceArray` is a copy of one resident tensor (public as `mojolearn.training.DeviceArray`)."""

from __future__ import annotations

from .._runtime import backend as _backend
from .base import _Buf, _copy, _Fields, _locked

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TypeVar

    from .._buffers.array import Array
    from .._buffers.types import Buffers

    _Opt = TypeVar("_Opt", bound="_Resident")


class DeviceArray:
    """A float32 tensor in binding-owned memory (a copy), from `param_device(j)`.

    Attributes:
        shape: the tensor's shape.
        dtype: "float32".
        vendor: the binding's vendor ('cpu', 'cuda' or 'hip').
    """

    shape: tuple[int, ...]
    dtype: str
    vendor: str

    def __init__(self, buf: _Buf, shape: Sequence[int], vendor: str) -> None:
        """Wrap memory the optimizer copied (`param_device` makes these; not user code).

        Args:
            buf: the binding-owned copy.
            shape: its shape.
            vendor: the binding's vendor.
        """
        self._buf = buf
        self.shape = tuple(shape)
        self.dtype = "float32"
        self.vendor = vendor

    @property
    def size(self) -> int:
        """The number of values."""
        return self._buf.n

    def to_host(self) -> Array:
        """Copy the tensor to host memory.

        Returns:
            A new `mojolearn.Array` with this tensor's values and shape.
        """
        return self._buf.download().reshape(self.shape)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype='float32', vendor={self.vendor!r})"


class _Resident(_Fields):
    """The device half of an optimizer (a mixin of `_Optimizer`): residency flags and copies;
    the step itself is `_Optimizer._run` on the resident addresses."""

    if TYPE_CHECKING:  # `_Optimizer` defines these

        def _grads(
            self, grads: Buffers, name: str, writable: bool
        ) -> tuple[list[Any], list[int]]: ...

        def _max_norm(self, max_norm: float | None) -> float | None: ...

        def _run(self, g_addrs: list[int], max_norm: float | None) -> float | None: ...

        def _wrote_params(self) -> None: ...

    @property
    def resident_(self) -> bool:
        """True when the moments live in binding-owned (device) memory."""
        return self._resident

    def params_resident_available(self) -> bool:
        """Whether `params_to_device` works on this build.

        Returns:
            True (binding-owned memory exists on every build).
        """
        return True

    @_locked
    def params_to_device(self: _Opt) -> _Opt:
        """Copy the parameters into binding-owned memory and keep them there.

        `step_device` then neither uploads nor downloads them. Call again after editing the
        host arrays.

        Returns:
            self.
        """
        if self._pdev is None:
            self._pdev = _Buf(self._n_total, True)
        for arr, off, n in zip(self._params, self._offsets, self._sizes):
            self._pdev.upload(arr._addr, off, n)
        return self

    def _need_pdev(self, what: str) -> None:
        if self._pdev is None:
            raise RuntimeError(
                f"{what}: the parameters are not on the device; call params_to_device() first"
            )

    @_locked
    def params_to_host(self) -> list[Any]:
        """Copy the device parameters into the caller's arrays (they stay resident).

        Returns:
            The parameter objects as given to the constructor, now holding the values.

        Raises:
            RuntimeError: `params_to_device` was not called.
        """
        self._need_pdev("params_to_host")
        self._sync_params_to_host()
        return self._objects

    @_locked
    def param_device(self, j: int) -> DeviceArray:
        """A device copy of one resident parameter.

        Args:
            j: the parameter's index in `params`.

        Returns:
            A `DeviceArray` holding a copy of its resident values.

        Raises:
            RuntimeError: `params_to_device` was not called.
            TypeError: `j` is not an int.
            IndexError: `j` is out of range.
        """
        self._need_pdev("param_device")
        if isinstance(j, bool) or not isinstance(j, int):
            raise TypeError(f"param_device(j): j must be an int, got {type(j).__name__}")
        if not 0 <= j < len(self._params):
            raise IndexError(f"param_device(j): j={j} outside [0, {len(self._params)})")
        buf = _Buf(self._sizes[j], True)
        _copy(buf.addr, self._pdev.at(self._offsets[j]), self._sizes[j])  # type: ignore[union-attr]
        return DeviceArray(buf, self._shapes[j], _backend.vendor_used())

    @_locked
    def grads_to_device(self: _Opt, grads: Buffers) -> _Opt:
        """Copy a gradient list into the device gradient buffer, for `step_device()`.

        Args:
            grads: float32 buffers matching `params`.

        Returns:
            self.
        """
        keeps, addrs = self._grads(grads, "grads", writable=False)
        if self._gdev is None:
            self._gdev = _Buf(self._n_total, True)
        for addr, off, n in zip(addrs, self._offsets, self._sizes):
            self._gdev.upload(addr, off, n)
        return self

    @_locked
    def grads_to_host(self, grads: Buffers) -> Buffers:
        """Copy the device gradient (clipped, if the last device step clipped) into `grads`.

        Args:
            grads: writable float32 buffers matching `params`.

        Returns:
            `grads`.

        Raises:
            RuntimeError: there is no device gradient yet.
        """
        if self._gdev is None:
            raise RuntimeError("grads_to_host: no device gradient; call grads_to_device first")
        keeps, addrs = self._grads(grads, "grads", writable=True)
        for addr, off, n in zip(addrs, self._offsets, self._sizes):
            _copy(addr, self._gdev.at(off), n)
        return grads

    @_locked
    def step_device(
        self, grads: Buffers | None = None, max_norm: float | None = None
    ) -> float | None:
        """`step` on the device-resident parameters.

        Args:
            grads: used directly and copied into the device gradient buffer after the step
                (scaled in place on the host when clipping, as `step`); None: the device
                gradient from `grads_to_device` is used and clipped there.
            max_norm: as in `step`.

        Returns:
            What `step` returns.

        Raises:
            RuntimeError: `params_to_device` was not called, or no gradient is available.
        """
        self._need_pdev("step_device")
        max_norm = self._max_norm(max_norm)
        if grads is None:
            if self._gdev is None:
                raise RuntimeError(
                    "step_device: no device gradient; pass grads or call grads_to_device first"
                )
            return self._run([self._gdev.at(o) for o in self._offsets], max_norm)
        keeps, addrs = self._grads(grads, "grads", writable=max_norm is not None)
        result = self._run(addrs, max_norm)
        if self._gdev is None:
            self._gdev = _Buf(self._n_total, True)
        for addr, off, n in zip(addrs, self._offsets, self._sizes):
            self._gdev.upload(addr, off, n)
        return result

    def _sync_params_to_host(self) -> None:
        for arr, off, n in zip(self._params, self._offsets, self._sizes):
            _copy(arr._addr, self._pdev.at(off), n)  # type: ignore[union-attr]  # callers check
        self._wrote_params()
