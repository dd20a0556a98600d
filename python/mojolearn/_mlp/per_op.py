"""The per-operation path of the trainer core (`MOJOLEARN_MLP_FUSED=0`, a mixin of `MLPCore`):
the calls `_mlp/ops.steps` makes one kernel at a time, on host copies of the state, published
as the fused path publishes its own (the A/B partner of the fused step).
"""

from __future__ import annotations

from .._buffers.alloc import empty, zeros
from .._buffers.array import Array
from . import batches as _batches
from . import state as S
from . import steps as _steps
from .steps import _MODE_FORWARD, _MODE_TRAIN, _State, _translate

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Literal, TypeAlias, overload

    from .._buffers.types import BufferLike, TrainStepResult, TrainStepsResult
    from .core import MLPCore

    # The per-operation path's (new state or None, losses, logits, flat grads, input_grad).
    _Ops: TypeAlias = "tuple[_State | None, Array, Array, Array, Array | None]"


class PerOperation:
    """The per-operation path (a mixin of `MLPCore`)."""

    __slots__ = ()

    def _owned_batch(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, X: BufferLike, name: str = "X", stacked: bool = False
    ) -> Array:
        """X as an owned float32 (rows, inputs) copy, checked finite."""
        return _batches.owned_batch(X, self._API, self._spec.inputs, self._max_rows, name, stacked)  # type: ignore[no-any-return]

    def _labels(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, targets: BufferLike, rows: int
    ) -> Array:
        """targets as an int32 (rows,) Array of classes in range."""
        return _batches.targets(targets, rows, self._spec.classes, self._API)  # type: ignore[no-any-return]

    if TYPE_CHECKING:  # only a training run has a new state

        @overload
        def _run_ops(  # type: ignore[misc]  # self: the MLPCore this mixes into
            self: MLPCore,
            x: Array,
            y: Array,
            rows: int,
            mode: Literal[0, 1],
            k: int = 1,
            want_dx: bool = False,
        ) -> tuple[None, Array, Array, Array, Array | None]: ...

        @overload
        def _run_ops(  # type: ignore[misc]  # self: the MLPCore this mixes into
            self: MLPCore,
            x: Array,
            y: Array,
            rows: int,
            mode: Literal[2],
            k: int = 1,
            want_dx: bool = False,
        ) -> tuple[_State, Array, Array, Array, Array | None]: ...

    def _run_ops(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, x: Array, y: Array, rows: int, mode: int, k: int = 1, want_dx: bool = False
    ) -> _Ops:
        """The per-operation calls on a host copy of the state; returns
        (new _State or None, losses Array (k,), logits, flat grads, dx). Caller holds the lock."""
        from . import ops as _mlp_ops

        spec = self._spec
        st = self._st
        rates = self._rates(st.step + 1, k) if mode == _MODE_TRAIN else [self._config["lr"]]
        losses = zeros((k,))
        logits = empty((rows, spec.classes))
        grads = zeros((spec.total,))
        dx = empty((rows, spec.inputs)) if want_dx else zeros((1,))
        new = (
            _State(
                empty((spec.total,)),
                empty((spec.total,)),
                empty((spec.total,)),
                st.flags,
                st.step + k,
            )
            if mode == _MODE_TRAIN
            else None
        )
        try:
            _mlp_ops.steps(
                _steps._binding(),
                spec,
                x,
                y,
                rows,
                mode,
                k,
                st,
                new,
                losses,
                logits,
                grads,
                dx,
                want_dx,
                self._hyper(rates[0]),
                rates,
            )
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc, self._API) from None
        return new, losses, logits, grads, (dx if want_dx else None)

    def _train_step_ops(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, X: BufferLike, targets: BufferLike, want_dx: bool
    ) -> TrainStepResult:
        """`train_step` on the per-operation path. Caller holds the lock."""
        x = self._owned_batch(X)
        y = self._labels(targets, x.shape[0])
        new, losses, logits, grads, dx = self._run_ops(x, y, x.shape[0], _MODE_TRAIN, 1, want_dx)
        self._publish(new.params, new.m, new.v, new.step)
        result: TrainStepResult = {
            "step": new.step,
            "loss": losses._mv[0],
            "logits": logits,
            "gradients": S.split(grads, self._spec),
        }
        if want_dx:
            result["input_grad"] = dx  # type: ignore[typeddict-item]  # an Array when asked
        return result

    def _train_steps_ops(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, X: BufferLike, targets: BufferLike, k: int
    ) -> TrainStepsResult:
        """`train_steps` on the per-operation path. Caller holds the lock."""
        x = self._owned_batch(X, stacked=True)
        self._check_stack(x.shape[0], k)
        y = self._labels(targets, x.shape[0])
        rows = x.shape[0] // k
        new, losses, logits, grads, _ = self._run_ops(x, y, rows, _MODE_TRAIN, k)
        self._publish(new.params, new.m, new.v, new.step)
        values: list[float] = losses._mv.tolist()  # type: ignore[assignment]  # float32 values
        return {
            "step": new.step,
            "losses": values,
            "loss": values[-1],
            "logits": logits,
            "gradients": S.split(grads, self._spec),
        }

    def _forward_ops(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, x: Array
    ) -> Array:
        """`predict_logits` on the per-operation path. Caller holds the lock."""
        rows = x.shape[0]
        y = zeros((rows,), "<i4")
        return self._run_ops(x, y, rows, _MODE_FORWARD)[2]
