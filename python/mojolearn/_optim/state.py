"""An optimizer's resumable state, torch's way: `state_dict()` copies the step count, the
moments and SGD's per-tensor `buf_initialized` flags; `load_state_dict()` checks every field
(torch's key names, the sizes of this optimizer, finite values, integer flags) before it
publishes fresh buffers in one go. A refused state changes nothing."""

from __future__ import annotations

import array as _pyarray

from .._buffers.array import Array
from .._buffers.formats import dtype_name
from .._buffers.intake import f32_tensor, probe
from .base import _SGD, STEP_F64_EXACT, _binding, _Buf, _Fields, _locked, _real

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

_KEYS = frozenset(("t", "exp_avg", "exp_avg_sq", "buf_initialized"))


class _StateDict(_Fields):
    """The state_dict half of an optimizer (a mixin of `_Optimizer`)."""

    if TYPE_CHECKING:

        @property
        def t(self) -> int: ...  # `_Optimizer.t`

    @property
    @_locked
    def exp_avg(self) -> Array:
        """Adam's first moment / SGD's momentum buffer: a flat float32 `Array` copy."""
        return self._m.download()

    @property
    @_locked
    def exp_avg_sq(self) -> Array:
        """Adam's second moment (zeros for SGD): a flat float32 `Array` copy."""
        return self._v.download()

    @property
    @_locked
    def buf_initialized(self) -> Array:
        """Per-tensor flags (int32 `Array` copy): 1 once a tensor's momentum buffer holds
        state; SGD's first step with momentum copies the gradient in instead."""
        return self._flags.copy()

    @_locked
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, as copies.

        Returns:
            {"t": the step count, "exp_avg", "exp_avg_sq": flat float32 Arrays,
            "buf_initialized": an int32 Array, one flag per tensor}.
        """
        return {
            "t": self.t,
            "exp_avg": self._m.download(),
            "exp_avg_sq": self._v.download(),
            "buf_initialized": self._flags.copy(),
        }

    @_locked
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict`; the optimizer keeps its own copy.

        Args:
            state: a `state_dict()` (its arrays may be lists or float32 buffers).

        Raises:
            TypeError: `state` is not a dict, or a field has the wrong type.
            ValueError: missing or unknown keys, wrong lengths or values. Every field is
                checked before anything changes.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing, extra = _KEYS - set(state), set(state) - _KEYS
        if missing:
            raise ValueError(f"state is missing {sorted(missing)}")
        if extra:
            raise ValueError(f"state has unknown keys {sorted(extra)}")
        t = state["t"]
        if type(t) is not int or not 0 <= t <= STEP_F64_EXACT:
            raise ValueError(f"state['t'] must be an int in [0, {STEP_F64_EXACT}], got {t!r}")
        m = _state_f32(state["exp_avg"], "exp_avg", self._n_total)
        v = _state_f32(state["exp_avg_sq"], "exp_avg_sq", self._n_total)
        if self._hyper.kind != _SGD and v._size and min(v.tolist()) < 0:
            raise ValueError("state['exp_avg_sq'] holds a negative value; a second moment is >= 0")
        flags = _state_flags(state["buf_initialized"], len(self._sizes))
        # Fill fresh buffers, then publish them with plain attribute stores (no call in
        # between, so no interrupt can land between them on CPython 3.11+).
        new_m, new_v = _Buf(self._n_total, self._resident), _Buf(self._n_total, self._resident)
        new_m.upload(m._addr, 0, self._n_total)
        new_v.upload(v._addr, 0, self._n_total)
        new_flags = Array._wrap(_pyarray.array("i", flags), (len(flags),), "<i4")
        new_step = Array._wrap(_pyarray.array("q", [t]), (1,), "<i8")
        self._m, self._v, self._flags, self._step = new_m, new_v, new_flags, new_step


def _state_f32(value: object, name: str, n: int) -> Array:
    if isinstance(value, (list, tuple)):
        for x in value:
            _real(f"state['{name}'] values", x)
        arr = Array.from_list([float(x) for x in value], "<f4")
    else:
        arr, _ = f32_tensor(value, f"state['{name}']", writable=False)
    if arr._size != n:
        raise ValueError(f"state['{name}'] holds {arr._size} values, expected {n}")
    if n and _binding().all_finite([arr._addr], [n]) != 1:
        raise ValueError(f"state['{name}'] holds a NaN or an infinity")
    return arr


def _state_flags(value: Any, n: int) -> list[int]:
    if isinstance(value, (list, tuple)):
        flags = list(value)
    else:
        try:
            pb = probe(value)
        except TypeError:
            raise TypeError(
                f"state['buf_initialized'] must be a list or an int32 buffer, got "
                f"{type(value).__name__}"
            ) from None
        if dtype_name(pb.format, pb.itemsize) not in ("int32", "int64", "uint8", "int8"):
            raise TypeError(
                f"state['buf_initialized'] must hold integers, got "
                f"{dtype_name(pb.format, pb.itemsize)}"
            )
        flags = (
            Array.from_buffer(value).tolist()
            if pb.itemsize in (4, 8)
            else list(memoryview(value).cast("B"))
        )
    if len(flags) != n:
        raise ValueError(
            f"state['buf_initialized'] has {len(flags)} flags, expected {n} (one per tensor)"
        )
    for f in flags:
        if type(f) is not int or f not in (0, 1):
            raise ValueError(f"state['buf_initialized'] flags must be 0 or 1, got {f!r}")
    return flags
