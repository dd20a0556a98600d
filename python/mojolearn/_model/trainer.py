"""`Trainer`: any `nn.Sequential` of the engine's layers, trained with AdamW on the model
engine (training/model.mojo, the binding's `model_step`): one binding call per step (or per k
steps), the state published by one assignment after the call succeeded, so a step completes
or changes nothing.

State: the flat float32 parameters in torch's `state_dict` order (`_model/spec.py`), the AdamW
moments m, v in the same order, the step count, the hyperparameters, the seed (it draws the
initial weights and keys every Dropout mask) and the data schedule.
"""

from __future__ import annotations

import math
import threading
import warnings

from .._buffers.alloc import ResultBuffers, empty, zeros
from .._buffers.array import Array
from .._buffers.intake import owned_tensor
from .._mlp import lr_schedule as _lrs
from .._mlp import state as S
from .._mlp.rng import _check_seed
from .._runtime import backend as _backend
from .._runtime import threads as _threads
from . import batch as _batch
from .export import ModelExport
from .generate import ModelGeneration
from .infer import ModelInference
from .persist import ModelPersistence
from .port import ModelPort
from .preprocessing import ModelPreprocessing
from .program import Program
from .spec import ModelSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .._buffers.types import BufferLike, LRSchedule

_API = "Trainer"
_FORWARD, _GRADS, _TRAIN, _EVAL = 0, 1, 2, 3
MAX_ROWS = 1 << 20
# A batch's activations and their gradients: a guard against a typo's batch, not an allocation;
# 2 GiB admits batch 64 of nanoGPT's CPU configuration (6.2 MiB an example) with room.
MAX_BATCH_BYTES = 2 << 30
SCHEMA = "mojolearn.model-state.v1"
_warned_device = False


def engine_device(vendor: str) -> str:
    """Where `Trainer` steps run on a binding of `vendor` (`mojolearn info` prints it)."""
    if vendor == "cpu":
        return "cpu kernels"
    return f"cpu kernels, the same bits (no {vendor} kernels for the model engine yet)"


def _say_where_it_runs() -> None:
    """Once per process on a GPU install: the model engine runs on the CPU kernels."""
    global _warned_device
    vendor = _backend.binding().vendor
    if vendor != "cpu" and not _warned_device:
        _warned_device = True
        warnings.warn(
            f"mojolearn.Trainer runs on the {engine_device(vendor)}; MLPTrainer and "
            f"SmallMLPTrainer run on the device",
            RuntimeWarning,
            stacklevel=3,
        )


