"""`Trainer`'s port for `mojolearn.distributed` (`Trainer._port()`): the same narrow way in as
the MLP's (`_mlp/port.py`): read a batch, compute a microbatch's loss and gradients, apply
combined gradients, and the facts the processes compare. A microbatch's result buffer is
[loss | gradients] (`result_at`).
"""

from __future__ import annotations

import array as _pyarray
import functools
import json
import math

from .._buffers.alloc import empty
from .._mlp import lr_schedule as _lrs
from .._runtime import backend as _backend
from . import batch as _batch

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from typing import Any

    from .._buffers.types import BufferLike, PyArray
    from .trainer import Trainer

# The model record names the whole model (layers, input shape, loss) as the MLP's sizes do.
MODEL_FACT = "the model (layers, input shape, loss)"


class ModelPort:
    """What data-parallel training needs of one `Trainer`.

    Attributes:
        api: "Trainer", the name in messages.
        mode: the numeric mode its steps run in.
        inputs: one example's input floats (X's row stride).
        total: the floats of the flat parameters (and of each gradient).
        model_fact: the name of the model fact the processes compare (`model`).
        lock: the trainer's lock: hold it around `microbatch` and `apply`.
        microbatch: (x_addr, y_addr, row_bytes, rows, divide_by, first_row) -> [loss |
            gradients] of examples [first_row, first_row + rows) of a batch of `divide_by`
            examples (the loss's and gradients' divisor counts all of that batch's positions
            or outputs; Dropout's global element index starts at `first_row`) on the current
            state; no step.
        apply: (grads_addr) -> one AdamW step with the flat gradients at `grads_addr` (the
            trainer's schedule gives its rate); returns the new step count. All or nothing.
    """

    __slots__ = (
        "_trainer",
        "api",
        "mode",
        "inputs",
        "total",
        "model_fact",
        "lock",
        "microbatch",
        "apply",
    )
    api: str
    mode: str
    inputs: int
    total: int
    model_fact: str
    lock: threading.RLock
    microbatch: Callable[[int, int, int, int, int, int], PyArray]
    apply: Callable[[int], int]

    def __init__(self, trainer: Trainer) -> None:
        spec = trainer._spec
        self._trainer = trainer
        self.api, self.mode = "Trainer", _backend.binding().mode
        self.inputs, self.total = math.prod(spec.input_shape), spec.total
        self.model_fact = MODEL_FACT
        self.lock = trainer._lock
        # Bound to the trainer once: no frame of the port's between DataParallel and them.
        self.microbatch = functools.partial(microbatch, trainer)
        self.apply = functools.partial(apply_flat, trainer)

    @staticmethod
    def result_at(rows: int) -> tuple[int, int]:
        """(loss, first gradient) offsets in a microbatch's result buffer, for any rows."""
        return 0, 1

    def model(self) -> tuple[object, str]:
        """(value compared, value shown) of the model: its record as canonical JSON (every
        argument), shown as its one-line repr with the input shape and loss."""
        spec = self._trainer._spec
        shown = f"{spec.model!r} on input_shape {spec.input_shape} with loss {spec.loss!r}"
        return json.dumps(spec.record(), sort_keys=True), shown[:240]

    def read(self, X: BufferLike) -> tuple[object, int, int]:
        """(object to keep alive, address, rows) of X: float32 (rows, *input_shape), any
        number of rows (stacked microbatches), finite; refused by name otherwise."""
        x = _batch.inputs(X, self._trainer._spec, None)
        return x, x._addr, x._shape[0]

    def read_labels(self, targets: BufferLike, rows: int) -> tuple[object, int, int]:
        """(object to keep alive, address, bytes per example) of `rows` examples' targets, as
        `train_step` takes them; refused by name otherwise (the binding checks class ids)."""
        y = _batch.targets(targets, self._trainer._spec, rows)
        return y, y._addr, 4 * (y._size // rows)

    def mark(self) -> tuple[tuple[object, ...], int]:
        """(the state's objects, the step count): `changed` tells whether a load, a setting or
        a step replaced any of them since."""
        t = self._trainer
        return (t._state, t._config, t._lr_schedule, t._schedule), t._step

    def changed(self, mark: tuple[Any, int]) -> bool:
        """Whether the trainer's state may differ from `mark`'s (any object replaced, or
        another step count)."""
        held, step = mark
        now, now_step = self.mark()
        return step != now_step or any(a is not b for a, b in zip(held, now))

    def config(self) -> dict[str, float]:
        """The AdamW hyperparameters as given (lr, beta1, beta2, eps, weight_decay): a copy."""
        return dict(self._trainer._config)

    def schedule_record(self) -> dict[str, Any] | None:
        """The learning-rate schedule's record (what checkpoints store), or None without one."""
        schedule = self._trainer._lr_schedule
        return None if schedule is None else _lrs.record(schedule)


def microbatch(
    self: Trainer, xa: int, ya: int, row_bytes: int, rows: int, divide_by: int, first_row: int
) -> PyArray:
    """[loss | gradients] of examples [first_row, first_row + rows) of a batch of
    `divide_by` examples on the current state (ARITHMETIC.md "Data parallel"): the loss
    and gradients of the sum of their losses over the whole batch's count of positions
    (or outputs, for MSE), Dropout as in that batch's step. No step. `row_bytes` is the
    targets' stride (the port's `read_labels`)."""
    spec = self._spec
    out = spec.output_shape
    per = math.prod(out[:-1]) if spec.loss == "cross_entropy" else math.prod(out)
    buf = _pyarray.array("f", bytes(4 * (1 + spec.total)))
    at = buf.buffer_info()[0]
    p, m, v = self._state
    outputs = empty((rows, *out))
    addrs = [xa, ya, p._addr, m._addr, v._addr, p._addr, m._addr, v._addr]
    addrs += [at, outputs._addr, at + 4]  # mode grads writes no new state
    head = [rows, 1, 1, self._step + 1, self._config["lr"]]  # mode 1: grads  # lr: unused in grads
    self._run(addrs, head, first_row, divide_by * per)
    return buf


def apply_flat(self: Trainer, grads_addr: int) -> int:
    """One AdamW step with the flat gradients at `grads_addr` (`mlp_adamw`: the same
    `adamw_flat` as a whole step's) at this step's rate, on copies published at once;
    returns the new step count. All or nothing."""
    with self._lock:
        t = self._step + 1
        lr = self._rate(t)
        p, m, v = (a.copy() for a in self._state)
        c = self._config
        hyper = [lr, c["beta1"], c["beta2"], c["eps"], c["weight_decay"]]
        try:
            _backend.binding().mlp_adamw(
                [p._addr, grads_addr, m._addr, v._addr], [self._spec.total, t, *hyper]
            )
        except RuntimeError as exc:
            raise RuntimeError(f"Trainer: the step produced a non-finite result ({exc})") from None
        self._publish((p, m, v), 1)
        return self._step
