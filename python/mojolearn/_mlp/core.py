"""The MLP trainer core: what SmallMLPTrainer and MLPTrainer are, for any layer sizes.

State = flat float32 parameters in the order weight1, bias1, ..., weightL, biasL, flat AdamW
moments m, v in the same order, the step count t (and, for SmallMLPTrainer, the v1 layout's
always-zero flags). It lives in a resident session (`_mlp_resident.Session`): binding-owned
memory that every step updates, so a step is ONE binding call with no state copies; the
binding checks the batch (finite X, labels in range), writes the results into one fresh
buffer and either completes or leaves the state as it was. `state_dict`, checkpoints and
`weights_` download from it; `load_state_dict` and `apply_gradients` open a new session and
swap it in; the session closes itself when the trainer goes. Calls are serialized by the
trainer's one lock.

With MOJOLEARN_MLP_FUSED=0 a step runs instead as the per-operation calls the fused step fuses
(`_mlp_ops`) on a host copy of the state, then publishes it as a new session: same kernels,
same order, same bits.

A subclass sets `_API` (the name in messages), `_SCHEMA` / `_FILE_SCHEMA` (its payload and
file schemas), and constructs through `_init_core`; SmallMLPTrainer adds its one justified
fast path, an unrolled `train_step` for the 8→16→3 network.
"""

from __future__ import annotations

import os
import threading

from .._buffers.alloc import ZERO_F32, empty, zeros
from .._buffers.array import Array, _new_object, _result_view
from .._buffers.intake import owned_tensor
from .._runtime import backend as _backend
from . import batches as _batches
from . import codec as _ckpt
from . import infer as _infer
from . import state as S
from .session import CAPACITY_ROWS, MAX_CAPACITY_ROWS, Session

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, Final, Literal, TypeAlias, TypeVar, overload

    from .._buffers.types import (
        BufferLike,
        EvaluateResult,
        PyArray,
        TrainStepResult,
        TrainStepsResult,
    )
    from .spec import LayerSizes

    _Trainer = TypeVar("_Trainer", bound="MLPCore")
    # [losses (k) | logits | grads | input_grad] and its views: logits, gradients (None in
    # forward mode), input_grad (None unless asked).
    _Pass: TypeAlias = "tuple[PyArray, Array, dict[str, Array] | None, Array | None]"
    # The per-operation path's (new state or None, losses, logits, flat grads, input_grad).
    _Ops: TypeAlias = "tuple[_State | None, Array, Array, Array, Array | None]"

# The mode argument of the step entries (Final: the overloads below tell them apart).
_MODE_FORWARD: Final = 0
_MODE_GRADS: Final = 1
_MODE_TRAIN: Final = 2
_ZERO = ZERO_F32

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


def trainer_from_bytes(cls: type[_Trainer], data: bytes) -> _Trainer:
    """A `cls` trainer from checkpoint bytes, checked as a file is (how trainers unpickle)."""
    return cls._from_state(_ckpt.loads(data, schema=cls._FILE_SCHEMA))


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
    buf: PyArray, addr: int, spec: LayerSizes, rows: int, k: int, want_dx: bool
) -> tuple[Array, dict[str, Array], Array | None]:
    """(logits, gradients dict, input_grad or None): Arrays viewing the flat result buffer at
    `addr`, [losses (k) | logits (rows × classes) | grads (total) | input_grad (rows ×
    inputs)] (each keeps it alive)."""
    g = addr + 4 * (k + rows * spec.classes)
    logits = _result_view(buf, (rows, spec.classes), addr + 4 * k, rows * spec.classes)
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
    if want_dx:
        dx = _result_view(buf, (rows, spec.inputs), g + 4 * spec.total, rows * spec.inputs)
    return logits, grads, dx


