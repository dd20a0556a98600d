"""`Trainer`'s port for `mojolearn.distributed` (`Trainer._port()`): the same narrow way in as
the MLP's (`_mlp/port.py`): read a batch, compute a microbatch's loss and gradients, apply
combined gradients, and the facts the processes compare. A microbatch's result buffer is
[loss | gradients] (`result_at`).
"""

from __future__ import annotations

import json
import math

from .._mlp import lr_schedule as _lrs
from .._runtime import backend as _backend

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
        # The trainer's own bound methods: no frame of the port's between DataParallel and them.
        self.microbatch = trainer._microbatch
        self.apply = trainer._apply_flat

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
        from .trainer import _inputs

        x = _inputs(X, self._trainer._spec, None)
        return x, x._addr, x._shape[0]

    def read_labels(self, targets: BufferLike, rows: int) -> tuple[object, int, int]:
        """(object to keep alive, address, bytes per example) of `rows` examples' targets, as
        `train_step` takes them; refused by name otherwise (the binding checks class ids)."""
        from .trainer import _targets

        y = _targets(targets, self._trainer._spec, rows)
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
