"""`SmallMLPTrainer`: Linear(8, 16) → ReLU → Linear(16, 3), mean cross-entropy, AdamW.

The [8, 16, 3] case of the MLP trainer core (`_mlp.core.MLPCore`, which MLPTrainer is too):
the reference's constructor (four weight buffers), its state layout and file schema
(`mojolearn.small-mlp-checkpoint.v1`, with the always-zero flags), a batch limit of 256 rows,
and one fast path a benchmark justifies: `train_step` checks Array inputs inline, hands any other
X to the binding as it is, and builds its five result views unrolled (at batch 1 each saved
call is ~3 % of a ~3 µs step).
Everything else — state, validation, transactions, the other steps, checkpoints — is the core's.
"""

from __future__ import annotations

from ._buffers.alloc import zeros
from ._buffers.array import Array, _new_object, _result_view
from ._buffers.intake import owned_tensor
from ._mlp import lr_schedule as _lrs
from ._mlp import state as S
from ._mlp.core import MLPCore
from ._mlp.schema import SMALL_RECORD
from ._mlp.spec import SMALL, ResultLayout
from ._mlp.steps import (
    _FUSED_KEY,
    _MODE_TRAIN,
    _OFF,
    _ZERO,
    _binding,
    _env_get,
    _step_result,
)
from ._mlp.steps import _translate as _core_translate
from ._runtime import backend as _backend

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import os
    from collections.abc import Callable
    from typing import Any

    from ._buffers.types import BufferLike, LRSchedule, TrainStepResult

_IN, _HID, _OUT = S.ARCHITECTURE
_MAX_ROWS = 256
_API = SMALL_RECORD.api  # "SmallMLPTrainer"
_MAX_STEP = S.STEP_INT32_MAX
# `train_step` unrolls its result views; their constants come from the spec and the result
# layout, here, once. The unrolled body is four gradient views (offsets 0, 128, 144, 192).
assert S.OFFSETS == (0, 128, 144, 192) and S.TOTAL == 195 and S.ARCHITECTURE == [8, 16, 3]
_W1_SHAPE, _B1_SHAPE, _W2_SHAPE, _B2_SHAPE = S.SHAPES
_W1_SIZE, _B1_SIZE, _W2_SIZE, _B2_SIZE = (view[3] for view in SMALL.views)
_W1_AT, _B1_AT, _W2_AT, _B2_AT = (view[2] for view in SMALL.views)  # bytes into the gradients


def _views_at(rows: int, want_dx: bool) -> tuple[int, int, int, int, int, int, int | None]:
    """`ResultLayout` as `train_step` reads it: the buffer's size in floats, then the byte
    offsets from its start of the logits (z), weight1, bias1, weight2, bias2 and input_grad
    (None unless `want_dx`) of a batch of `rows`."""
    at = ResultLayout(1, rows, SMALL, want_dx)
    g = 4 * at.grads
    dx = None if at.input_grad is None else 4 * at.input_grad
    return at.size, 4 * at.logits, g + _W1_AT, g + _B1_AT, g + _W2_AT, g + _B2_AT, dx


# `_AT[rows][want_dx]`: an index and an unpack cost what the offset arithmetic did (making a
# ResultLayout per step would cost ~1 µs; reading its fields and scaling them, ~30 ns).
_AT = [(_views_at(rows, False), _views_at(rows, True)) for rows in range(_MAX_ROWS + 1)]
_LOGITS_SHAPES = [(rows, _OUT) for rows in range(_MAX_ROWS + 1)]  # shared, not rebuilt per step


def _translate(exc: BaseException) -> BaseException:
    """A binding refusal as SmallMLPTrainer's error (see `_mlp.steps._translate`)."""
    return _core_translate(exc, _API)