class Trainer(ModelInference, ModelPersistence, ModelExport, ModelPreprocessing, ModelGeneration):
    """Trains any `mojolearn.nn.Sequential` of the engine's layers with AdamW, reproducibly.

    Every step is one fixed order of float32 operations (docs/ARITHMETIC.md "Models") in the
    identical mode, so the same seed, data and hyperparameters give the same bits on every
    machine; a `ReLU` MLP gives exactly `MLPTrainer`'s bits.

    float64 and lists of numbers are taken wherever X (or MSE targets) is: rounded once to
    the nearest float32 (ties to even, as `astype(float32)`); a value beyond float32's range
    is refused (ValueError), not rounded to infinity. Class ids may be a list of ints.

    Args:
        model: an `nn.Sequential` of `mojolearn.nn` layers; with an `Embedding` first, X is
            `(n, T)` integer token ids (`input_shape=(T,)`, each checked; floats refused).
        input_shape: one example's shape without the batch axis, e.g. `(10,)` or `(T, D)`.
        loss: `"cross_entropy"` (integer class targets; an output of `(T, C)` per example
            takes `(B, T)` targets, the mean over all positions) or `"mse"` (float32 targets of
            the output's shape, the mean over every element).
        weights: None (seeded torch-default initialization) or a dict of float32 buffers keyed
            by torch's `state_dict()` names of the same model (`"0.weight"`, `"2.1.bias"`).
        seed: an int in [0, 2**64): the initial weights and every Dropout mask.
        data_schedule: a JSON object recorded with the state (None: `{}`); `mojolearn.fit`
            adds its record under "fit".
        lr: the learning rate, > 0.
        betas: AdamW's (beta1, beta2), each in [0, 1).
        eps: AdamW's eps, > 0.
        weight_decay: AdamW's decoupled weight decay, >= 0.
        lr_schedule: an object with `lr_at(t)` giving step t's rate, or None.
        max_rows: the most examples a batch may have (default: what 2 GiB of activations
            and their gradients hold, at most 2**20).
    """

    __slots__ = (
        "_spec",
        "_program",
        "_seed",
        "_config",
        "_lr_schedule",
        "_schedule",
        "_state",
        "_spare",
        "_results",
        "_scratch",
        "_step",
        "_max_rows",
        "_lock",
    )

    _API = _API

    def __init__(
        self,
        model: object,
        *,
        input_shape: object,
        loss: str = "cross_entropy",
        weights: dict[str, BufferLike] | None = None,
        seed: int = 0,
        data_schedule: dict[str, Any] | None = None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        lr_schedule: LRSchedule | None = None,
        max_rows: int | None = None,
    ) -> None:
        spec = ModelSpec(model, input_shape, loss, _API)
        self._seed = _check_seed(seed)
        self._config = S.check_config(lr, betas, eps, weight_decay, _API)
        self._schedule = {} if data_schedule is None else S.check_schedule(data_schedule, _API)
        self._lr_schedule = _lrs.checked(lr_schedule, _API)
        bound = MAX_BATCH_BYTES // (8 * Program(spec, 0).arena)
        self._max_rows = _max_rows(max_rows, max(1, min(MAX_ROWS, bound)))
        params = _initial(spec, weights, self._seed)
        self._spec, self._program = spec, Program(spec, self._seed)
        self._state = (params, zeros((spec.total,)), zeros((spec.total,)))
        self._spare = (empty((spec.total,)), empty((spec.total,)), empty((spec.total,)))
        self._results = ResultBuffers()
        self._scratch = empty((1,))
        self._step = 0
        self._lock = threading.RLock()
        _say_where_it_runs()

    # -- introspection -----------------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The model description (an `nn.Sequential`)."""
        return self._spec.model

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One example's input shape."""
        return self._spec.input_shape

    @property
    def output_shape(self) -> tuple[int, ...]:
        """One example's output shape."""
        return self._spec.output_shape

    @property
    def loss(self) -> str:
        """`"cross_entropy"` or `"mse"`."""
        return str(self._spec.loss)

    @property
    def step_(self) -> int:
        """Number of optimizer steps taken."""
        return self._step

    @property
    def max_rows(self) -> int:
        """The most examples one training batch may have."""
        return self._max_rows

    @property
    def weights_(self) -> dict[str, Array]:
        """The current parameters: fresh Arrays keyed by torch's `state_dict` names."""
        return self._spec.split(self._state[0])

    @property
    def lr(self) -> float:
        """The learning rate of steps without an `lr_schedule` (settable, checked)."""
        return float(self._config["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        cfg = dict(self._config)
        cfg.update(
            S.check_config(
                value, (cfg["beta1"], cfg["beta2"]), cfg["eps"], cfg["weight_decay"], _API
            )
        )
        self._config = cfg

    @property
    def weight_decay(self) -> float:
        """AdamW's decoupled weight decay (settable, checked)."""
        return float(self._config["weight_decay"])

    @weight_decay.setter
    def weight_decay(self, value: float) -> None:
        cfg = dict(self._config)
        cfg.update(S.check_config(cfg["lr"], (cfg["beta1"], cfg["beta2"]), cfg["eps"], value, _API))
        self._config = cfg

    @property
    def lr_schedule(self) -> LRSchedule | None:
        """The learning-rate schedule (settable): step t runs at `lr_at(t)`; None: `lr`."""
        return self._lr_schedule

    @lr_schedule.setter
    def lr_schedule(self, value: LRSchedule | None) -> None:
        self._lr_schedule = _lrs.checked(value, _API)

    @property
    def data_schedule(self) -> dict[str, Any]:
        """The data schedule recorded with the state (a copy; settable, checked)."""
        return S.check_schedule(self._schedule, _API) if self._schedule else {}

    @data_schedule.setter
    def data_schedule(self, value: dict[str, Any]) -> None:
        self._schedule = S.check_schedule(value, _API)

    # -- steps -------------------------------------------------------------------------------

    def train_step(self, X: BufferLike, targets: BufferLike) -> dict[str, Any]:
        """One AdamW step on a batch: the loss, its gradients, the update.

        Args:
            X: float32 `(n, *input_shape)` (or `(n, prod(input_shape))`), finite, 1 <= n <=
                `max_rows`; float64 or a list of numbers is rounded once to float32 (the
                class docstring says how; every method that takes X takes them so).
            targets: cross-entropy: integer class ids `(n,)`, or `(n, T)` for outputs of
                `(T, C)`; MSE: float32 of the outputs' shape `(n, *output_shape)`, finite.

        Returns:
            `step` (the new count), `loss` (before the update), `outputs` (the model's
            output before the update; for cross-entropy also as `logits`) and `gradients`
            (fresh Arrays keyed by torch's names).

        Raises:
            TypeError: X or targets of the wrong dtype or kind.
            ValueError: wrong shapes, a NaN or infinity, a class id out of range, or a
                scheduled rate that is not finite and >= 0. Nothing changes.
            RuntimeError: the step produced a non-finite result (nothing was applied).
        """
        with self._lock:
            x, y, n = self._read(X, targets, self._max_rows)
            lr = self._rate(self._step + 1)
            out = self._call(x, y, n, _TRAIN, 1, lr)
            self._publish(out["state"], 1)
            return _result(self._step, out, self._spec)

    def train_steps(self, X: BufferLike, targets: BufferLike, k: int) -> dict[str, Any]:
        """`k` AdamW steps, bit-equal to k `train_step` calls; all or nothing.

        Args:
            X: k equal batches of n examples, stacked: `(k·n, *input_shape)`.
            targets: their targets, stacked the same way.
            k: the number of steps, a positive int.

        Returns:
            `step`, `losses` (the k losses in order), `loss` (the last), and the last step's
            `outputs` and `gradients`.

        Raises:
            TypeError: X or targets of the wrong dtype or kind.
            ValueError: `k` not a positive int, X not k equal batches, a refused batch or
                rate. Nothing changes.
            RuntimeError: a step produced a non-finite result (none was applied).
        """
        if isinstance(k, bool) or type(k) is not int or k < 1:
            raise ValueError(f"{_API}: k must be a positive int, got {k!r}")
        with self._lock:
            x, y, total = self._read(X, targets, self._max_rows * k)
            if total % k:
                raise ValueError(f"{_API}: X's {total} examples are not {k} equal batches")
            n = total // k
            if self._lr_schedule is None:
                out = self._call(x, y, n, _TRAIN, k, self._config["lr"])
            else:  # one rate a step: k calls on working copies, published at the end
                rates = [self._rate(self._step + 1 + i) for i in range(k)]
                out, losses, state = {}, [], self._state
                for i, lr in enumerate(rates):
                    xi, yi = _batch.rows_of(x, i * n, n), _batch.rows_of(y, i * n, n)
                    out = self._call(xi, yi, n, _TRAIN, 1, lr, state, self._step + 1 + i)
                    losses.append(out["losses"][0])
                    state = out["state"]
                out["losses"] = losses
            self._publish(out["state"], k)
            result = _result(self._step, out, self._spec)
            result["losses"] = [float(v) for v in out["losses"]]
            return result

    def _rate(self, t: int) -> float:
        if self._lr_schedule is None:
            return float(self._config["lr"])
        return _lrs.rate(self._lr_schedule, t, _API)

    def _read(self, X: Any, targets: Any, most: int) -> tuple[Array, Array, int]:
        x = _batch.inputs(X, self._spec, most)
        n = x._shape[0]
        return x, _batch.targets(targets, self._spec, n), n

    def _call(
        self,
        x: Array,
        y: Array,
        n: int,
        mode: int,
        k: int,
        lr: float,
        state: tuple[Array, Array, Array] | None = None,
        t: int | None = None,
    ) -> dict[str, Any]:
        """One `model_step` call on batches of n examples. A training call from the published
        state writes the new one into the spare state (published by `_publish`, which swaps
        the two: no state is allocated or copied a step); from another `state`, into fresh
        buffers. The results lie in one buffer: [losses | outputs | gradients] (a training
        call's reused once nothing refers to it: `ResultBuffers`)."""
        spec = self._spec
        p, m, v = state or self._state
        total = spec.total
        new = (p, m, v)
        if mode == _TRAIN:
            new = (
                self._spare
                if state is None
                else (empty((total,)), empty((total,)), empty((total,)))
            )
        outs = n * math.prod(spec.output_shape)
        grads = total if mode in (_GRADS, _TRAIN) else 0
        size = k + outs + grads
        res = (
            empty((size,))
            if mode != _TRAIN
            else Array._wrap(self._results.take(size), (size,), "<f4")
        )
        losses, outputs = _batch.view(res, 0, (k,)), _batch.view(res, k, (n, *spec.output_shape))
        g = _batch.view(res, k + outs, (grads,)) if grads else losses  # never written: a place
        addrs = [x._addr, y._addr, p._addr, m._addr, v._addr]
        addrs += [a._addr for a in new] + [losses._addr, outputs._addr, g._addr]
        self._run(addrs, [n, mode, k, self._step + 1 if t is None else t, lr])
        return {"state": new, "losses": list(losses._mv), "outputs": outputs, "grads": g}

    def _publish(self, state: tuple[Array, Array, Array], k: int) -> None:
        if state is self._spare:  # the old state becomes the next step's spare
            self._spare = self._state
        self._state, self._step = state, self._step + k

    def _run(
        self, addrs: list[int], head: list[Any], first_row: int = 0, divide_by: int = 0
    ) -> None:
        """`model_step` on `addrs` (all but the program's and the scratch) with params `head`
        (rows, mode, k, t, lr) and the trainer's other hyperparameters; a non-finite result is a
        RuntimeError naming the trainer."""
        c = self._config
        hyper = [c["beta1"], c["beta2"], c["eps"], c["weight_decay"], self._spec.total]
        scratch = self._scratch_at(head[0])
        tail = [first_row, divide_by, _threads.pool()]
        try:
            _backend.binding().model_step(
                [self._program.address, *addrs, scratch], [*head, *hyper, *tail]
            )
        except RuntimeError as exc:
            raise RuntimeError(f"{_API}: the step produced a non-finite result ({exc})") from None

    def _scratch_at(self, rows: int) -> int:
        """The address of the activations, their gradients and the rows' losses for `rows`
        examples (training/model.mojo `scratch_floats`): one buffer kept between calls, grown
        (to the next power of two) when a batch needs more."""
        need = rows * (2 * self._program.arena + self._program.positions)
        if self._scratch._size < need:
            self._scratch = empty((1 << (need - 1).bit_length(),))
        return int(self._scratch._addr)

    # -- data parallel (`mojolearn.distributed` through `_model/port.py`) ---------------------

    def _port(self) -> ModelPort:
        """The one way `DataParallel` drives this trainer."""
        return ModelPort(self)

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The whole resumable state as plain values (fresh copies).

        Returns:
            `schema`, `model` (the model record: layers, input shape, loss), `numeric_mode`
            (the process's: a state resumes only in it), `seed`, `step`,
            `config` (lr, betas, eps, weight decay), `lr_schedule` (its record or None),
            `data_schedule`, and `params`, `m`, `v` (dicts of fresh Arrays by torch name).
        """
        with self._lock:
            p, m, v = self._state
            return {
                "schema": SCHEMA,
                "model": self._spec.record(),
                "numeric_mode": _backend.binding().mode,
                "seed": self._seed,
                "step": self._step,
                "config": dict(self._config),
                "lr_schedule": None
                if self._lr_schedule is None
                else _lrs.record(self._lr_schedule),
                "data_schedule": self.data_schedule,
                "params": self._spec.split(p),
                "m": self._spec.split(m),
                "v": self._spec.split(v),
            }


def _max_rows(value: object, bound: int) -> int:
    if value is None:
        return bound
    if isinstance(value, bool) or type(value) is not int or not 1 <= value <= bound:
        raise ValueError(
            f"{_API}: max_rows must be an int in [1, {bound}] (this model's activations for "
            f"{bound} examples fill {MAX_BATCH_BYTES >> 30} GiB), got {value!r}"
        )
    return value


def _initial(spec: ModelSpec, weights: object, seed: int) -> Array:
    if weights is None:
        values = [v for t in spec.init(seed) for v in t]
        return Array.from_list(values, "<f4") if values else zeros((spec.total,))
    if not isinstance(weights, dict):
        raise TypeError(
            f"{_API}: weights must be None or a dict keyed by torch's state_dict names "
            f"({', '.join(spec.names[:3])}, ...), got {type(weights).__name__}"
        )
    missing = [n for n in spec.names if n not in weights]
    extra = sorted(str(k) for k in weights if k not in spec.names)
    if missing or extra:
        raise ValueError(f"{_API}: weights has missing tensors {missing} / unknown tensors {extra}")
    tensors = [
        owned_tensor(weights[n], s, f"weights[{n!r}]", _API)
        for n, s in zip(spec.names, spec.shapes)
    ]
    return S.flat(tensors)  # type: ignore[no-any-return]


def _result(step: int, out: dict[str, Any], spec: ModelSpec) -> dict[str, Any]:
    r = {
        "step": step,
        "loss": float(out["losses"][-1]),
        "outputs": out["outputs"],
        "gradients": _batch.tensors(out["grads"], spec),
    }
    if spec.loss == "cross_entropy":
        r["logits"] = out["outputs"]
    return r
