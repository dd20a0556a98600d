"""The one narrow way `mojolearn.distributed` drives a trainer (`MLPCore._port()`): read a
batch, compute a microbatch's gradients, apply combined gradients, and the few facts the
processes compare. DataParallel touches nothing else of the trainer but its public surface.
"""

from __future__ import annotations

from . import lr_schedule as _lrs

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from typing import Any

    from .._buffers.types import BufferLike, PyArray
    from .core import MLPCore
    from .session import Session
    from .spec import LayerSizes


class Port:
    """What data-parallel training needs of one trainer.

    Attributes:
        api: the trainer's name in messages ("SmallMLPTrainer", "MLPTrainer").
        mode: the numeric mode its steps run in.
        spec: its layer sizes (`ResultLayout` gives its result buffers' offsets).
        lock: the trainer's lock: hold it around `microbatch` and `apply`.
        microbatch: (x_addr, y_addr, y_itemsize, rows, divide_by) -> the result buffer of one
            microbatch on the current state (`ResultLayout(1, rows, spec, False)`), its loss
            and gradients divided by `divide_by`; no step.
        apply: (grads_addr) -> one AdamW step with the flat gradients at `grads_addr` (the
            trainer's schedule gives its rate); returns the new step count. All or nothing.
    """

    __slots__ = ("_core", "api", "mode", "spec", "lock", "microbatch", "apply")
    api: str
    mode: str
    spec: LayerSizes
    lock: threading.RLock
    microbatch: Callable[[int, int, int, int, int], PyArray]
    apply: Callable[[int], int]

    def __init__(self, core: MLPCore) -> None:
        self._core = core
        self.api, self.mode, self.spec, self.lock = core._API, core._mode, core._spec, core._lock
        # The core's own bound methods: no frame of the port's between DataParallel and them.
        self.microbatch = core._microbatch
        self.apply = core._apply_flat

    def read(self, X: BufferLike) -> tuple[object, int, int]:
        """(object to keep alive, address, rows) of X: float32 C-contiguous (rows, inputs),
        any number of rows (stacked microbatches); refused by name otherwise."""
        return self._core._reader.x(X, stacked=True)  # type: ignore[no-any-return]

    def read_labels(self, targets: BufferLike, rows: int) -> tuple[object, int, int]:
        """(object to keep alive, address, itemsize) of `rows` integer labels; refused by name
        otherwise (the binding checks the class range)."""
        return self._core._reader.y(targets, rows)  # type: ignore[no-any-return]

    def mark(self) -> tuple[Session, int]:
        """(the resident session, the step count): a different mark means the state may have
        changed (a load, a setting or a step reopens or steps the session)."""
        core = self._core
        return core._session, core._step

    def config(self) -> dict[str, float]:
        """The AdamW hyperparameters as given (lr, beta1, beta2, eps, weight_decay): a copy."""
        return dict(self._core._config)

    def schedule_record(self) -> dict[str, Any] | None:
        """The learning-rate schedule's record (what checkpoints store), or None without one."""
        schedule = self._core._lr_schedule
        return None if schedule is None else _lrs.record(schedule)