class SmallMLPTrainer(MLPCore):
    """Trainer for the fixed 8→16→3 ReLU network with mean cross-entropy and AdamW.

    Args:
        weight1, bias1, weight2, bias2: float32 buffers of shapes (16, 8), (16,), (3, 16), (3,)
            (NumPy arrays, array.array, memoryview or mojolearn.Array; lists are refused).
            Copied, never aliased.
        data_schedule: a non-empty, bounded JSON object describing the data order (dataset
            hash, seed, cursor ...). Stored with the state and in checkpoints; never compared
            with the batches passed. None (the default) records {"source": "unspecified"};
            `mojolearn.fit` adds its record under "fit".
        lr, betas, eps, weight_decay: AdamW hyperparameters, kept as given (each step's
            scalars are formed from them in binary64, docs/ARITHMETIC.md profile v2) and
            checked as given and in float32 (lr > 0, eps > 0, weight_decay >= 0, betas in
            [0, 1)).
        lr_schedule: None (every step at `lr`), or a learning-rate schedule giving every
            step's rate: `ConstantLR`, `WarmupLinearLR`, `WarmupCosineLR` or any object with
            a one-based `lr_at(t)` (see the `lr_schedule` property).

    Raises:
        TypeError: a parameter is not a float32 buffer, or `lr_schedule` has no `lr_at`.
        ValueError: wrong shape, non-finite value, bad hyperparameter or data_schedule.

    A step either completes or changes nothing; calls from several threads are serialized.
    A batch has 1 to 256 rows (`max_rows`).
    `lr`, `weight_decay` and `lr_schedule` may be assigned (checked as here; a refused value
    changes nothing; `lr` is refused while a schedule is set): the next step uses the new
    value, and `state_dict`, checkpoints and the state hash record it. Every other public
    attribute is read-only (AttributeError).

    Example:
        >>> w1, b1, w2, b2 = ...  # float32 (16, 8), (16,), (3, 16), (3,)
        >>> trainer = mojolearn.SmallMLPTrainer(w1, b1, w2, b2, data_schedule={"seed": 0})
        >>> out = trainer.train_step(X, y)  # X: float32 (n, 8), y: integer (n,)
        >>> out["step"], out["loss"]
    """

    __slots__ = ("_run_step",)
    _API = _API
    _SCHEMA_REC = SMALL_RECORD
    _run_step: Callable[..., Any]  # the binding's mlp_resident_step

    def __init__(
        self,
        weight1: BufferLike,
        bias1: BufferLike,
        weight2: BufferLike,
        bias2: BufferLike,
        *,
        data_schedule: dict[str, Any] | None = None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        lr_schedule: LRSchedule | None = None,
    ) -> None:
        weights = [
            owned_tensor(w, s, n, _API)
            for w, s, n in zip((weight1, bias1, weight2, bias2), S.SHAPES, S.NAMES)
        ]
        config = S.check_config(lr, betas, eps, weight_decay)
        schedule = S.check_schedule(data_schedule)
        lr_sched = _lrs.checked(lr_schedule, _API)
        self._init_core(
            SMALL,
            S.flat(weights),
            config,
            schedule,
            flags=zeros((4,), "<i4"),
            max_rows=_MAX_ROWS,
            lr_schedule=lr_sched,
        )
        self._run_step = _binding().mlp_resident_step  # train_step's entry, looked up once

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        *,
        allow_profile_change: bool = False,
        lr_schedule: LRSchedule | None = None,
    ) -> SmallMLPTrainer:
        """A trainer restored from `save_checkpoint` output.

        Size, schema, hash, arithmetic profile and every field are checked before anything
        is built. A learning-rate schedule the file records continues where it stood: the
        project's schedules are rebuilt from the file; a custom one must be passed again.

        Args:
            path: the checkpoint file.
            allow_profile_change: accept a file written under another arithmetic profile (a
                migration: bits then follow this mojolearn's arithmetic).
            lr_schedule: the file's schedule again: required when it recorded a custom one
                (an object of the recorded class); a project schedule must equal the record;
                refused when the file has none.

        Returns:
            The restored trainer.

        Raises:
            ValueError: the file is refused (named reason), or `lr_schedule` is not the
                file's schedule; nothing is built.
            TypeError: `lr_schedule` has no `lr_at`.
            OSError: the file cannot be read.

        Example:
            >>> t = SmallMLPTrainer.from_checkpoint("run.ckpt")  # a WarmupCosineLR continues
            >>> t = SmallMLPTrainer.from_checkpoint("run.ckpt", lr_schedule=MySchedule())
        """
        state = cls._load(path, allow_profile_change, None)
        return cls._from_state(state, lr_schedule)

    @classmethod
    def _from_state(
        cls, state: dict[str, Any], lr_schedule: LRSchedule | None = None
    ) -> SmallMLPTrainer:
        """A trainer holding a `state_dict()`, validated as `load_state_dict` validates it
        (`lr_schedule` as it takes it)."""
        w = state["weights"]
        cfg = state["config"]
        trainer = cls(
            w["weight1"],
            w["bias1"],
            w["weight2"],
            w["bias2"],
            data_schedule=state["data_schedule"],
            lr=cfg["lr"],
            betas=(cfg["beta1"], cfg["beta2"]),
            eps=cfg["eps"],
            weight_decay=cfg["weight_decay"],
        )
        return trainer.load_state_dict(state, lr_schedule=lr_schedule)

    def train_step(
        self, X: BufferLike, targets: BufferLike, *, return_input_grad: bool = False
    ) -> TrainStepResult:
        """One AdamW step on a batch: mean cross-entropy, its gradients, the update.

        The step either completes or changes nothing (a refused batch, a non-finite result,
        an interrupt). Its body is long and unrolled, hot on purpose: at batch 1 every Python
        call saved is ~3 % of the step (`tools/bench_train.py`), so it is one frame.

        Args:
            X: float32 (n, 8), 1 <= n <= 256, C-contiguous or not (a strided one is
                copied); finite.
            targets: integer (n,): the class of each row, 0..2.
            return_input_grad: also return d(loss)/dX.

        Returns:
            `step` (the new count), `loss` (before the update), `logits` (n, 3) before the
            update, `gradients` (weight1, bias1, weight2, bias2) and, when asked,
            `input_grad` (n, 8). The Arrays are fresh (one buffer, not the trainer's).

        Raises:
            TypeError: X or targets is not a buffer of the right dtype, or
                `return_input_grad` is not a bool; a scheduled rate that is no real number.
            ValueError: a wrong shape, a non-finite X, a class out of range, the step
                counter is exhausted, or the scheduled rate (`lr_schedule.lr_at(step_ + 1)`)
                is not finite and >= 0 (what `lr_at` raises propagates; nothing changes).
            RuntimeError: the step produced a non-finite result (nothing was applied).

        Example:
            >>> out = trainer.train_step(X, y)  # X: float32 (n, 8), y: integer (n,)
            >>> out["step"], out["loss"], out["gradients"]["weight1"].shape
        """
        if return_input_grad is not False and return_input_grad is not True:
            raise TypeError(
                f"SmallMLPTrainer: return_input_grad must be a bool, got "
                f"{type(return_input_grad).__name__}"
            )
        # An Array X (and int32 Array targets) checked inline; any other X goes to the binding
        # as it is: it reads X and targets, takes the rows from X and makes the result buffer,
        # or declines, saying why (`_declined` then copies, converts or refuses by name). At
        # batch 1 each saved call is ~3 % of a step (bench_train.py).
        xa: object  # an address, or the object itself (rows 0)
        ya: object
        if (
            type(X) is Array
            and X._dtype == "<f4"
            and len(shape := X._shape) == 2
            and shape[1] == _IN
            and 0 < (rows := shape[0]) <= _MAX_ROWS
        ):
            xa = X._addr
            if type(targets) is Array and targets._dtype == "<i4" and targets._shape == (rows,):
                ya, itemsize = targets._addr, 4
            else:  # through the reader; its keep-alive lives as long as this frame
                y_kept, ya, itemsize = self._reader.y(targets, rows)
        else:
            xa, rows, itemsize = X, 0, 0
            ya = targets._mv if type(targets) is Array else targets  # a buffer the binding reads
        lock = self._lock
        lock.acquire()  # explicit: `with` costs ~0.05 µs more
        try:
            step = self._step
            if step >= _MAX_STEP:
                self._check_room(1)
            if _env_get(_FUSED_KEY) == _OFF:
                return self._train_step_ops(X, targets, return_input_grad)
            if self._lr_schedule is not None:  # the session at this step's rate (or refused)
                self._session.set_lr(self._rates(step + 1, 1)[0])
            try:
                if rows:
                    size, z_at, w1_at, b1_at, w2_at, b2_at, dx_at = _AT[rows][return_input_grad]
                    buf = _ZERO * size
                    addr = buf.buffer_info()[0]
                    self._step = self._run_step(
                        self._session.handle,
                        xa,
                        ya,
                        addr,
                        _MODE_TRAIN,
                        rows,
                        itemsize,
                        return_input_grad,
                        step,
                    )
                else:
                    r = self._run_step(
                        self._session.handle,
                        xa,
                        ya,
                        _ZERO,  # the template the binding makes the buffer from
                        _MODE_TRAIN,
                        0,
                        0,
                        return_input_grad,
                        step,
                    )
                    if type(r) is tuple:
                        self._step, buf, addr, rows = r
                        _, z_at, w1_at, b1_at, w2_at, b2_at, dx_at = _AT[rows][return_input_grad]
                if rows:  # `_results`, inlined and unrolled for this hottest call (~5 %)
                    make = _new_object
                    A = Array
                    logits = make(A)
                    logits._owner = buf
                    logits._shape = _LOGITS_SHAPES[rows]
                    logits._size = rows * _OUT
                    logits._addr = addr + z_at
                    w1 = make(A)
                    w1._owner = buf
                    w1._shape = _W1_SHAPE
                    w1._size = _W1_SIZE
                    w1._addr = addr + w1_at
                    b1 = make(A)
                    b1._owner = buf
                    b1._shape = _B1_SHAPE
                    b1._size = _B1_SIZE
                    b1._addr = addr + b1_at
                    w2 = make(A)
                    w2._owner = buf
                    w2._shape = _W2_SHAPE
                    w2._size = _W2_SIZE
                    w2._addr = addr + w2_at
                    b2 = make(A)
                    b2._owner = buf
                    b2._shape = _B2_SHAPE
                    b2._size = _B2_SIZE
                    b2._addr = addr + b2_at
                    logits._dtype = w1._dtype = b1._dtype = w2._dtype = b2._dtype = "<f4"
                    logits._readonly = w1._readonly = b1._readonly = w2._readonly = b2._readonly = (
                        False
                    )
                    result: TrainStepResult = {
                        "step": self._step,
                        "loss": buf[0],
                        "logits": logits,
                        "gradients": {"weight1": w1, "bias1": b1, "weight2": w2, "bias2": b2},
                    }
                    if dx_at is not None:  # return_input_grad
                        result["input_grad"] = _result_view(
                            buf, (rows, _IN), addr + dx_at, rows * _IN
                        )
                    return result
            except BaseException as exc:  # refused, or e.g. a KeyboardInterrupt after it ran
                self._recover(step)
                new = _translate(_backend.translate(exc))
                if new is exc:
                    raise
                raise new from None
            return self._declined(X, targets, return_input_grad, r)
        finally:
            lock.release()

    def _declined(
        self, X: BufferLike, targets: BufferLike, want_dx: bool, reason: int
    ) -> TrainStepResult:
        """`train_step` on what the binding declined for `reason`: the operand it declined
        copied or converted (or refused by name) by the reader, then the step on addresses.
        Caller holds the lock."""
        lrs = self._step_rates(1)
        r = self._declined_pass(X, targets, _MODE_TRAIN, want_dx, 1, False, lrs, reason)
        return _step_result(self._step, r, want_dx)

    def __repr__(self) -> str:
        return f"SmallMLPTrainer(step={self._step}, {self._lr_repr()}, mode={self._mode!r})"
