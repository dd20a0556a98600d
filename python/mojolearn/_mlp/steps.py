"""The trainer core's calls into its resident session: a step, k steps, a microbatch's gradients,
an update from flat gradients, growth of the session and rollback (a mixin of `MLPCore`), and
the pieces every path shares: the mode constants, the binding's module global (tests wrap it),
the fused/per-operation switch, the host state copy, the error translation and the result views
of the flat buffer [losses (k) | logits | grads | input_grad].
"""

from __future__ import annotations

import os

from .._buffers.alloc import ZERO_F32
from .._buffers.array import Array, _new_object, _result_view
from .._runtime import backend as _backend
from . import batches as _batches
from . import state as S

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final, Literal, TypeAlias, overload

    from .._buffers.types import BufferLike, PyArray, TrainStepResult
    from .core import MLPCore
    from .spec import LayerSizes, ResultLayout

    # [losses (k) | logits | grads | input_grad] and its views: logits, gradients (None in
    # forward mode), input_grad (None unless asked).
    _Pass: TypeAlias = "tuple[PyArray, Array, dict[str, Array] | None, Array | None]"

# The mode argument of the step entries (Final: the overloads below tell them apart).
_MODE_FORWARD: Final = 0
_MODE_GRADS: Final = 1
_MODE_TRAIN: Final = 2
_ZERO = ZERO_F32
_KEEP: Any = object()  # `_publish`: keep the current learning-rate schedule (None removes it)

_binding: Callable[[], Any] = _backend.binding  # a module global: tests wrap it to inject failures

# os.environ is re-read on every step (tests and tools flip the path between steps), so read
# its backing dict directly: os.environ.get costs ~0.3 µs, more than a batch-1 step.
_env_get: Callable[[Any], object]
_FUSED_KEY: object
_OFF: object
try:
    _env_get = os.environ._data.get  # type: ignore[attr-defined]
    _FUSED_KEY = os.environ.encodekey("MOJOLEARN_MLP_FUSED")
    _OFF = os.environ.encodevalue("0")
except AttributeError:  # not CPython's os.environ: take the slow, portable way
    _env_get, _FUSED_KEY, _OFF = os.environ.get, "MOJOLEARN_MLP_FUSED", "0"


def _fused_enabled() -> bool:
    """False while MOJOLEARN_MLP_FUSED=0 (the per-operation path), re-read on every call."""
    return _env_get(_FUSED_KEY) != _OFF


class _State:
    """A host copy of the trainer state (the per-operation path and `tools/`)."""

    __slots__ = ("params", "m", "v", "flags", "step")
    params: Array
    m: Array
    v: Array
    flags: Array | None
    step: int

    def __init__(self, params: Array, m: Array, v: Array, flags: Array | None, step: int) -> None:
        self.params, self.m, self.v, self.flags, self.step = params, m, v, flags, step


def _translate(exc: BaseException, api: str) -> BaseException:
    """A binding refusal as the trainer's error: a non-finite result as RuntimeError, a
    refused input (the resident entries check X and targets) as ValueError naming it."""
    if isinstance(exc, RuntimeError) and "not finite" in str(exc):
        return RuntimeError(
            f"{api}: the step produced a non-finite result and was not applied ({exc})"
        )
    if type(exc) is ValueError and str(exc).startswith("mlp_resident_"):
        return ValueError(f"{api}: " + str(exc).partition(": ")[2])
    return exc


def _results(
    buf: PyArray, addr: int, spec: LayerSizes, at: ResultLayout
) -> tuple[Array, dict[str, Array], Array | None]:
    """(logits, gradients dict, input_grad or None): Arrays viewing the flat result buffer at
    `addr`, laid out as `at` says (each keeps it alive)."""
    rows = at.rows
    g = addr + 4 * at.grads
    logits = _result_view(buf, (rows, spec.classes), addr + 4 * at.logits, rows * spec.classes)
    grads: dict[str, Array] = {}
    make = _new_object
    for name, shape, offset, size in spec.views:  # `_result_view`, inlined: ~0.1 µs a view
        a = make(Array)
        a._owner = buf
        a._shape = shape
        a._dtype = "<f4"
        a._size = size
        a._readonly = False
        a._addr = g + offset
        grads[name] = a
    dx: Array | None = None
    if at.input_grad is not None:
        dx = _result_view(buf, (rows, spec.inputs), addr + 4 * at.input_grad, rows * spec.inputs)
    return logits, grads, dx


def _step_result(step: int, r: _Pass, want_dx: bool) -> TrainStepResult:
    """A `train_step` result from a one-step `_pass` result `r` (`step`: the new count)."""
    buf, logits, grads, dx = r
    result: TrainStepResult = {
        "step": step,
        "loss": buf[0],
        "logits": logits,
        "gradients": grads,  # type: ignore[typeddict-item]  # a dict: a training pass
    }
    if want_dx:
        result["input_grad"] = dx  # type: ignore[typeddict-item]  # an Array when asked
    return result


