"""What every optimizer is built from: the argument checks (torch's rules and words), the
frozen `Hyper` record each constructor builds once, binding-owned memory (`_Buf`), the lock
decorator, and `_Fields`, the attributes the collaborators share.

`mojolearn.optim` assembles `_Optimizer` from these, `state` (the state_dict) and `resident`
(device residency). Every per-instance value lives in the instance's `__dict__`: `set_params`
rebuilds through the constructor and swaps that dict, keeping the lock.
"""

from __future__ import annotations

import array as _pyarray
import math
import numbers
import weakref

from .._buffers.array import Array
from .._runtime import backend as _backend
from .._runtime.portable import f32_in_range, round_f32

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Iterable
    from typing import Any, NoReturn, TypeVar

    from .._buffers.types import LRSchedule, PyArray

    _F = TypeVar("_F", bound=Callable[..., Any])

_REFUSED = ("foreach", "fused", "capturable", "differentiable", "amsgrad")
# The update rule, as `optim_step` takes it (its first param).
_ADAM, _ADAMW, _SGD = 0, 1, 2
# Steps travel to the binding as float64: beyond 2**53 a count would no longer be exact.
STEP_F64_EXACT = (1 << 53) - 1


def _binding() -> Any:
    return _backend.binding()


def _locked(method: _F) -> _F:
    """Serialize a method on the optimizer's lock: a step releases the GIL inside the binding,
    so two threads must never run steps, state swaps or device copies of one optimizer at once
    (a swap frees the memory a running step writes)."""

    def run(self: _Fields, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    run.__name__, run.__doc__, run.__wrapped__ = method.__name__, method.__doc__, method  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]  # `method`'s signature, behind the lock


# -- argument checks ---------------------------------------------------------------------------


def _refuse_kwargs(cls: str, kwargs: dict[str, Any]) -> None:
    for key in kwargs:
        if key in _REFUSED:
            raise TypeError(
                f"{cls}: {key!r} is not supported (mojolearn has one fixed, "
                f"single-tensor-per-call implementation)"
            )
        raise TypeError(f"{cls}() got an unexpected keyword argument {key!r}")


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _f32_hyper(
    name: str,
    value: object,
    lo: float = 0.0,
    lo_open: bool = False,
    hi: float = math.inf,
    hi_open: bool = True,
) -> float:
    """`value` as given (binary64: profile v2 forms each step's scalars from it), checked
    against [lo, hi) (or the open variants) before AND after rounding to float32, as the
    per-element update uses the rounded value: 0.99999999 rounds to 1.0 and 1e-50 to 0.0,
    both refused by name, in torch's words."""
    v = _real(name, value)
    code = f32_in_range(v, lo, hi, lo_open, hi_open)
    if code:
        rng = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open or hi == math.inf else ']'}"
        why = f" (it rounds to {round_f32(v)!r} in float32)" if code == 2 else ""
        raise ValueError(f"Invalid {name}: {value!r}{why}; expected a finite value in {rng}")
    return v


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _betas(betas: object) -> tuple[object, object]:
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"Invalid betas: {betas!r}; expected a pair (beta1, beta2)")
    return betas[0], betas[1]


def _accumulation_steps(value: int) -> int:
    ok = type(value) is int and value >= 1 and value & (value - 1) == 0
    if not ok:
        raise ValueError(
            f"Invalid accumulation_steps: {value!r}; expected an int power of two "
            f">= 1 (1, 2, 4, ...)"
        )
    return value


def _lr_schedule(value: LRSchedule | None) -> LRSchedule | None:
    if value is not None and not callable(getattr(value, "lr_at", None)):
        raise TypeError(
            f"lr_schedule must have a one-based lr_at(t) method, got {type(value).__name__}"
        )
    return value


def _resident_flag(value: object) -> bool:
    """`resident` as a flag: None (the default) and True keep the state in binding memory."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"resident must be None or a bool, got {type(value).__name__}")
    return value is not False


def _norm_type(value: object) -> float:
    """`norm_type` as the binding takes it: +inf, or a finite p >= 1 rounded to float32 (the
    per-element `p · log32(|g|)` and the root use the rounded value; 1 and 2 pick their own
    sums by it)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"clip_grad_norm_: norm_type must be a real number (a p >= 1, or float('inf') "
            f"for the max-abs norm), got {type(value).__name__}"
        )
    p = float(value)
    if p == math.inf:
        return p
    code = f32_in_range(p, 1.0)  # NaN and -inf are outside
    if code:
        why = " (it rounds to inf in float32)" if code == 2 else ""
        raise ValueError(
            f"Invalid norm_type: {value!r}{why}; expected a p-norm order p >= 1 (finite) or "
            f"float('inf')"
        )
    return round_f32(p)  # type: ignore[no-any-return]  # a float


