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
    from .spec import LayerSizes, ResultLayout


class Port:
    """What data-parallel training needs of one trainer.

    Attributes:
        api: the trainer's name in messages ("SmallMLPTrainer", "MLPTrainer").
        mode: the numeric mode its steps run in.
        spec: its layer sizes (`ResultLayout` gives its result buffers' offsets).
        inputs: one example's input floats (X's row stride).
        total: the floats of the flat parameters (and of each gradient).
        model_fact: the name of the model fact the processes compare (`model`).
        lock: the trainer's lock: hold it around `microbatch` and `apply`.
        microbatch: (x_addr, y_addr, y_itemsize, rows, divide_by, first_row) -> the result
            buffer of one microbatch on the current state (`ResultLayout(1, rows, spec,
            False)`), its loss and gradients divided by `divide_by`; no step (an MLP has no
            Dropout: `first_row` changes nothing).
        apply: (grads_addr) -> one AdamW step with the flat gradients at `grads_addr` (the
            trainer's schedule gives its rate); returns the new step count. All or nothing.
    """

    __slots__ = (
        "_core",
        "api",
        "mode",
        "spec",
        "inputs",
        "total",
        "model_fact",
        "lock",
        "microbatch",
        "apply",
    )
    api: str
    mode: str
    spec: LayerSizes
    inputs: int
    total: int
    model_fact: str
    lock: threading.RLock
    microbatch: Callable[[int, int, int, int, int, int], PyArray]
    apply: Callable[[int], int]

    def __init__(self, core: MLPCore) -> None:
        self._core = core
        self.api, self.mode, self.spec, self.lock = core._API, core._mode, core._spec, core._lock
        self.inputs, self.total = core._spec.inputs, core._spec.total
        self.model_fact = "layer sizes"
        # The core's own bound methods: no frame of the port's between DataParallel and them.
        self.microbatch = core._microbatch
        self.apply = core._apply_flat

    def result_at(self, rows: int) -> tuple[int, int]:
        """(loss, first gradient) offsets in the result buffer of a microbatch of `rows`."""
        at: ResultLayout = self.spec.layouts[rows][False]
        return at.losses, at.grads

    def model(self) -> tuple[object, str]:
        """(value compared, value shown) of the model: its layer sizes."""
        sizes = self._core.layer_sizes
        return tuple(sizes), str(sizes)

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

    def changed(self, mark: tuple[Any, int]) -> bool:
        """Whether the trainer's state may differ from `mark`'s (another session or step)."""
        session, step = self.mark()
        return session is not mark[0] or step != mark[1]

    def config(self) -> dict[str, float]:
        """The AdamW hyperparameters as given (lr, beta1, beta2, eps, weight_decay): a copy."""
        return dict(self._core._config)

    def schedule_record(self) -> dict[str, Any] | None:
        """The learning-rate schedule's record (what checkpoints store), or None without one."""
        schedule = self._core._lr_schedule
        return None if schedule is None else _lrs.record(schedule)