def _quick(X: Any, targets: Any, inputs: int, max_rows: int, k: int = 1) -> tuple[Any, ...] | None:
    """(x, y, target_itemsize, rows) as the binding's step entries take them, reading no
    buffer here: an Array X that fits as its address and rows (checked here); any other X as
    itself with rows 0 (the binding reads it, takes its rows and makes the result buffer, and
    declines, saying why, what it cannot take zero-copy). Targets likewise: int32 labels of an
    Array X as their address, else the object (an Array as its memoryview), itemsize 0: its
    own. None when an Array X is not k batches of 1 to `max_rows` (the binding is not called:
    `BatchReader.x` refuses it by name)."""
    if type(X) is not Array:
        return X, (targets._mv if type(targets) is Array else targets), 0, 0
    if not (X._dtype == "<f4" and len(shape := X._shape) == 2 and shape[1] == inputs):
        return None
    total = shape[0]
    rows = total // k
    if not 0 < rows <= max_rows or rows * k != total:
        return None
    if type(targets) is Array and targets._dtype == "<i4" and targets._shape == (total,):
        return X._addr, targets._addr, 4, rows
    return X._addr, (targets._mv if type(targets) is Array else targets), 0, rows


class SessionSteps:
    """The core's binding calls on its resident session (a mixin of `MLPCore`): the fused path."""

    __slots__ = ()

    def _check_room(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, k: int
    ) -> None:
        """Refuse `k` more steps when they would pass the step counter's bound."""
        if self._step + k > S.STEP_INT32_MAX:
            raise ValueError(
                f"{self._API}: the step counter is exhausted (step "
                f"{self._step} + {k} would pass 2**31-1)"
            )

    def _recover(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, t_before: int
    ) -> None:
        """After a failure: roll the session back to step `t_before` if the step was applied."""
        try:
            self._step = self._session.rollback(t_before)
        except Exception:  # the session refused: it was never changed
            pass

    def _fit(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, rows: int
    ) -> None:
        """A session whose scratch holds `rows` rows (reopened larger, state unchanged, when
        a batch outgrows it). Caller holds the lock."""
        if rows > self._session.capacity:  # checked again: callers test it before calling
            p, m, v, t = self._session.download()
            self._publish(
                p, m, v, t, capacity=min(self._max_rows, max(rows, 2 * self._session.capacity))
            )

    if TYPE_CHECKING:  # forward mode has no gradient views

        @overload
        def _pass(  # type: ignore[misc]  # self: the MLPCore this mixes into
            self: MLPCore,
            X: BufferLike,
            targets: BufferLike | None,
            mode: Literal[0],
            want_dx: bool,
            k: int = 1,
            stacked: bool = False,
        ) -> tuple[PyArray, Array, None, None]: ...

        @overload
        def _pass(  # type: ignore[misc]  # self: the MLPCore this mixes into
            self: MLPCore,
            X: BufferLike,
            targets: BufferLike,
            mode: Literal[1, 2],
            want_dx: bool,
            k: int = 1,
            stacked: bool = False,
        ) -> tuple[PyArray, Array, dict[str, Array], Array | None]: ...

    def _pass(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
        X: BufferLike,
        targets: BufferLike | None,
        mode: int,
        want_dx: bool,
        k: int = 1,
        stacked: bool = False,
    ) -> _Pass:
        """One resident pass (forward / grads / one train step) on X and targets (ignored in
        forward mode), or k train steps in one call over k stacked batches; returns the
        result buffer [losses (k) | logits | grads | input_grad] and the `_results` views of
        it (logits only in forward mode). The binding reads the objects itself; what it
        declines goes to `_declined_pass` with the reason. Caller holds the lock."""
        lrs = self._step_rates(k) if mode == _MODE_TRAIN else None
        q = _quick(X, targets, self._spec.inputs, self._max_rows, k)
        reason = _batches.DECLINED_X
        if q is not None:
            r = self._run_pass(*q, mode, want_dx, k, lrs)  # type: ignore[call-arg]  # q: 4 args
            if type(r) is not int:
                return r  # type: ignore[return-value]  # a _Pass
            reason = r
        return self._declined_pass(X, targets, mode, want_dx, k, stacked, lrs, reason)

    def _declined_pass(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
        X: BufferLike,
        targets: BufferLike | None,
        mode: int,
        want_dx: bool,
        k: int,
        stacked: bool,
        lrs: PyArray | None,
        reason: int,
    ) -> _Pass:
        """`_pass` after the binding declined it for `reason` (`_batches.DECLINED_*`): the
        reader copies or converts the operand it declined, or refuses it by name, and the pass
        runs on addresses (which the binding never declines). Caller holds the lock."""
        x, xa, total, y, ya, itemsize = self._reader.declined(
            X, None if mode == _MODE_FORWARD else targets, reason, stacked
        )
        if stacked:
            self._check_stack(total, k)
        r = self._run_pass(xa, ya, itemsize, total // k, mode, want_dx, k, lrs)
        assert type(r) is tuple  # addresses with their rows and itemsize: never declined
        return r

    def _check_stack(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, total: int, k: int
    ) -> None:
        """Refuse X unless its `total` rows stack k equal batches of 1 to `max_rows` rows."""
        if total % k or not 1 <= total // k <= self._max_rows:
            raise ValueError(
                f"{self._API}: X must stack k={k} equal batches of 1 to "
                f"{self._max_rows} rows, got {total} rows"
            )

    def _run_pass(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
        xa: object,
        ya: object,
        itemsize: int,
        rows: int,
        mode: int,
        want_dx: bool,
        k: int,
        lrs: PyArray | None = None,
    ) -> _Pass | int:
        """`_pass` on inputs as the binding takes them (`_quick`; rows 0: X is an object
        whose rows the binding takes, making the result buffer); a `_batches.DECLINED_*` code
        when it declined an object (nothing was done). `lrs`: the k steps' scheduled rates
        (`_step_rates`), handed to the session after any regrowth (a new session has the config's lr). A
        failure after the binding applied a training run (e.g. a MemoryError making the
        views) rolls it back."""
        if rows > self._session.capacity:
            self._fit(rows)
        spec = self._spec
        step = self._step
        grads: dict[str, Array] | None
        dx: Array | None
        try:
            if rows:
                at: ResultLayout = spec.layouts[rows if k == 1 else (k, rows)][want_dx]
                buf = self._results.take(at.size) if mode == _MODE_TRAIN else _ZERO * at.size
                out = buf.buffer_info()[0]
            if k == 1:
                if lrs is not None:
                    self._session.set_lr(lrs[0])
                after = _binding().mlp_resident_step(
                    self._session.handle,
                    xa,
                    ya,
                    out if rows else _ZERO,
                    mode,
                    rows,
                    itemsize,
                    want_dx,
                    step,
                )
            else:
                after = _binding().mlp_resident_steps(
                    self._session.handle,
                    xa,
                    ya,
                    out if rows else _ZERO,
                    0 if lrs is None else lrs.buffer_info()[0],
                    rows,
                    k,
                    itemsize,
                    step,
                )
            if not rows:
                if type(after) is int:  # declined: why
                    return after
                after, buf, out, rows = after
                at = spec.layouts[rows if k == 1 else (k, rows)][want_dx]
            elif after < 0:  # declined (an object's targets): why
                return after  # type: ignore[no-any-return]
            self._step = after
            if mode == _MODE_FORWARD:  # logits only: no gradient views to build
                logits, grads, dx = (
                    _result_view(
                        buf, (rows, spec.classes), out + 4 * at.logits, rows * spec.classes
                    ),
                    None,
                    None,
                )
            else:
                logits, grads, dx = _results(buf, out, spec, at)
        except BaseException as exc:
            if mode == _MODE_TRAIN:
                self._recover(step)
            new = _translate(_backend.translate(exc), self._API)
            if new is exc:
                raise
            raise new from None
        return buf, logits, grads, dx

    def _microbatch(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
        xa: int,
        ya: int,
        itemsize: int,
        rows: int,
        divide_by: int,
        first_row: int = 0,
    ) -> PyArray:
        """The result buffer of one microbatch on the current state (`ResultLayout(1, rows,
        spec, False)`: [loss | logits | grads]), its loss and gradient divided by `divide_by`
        (the whole batch's rows). No step. `first_row` (the microbatch's place in the batch,
        which a model's Dropout needs) changes nothing: an MLP draws no random numbers."""
        if rows > self._session.capacity:
            self._fit(rows)
        at: ResultLayout = self._spec.layouts[rows][False]
        buf = _ZERO * at.size
        try:
            _binding().mlp_resident_grads(
                [self._session.handle, xa, ya, buf.buffer_info()[0]],
                [rows, itemsize, divide_by, self._step],
            )
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc, self._API) from None
        return buf

    def _apply_flat(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, grads_addr: int
    ) -> int:
        """One AdamW step in the session with the flat gradients at `grads_addr`; returns the
        new step count. All or nothing."""
        self._check_room(1)
        lrs = self._step_rates(1)
        if lrs is not None:
            self._session.set_lr(lrs[0])
        try:
            self._step = _binding().mlp_resident_apply(
                [self._session.handle, grads_addr], [self._step]
            )
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc, self._API) from None
        return self._step
