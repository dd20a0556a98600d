"""Inference on the MLP trainer core: `predict`, `predict_proba` and `evaluate`, the bodies of
both trainers' methods of those names (`MLPCore` calls them; this module never imports a
trainer class).

Each function holds the trainer's lock for the whole call and changes no state. X may have any
number of rows n >= 1: up to `max_rows` it is one forward; beyond, it is cut into chunks of at
most `max_rows` rows, one forward each (rows are independent, so every row gets the bits it has
when predicted alone). Finite rows whose logits overflow float32 are a ValueError naming the
first such row of X (the binding reports only an index in its output, and it calls that output
a step's). Labels come from the binding's `argmax`
entry, probabilities from its `softmax` entry and the loss from its `cross_entropy` entry, the
kernel a step's loss is (docs/ARITHMETIC.md, "Probabilities" and "Cross-entropy"): no Python
work per row but `evaluate`'s counts (integers), and each of its ratios is one binary64
division of two ints.
"""

from __future__ import annotations

import math

from .._buffers.alloc import empty
from .._buffers.array import Array, frombytes
from .._runtime import backend as _backend
from . import batches as _batches
from . import ops as _ops

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._buffers.types import BufferLike, EvaluateResult
    from .core import MLPCore


def _batch(core: MLPCore, X: BufferLike) -> Array:
    """X as a float32 C-contiguous (n, inputs) Array, n >= 1: borrowed when it already is one,
    else a C-order copy; refused by name otherwise (finiteness is checked by the forward)."""
    inputs = core._spec.inputs
    # A fitting Array is returned unprobed: the probe costs ~3 µs, 5 % of a batch-1 `predict`
    # at [784, 256, 10] (tools/bench_predict.py).
    if type(X) is Array and X._dtype == "<f4" and len(s := X._shape) == 2 and s[1] == inputs:
        if s[0]:
            return X
    x: Array = _batches.batch(X, core._API, inputs, core._max_rows, "X", stacked=True)
    if not x._shape[0]:
        raise ValueError(f"{core._API}: X must have at least 1 row, got 0")
    return x


def _rows(x: Array, begin: int, end: int) -> Array:
    """Rows [begin, end) of a C-contiguous 2-D Array, as a view sharing its memory."""
    width = x._shape[1]
    return x._view(
        x._mv[begin * width : end * width], (end - begin, width), x._addr + 4 * begin * width
    )


def _check_finite(api: str, chunks: list[Array]) -> None:
    """Refuse non-finite values in X's chunks, naming the flat index in X (as a single
    batch's refusal does)."""
    offset = 0
    for chunk in chunks:
        if not _batches.all_finite(chunk, "X"):
            values = chunk._mv.tolist()
            bad = next(i for i, v in enumerate(values) if not math.isfinite(v))
            raise ValueError(
                f"{api}: X must be finite (flat index {offset + bad} is {values[bad]!r})"
            )
        offset += chunk._size


def _logits(core: MLPCore, x: Array) -> Array:
    """The logits (n, classes) of a checked batch `x` of any n >= 1; ValueError naming the
    first row whose logits overflow. Caller holds the lock."""
    try:
        return _forward_rows(core, x)
    except RuntimeError as exc:
        raise _overflow(core, x, exc) from None


def _forward_rows(core: MLPCore, x: Array) -> Array:
    """The logits of `x`, in chunks of at most `max_rows` rows (rows are independent, so each
    gets its bits alone); the binding's RuntimeError when an output is not finite."""
    n, step = x._shape[0], core._max_rows
    if n <= step:
        return core._forward(x)
    chunks = [_rows(x, i, min(i + step, n)) for i in range(0, n, step)]
    _check_finite(core._API, chunks)  # so that a refusal names X, not a chunk
    raw = b"".join(core._forward(chunk).tobytes() for chunk in chunks)
    return frombytes(raw, "<f4", (n, core._spec.classes))


class NonFiniteRow(ValueError):
    """A finite row of X whose logits overflow float32; `row` is its index in X (the command
    line names the CSV row from it)."""

    def __init__(self, message: str, row: int) -> None:
        super().__init__(message)
        self.row = row


def _overflow(core: MLPCore, x: Array, exc: RuntimeError) -> Exception:
    """What a forward over finite `x` that came out non-finite raises: ValueError naming X's
    first row whose logits overflow float32, found by halving (rows are independent, so a
    range fails exactly when a row in it does: about 2n rows of forwards, on the failure path
    only); `exc` itself when no row fails alone."""
    begin, end = 0, x._shape[0]
    if not _fails(core, _rows(x, begin, end)):
        return exc
    while end - begin > 1:
        middle = (begin + end) // 2
        if _fails(core, _rows(x, begin, middle)):
            end = middle
        else:
            begin = middle
    return NonFiniteRow(
        f"{core._API}: X row {begin} gives a non-finite logit: its values are finite but the "
        f"network's outputs on it overflow float32 (scale or standardize X)",
        begin,
    )


def _fails(core: MLPCore, x: Array) -> bool:
    try:
        _forward_rows(core, x)
    except RuntimeError:
        return True
    return False


def _argmax(z: Array) -> Array:
    """Each row's first index of its maximum (int32, rows): the lowest class wins a tie."""
    rows, classes = z._shape
    labels = empty((rows,), "<i4")
    _backend.binding().argmax([z._addr, labels._addr], [rows, classes])
    return labels


