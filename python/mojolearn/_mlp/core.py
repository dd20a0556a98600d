"""The MLP trainer core: what SmallMLPTrainer and MLPTrainer are, for any layer sizes.

State = flat float32 parameters in the order weight1, bias1, ..., weightL, biasL, flat AdamW
moments m, v in the same order, the step count t (and, for SmallMLPTrainer, the v1 layout's
always-zero flags). It lives in a resident session (`_mlp.session.Session`): binding-owned
memory that every step updates, so a step is ONE binding call with no state copies; the
binding checks the batch (finite X, labels in range), writes the results into one fresh
buffer and either completes or leaves the state as it was. `state_dict`, checkpoints and
`weights_` download from it; `load_state_dict` and `apply_gradients` open a new session and
swap it in; the session closes itself when the trainer goes. Calls are serialized by the
trainer's one lock.

With MOJOLEARN_MLP_FUSED=0 a step runs instead as the per-operation calls the fused step fuses
(`_mlp/ops.py`) on a host copy of the state, then publishes it as a new session: same kernels,
same order, same bits.

A subclass sets `_API` (the name in messages), `_SCHEMA_REC` (its persistence record,
`_mlp/schema.py`: payload and file schemas, size bound, optimizer fields), and constructs
through `_init_core`; SmallMLPTrainer adds its one justified fast path, an unrolled
`train_step` for the 8→16→3 network.

This class keeps the constructor, the introspection, the transactions (`_st`, `_publish`) and
the public steps; its mixins hold the rest: `SessionSteps` (`_mlp/steps.py`: the binding calls
on the session, growth, rollback), `PerOperation` (`_mlp/per_op.py`), `Persistence`
(`_mlp/persist.py`: settings, state_dict, checkpoints, copies, pickles), `Inference`
(`_mlp/infer.py`) and `Export` (`_mlp/export.py`).
"""

from __future__ import annotations

import array as _pyarray
import threading

