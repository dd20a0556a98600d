"""Inference on a `Trainer` (the `ModelInference` mixin): `predict_logits`, `predict`,
`predict_proba`, `evaluate`. Each holds the trainer's lock while it reads the state and changes
nothing; X may have any number of rows (forwards of at most `max_rows` rows: rows are
independent, so each gets the bits it has alone). A held standardization (`preprocessing`)
makes them take raw rows."""

from __future__ import annotations

import math

from .._buffers.alloc import empty
from .._buffers.array import Array
from .._mlp.infer import _argmax, _report
from .._runtime import backend as _backend
from . import batch as _batch
from . import preprocessing as _pre

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .._buffers.types import BufferLike
    from .trainer import Trainer

_API = "Trainer"
_FORWARD, _EVAL = 0, 3  # the binding's modes (`model_step`)


class ModelInference:
    """`Trainer`'s inference entries (mixed in: `self` is the Trainer)."""

    __slots__ = ()

    def predict_logits(self: Trainer, X: BufferLike) -> Array:  # type: ignore[misc]
        """The model's outputs on a batch with the current weights (no step, no dropout).

        Args:
            X: float32 `(n, *input_shape)`, finite, any n >= 1 (run in chunks of `max_rows`).

        Returns:
            float32 `(n, *output_shape)`, a fresh Array.

        Raises:
            TypeError: X of the wrong dtype or kind.
            ValueError: a wrong shape, a NaN or infinity, or outputs that overflow float32.
        """
        X = self._network_inputs(X)
        with self._lock:
            x = _batch.inputs(X, self._spec, None)
            return self._forward(x)

    def _forward(self: Trainer, x: Array) -> Array:  # type: ignore[misc]
        n, spec = x._shape[0], self._spec
        out = empty((n, *spec.output_shape))
        chunk = self._max_rows
        per_out = math.prod(spec.output_shape)
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            xi = _batch.rows_of(x, start, rows)
            try:
                r = self._call(xi, xi, rows, _FORWARD, 1, self._config["lr"])
            except RuntimeError:
                raise ValueError(
                    f"{_API}: X rows {start}..{start + rows - 1} give outputs that overflow "
                    f"float32 (finite inputs, too large for these weights)"
                ) from None
            out._mv[start * per_out : (start + rows) * per_out] = r["outputs"]._mv
        return out

    def predict(self: Trainer, X: BufferLike) -> Array:  # type: ignore[misc]
        """Cross-entropy models: each example's class (int32; `(n,)` or `(n, T)`), the
        argmax of its outputs, ties to the lowest class; MSE models: the outputs (in the
        target's units when the `preprocessing` records a target mean and sd).

        Args:
            X: float32 `(n, *input_shape)`, finite.

        Returns:
            The predictions, a fresh Array.

        Raises:
            TypeError: X of the wrong dtype or kind.
            ValueError: a wrong shape, a NaN or infinity, overflowing outputs.
        """
        z = self.predict_logits(X)
        if self._spec.loss == "mse":  # in the target's units when a standardization says so
            return _pre.target_units(_pre.held(self._schedule), z)
        labels = _argmax(_batch.as_rows(z, self._spec.output_shape[-1]))
        return labels.reshape(z._shape[:-1])

    def predict_proba(self: Trainer, X: BufferLike) -> Array:  # type: ignore[misc]
        """Cross-entropy models: the softmax of each example's outputs (float32, the shape of
        the outputs).

        Args:
            X: float32 `(n, *input_shape)`, finite.

        Returns:
            The probabilities, a fresh Array.

        Raises:
            TypeError: X of the wrong dtype or kind, or an MSE model (it has no classes).
            ValueError: a wrong shape, a NaN or infinity, overflowing outputs.
        """
        if self._spec.loss == "mse":
            raise TypeError(f"{_API}: predict_proba needs a cross_entropy model, this one is mse")
        z = self.predict_logits(X)
        rows = _batch.as_rows(z, self._spec.output_shape[-1])
        probs = empty(rows._shape)
        _backend.binding().softmax([rows._addr, probs._addr], list(rows._shape))
        return probs.reshape(z._shape)

    def evaluate(self: Trainer, X: BufferLike, targets: BufferLike) -> dict[str, Any]:  # type: ignore[misc]
        """The loss (dropout off) and metrics on a batch.

        Args:
            X: float32 `(n, *input_shape)`, finite, 1 <= n <= `max_rows`.
            targets: as `train_step`'s.

        Returns:
            `loss` (the kernel's mean loss), and for cross-entropy `accuracy`, `per_class`
            (precision, recall, f1, support) and `confusion` over every position; for MSE
            `mse` (= loss), `mae` and `r2` (binary64 over the float32 outputs).

        Raises:
            TypeError: X or targets of the wrong dtype or kind.
            ValueError: wrong shapes, a NaN or infinity, a class id out of range, or a loss
                that overflows float32.
        """
        record = _pre.held(self._schedule)
        if record is not None:
            X, targets = self._network_inputs(X), _pre.raw_targets(record, targets)
        with self._lock:
            x, y, n = self._read(X, targets, self._max_rows)
            try:
                r = self._call(x, y, n, _EVAL, 1, self._config["lr"])
            except RuntimeError as exc:
                raise ValueError(f"{_API}: the loss on these rows is not finite ({exc})") from None
        loss, z = float(r["losses"][0]), r["outputs"]
        if self._spec.loss == "mse":
            return _regression(loss, list(z._mv), list(y._mv))
        classes = self._spec.output_shape[-1]
        pred = _argmax(_batch.as_rows(z, classes))
        return dict(_report(loss, list(y._mv), list(pred._mv), classes))


def _regression(loss: float, z: list[float], t: list[float]) -> dict[str, Any]:
    n = len(z)
    mean = math.fsum(t) / n
    ss_res = math.fsum((a - b) ** 2 for a, b in zip(z, t))
    ss_tot = math.fsum((b - mean) ** 2 for b in t)
    return {
        "loss": loss,
        "mse": loss,
        "mae": math.fsum(abs(a - b) for a, b in zip(z, t)) / n,
        "r2": 1.0 - ss_res / ss_tot if ss_tot else 0.0,
    }
