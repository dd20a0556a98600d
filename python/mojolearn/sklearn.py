"""scikit-learn estimators over `mojolearn.Trainer`: `MLPClassifier` and `MLPRegressor`.

They take scikit-learn's `MLPClassifier` / `MLPRegressor` parameters where those mean the same
thing, so they drop into `Pipeline`, `GridSearchCV`, `cross_val_score` and `clone`; the network
trains on mojolearn's kernels, so the same `random_state`, data and parameters give the same
bits on every machine (in the identical mode). scikit-learn is an optional dependency (the
`sklearn` extra; `pip install scikit-learn`), imported here only, never by `import mojolearn`.

What differs from scikit-learn's estimators (DEVIATIONS.md):

- `alpha` is AdamW's decoupled weight decay (`weight_decay=alpha`), not an L2 penalty added to
  the loss; `loss_curve_` holds the data loss only.
- `random_state=None` means seed 0, not a fresh draw: a refit gives the same model. An int is
  the seed; a `numpy.random.RandomState` gives one draw as the seed.
- Only the Adam family: AdamW with scikit-learn's betas (0.9, 0.999) and eps (1e-8), a
  constant learning rate (`solver`, `learning_rate`, `momentum`, `power_t` do not exist).
- Inputs are rounded once to float32 (to nearest, ties to even: NumPy's cast, the same as
  `Trainer`'s own rounding of float64); outputs are the float32 results widened exactly to
  float64.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from . import nn
from ._model.trainer import Trainer
from ._runtime.backend import set_numeric_mode
from .batches import Batches

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MLPClassifier", "MLPRegressor"]

DEFAULT_SEED = 0  # random_state=None: one documented seed, so a refit repeats its bits
_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "logistic": nn.Sigmoid}


class _MLPBase(BaseEstimator):  # type: ignore[misc]  # scikit-learn is untyped
    """What both estimators share: the parameters, the network, the epoch loop."""

    _loss = "cross_entropy"
    # What fit and partial_fit set (scikit-learn's names; trainer_ is the mojolearn.Trainer).
    loss_curve_: list[float]
    validation_scores_: list[float] | None
    best_loss_: float | None
    best_validation_score_: float | None
    n_iter_: int

    def __init__(
        self,
        hidden_layer_sizes: tuple[int, ...] = (100,),
        activation: str = "relu",
        *,
        alpha: float = 1e-4,
        batch_size: int | str = "auto",
        learning_rate_init: float = 1e-3,
        max_iter: int = 200,
        shuffle: bool = True,
        random_state: Any = None,
        tol: float = 1e-4,
        verbose: bool = False,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        mode: str = "identical",
        dropout: float = 0.0,
        layer_norm: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.alpha = alpha
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.tol = tol
        self.verbose = verbose
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.mode = mode
        self.dropout = dropout
        self.layer_norm = layer_norm

    # -- the network ---------------------------------------------------------------------------

    def _model(self, inputs: int, outputs: int) -> Any:
        """Linear, [LayerNorm], activation, [Dropout] per hidden layer, then the output Linear."""
        given = self.hidden_layer_sizes
        sizes = [given] if isinstance(given, (int, np.integer)) else list(given)
        if not all(isinstance(s, (int, np.integer)) and s >= 1 for s in sizes):
            raise ValueError(f"hidden_layer_sizes must be ints >= 1, got {self.hidden_layer_sizes}")
        act = _ACTIVATIONS.get(self.activation)
        if act is None:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}"
            )
        layers: list[Any] = []
        width = inputs
        for size in map(int, sizes):
            layers.append(nn.Linear(width, size))
            if self.layer_norm:
                layers.append(nn.LayerNorm(size))
            layers.append(act())
            if self.dropout:
                layers.append(nn.Dropout(float(self.dropout)))
            width = size
        layers.append(nn.Linear(width, outputs))
        return nn.Sequential(*layers)

    def _check_params(self) -> None:
        if self.mode not in ("identical", "fast"):
            raise ValueError(f"mode must be 'identical' or 'fast', got {self.mode!r}")
        try:
            set_numeric_mode("fast" if self.mode == "fast" else "identical")
        except RuntimeError as exc:
            raise ValueError(f"mode={self.mode!r}: {exc}") from None
        checks = (
            ("max_iter", self.max_iter, lambda v: isinstance(v, (int, np.integer)) and v >= 1),
            ("n_iter_no_change", self.n_iter_no_change, lambda v: v >= 1),
            ("alpha", self.alpha, lambda v: v >= 0),
            ("learning_rate_init", self.learning_rate_init, lambda v: v > 0),
            ("tol", self.tol, lambda v: v >= 0),
            ("validation_fraction", self.validation_fraction, lambda v: 0 < v < 1),
            ("dropout", self.dropout, lambda v: 0 <= v < 1),
        )
        for name, value, ok in checks:
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not ok(value):
                raise ValueError(f"{name} is out of range, got {value!r}")
        bs = self.batch_size
        if bs != "auto" and (
            isinstance(bs, bool) or not isinstance(bs, (int, np.integer)) or bs < 1
        ):
            raise ValueError(f"batch_size must be 'auto' or an int >= 1, got {bs!r}")

    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return DEFAULT_SEED
        if isinstance(rs, (int, np.integer)) and not isinstance(rs, bool):
            return int(rs) % (1 << 64)
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(np.iinfo(np.int32).max))
        raise ValueError(f"random_state must be None, an int or a RandomState, got {rs!r}")

    # -- training ------------------------------------------------------------------------------

    def _fit(self, X: Any, targets: Any, outputs: int, stratify: Any) -> Any:
        self._check_params()
        seed = self._seed()
        n, inputs = X.shape
        Xv = yv = None
        if self.early_stopping:
            X, Xv, targets, yv = train_test_split(
                X,
                targets,
                test_size=self.validation_fraction,
                random_state=seed % (1 << 32),
                stratify=stratify,
            )
        self._new_trainer(inputs, outputs, seed)
        self._epochs(X, targets, self._batch_rows(X.shape[0]), seed, Xv, yv)
        return self

    def _new_trainer(self, inputs: int, outputs: int, seed: int) -> None:
        self._rng_seed = seed  # partial_fit's epochs draw their orders from it
        self.trainer_ = Trainer(
            self._model(inputs, outputs),
            input_shape=(inputs,),
            loss=self._loss,
            seed=seed,
            lr=float(self.learning_rate_init),
            weight_decay=float(self.alpha),
        )

    def _batch_rows(self, n: int) -> int:
        batch = min(200, n) if self.batch_size == "auto" else int(self.batch_size)
        if batch > n:
            warnings.warn(
                f"Got batch_size={batch} larger than the {n} training rows: using {n}",
                UserWarning,
                stacklevel=4,
            )
        return min(batch, n)

    def _partial(self, X: Any, targets: Any, outputs: int) -> Any:
        """One epoch over (X, targets), continuing the trainer (a first call makes it): no
        early stopping, no stopping rule, as scikit-learn's `partial_fit`."""
        if not hasattr(self, "trainer_"):
            self._check_params()
            self._new_trainer(X.shape[1], outputs, self._seed())
            self.loss_curve_, self.n_iter_ = [], 0
            self.validation_scores_ = self.best_validation_score_ = None
            self.best_loss_ = math.inf
        elif self.trainer_.output_shape != (outputs,):
            raise ValueError(
                f"{type(self).__name__}: y has {outputs} outputs, the fitted network "
                f"{self.trainer_.output_shape[0]}"
            )
        X, targets = self._f32(X, "X"), self._f32(targets, "y") if self._loss == "mse" else targets
        seed = (self._rng_seed + self.n_iter_) % (1 << 64)  # a new order for every call
        rows = self._batch_rows(X.shape[0])
        loss = self._epoch(Batches(X, targets, rows, seed=seed, shuffle=bool(self.shuffle)))
        self.loss_curve_.append(loss)
        self.n_iter_ += 1
        self.best_loss_ = min(self.best_loss_ or math.inf, loss)
        return self

    def _epoch(self, batches: Any) -> float:
        """One epoch's steps; its loss, the mean over its rows (printed when verbose)."""
        total, rows = 0.0, 0
        for xb, yb in batches:
            total += self.trainer_.train_step(xb, yb)["loss"] * xb.shape[0]
            rows += xb.shape[0]
        if self.verbose:
            print(f"Iteration {len(self.loss_curve_) + 1}, loss = {total / rows:.8f}")
        return total / rows

    def _epochs(self, X: Any, targets: Any, batch: int, seed: int, Xv: Any, yv: Any) -> None:
        """scikit-learn's loop: an epoch's loss (the mean over its rows), then stop once
        `n_iter_no_change` epochs in a row have not improved by `tol` (the training loss, or
        with `early_stopping` the validation score, whose best state is kept)."""
        trainer = self.trainer_
        # Rounded to float32 once here, not again at every epoch's read.
        X = self._f32(X, "X")
        Xv = None if Xv is None else self._f32(Xv, "X")
        if self._loss == "mse":
            targets = self._f32(targets, "y")
        batches = Batches(X, targets, batch, seed=seed, shuffle=bool(self.shuffle))
        self.loss_curve_ = []
        self.validation_scores_ = [] if self.early_stopping else None
        best_loss, best_score, bad, best_state = math.inf, -math.inf, 0, None
        for epoch in range(int(self.max_iter)):
            self.loss_curve_.append(self._epoch(batches))
            self.n_iter_ = epoch + 1
            if self.validation_scores_ is not None:
                score = float(self._score_encoded(Xv, yv))
                self.validation_scores_.append(score)
                bad = bad + 1 if score < best_score + self.tol else 0
                if score > best_score:
                    best_score, best_state = score, trainer.state_dict()
            else:
                bad = bad + 1 if self.loss_curve_[-1] > best_loss - self.tol else 0
                best_loss = min(best_loss, self.loss_curve_[-1])
            if bad > self.n_iter_no_change:
                break
        else:
            warnings.warn(
                f"{type(self).__name__}: {self.max_iter} epochs (max_iter) reached and the "
                f"optimization hasn't converged yet",
                ConvergenceWarning,
                stacklevel=4,
            )
        if best_state is not None:
            trainer.load_state_dict(best_state)
        self.best_loss_ = None if self.early_stopping else best_loss
        self.best_validation_score_ = best_score if self.early_stopping else None

    def _f32(self, values: Any, name: str) -> Any:
        """`values` (finite: `validate_data` checked) rounded once to the nearest float32, C
        order: NumPy's cast, the same rounding as `Trainer`'s own (ties to even), at NumPy's
        speed; a value beyond float32's range is refused rather than made infinite."""
        with np.errstate(over="ignore"):
            out = np.asarray(values, dtype=np.float32, order="C")
        if not np.isfinite(out).all():
            at = np.unravel_index(int(np.argmin(np.isfinite(out))), out.shape)
            raise ValueError(
                f"{type(self).__name__}: {name} must fit in float32: {name}{list(at)} is "
                f"{values[at]!r}, beyond float32's largest value (3.4028235e38); scale it first"
            )
        return out

    def _checked(self, X: Any) -> Any:
        """X for a fitted estimator's predictions: checked as scikit-learn checks, float32."""
        check_is_fitted(self, "trainer_")
        X = validate_data(self, X, reset=False, dtype=(np.float64, np.float32))
        return self._f32(X, "X")

    def _outputs(self, X: Any) -> Any:
        """The network's float32 outputs on X, widened exactly to float64 (n, outputs)."""
        X = self._checked(X)  # first: NotFittedError before any use of trainer_
        return np.asarray(self.trainer_.predict_logits(X), dtype=np.float64)

    # -- pickling: the trainer travels as its state --------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """The estimator's fields, the trainer as (model, input shape, state_dict).

        Returns:
            A picklable dict.
        """
        state = dict(self.__dict__)
        t = state.pop("trainer_", None)
        if t is not None:
            state["_trainer_state"] = (t.model, t.input_shape, t.loss, t.state_dict())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore `__getstate__`'s dict, rebuilding the trainer from its state.

        Args:
            state: what `__getstate__` returned.
        """
        saved = state.pop("_trainer_state", None)
        self.__dict__.update(state)
        if saved is not None:
            model, shape, loss, sd = saved
            self.trainer_ = Trainer(model, input_shape=shape, loss=loss).load_state_dict(sd)

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags: float inputs, no NaN, no sparse.

        Returns:
            The estimator's `Tags`.
        """
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags


class MLPClassifier(ClassifierMixin, _MLPBase):  # type: ignore[misc]
    """A multilayer perceptron classifier trained with AdamW on mojolearn's kernels.

    scikit-learn's `MLPClassifier` parameters where they mean the same thing, with the
    differences the module docstring lists; the output layer has one logit per class
    (softmax and cross-entropy, two logits for two classes). Labels may be of any type
    scikit-learn sorts (ints, strings): `classes_` maps them to the network's class ids.

    Args:
        hidden_layer_sizes: the hidden layers' widths.
        activation: "relu", "gelu", "tanh" or "logistic" (sigmoid).
        alpha: AdamW's decoupled weight decay (not scikit-learn's L2 on the loss).
        batch_size: rows per step; "auto" is min(200, n).
        learning_rate_init: AdamW's learning rate.
        max_iter: the most epochs.
        shuffle: shuffle the rows each epoch (mojolearn's seeded `Batches`).
        random_state: None (seed 0), an int seed, or a RandomState (one draw).
        tol: the improvement that counts, for the loss or the validation score.
        verbose: print each epoch's loss.
        early_stopping: hold out `validation_fraction` of the rows (stratified) and stop on
            their accuracy, keeping the best epoch's state.
        validation_fraction: the held-out share with `early_stopping`.
        n_iter_no_change: the epochs without improvement that stop the run.
        mode: "identical" or "fast": the process's numeric mode, fixed by the first binding
            that loads; fit selects it, and refuses one that is not the process's.
        dropout: a Dropout of this rate after each hidden activation (0: none).
        layer_norm: a LayerNorm after each hidden Linear.
    """

    def fit(self, X: Any, y: Any) -> MLPClassifier:
        """Train a fresh network on (X, y).

        Args:
            X: (n, features) numbers: float64, float32, ints, nested lists.
            y: (n,) labels of any sortable type.

        Returns:
            self.

        Raises:
            ValueError: a bad parameter, NaN or infinite X, mismatched lengths.
        """
        X, y = validate_data(self, X, y, dtype=(np.float64, np.float32))
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        outputs = max(len(self.classes_), 2)
        stratify = encoded if self.early_stopping and len(self.classes_) > 1 else None
        return self._fit(X, encoded.astype(np.int32), outputs, stratify)  # type: ignore[no-any-return]

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> MLPClassifier:
        """One epoch on (X, y), continuing the network (the first call makes it).

        Args:
            X: (n, features) numbers.
            y: (n,) labels, each one of `classes`.
            classes: every label the estimator will see; required on the first call (unless
                fitted), then optional and equal to `classes_`.

        Returns:
            self.

        Raises:
            ValueError: no `classes` on the first call, other `classes` later, a label of y
                not in them, or another number of features.
        """
        first = not hasattr(self, "classes_")
        X, y = validate_data(self, X, y, dtype=(np.float64, np.float32), reset=first)
        check_classification_targets(y)
        if first and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit")
        if classes is not None:
            wanted = np.unique(classes)
            if not first and not np.array_equal(wanted, self.classes_):
                raise ValueError(f"classes={wanted!r} is not classes_ {self.classes_!r}")
            self.classes_ = wanted
        codes = np.searchsorted(self.classes_, y)
        unknown = (codes >= len(self.classes_)) | (self.classes_[codes % len(self.classes_)] != y)
        if unknown.any():
            raise ValueError(f"y holds labels not in classes: {np.unique(y[unknown])!r}")
        return self._partial(X, codes.astype(np.int32), max(len(self.classes_), 2))  # type: ignore[no-any-return]

    def _score_encoded(self, X: Any, codes: Any) -> float:
        pred = np.asarray(self.trainer_.predict(X))
        return float(np.mean(pred == codes))

    def predict_proba(self, X: Any) -> Any:
        """Each class's probability (the softmax of the float32 logits, widened to float64).

        Args:
            X: (n, features) numbers.

        Returns:
            (n, len(classes_)) float64.
        """
        X = self._checked(X)  # first: NotFittedError before any use of trainer_
        proba = np.asarray(self.trainer_.predict_proba(X), dtype=np.float64)
        return proba[:, : len(self.classes_)] if len(self.classes_) == 1 else proba

    def predict(self, X: Any) -> Any:
        """Each row's class: the argmax of its logits (ties to the first class).

        Args:
            X: (n, features) numbers.

        Returns:
            (n,) labels from `classes_`.
        """
        X = self._checked(X)  # first: NotFittedError before any use of trainer_
        codes = np.asarray(self.trainer_.predict(X))
        return self.classes_[np.minimum(codes, len(self.classes_) - 1)]

    def predict_log_proba(self, X: Any) -> Any:
        """The log of `predict_proba`.

        Args:
            X: (n, features) numbers.

        Returns:
            (n, len(classes_)) float64.
        """
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))


class MLPRegressor(RegressorMixin, _MLPBase):  # type: ignore[misc]
    """A multilayer perceptron regressor trained with AdamW on mojolearn's kernels.

    scikit-learn's `MLPRegressor` parameters where they mean the same thing, with the
    differences the module docstring lists; the loss is the mean squared error over every
    output (scikit-learn's is half of it: the same minimum, gradients twice as large).

    Args:
        hidden_layer_sizes: the hidden layers' widths.
        activation: "relu", "gelu", "tanh" or "logistic" (sigmoid).
        alpha: AdamW's decoupled weight decay (not scikit-learn's L2 on the loss).
        batch_size: rows per step; "auto" is min(200, n).
        learning_rate_init: AdamW's learning rate.
        max_iter: the most epochs.
        shuffle: shuffle the rows each epoch (mojolearn's seeded `Batches`).
        random_state: None (seed 0), an int seed, or a RandomState (one draw).
        tol: the improvement that counts, for the loss or the validation score.
        verbose: print each epoch's loss.
        early_stopping: hold out `validation_fraction` of the rows and stop on their R²,
            keeping the best epoch's state.
        validation_fraction: the held-out share with `early_stopping`.
        n_iter_no_change: the epochs without improvement that stop the run.
        mode: "identical" or "fast": the process's numeric mode (see `MLPClassifier`).
        dropout: a Dropout of this rate after each hidden activation (0: none).
        layer_norm: a LayerNorm after each hidden Linear.
    """

    _loss = "mse"

    def fit(self, X: Any, y: Any) -> MLPRegressor:
        """Train a fresh network on (X, y).

        Args:
            X: (n, features) numbers: float64, float32, ints, nested lists.
            y: (n,) or (n, outputs) numbers.

        Returns:
            self.

        Raises:
            ValueError: a bad parameter, NaN or infinite X or y, mismatched lengths.
        """
        X, targets = self._data(X, y, True)
        return self._fit(X, targets, targets.shape[1], None)  # type: ignore[no-any-return]

    def partial_fit(self, X: Any, y: Any) -> MLPRegressor:
        """One epoch on (X, y), continuing the network (the first call makes it).

        Args:
            X: (n, features) numbers.
            y: (n,) or (n, outputs) numbers, as the first call's.

        Returns:
            self.

        Raises:
            ValueError: another number of features or outputs, NaN or infinite values.
        """
        X, targets = self._data(X, y, not hasattr(self, "trainer_"))
        return self._partial(X, targets, targets.shape[1])  # type: ignore[no-any-return]

    def _data(self, X: Any, y: Any, reset: bool) -> tuple[Any, Any]:
        """(X, y as (n, outputs) float64), checked as scikit-learn checks them."""
        X, y = validate_data(
            self,
            X,
            y,
            dtype=(np.float64, np.float32),
            multi_output=True,
            y_numeric=True,
            reset=reset,
        )
        if y.ndim == 2 and y.shape[1] == 1:  # as scikit-learn's MLPRegressor: warned, then 1-D
            y = column_or_1d(y, warn=True)
        y = np.asarray(y, dtype=np.float64)
        if reset:
            self._one_output = y.ndim == 1
        return X, y.reshape(len(y), -1)

    def _score_encoded(self, X: Any, targets: Any) -> float:
        from sklearn.metrics import r2_score

        return float(r2_score(targets, np.asarray(self.trainer_.predict(X), dtype=np.float64)))

    def predict(self, X: Any) -> Any:
        """The network's outputs (float32, widened exactly to float64).

        Args:
            X: (n, features) numbers.

        Returns:
            (n,) when fitted on 1-D y, else (n, outputs).
        """
        out = self._outputs(X)
        return out.ravel() if self._one_output else out