from .._buffers.alloc import ResultBuffers, zeros
from .._buffers.array import Array
from .._buffers.intake import owned_tensor
from .._model.preprocessing import Preprocessing
from . import lr_schedule as _lrs
from . import state as S
from . import steps as _steps
from .batches import BatchReader
from .export import Export
from .infer import Inference, _batch
from .per_op import PerOperation
from .persist import Persistence
from .port import Port
from .session import CAPACITY_ROWS, MAX_CAPACITY_ROWS, Session
from .steps import (
    _KEEP,
    _MODE_FORWARD,
    _MODE_GRADS,
    _MODE_TRAIN,
    SessionSteps,
    _fused_enabled,
    _State,
    _translate,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TypeAlias, TypeVar

    from .._buffers.types import (
        BufferLike,
        LRSchedule,
        PyArray,
        TrainStepResult,
        TrainStepsResult,
    )
    from .schema import Schema
    from .spec import LayerSizes

    _Trainer = TypeVar("_Trainer", bound="MLPCore")
    # [losses (k) | logits | grads | input_grad] and its views: logits, gradients (None in
    # forward mode), input_grad (None unless asked).
    _Pass: TypeAlias = "tuple[PyArray, Array, dict[str, Array] | None, Array | None]"
    # The per-operation path's (new state or None, losses, logits, flat grads, input_grad).
    _Ops: TypeAlias = "tuple[_State | None, Array, Array, Array, Array | None]"


class MLPCore(SessionSteps, PerOperation, Persistence, Inference, Export, Preprocessing):
    """The shared state, validation, transactions, steps and checkpoints of both trainers.

    Slotted (each subclass too): assigning to a public name other than the settable
    properties (`lr`, `weight_decay`, `lr_schedule`, `data_schedule`, `preprocessing`) raises
    AttributeError instead of making an instance attribute that nothing reads, at no cost to a
    step.

    A learning-rate schedule (`lr_schedule`, `lr_schedule.py`) gives every step its rate:
    step t (one-based) runs at `lr_at(t)`, checked before the step; the fused steps hand the
    rate to the session (`Session.set_lr` before one step, one rate per step to
    `mlp_resident_steps`), the others pass it with the hyperparameters. Without one the
    session's own lr (the config's) is used, as always.
    """

    __slots__ = (
        "_spec",
        "_config",
        "_schedule",
        "_flags",
        "_max_rows",
        "_reader",
        "_mode",
        "_lock",
        "_step",
        "_session",
        "_lr_schedule",
        "_results",
        "__weakref__",
    )

    # Set by each subclass.
    _API: str  # the name in messages: "SmallMLPTrainer", "MLPTrainer"
    _SCHEMA_REC: Schema  # its state and file schemas, size bound, optimizer fields

    _spec: LayerSizes
    _config: dict[str, float]  # lr, beta1, beta2, eps, weight_decay (as given: profile v2)
    _schedule: dict[str, Any]
    _flags: Array | None  # SmallMLPTrainer's v1 optimizer flags (int32, 4); None otherwise
    _max_rows: int
    _reader: BatchReader  # the batches' way in: what the binding declines
    _mode: str
    _lock: threading.RLock
    _step: int
    _session: Session
    _lr_schedule: LRSchedule | None
    _results: ResultBuffers  # the training steps' result buffers, reused when unreferenced

    if TYPE_CHECKING:  # each subclass defines it (the constructor differs)

        @classmethod
        def _from_state(
            cls: type[_Trainer], state: dict[str, Any], lr_schedule: LRSchedule | None = None
        ) -> _Trainer:
            """A trainer holding a `state_dict()`, validated as `load_state_dict` does
            (`lr_schedule`: as `load_state_dict` takes it)."""
            ...

    def _init_core(
        self,
        spec: LayerSizes,
        params: Array,
        config: dict[str, float],
        schedule: dict[str, Any],
        flags: Array | None = None,
        max_rows: int | None = None,
        m: Array | None = None,
        v: Array | None = None,
        step: int = 0,
        lr_schedule: LRSchedule | None = None,
    ) -> None:
        """Set up the state (checked by the caller) and open its resident session: the
        constructors' common part. `m`, `v` default to zeros; `max_rows` to the spec's, at
        most the rows a session can hold (so a session can always grow to any batch)."""
        self._spec = spec
        self._config = config
        self._schedule = schedule
        self._lr_schedule = lr_schedule
        self._flags = flags
        if max_rows is None:
            max_rows = min(spec.max_rows(), MAX_CAPACITY_ROWS)
        self._max_rows = max_rows
        self._reader = BatchReader(self._API, spec.inputs, spec.classes, max_rows)
        self._mode = _steps._binding().mode
        self._lock = threading.RLock()
        self._results = ResultBuffers()
        self._step = step
        self._session = Session(
            params,
            zeros((spec.total,)) if m is None else m,
            zeros((spec.total,)) if v is None else v,
            step,
            config,
            spec,
            min(CAPACITY_ROWS, self._max_rows),
        )

    # ------------------------------------------------------------ introspection

    @property
    def layer_sizes(self) -> list[int]:
        """[inputs, hidden..., classes] (a fresh list)."""
        return list(self._spec.sizes)

    @property
    def max_rows(self) -> int:
        """The most rows one batch may have: a bound on a step's working memory, and at most
        the 2**20 rows a resident session holds."""
        return self._max_rows

    @property
    def step_(self) -> int:
        """Number of optimizer steps taken."""
        return self._step

    @property
    def weights_(self) -> dict[str, Array]:
        """The current parameters: a dict of fresh Arrays weight1, bias1, ..., biasL."""
        with self._lock:
            return S.split(self._session.download()[0], self._spec)  # type: ignore[no-any-return]

    def numeric_mode_used(self) -> str:
        """The numeric mode of the binding the steps run in.

        Returns:
            'identical' or 'fast', read from the loaded binding.
        """
        return _steps._binding().mode  # type: ignore[no-any-return]  # the binding is untyped

    def vendor_used(self) -> str:
        """The vendor of the binding the steps run in.

        Returns:
            'cpu', 'cuda' or 'hip', read from the loaded binding.
        """
        return _steps._binding().vendor  # type: ignore[no-any-return]

    # ------------------------------------------------------------ settings

    # ------------------------------------------------------------ state

    @property
    def _st(self) -> _State:
        """The whole state as a host `_State` of fresh Arrays (synced from the session)."""
        with self._lock:
            p, m, v, t = self._session.download()
            return _State(p, m, v, None if self._flags is None else self._flags.copy(), t)

    def _publish(
        self,
        params: Array,
        m: Array,
        v: Array,
        step: int,
        config: dict[str, float] | None = None,
        schedule: dict[str, Any] | None = None,
        flags: Array | None = None,
        capacity: int | None = None,
        lr_schedule: Any = _KEEP,
    ) -> None:
        """Replace the session by one holding (params, m, v, step) — opened before anything
        changes, so a failure to open leaves the trainer as it was — and, when given, the
        config, schedule, flags and learning-rate schedule (None: none), all in ONE
        assignment. Caller holds the lock."""
        config = self._config if config is None else config
        new = Session(
            params,
            m,
            v,
            step,
            config,
            self._spec,
            self._session.capacity if capacity is None else capacity,
        )
        old = self._session
        (
            self._session,
            self._step,
            self._config,
            self._schedule,
            self._flags,
            self._lr_schedule,
        ) = (
            new,
            step,
            config,
            self._schedule if schedule is None else schedule,
            self._flags if flags is None else flags,
            self._lr_schedule if lr_schedule is _KEEP else lr_schedule,
        )
        old.close()

    # ------------------------------------------------------------ steps
    #
    # The fused path (default) is ONE resident-session call per public call: the session
    # holds the state, the binding checks X's finiteness and the label range, runs the step
    # and writes loss, logits, gradients and input gradient into one fresh result buffer.
    # A refused step changes nothing inside the binding; anything failing after the binding
    # returned is undone by `_recover` (the session keeps the pre-step state until the next
    # step). MOJOLEARN_MLP_FUSED=0 runs the per-operation path on a host copy instead.

    def _rates(self, t0: int, k: int) -> list[float]:
        """The learning rates of the steps t0 .. t0 + k - 1 (one-based): the schedule's,
        checked (a refusal changes nothing), or the config's lr."""
        if self._lr_schedule is None:
            return [self._config["lr"]] * k
        return _lrs.rates(self._lr_schedule, t0, k, self._API)

    def _hyper(self, lr: float) -> list[float]:
        """The AdamW hyperparameters at learning rate `lr`, in the order the binding takes
        them."""
        c = self._config
        return [lr, c["beta1"], c["beta2"], c["eps"], c["weight_decay"]]

    def _step_rates(self, k: int) -> PyArray | None:
        """The next k steps' scheduled rates, checked, as a float64 array (what
        `mlp_resident_steps` takes); None without a schedule (the session's own lr)."""
        if self._lr_schedule is None:
            return None
        return _pyarray.array("d", self._rates(self._step + 1, k))

    def _port(self) -> Port:
        """The one way `mojolearn.distributed` drives this trainer (`_mlp/port.py`): reading
        a batch, a microbatch's gradients, applying combined gradients, the lock, the spec
        and the facts the processes compare."""
        return Port(self)

    def _check_want_dx(self, value: object) -> None:
        """Refuse a `return_input_grad` that is not a bool."""
        if value is not False and value is not True:
            raise TypeError(
                f"{self._API}: return_input_grad must be a bool, got {type(value).__name__}"
            )

    def train_step(
        self, X: BufferLike, targets: BufferLike, *, return_input_grad: bool = False
    ) -> TrainStepResult:
        """One AdamW step on a batch: mean cross-entropy, its gradients, the update.

        The step either completes or changes nothing (a refused batch, a non-finite result,
        an interrupt).

        Args:
            X: float32 (n, inputs), C-contiguous or not (a strided one is copied), 1 <= n <=
                `max_rows`; finite.
            targets: integer (n,): the class of each row, 0..classes-1.
            return_input_grad: also return d(loss)/dX.

        Returns:
            `step` (the new count), `loss` (before the update), `logits` (n, classes) before
            the update, `gradients` ({"weight1": ..., "bias1": ..., ...}) and, when asked,
            `input_grad` (n, inputs). The Arrays are fresh (one buffer, not the trainer's).

        Raises:
            TypeError: X or targets is not a buffer of the right dtype, or
                `return_input_grad` is not a bool; a scheduled rate that is no real number.
            ValueError: a wrong shape, a non-finite X, a class out of range, the step
                counter is exhausted, or the scheduled rate (`lr_schedule.lr_at(step_ + 1)`)
                is not finite and >= 0 (what `lr_at` raises propagates; nothing changes).
            RuntimeError: the step produced a non-finite result (nothing was applied).

        Example:
            >>> out = trainer.train_step(X, y)  # X: float32 (n, inputs), y: integer (n,)
            >>> out["step"], out["loss"], out["gradients"]["weight1"].shape
        """
        self._check_want_dx(return_input_grad)
        with self._lock:
            self._check_room(1)
            if not _fused_enabled():
                return self._train_step_ops(X, targets, return_input_grad)
            r = self._pass(X, targets, _MODE_TRAIN, return_input_grad)
            return _steps._step_result(self._step, r, return_input_grad)

    def train_steps(self, X: BufferLike, targets: BufferLike, k: int) -> TrainStepsResult:
        """`k` AdamW steps in ONE binding call, bit-equal to k `train_step` calls.

        Batch i is rows i * n .. (i + 1) * n - 1 of X and targets; with `lr_schedule`,
        step i (0-based) runs at `lr_at(step_ + 1 + i)`, all k rates checked first. The k
        steps either all complete or change nothing.

        Args:
            X: float32 (k * n, inputs): k equal batches of 1 <= n <= `max_rows` rows,
                stacked.
            targets: integer (k * n,): their classes, stacked the same way.
            k: the number of steps, a positive int.

        Returns:
            `step` (the new count), `losses` (the k losses, in order), `loss` (the last),
            and `logits` and `gradients` of the last step.

        Raises:
            TypeError: X or targets is not a buffer of the right dtype; a scheduled rate
                that is no real number.
            ValueError: `k` is not a positive int, X does not stack k batches of 1 to
                `max_rows` rows, a refused batch, the step counter would pass its bound, or a
                scheduled rate is not finite and >= 0 (what `lr_at` raises propagates).
            RuntimeError: a step produced a non-finite result (none was applied).
        """
        if isinstance(k, bool) or type(k) is not int or k < 1:
            raise ValueError(f"{self._API}: k must be a positive int, got {k!r}")
        with self._lock:
            self._check_room(k)
            if not _fused_enabled():
                return self._train_steps_ops(X, targets, k)
            step = self._step
            buf, logits, grads, _ = self._pass(X, targets, _MODE_TRAIN, False, k, stacked=True)
            try:
                values = buf[:k].tolist()
            except BaseException:  # e.g. MemoryError, KeyboardInterrupt: undo the steps
                self._recover(step)
                raise
            return {
                "step": self._step,
                "losses": values,
                "loss": values[-1],
                "logits": logits,
                "gradients": grads,
            }

    def loss_and_grads(self, X: BufferLike, targets: BufferLike) -> tuple[float, list[Array]]:
        """The loss and gradients of a batch on the current state, without a step.

        Args:
            X: float32 (n, inputs), 1 <= n <= `max_rows`; finite.
            targets: integer (n,): the class of each row.

        Returns:
            (loss, [dweight1, dbias1, ..., dbiasL]): the mean loss and fresh gradient Arrays
            in parameter order (what `apply_gradients` takes).

        Raises:
            TypeError: X or targets is not a buffer of the right dtype.
            ValueError: a wrong shape, a non-finite X or a class out of range.
            RuntimeError: the result is not finite.
        """
        names = self._spec.names
        with self._lock:
            if not _fused_enabled():
                x = self._owned_batch(X)
                rows = x._shape[0]
                y = self._labels(targets, rows)
                _, losses, _, flat_grads, _ = self._run_ops(x, y, rows, _MODE_GRADS)
                g = S.split(flat_grads, self._spec)
                return losses._mv[0], [g[n] for n in names]
            buf, _, grads, _ = self._pass(X, targets, _MODE_GRADS, False)
        return buf[0], [grads[n] for n in names]

    def apply_gradients(self, gradients: Sequence[BufferLike]) -> int:
        """One AdamW step with already-combined gradients (e.g. averaged over processes).

        All or nothing: every gradient (and, with `lr_schedule`, the step's rate) is checked
        before the update, and a non-finite result leaves the state as it was.

        Args:
            gradients: float32 buffers in parameter order (weight1, bias1, ..., biasL), each
                of its parameter's exact shape, finite (a list, not a dict).

        Returns:
            The new step count.

        Raises:
            TypeError: not a sequence of float32 buffers (a dict is refused); a scheduled
                rate that is no real number.
            ValueError: a wrong count, shape or non-finite value, the step counter is
                exhausted, or a refused scheduled rate (as `train_step`).
            RuntimeError: the update produced a non-finite result (nothing was applied).
        """
        spec, api = self._spec, self._API
        n = len(spec.names)
        if isinstance(gradients, dict):
            raise TypeError(
                f"{api}: gradients must be a sequence of {n} buffers in the order "
                f"{', '.join(spec.names)} (not a dict)"[:300]
            )
        try:
            gradients = list(gradients)
        except TypeError:
            raise TypeError(
                f"{api}: gradients must be a sequence of {n} buffers, got "
                f"{type(gradients).__name__}"
            ) from None
        if len(gradients) != n:
            raise ValueError(
                f"{api}: gradients must hold exactly {n} buffers "
                f"({', '.join(spec.names)}), got {len(gradients)}"[:300]
            )
        g = S.flat(
            [
                owned_tensor(v, s, name + " gradient", api)
                for v, s, name in zip(gradients, spec.shapes, spec.names)
            ]
        )
        with self._lock:
            self._check_room(1)
            t: int = self._step
            hyper = self._hyper(self._rates(t + 1, 1)[0])  # a refused rate changes nothing
            p, m, v, t = self._session.download()  # fresh copies: the update runs on them
            try:
                _steps._binding().mlp_adamw(
                    [p._addr, g._addr, m._addr, v._addr], [spec.total, t + 1, *hyper]
                )
            except (RuntimeError, ValueError) as exc:
                raise _translate(exc, api) from None
            self._publish(p, m, v, t + 1)
            return t + 1

    def _forward(self, X: BufferLike) -> Array:
        """The logits of X with the current weights, on the path the switch selects. Caller
        holds the lock."""
        if not _fused_enabled():
            return self._forward_ops(self._owned_batch(X))
        return self._pass(X, None, _MODE_FORWARD, False)[1]

    # ------------------------------------------------------------ per-operation path

    def _read_inputs(self, X: BufferLike) -> Array:
        """X as the scoring entries read it (`preprocess.Preprocessing`)."""
        return _batch(self, X)

    def _preprocess_sizes(self) -> tuple[int, int]:
        return self._spec.inputs, self._spec.classes

    def _lr_repr(self) -> str:
        s = self._lr_schedule
        return f"lr={self._config['lr']}" if s is None else f"lr_schedule={s!r}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({list(self._spec.sizes)}, step={self._step}, "
            f"{self._lr_repr()}, mode={self._mode!r})"
        )