class MLPCore:
    """The shared state, validation, transactions, steps and checkpoints of both trainers.

    Slotted (each subclass too): assigning to a public name other than the settable
    properties (`lr`, `weight_decay`, `data_schedule`) raises AttributeError instead of
    making an instance attribute that nothing reads, at no cost to a step.
    """

    __slots__ = (
        "_spec",
        "_config",
        "_schedule",
        "_flags",
        "_max_rows",
        "_mode",
        "_lock",
        "_step",
        "_session",
        "__weakref__",
    )

    # Set by each subclass.
    _API: str  # the name in messages: "SmallMLPTrainer", "MLPTrainer"
    _SCHEMA: str  # the `state_dict()` schema
    _FILE_SCHEMA: str  # the checkpoint file schema

    _spec: LayerSizes
    _config: dict[str, float]  # lr, beta1, beta2, eps, weight_decay (as given: profile v2)
    _schedule: dict[str, Any]
    _flags: Array | None  # SmallMLPTrainer's v1 optimizer flags (int32, 4); None otherwise
    _max_rows: int
    _mode: str
    _lock: threading.RLock
    _step: int
    _session: Session

    if TYPE_CHECKING:  # each subclass defines it (the constructor differs)

        @classmethod
        def _from_state(cls: type[_Trainer], state: dict[str, Any]) -> _Trainer:
            """A trainer holding a `state_dict()`, validated as `load_state_dict` does."""
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
    ) -> None:
        """Set up the state (checked by the caller) and open its resident session: the
        constructors' common part. `m`, `v` default to zeros; `max_rows` to the spec's, at
        most the rows a session can hold (so a session can always grow to any batch)."""
        self._spec = spec
        self._config = config
        self._schedule = schedule
        self._flags = flags
        if max_rows is None:
            max_rows = min(spec.max_rows(), MAX_CAPACITY_ROWS)
        self._max_rows = max_rows
        self._mode = _binding().mode
        self._lock = threading.RLock()
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
        return _binding().mode  # type: ignore[no-any-return]  # the binding is untyped

    def vendor_used(self) -> str:
        """The vendor of the binding the steps run in.

        Returns:
            'cpu', 'cuda' or 'hip', read from the loaded binding.
        """
        return _binding().vendor  # type: ignore[no-any-return]

    # ------------------------------------------------------------ settings

    @property
    def lr(self) -> float:
        """The AdamW learning rate, as given. Assigning one (checked as the constructor's
        `lr`: a ValueError changes nothing) takes effect at the next step and is recorded in
        `state_dict()["config"]`, checkpoints and the state hash."""
        return self._config["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        self._set_config("lr", value)

    @property
    def weight_decay(self) -> float:
        """The AdamW weight decay, as given. Assigning one (checked as the constructor's
        `weight_decay`: a ValueError changes nothing) takes effect at the next step and is
        recorded in `state_dict()["config"]`, checkpoints and the state hash."""
        return self._config["weight_decay"]

    @weight_decay.setter
    def weight_decay(self, value: float) -> None:
        self._set_config("weight_decay", value)

    def _set_config(self, key: str, value: float) -> None:
        """Set one hyperparameter: the whole config checked as the constructor checks it,
        then the session reopened holding it (the same state; its hyperparameters are fixed
        when it opens). A refusal or a failed open changes nothing."""
        with self._lock:
            c = dict(self._config)
            c[key] = value
            config = S.check_config(
                c["lr"], (c["beta1"], c["beta2"]), c["eps"], c["weight_decay"], self._API
            )
            p, m, v, t = self._session.download()
            self._publish(p, m, v, t, config)

    # ------------------------------------------------------------ state

    @property
    def data_schedule(self) -> dict[str, Any]:
        """The stored data-order description (a fresh copy). Assigning a new one (validated
        like the constructor's: a ValueError leaves the old one) records where the data
        stream stands, e.g. before a save."""
        with self._lock:
            return S.check_schedule(self._schedule, self._API)  # type: ignore[no-any-return]

    @data_schedule.setter
    def data_schedule(self, value: dict[str, Any]) -> None:
        schedule = S.check_schedule(value, self._API)
        with self._lock:
            self._schedule = schedule

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
    ) -> None:
        """Replace the session by one holding (params, m, v, step) — opened before anything
        changes, so a failure to open leaves the trainer as it was — and, when given, the
        config, schedule and flags, all in ONE assignment. Caller holds the lock."""
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
        (self._session, self._step, self._config, self._schedule, self._flags) = (
            new,
            step,
            config,
            self._schedule if schedule is None else schedule,
            self._flags if flags is None else flags,
        )
        old.close()

    def state_dict(self) -> dict[str, Any]:
        """An independent snapshot of the whole resumable state.

        Returns:
            A new dict: `schema`, `architecture` (the layer sizes), `numeric_mode`,
            `parameter_order`, `weights` (fresh Arrays by name), `optimizer` (`kind`, `step`
            and the AdamW moments `m`, `v` as flat fresh Arrays; SmallMLPTrainer's also its
            `flags`), `config` (the float32 hyperparameters) and `data_schedule`. Nothing in
            it shares memory with the trainer.

        Example:
            >>> state = trainer.state_dict()
            >>> trainer.train_step(X, y)
            >>> trainer.load_state_dict(state)  # back to the snapshot, bit for bit
        """
        with self._lock:
            st = self._st
            optimizer = {"kind": S.OPTIMIZER, "step": st.step, "m": st.m, "v": st.v}
            if st.flags is not None:
                optimizer["flags"] = st.flags
            return {
                "schema": self._SCHEMA,
                "architecture": list(self._spec.sizes),
                "numeric_mode": self._mode,
                "parameter_order": list(self._spec.names),
                "weights": S.split(st.params, self._spec),
                "optimizer": optimizer,
                "config": dict(self._config),
                "data_schedule": S.check_schedule(self._schedule, self._API),
            }

    def load_state_dict(self: _Trainer, state: dict[str, Any]) -> _Trainer:
        """Restore a `state_dict()` snapshot of the same layer sizes and numeric mode.

        The whole state is validated and copied before anything changes.

        Args:
            state: a `state_dict()` of a trainer of this class (its tensors may be any
                float32 / int32 buffers of the right shapes).

        Returns:
            self.

        Raises:
            ValueError: a wrong schema, architecture, numeric mode, shape or value (the
                trainer is unchanged).
            TypeError: a tensor that is not a buffer of the right dtype.
        """
        params, m, v, flags, step, config, schedule, _ = S.validate_state(
            state, self._mode, self._spec, self._API, self._SCHEMA
        )
        with self._lock:
            self._publish(params, m, v, step, config, schedule, flags)
        return self

    def state_hash(self) -> str:
        """A digest of the whole state: equal hashes mean bit-equal states.

        Returns:
            The SHA-256 (hex) of the canonical JSON of this state's checkpoint payload (the
            hash `save_checkpoint` records in the file).
        """
        return _ckpt.state_hash(_ckpt.encode_state(self.state_dict()))

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write the whole state to `path` atomically (see `mojolearn.checkpoint`).

        The bytes go to a temporary file in the same folder, which then replaces `path`: a
        reader sees the old file or the new one, never part of one.

        Args:
            path: the checkpoint file (replaced if it exists).

        Raises:
            ValueError: `path` names something other than a regular file, or the state is
                over the file's size bound; nothing is written.
            OSError: the file cannot be written.
        """
        with self._lock:
            data = _ckpt.dumps(self.state_dict())
        _ckpt.write_atomic(path, data)

    @classmethod
    def _load(
        cls, path: str | os.PathLike[str], allow_profile_change: bool, max_bytes: int | None
    ) -> dict[str, Any]:
        """The checked state of a checkpoint file of this class's file schema."""
        if cls._FILE_SCHEMA == _ckpt.FILE_SCHEMA:
            return _ckpt.load_resumable(path, allow_profile_change)
        return _ckpt.load_resumable(path, allow_profile_change, cls._FILE_SCHEMA, max_bytes)

    def load_checkpoint(
        self: _Trainer,
        path: str | os.PathLike[str],
        *,
        allow_profile_change: bool = False,
        max_bytes: int | None = None,
    ) -> _Trainer:
        """Restore this trainer from a `save_checkpoint` file of the same layer sizes.

        The file is checked whole (size bound, schema, hash, arithmetic profile, every
        field) before anything changes.

        Args:
            path: the checkpoint file.
            allow_profile_change: accept a file written under another arithmetic profile (a
                migration: bits then follow this mojolearn's arithmetic).
            max_bytes: the size bound (MLPTrainer files; default `checkpoint.MLP_MAX_BYTES`).
                SmallMLPTrainer files have their fixed bound and ignore it.

        Returns:
            self.

        Raises:
            ValueError: the file is refused (named reason), or holds other layer sizes; the
                trainer is unchanged.
            OSError: the file cannot be read.
        """
        return self.load_state_dict(self._load(path, allow_profile_change, max_bytes))

    # A copy is a trainer of its own: same state bits, its own session and lock (a shallow
    # copy would share the session, and each would then step the other's state).
    def __copy__(self: _Trainer) -> _Trainer:
        return type(self)._from_state(self.state_dict())

    def __deepcopy__(self: _Trainer, memo: dict[int, Any]) -> _Trainer:
        return self.__copy__()

    def __reduce__(self) -> tuple[Callable[..., MLPCore], tuple[type[MLPCore], bytes]]:
        return trainer_from_bytes, (type(self), _ckpt.dumps(self.state_dict()))

    # ------------------------------------------------------------ steps
    #
    # The fused path (default) is ONE resident-session call per public call: the session
    # holds the state, the binding checks X's finiteness and the label range, runs the step
    # and writes loss, logits, gradients and input gradient into one fresh result buffer.
    # A refused step changes nothing inside the binding; anything failing after the binding
    # returned is undone by `_recover` (the session keeps the pre-step state until the next
    # step). MOJOLEARN_MLP_FUSED=0 runs the per-operation path on a host copy instead.

    def _hyper(self) -> list[float]:
        """The AdamW hyperparameters in the order the binding takes them."""
        c = self._config
        return [c["lr"], c["beta1"], c["beta2"], c["eps"], c["weight_decay"]]

    def _check_room(self, k: int) -> None:
        """Refuse `k` more steps when they would pass the step counter's bound."""
        if self._step + k > S.STEP_INT32_MAX:
            raise ValueError(
                f"{self._API}: the step counter is exhausted (step "
                f"{self._step} + {k} would pass 2**31-1)"
            )

    def _recover(self, t_before: int) -> None:
        """After a failure: roll the session back to step `t_before` if the step was applied."""
        try:
            self._step = self._session.rollback(t_before)
        except Exception:  # the session refused: it was never changed
            pass

    def _fit(self, rows: int) -> None:
        """A session whose scratch holds `rows` rows (reopened larger, state unchanged, when
        a batch outgrows it). Caller holds the lock."""
        if rows > self._session.capacity:  # checked again: callers test it before calling
            p, m, v, t = self._session.download()
            self._publish(
                p, m, v, t, capacity=min(self._max_rows, max(rows, 2 * self._session.capacity))
            )

    def _x_input(
        self, X: BufferLike, name: str = "X", stacked: bool = False
    ) -> tuple[object, int, int]:
        """(object to keep alive, address, rows) of a float32 C-contiguous (rows, inputs) batch;
        finiteness is checked by the binding."""
        return _batches.x_input(X, self._API, self._spec.inputs, self._max_rows, name, stacked)  # type: ignore[no-any-return]

    def _y_input(self, targets: BufferLike, rows: int) -> tuple[object, int, int]:
        """(object to keep alive, address, itemsize) of `rows` int32 labels; the binding checks
        the class range."""
        return _batches.y_input(targets, rows, self._spec.classes, self._API)  # type: ignore[no-any-return]

    if TYPE_CHECKING:  # forward mode has no gradient views

        @overload
        def _pass(
            self,
            X: BufferLike,
            targets: BufferLike | None,
            mode: Literal[0],
            want_dx: bool,
            k: int = 1,
            stacked: bool = False,
        ) -> tuple[PyArray, Array, None, None]: ...

        @overload
        def _pass(
            self,
            X: BufferLike,
            targets: BufferLike,
            mode: Literal[1, 2],
            want_dx: bool,
            k: int = 1,
            stacked: bool = False,
        ) -> tuple[PyArray, Array, dict[str, Array], Array | None]: ...

    def _pass(
        self,
        X: BufferLike,
        targets: BufferLike | None,
        mode: int,
        want_dx: bool,
        k: int = 1,
        stacked: bool = False,
    ) -> _Pass | None:
        """One resident pass (forward / grads / one train step) on X and targets (ignored in
        forward mode), or k train steps in one call over k stacked batches; returns the
        result buffer [losses (k) | logits | grads | input_grad] and the `_results` views of
        it (logits only in forward mode). The binding reads the objects itself; what it
        declines comes back through `_intake` (a copy, or the refusal naming it). Caller
        holds the lock."""
        spec = self._spec
        q = _batches.quick(X, targets, spec.inputs, self._max_rows, k)
        if q is not None:
            r = self._run_pass(*q, mode, want_dx, k)  # type: ignore[call-arg]  # q: 4 arguments
            if r is not None:
                return r
        x, xa, total = self._x_input(X, stacked=stacked)
        if stacked:
            self._check_stack(total, k)
        if mode == _MODE_FORWARD:
            y, ya, itemsize = x, xa, 4
        else:
            y, ya, itemsize = self._y_input(targets, total)  # type: ignore[arg-type]  # not None
        return self._run_pass(xa, ya, itemsize, total // k, mode, want_dx, k)

    def _check_stack(self, total: int, k: int) -> None:
        """Refuse X unless its `total` rows stack k equal batches of 1 to `max_rows` rows."""
        if total % k or not 1 <= total // k <= self._max_rows:
            raise ValueError(
                f"{self._API}: X must stack k={k} equal batches of 1 to "
                f"{self._max_rows} rows, got {total} rows"
            )

    def _run_pass(
        self,
        xa: object,
        ya: object,
        itemsize: int,
        rows: int,
        mode: int,
        want_dx: bool,
        k: int,
    ) -> _Pass | None:
        """`_pass` on inputs as the binding takes them (`_batches.quick`; rows 0: X is an
        object whose rows the binding takes, making the result buffer); None when it declined
        an object (nothing was done). A failure after the binding applied a training run
        (e.g. a MemoryError making the views) rolls it back."""
        if rows > self._session.capacity:
            self._fit(rows)
        spec = self._spec
        step = self._step
        grads: dict[str, Array] | None
        dx: Array | None
        try:
            if rows:
                buf = _ZERO * (
                    k + rows * spec.classes + spec.total + (rows * spec.inputs if want_dx else 0)
                )
                out = buf.buffer_info()[0]
            if k == 1:
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
                    self._session.handle, xa, ya, out if rows else _ZERO, rows, k, itemsize, step
                )
            if after is None:
                return None
            if not rows:
                after, buf, out, rows = after
            self._step = after
            if mode == _MODE_FORWARD:  # logits only: no gradient views to build
                logits, grads, dx = (
                    _result_view(buf, (rows, spec.classes), out + 4 * k, rows * spec.classes),
                    None,
                    None,
                )
            else:
                logits, grads, dx = _results(buf, out, spec, rows, k, want_dx)
        except BaseException as exc:
            if mode == _MODE_TRAIN:
                self._recover(step)
            new = _translate(_backend.translate(exc), self._API)
            if new is exc:
                raise
            raise new from None
        return buf, logits, grads, dx

    # -- the data-parallel pieces (mojolearn.distributed): caller holds the lock ---------

    def _microbatch(self, xa: int, ya: int, itemsize: int, rows: int, divide_by: int) -> PyArray:
        """The result buffer [loss | logits | grads] of one microbatch on the current state,
        its loss and gradient divided by `divide_by` (the whole batch's rows). No step."""
        if rows > self._session.capacity:
            self._fit(rows)
        spec = self._spec
        buf = _ZERO * (1 + rows * spec.classes + spec.total)
        try:
            _binding().mlp_resident_grads(
                [self._session.handle, xa, ya, buf.buffer_info()[0]],
                [rows, itemsize, divide_by, self._step],
            )
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc, self._API) from None
        return buf

    def _apply_flat(self, grads_addr: int) -> int:
        """One AdamW step in the session with the flat gradients at `grads_addr`; returns the
        new step count. All or nothing."""
        self._check_room(1)
        try:
            self._step = _binding().mlp_resident_apply(
                [self._session.handle, grads_addr], [self._step]
            )
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc, self._API) from None
        return self._step

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
                `return_input_grad` is not a bool.
            ValueError: a wrong shape, a non-finite X, a class out of range, or the step
                counter is exhausted.
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
            buf, logits, grads, dx = self._pass(X, targets, _MODE_TRAIN, return_input_grad)
            result: TrainStepResult = {
                "step": self._step,
                "loss": buf[0],
                "logits": logits,
                "gradients": grads,
            }
            if return_input_grad:
                result["input_grad"] = dx  # type: ignore[typeddict-item]  # an Array when asked
            return result

    def train_steps(self, X: BufferLike, targets: BufferLike, k: int) -> TrainStepsResult:
        """`k` AdamW steps in ONE binding call, bit-equal to k `train_step` calls.

        Batch i is rows i * n .. (i + 1) * n - 1 of X and targets. The k steps either all
        complete or change nothing.

        Args:
            X: float32 (k * n, inputs): k equal batches of 1 <= n <= `max_rows` rows,
                stacked.
            targets: integer (k * n,): their classes, stacked the same way.
            k: the number of steps, a positive int.

        Returns:
            `step` (the new count), `losses` (the k losses, in order), `loss` (the last),
            and `logits` and `gradients` of the last step.

        Raises:
            TypeError: X or targets is not a buffer of the right dtype.
            ValueError: `k` is not a positive int, X does not stack k batches of 1 to
                `max_rows` rows, a refused batch, or the step counter would pass its bound.
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

        All or nothing: every gradient is checked before the update, and a non-finite
        result leaves the state as it was.

        Args:
            gradients: float32 buffers in parameter order (weight1, bias1, ..., biasL), each
                of its parameter's exact shape, finite (a list, not a dict).

        Returns:
            The new step count.

        Raises:
            TypeError: not a sequence of float32 buffers (a dict is refused).
            ValueError: a wrong count, shape or non-finite value, or the step counter is
                exhausted.
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
            t: int
            p, m, v, t = self._session.download()  # fresh copies: the update runs on them
            try:
                _binding().mlp_adamw(
                    [p._addr, g._addr, m._addr, v._addr], [spec.total, t + 1, *self._hyper()]
                )
            except (RuntimeError, ValueError) as exc:
                raise _translate(exc, api) from None
            self._publish(p, m, v, t + 1)
            return t + 1

    def predict_logits(self, X: BufferLike) -> Array:
        """The network's outputs on a batch with the current weights (no step).

        Args:
            X: float32 (n, inputs), 1 <= n <= `max_rows`; finite.

        Returns:
            The logits, a fresh float32 Array (n, classes).

        Raises:
            TypeError: X is not a float32 buffer.
            ValueError: a wrong shape or a non-finite X.
        """
        with self._lock:
            if not _fused_enabled():
                return self._forward_ops(self._owned_batch(X))
            return self._pass(X, None, _MODE_FORWARD, False)[1]

    def predict_logits_sessions(self, inputs: Sequence[BufferLike]) -> Array:
        """The logits of several batches with the current weights, concatenated.

        Each row's logits are the bits `predict_logits` gives it, whatever the batching.

        Args:
            inputs: float32 (n_i, inputs) buffers, 1 <= n_i <= `max_rows`, at least one.

        Returns:
            A fresh float32 Array (sum n_i, classes): the batches' logits in the order given.

        Raises:
            TypeError: `inputs` is not a list of float32 buffers.
            ValueError: no batch, a wrong shape or a non-finite value.
        """
        if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__iter__"):
            raise TypeError(
                f"{self._API}: inputs must be a list of float32 (n, "
                f"{self._spec.inputs}) buffers, got {type(inputs).__name__}"
            )
        batches = [self._owned_batch(X, name=f"inputs[{i}]") for i, X in enumerate(list(inputs))]
        if not batches:
            raise ValueError(f"{self._API}: inputs must hold at least one batch")
        # Rows are independent, so forwards over any grouping of the rows give each row's bits.
        with self._lock:
            raw = b"".join(self.predict_logits(x).tobytes() for x in batches)
        classes = self._spec.classes
        return Array(memoryview(raw).cast("f"), "<f4", (len(raw) // (4 * classes), classes))

    # ------------------------------------------------------------ per-operation path

    def _owned_batch(self, X: BufferLike, name: str = "X", stacked: bool = False) -> Array:
        """X as an owned float32 (rows, inputs) copy, checked finite."""
        return _batches.owned_batch(X, self._API, self._spec.inputs, self._max_rows, name, stacked)  # type: ignore[no-any-return]

    def _labels(self, targets: BufferLike, rows: int) -> Array:
        """targets as an int32 (rows,) Array of classes in range."""
        return _batches.targets(targets, rows, self._spec.classes, self._API)  # type: ignore[no-any-return]

    if TYPE_CHECKING:  # only a training run has a new state

        @overload
        def _run_ops(
            self,
            x: Array,
            y: Array,
            rows: int,
            mode: Literal[0, 1],
            k: int = 1,
            want_dx: bool = False,
        ) -> tuple[None, Array, Array, Array, Array | None]: ...

        @overload
        def _run_ops(
            self,
            x: Array,
            y: Array,
            rows: int,
            mode: Literal[2],
            k: int = 1,
            want_dx: bool = False,
        ) -> tuple[_State, Array, Array, Array, Array | None]: ...

    def _run_ops(
        self, x: Array, y: Array, rows: int, mode: int, k: int = 1, want_dx: bool = False
    ) -> _Ops:
        """The per-operation calls on a host copy of the state; returns
        (new _State or None, losses Array (k,), logits, flat grads, dx). Caller holds the lock."""
        from . import ops as _mlp_ops

        spec = self._spec
        st = self._st
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
                _binding(),
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
                self._hyper(),
            )
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc, self._API) from None
        return new, losses, logits, grads, (dx if want_dx else None)

    def _train_step_ops(self, X: BufferLike, targets: BufferLike, want_dx: bool) -> TrainStepResult:
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

    def _train_steps_ops(self, X: BufferLike, targets: BufferLike, k: int) -> TrainStepsResult:
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

    def _forward_ops(self, x: Array) -> Array:
        """`predict_logits` on the per-operation path. Caller holds the lock."""
        rows = x.shape[0]
        y = zeros((rows,), "<i4")
        return self._run_ops(x, y, rows, _MODE_FORWARD)[2]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({list(self._spec.sizes)}, step={self._step}, "
            f"lr={self._config['lr']}, mode={self._mode!r})"
        )

    # ------------------------------------------------------------ export

    def save_safetensors(self, path: str | os.PathLike[str]) -> None:
        """Write the current weights to a safetensors file, atomically (needs safetensors).

        The tensors carry the names, dtype and shapes of `MLPTrainer.to_torch().state_dict()`
        (`0.weight`, `0.bias`, `2.weight`, ...: float32, (out, in) and (out,)), so a torch
        model of these layer sizes loads `safetensors.torch.load_file(path)`; the metadata
        holds `layer_sizes`, `arithmetic_profile`, `numeric_mode`, `step` and `state_hash`.
        Weights only: a checkpoint holds the whole resumable state.

        Args:
            path: the file (replaced if it exists; a reader sees the old file or the new one).

        Raises:
            ImportError: the safetensors package is not installed (`pip install safetensors`).
            ValueError: `path` names something other than a regular file; nothing is written.
            OSError: the file cannot be written.

        Example:
            >>> trainer.save_safetensors("model.safetensors")
            >>> MLPTrainer.from_safetensors("model.safetensors").layer_sizes
        """
        from . import export as _export

        _export.save_safetensors(path, self.state_dict(), self._API)

    def export_onnx(self, path: str | os.PathLike[str]) -> None:
        """Write the network, for inference, as an ONNX model, atomically (needs onnx).

        Input `input`: float32 [batch, inputs] (any batch); output `logits`: float32 [batch,
        classes]; one `Gemm` per layer with a `Relu` between two, at ONNX opset 13. The model
        passes `onnx.checker.check_model` and carries the safetensors metadata.

        Args:
            path: the file (replaced if it exists; a reader sees the old file or the new one).

        Raises:
            ImportError: the onnx package is not installed (`pip install onnx`).
            ValueError: `path` names something other than a regular file; nothing is written.
            OSError: the file cannot be written.

        Example:
            >>> trainer.export_onnx("model.onnx")
            >>> onnxruntime.InferenceSession("model.onnx").run(None, {"input": X})[0]
        """
        from . import export as _export

        _export.export_onnx(path, self.state_dict(), self._API)

    # ------------------------------------------------------------ inference (`_infer`)

    def predict(self, X: BufferLike) -> Array:
        """The predicted class of each row with the current weights (no step).

        The class is the argmax of the row's logits, ties going to the lowest class index
        (as `torch.argmax`, which returns the first maximal value).

        Args:
            X: float32 (n, inputs), any n >= 1 (more than `max_rows` rows run in chunks of at
                most `max_rows`; each row gets the result it has alone); finite.

        Returns:
            A fresh int32 Array (n,).

        Raises:
            TypeError: X is not a float32 buffer.
            ValueError: a wrong shape, no row, or a non-finite X.
        """
        return _infer.predict(self, X)

    def predict_proba(self, X: BufferLike) -> Array:
        """The class probabilities of each row with the current weights (no step).

        The softmax of the row's logits, computed in the binding with the arithmetic
        profile's exp: p_j = e_j / s with cross-entropy's e_j = exp32(z_j - max_k z_k) and s
        = their sum, j ascending (docs/ARITHMETIC.md "Probabilities"; identical mode gives
        the same bits everywhere). A row sums to 1 within a few float32 roundings.

        Args:
            X: float32 (n, inputs), any n >= 1 (chunked as in `predict`); finite.

        Returns:
            A fresh float32 Array (n, classes).

        Raises:
            TypeError: X is not a float32 buffer.
            ValueError: a wrong shape, no row, or a non-finite X.
        """
        return _infer.predict_proba(self, X)

    def evaluate(self, X: BufferLike, y: BufferLike) -> EvaluateResult:
        """The loss, accuracy and per-class metrics of a labelled set (no step).

        `loss` is the mean cross-entropy by the kernel the steps use: in identical mode the
        bits of the loss `train_step` would report on (X, y) before updating (for n <=
        `max_rows`). Predictions are `predict`'s. Per class c: precision = tp / (tp + fp),
        recall = tp / (tp + fn), f1 = 2·tp / (2·tp + fp + fn) (scikit-learn's definitions);
        a zero denominator gives 0.0, as scikit-learn with `zero_division=0`.

        Args:
            X: float32 (n, inputs), any n >= 1 (chunked as in `predict`); finite.
            y: integer (n,): the class of each row, 0..classes-1.

        Returns:
            {"loss": float, "accuracy": float, "per_class": {"precision": [...],
            "recall": [...], "f1": [...], "support": [...]}, "confusion": [[...], ...]}:
            lists indexed by class, support and confusion[true][predicted] as ints
            (`EvaluateResult`).

        Raises:
            TypeError: X is not a float32 buffer, or y not an integer buffer.
            ValueError: a wrong shape, no row, a non-finite X or a class out of range.
            RuntimeError: the loss is not finite.
        """
        return _infer.evaluate(self, X, y)
