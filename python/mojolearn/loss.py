"""`mojolearn.cross_entropy`: torch's cross-entropy over class-index targets, in the binding.

The arithmetic is the numeric mode's (docs/ARITHMETIC.md, "Cross-entropy"): log-sum-exp with
the project's own float32 exp/log, sums in ascending order from +0.0, so `identical` mode
gives the same bits on every machine. Python only validates, allocates and packs.
"""

from __future__ import annotations

import math

from ._buffers.alloc import zeros
from ._buffers.intake import _I32_MAX, _I32_MIN, f32, i32
from ._runtime import backend as _backend
from ._runtime.abi import IGNORE_NOTHING

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Literal, overload

    from ._buffers.array import Array
    from ._buffers.types import BufferLike

_REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}


if TYPE_CHECKING:
    # The result's type follows `reduction` and `return_grad` (the implementation below is
    # what runs; these are for the checker only).
    @overload
    def cross_entropy(
        logits: BufferLike,
        targets: BufferLike,
        ignore_index: int = ...,
        reduction: Literal["mean", "sum"] = ...,
        label_smoothing: float = ...,
        return_grad: Literal[False] = ...,
    ) -> float: ...
    @overload
    def cross_entropy(
        logits: BufferLike,
        targets: BufferLike,
        ignore_index: int = ...,
        *,
        reduction: Literal["none"],
        label_smoothing: float = ...,
        return_grad: Literal[False] = ...,
    ) -> Array: ...
    @overload
    def cross_entropy(
        logits: BufferLike,
        targets: BufferLike,
        ignore_index: int = ...,
        reduction: Literal["mean", "sum"] = ...,
        label_smoothing: float = ...,
        *,
        return_grad: Literal[True],
    ) -> tuple[float, Array]: ...
    @overload
    def cross_entropy(
        logits: BufferLike,
        targets: BufferLike,
        ignore_index: int = ...,
        *,
        reduction: Literal["none"],
        label_smoothing: float = ...,
        return_grad: Literal[True],
    ) -> tuple[Array, Array]: ...
    @overload
    def cross_entropy(
        logits: BufferLike,
        targets: BufferLike,
        ignore_index: int = ...,
        reduction: str = ...,
        label_smoothing: float = ...,
        return_grad: bool = ...,
    ) -> float | Array | tuple[float | Array, Array]: ...


def cross_entropy(
    logits: BufferLike,
    targets: BufferLike,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    return_grad: bool = False,
) -> float | Array | tuple[float | Array, Array]:
    """Cross-entropy between logits (n, C) and class-index targets (n,), as torch's
    `torch.nn.functional.cross_entropy` (no class weights).

    Per kept row r (target y != ignore_index), with ε = label_smoothing:
        loss_r = (1 − ε)·(logsumexp(z_r) − z_r[y]) + (ε / C)·Σ_j (logsumexp(z_r) − z_r[j])
    'mean' divides the sum over kept rows by their count; 'sum' returns the sum; 'none' the
    per-row losses (0.0 for ignored rows).

    Args:
        logits: float32 buffer of shape (n, C), n >= 1, C >= 1 (NumPy array, array.array,
            memoryview, mojolearn.Array). Other dtypes are a TypeError (no silent casts).
        targets: integer buffer of shape (n,), values in [0, C) or equal to ignore_index.
        ignore_index: int; rows whose target equals it add nothing to the loss and get a
            zero gradient row.
        reduction: 'mean' (default), 'sum' or 'none'.
        label_smoothing: float in [0, 1]; the target distribution becomes
            (1 − ε)·onehot(y) + ε/C.
        return_grad: also return d(loss)/d(logits), an Array (n, C): of the mean for 'mean',
            of the sum for 'sum', of the sum of the per-row losses for 'none'.

    Returns:
        A float for 'mean'/'sum', an Array (n,) for 'none'; `(loss, dlogits)` when
        `return_grad`.

    Raises:
        TypeError: a wrongly typed argument (named in the message).
        ValueError: bad shapes, an unknown reduction, label_smoothing outside [0, 1], a target
            outside [0, C) that is not ignore_index, or every row ignored (the loss would be
            undefined; torch returns NaN for 'mean').
        RuntimeError: the loss or its gradient is not finite (e.g. a target logit of -inf).

    Example:
        >>> logits = mojolearn.Array.from_list([[2.0, 0.5, -1.0]])
        >>> round(mojolearn.cross_entropy(logits, mojolearn.Array.from_list([0], "<i4")), 4)
        0.2413
    """
    code = _check_options(ignore_index, reduction, label_smoothing, return_grad)
    z_kept, z_at, z_shape = f32(logits, "logits", 2)
    rows, classes = z_shape
    if rows == 0 or classes == 0:
        raise ValueError(f"logits must have at least one row and one class, got shape {z_shape}")
    t_kept, t_at, t_shape = i32(targets, "targets", 1)
    if t_shape[0] != rows:
        raise ValueError(
            f"targets must have shape ({rows},) to match logits {z_shape}, got {t_shape}"
        )
    losses = zeros((rows,))
    dlogits = zeros((rows, classes)) if return_grad else None
    ignore = ignore_index if _I32_MIN <= ignore_index <= _I32_MAX else IGNORE_NOTHING
    result = _backend.binding().cross_entropy(
        [z_at, t_at, losses._addr, (dlogits if return_grad else losses)._addr],  # type: ignore[union-attr]
        [rows, classes, ignore, float(label_smoothing), code, 1 if return_grad else 0],
    )
    loss = losses if code == 0 else result
    return (loss, dlogits) if return_grad else loss  # type: ignore[return-value]  # see above


def _check_options(
    ignore_index: object, reduction: object, label_smoothing: object, return_grad: object
) -> int:
    if type(ignore_index) is bool or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    if not isinstance(reduction, str):
        raise TypeError(f"reduction must be a str, got {type(reduction).__name__}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if type(label_smoothing) is bool or not isinstance(label_smoothing, (int, float)):
        raise TypeError(f"label_smoothing must be a float, got {type(label_smoothing).__name__}")
    if not (math.isfinite(label_smoothing) and 0.0 <= label_smoothing <= 1.0):
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    if type(return_grad) is not bool:
        raise TypeError(f"return_grad must be a bool, got {type(return_grad).__name__}")
    return _REDUCTIONS[reduction]