# -- the hyperparameter record -----------------------------------------------------------------


class Hyper:
    """What an optimizer is, fixed by its constructor (optax and torch keep the same record):
    the update rule and its constants as given (binary64: each step forms its float32 scalars
    from them, docs/ARITHMETIC.md profile v2), in the order `optim_step` takes them. The rate
    is not here: the `lr` setter and a schedule change it. Frozen: other values make another
    optimizer (`set_params` rebuilds through the constructor)."""

    __slots__ = (
        "kind",
        "beta1",
        "beta2",
        "eps",
        "weight_decay",
        "momentum",
        "dampening",
        "nesterov",
        "maximize",
    )
    kind: int
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    momentum: float
    dampening: float
    nesterov: bool
    maximize: bool

    def __init__(
        self,
        kind: int,
        *,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        momentum: float,
        dampening: float,
        nesterov: bool,
        maximize: bool,
    ) -> None:
        values = (kind, beta1, beta2, eps, weight_decay, momentum, dampening, nesterov, maximize)
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Hyper is frozen: {name} is fixed by the optimizer's constructor")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Hyper is frozen: {name} is fixed by the optimizer's constructor")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Hyper({fields})"


# -- binding-owned or host memory ---------------------------------------------------------------


def _addresses(values: Iterable[int]) -> PyArray:
    return _pyarray.array("q", values)


class _Buf:
    """n float32 of zero-filled working memory: binding-owned (resident) or an owned Array."""

    n: int
    resident: bool
    addr: int
    array: Array | None

    def __init__(self, n: int, resident: bool) -> None:
        self.n = n
        self.resident = resident
        if resident:
            b = _binding()
            self.addr = b.optim_resident_alloc([], [n])
            self._free: Any = weakref.finalize(self, b.raw.optim_resident_free, [self.addr], [])
            self.array = None
        else:
            self.array = Array._wrap(_pyarray.array("f", bytes(4 * max(n, 1))), (max(n, 1),), "<f4")
            self.addr = self.array._addr

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        # A copy would share (and later double-free) the binding-owned memory.
        raise TypeError(
            "optimizer state cannot be copied or pickled directly; use "
            "state_dict() / load_state_dict()"
        )

    def at(self, offset: int) -> int:
        return self.addr + 4 * offset

    def download(self, offset: int = 0, n: int | None = None) -> Array:
        n = self.n - offset if n is None else n
        out = Array._wrap(_pyarray.array("f", bytes(4 * n)), (n,), "<f4")
        _copy(out._addr, self.at(offset), n)
        return out

    def upload(self, src_addr: int, offset: int, n: int) -> None:
        _copy(self.at(offset), src_addr, n)


def _copy(dst: int, src: int, n: int) -> None:
    if n > 0:
        _binding().optim_copy([dst, src], [n])


# -- what the collaborators share ---------------------------------------------------------------


class _Fields:
    """The attributes `_Optimizer._setup` sets and its collaborators (`state`, `resident`) read:
    annotations only, so no collaborator holds state outside the instance's `__dict__`."""

    _lock: threading.RLock
    _hyper: Hyper
    _params: list[Array]  # the parameters, as Arrays sharing the caller's memory
    _objects: list[Any]  # the parameters as given
    _shapes: list[tuple[int, ...]]
    _sizes: list[int]
    _offsets: list[int]  # of each tensor in the flat state buffers
    _n_total: int
    _resident: bool
    _m: _Buf  # Adam's first moment, SGD's momentum
    _v: _Buf  # Adam's second moment
    _flags: Array  # SGD's buf_initialized, one int32 per tensor
    _step: Array  # the step count, one int64 the binding writes when it commits
    _pdev: _Buf | None  # device-resident parameters (params_to_device)
    _gdev: _Buf | None  # the device gradient (grads_to_device)
