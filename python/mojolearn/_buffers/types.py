"""Types for annotations: what the API accepts (`BufferLike`), what a step returns
(`TrainStepResult`, `TrainStepsResult`, `StepLoss`) and what `evaluate` returns
(`EvaluateResult`, `PerClassMetrics`).

Nothing in the package imports this module at run time except through `if TYPE_CHECKING:`
(the annotations are strings, `from __future__ import annotations`), so neither this module
nor `typing` is loaded by `import mojolearn` or by a training step.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Union, runtime_checkable

from .array import Array

if TYPE_CHECKING:
    from typing import TypeAlias

    # Subscripted for the checker only: at run time (pdoc, get_type_hints) array.array is not
    # subscriptable before 3.12, memoryview not at all.
    PyArray: TypeAlias = array.array[Any]
    View: TypeAlias = memoryview[Any]
else:
    PyArray = array.array
    View = memoryview

DType: TypeAlias = Literal["<f4", "<i4", "<f8", "<i8"]
"""An Array dtype: NumPy's little-endian typestr of float32, int32, float64, int64."""

__all__ = [
    "BufferLike",
    "Buffers",
    "DType",
    "EvaluateResult",
    "LRSchedule",
    "PerClassMetrics",
    "StepLoss",
    "SupportsDLPack",
    "TrainStepResult",
    "TrainStepsResult",
]


@runtime_checkable
class SupportsDLPack(Protocol):
    """An object that exports its memory through DLPack: NumPy arrays, torch tensors, JAX
    arrays, `mojolearn.Array`.

    Only CPU memory is accepted at run time (`__dlpack_device__()` must be `(1, 0)`); the
    dtype and layout are checked then too.
    """

    def __dlpack__(
        self, *, stream: None = None, max_version: tuple[int, int] | None = None
    ) -> object:
        """A DLPack capsule of the memory."""
        ...

    def __dlpack_device__(self) -> tuple[int, int]:
        """(device type, device index): (1, 0) is the CPU."""
        ...


if sys.version_info >= (3, 12):
    from collections.abc import Buffer

    BufferLike: TypeAlias = Union[Array, Buffer, SupportsDLPack]
else:
    BufferLike: TypeAlias = Union[Array, View, bytes, bytearray, PyArray, SupportsDLPack]
"""What every entry that takes a tensor accepts: a `mojolearn.Array`, any
buffer-protocol object (memoryview, array.array, bytes, bytearray, a NumPy array) or any object
with `__dlpack__` (a CPU torch tensor, a JAX array).

Before Python 3.12 the buffer protocol has no type, so the buffer half lists the standard
library's buffer types (NumPy arrays and torch tensors match `SupportsDLPack`); from 3.12 it is
`collections.abc.Buffer`. Dtype, shape and contiguity are checked at run time: a static type
cannot say "float32, C-contiguous, (n, 8)".
"""

Buffers: TypeAlias = Union[BufferLike, Iterable[BufferLike]]
"""One tensor, or a list (any iterable but a dict) of them: the optimizers' `params` and
`grads`."""


class LRSchedule(Protocol):
    """What an optimizer's `lr_schedule` must be: `ConstantLR`, `WarmupLinearLR`,
    `WarmupCosineLR`, or any object with a one-based `lr_at(t)`."""

    def lr_at(self, t: int) -> float:
        """The learning rate of the one-based step `t`."""
        ...


class StepLoss(TypedDict):
    """The dict `DataParallel.train_step` returns: `step` (the count after the step) and
    `loss` (the batch's mean loss, before the update)."""

    step: int
    loss: float


class _TrainStepKeys(StepLoss):
    logits: Array
    gradients: dict[str, Array]


class TrainStepResult(_TrainStepKeys, total=False):
    """The dict `train_step` returns.

    Keys:
        step: the step count after this step.
        loss: the batch's mean loss, before the update.
        logits: (n, classes), before the update.
        gradients: {"weight1": ..., "bias1": ..., ...}, the gradient of each parameter.
        input_grad: d(loss)/dX, (n, inputs); present only with `return_input_grad=True`.

    `input_grad` is the one optional key (`total=False` over a base of the others:
    `typing.NotRequired` is Python 3.11+, and the package has no dependency to backport it).
    """

    input_grad: Array


class TrainStepsResult(_TrainStepKeys):
    """The dict `train_steps(X, targets, k)` returns: `step`, `loss` (the last step's),
    `logits` and `gradients` of the last step, as in `TrainStepResult`, and `losses` (the k
    steps' losses, in order)."""

    losses: list[float]


class PerClassMetrics(TypedDict):
    """`EvaluateResult["per_class"]`: lists indexed by class.

    Keys:
        precision: tp / (tp + fp) of each class (0.0 when the class is never predicted).
        recall: tp / (tp + fn) (0.0 when the class has no row).
        f1: 2·tp / (2·tp + fp + fn), the harmonic mean of the two (0.0 when both
            denominators are 0).
        support: the number of rows of each true class (ints).
    """

    precision: list[float]
    recall: list[float]
    f1: list[float]
    support: list[int]


class EvaluateResult(TypedDict):
    """The dict `evaluate(X, y)` returns.

    Keys:
        loss: the mean cross-entropy of the batch (the float32 loss a step reports).
        accuracy: the fraction of rows whose predicted class is their label.
        per_class: precision, recall, f1 and support of each class (`PerClassMetrics`).
        confusion: confusion[true][predicted], the count of rows (ints), classes × classes.
    """

    loss: float
    accuracy: float
    per_class: PerClassMetrics
    confusion: list[list[int]]