def predict(core: MLPCore, X: BufferLike) -> Array:
    """`MLPCore.predict`: int32 labels (n,), the argmax of each row's logits."""
    with core._lock:
        return _argmax(_logits(core, _batch(core, X)))


def predict_proba(core: MLPCore, X: BufferLike) -> Array:
    """`MLPCore.predict_proba`: float32 (n, classes), the softmax of each row's logits."""
    with core._lock:
        z = _logits(core, _batch(core, X))
        rows, classes = z._shape
        probs = empty((rows, classes))
        _backend.binding().softmax([z._addr, probs._addr], [rows, classes])
        return probs


def evaluate(core: MLPCore, X: BufferLike, y: BufferLike) -> EvaluateResult:
    """`MLPCore.evaluate`: mean loss, accuracy, per-class metrics and the confusion matrix."""
    api, classes = core._API, core._spec.classes
    with core._lock:
        x = _batch(core, X)
        labels = _batches.targets(y, x._shape[0], classes, api, name="y")
        z = _logits(core, x)
        row_losses = empty((z._shape[0],))  # held: the binding writes it
        try:
            loss = _ops.mean_loss(
                _backend.binding(), z._addr, labels._addr, z._shape[0], classes, row_losses._addr
            )
        except RuntimeError as exc:  # e.g. a sum of row losses past float32's range
            raise ValueError(
                f"{api}: the mean loss of X's rows against y is not finite: a row's loss "
                f"overflows float32 ({exc})"
            ) from None
        pred = _argmax(z)
    return _report(loss, labels._mv.tolist(), pred._mv.tolist(), classes)


def _ratio(num: int, den: int) -> float:
    """num / den, 0.0 when den is 0 (scikit-learn's zero_division=0)."""
    return num / den if den else 0.0


def _report(loss: float, truth: list[int], pred: list[int], classes: int) -> EvaluateResult:
    """`evaluate`'s dict from the loss and the true and predicted class of each row."""
    confusion = [[0] * classes for _ in range(classes)]
    for t, p in zip(truth, pred):
        confusion[t][p] += 1
    support = [sum(row) for row in confusion]
    predicted = [sum(column) for column in zip(*confusion)]
    hits = [confusion[c][c] for c in range(classes)]
    return {
        "loss": loss,
        "accuracy": sum(hits) / len(truth),
        "per_class": {
            "precision": [_ratio(hits[c], predicted[c]) for c in range(classes)],
            "recall": [_ratio(hits[c], support[c]) for c in range(classes)],
            # 2·tp / (2·tp + fp + fn): the harmonic mean of precision and recall, formed from
            # the counts as scikit-learn forms it (one rounding, no 0/0 when both are 0).
            "f1": [_ratio(2 * hits[c], support[c] + predicted[c]) for c in range(classes)],
            "support": support,
        },
        "confusion": confusion,
    }


class Inference:
    """The trainers' inference methods: a mixin of `MLPCore` (the functions above do the work;
    the core gives the forward pass, its lock and its spec)."""

    __slots__ = ()

    def predict_logits(  # type: ignore[misc]  # self: the MLPCore this class mixes into
        self: MLPCore, X: BufferLike
    ) -> Array:
        """The network's outputs on a batch with the current weights (no step).

        Args:
            X: float32 (n, inputs), 1 <= n <= `max_rows`; finite.

        Returns:
            The logits, a fresh float32 Array (n, classes).

        Raises:
            TypeError: X is not a float32 buffer.
            ValueError: a wrong shape or a non-finite X; a finite row whose logits overflow
                float32 (the message names the first such row).
        """
        X = self._network_inputs(X)
        with self._lock:
            try:
                return self._forward(X)
            except RuntimeError as exc:  # the forward checked X: a finite batch overflowed
                raise _overflow(self, _batch(self, X), exc) from None

    def predict_logits_sessions(  # type: ignore[misc]  # self: the MLPCore this class mixes into
        self: MLPCore, inputs: Sequence[BufferLike]
    ) -> Array:
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
        return frombytes(raw, "<f4", (len(raw) // (4 * classes), classes))

    def predict(  # type: ignore[misc]  # self: the MLPCore this class mixes into
        self: MLPCore, X: BufferLike
    ) -> Array:
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
            ValueError: a wrong shape, no row, or a non-finite X; a finite row whose logits
                overflow float32 (the message names the first such row).
        """
        return predict(self, self._network_inputs(X))

    def predict_proba(  # type: ignore[misc]  # self: the MLPCore this class mixes into
        self: MLPCore, X: BufferLike
    ) -> Array:
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
            ValueError: a wrong shape, no row, or a non-finite X; a finite row whose logits
                overflow float32 (the message names the first such row).
        """
        return predict_proba(self, self._network_inputs(X))

    def evaluate(  # type: ignore[misc]  # self: the MLPCore this class mixes into
        self: MLPCore, X: BufferLike, y: BufferLike
    ) -> EvaluateResult:
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
            ValueError: a wrong shape, no row, a non-finite X or a class out of range; a
                finite row whose logits overflow float32 (the message names the first such
                row), or a loss past float32's range.
        """
        return evaluate(self, self._network_inputs(X), y)
