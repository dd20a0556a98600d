"""Preprocessing that travels with a model: the standardization a trainer holds (both
trainer families: `MLPCore` mixes in `Preprocessing`, `Trainer` `ModelPreprocessing`).

A trainer holds it as the `"preprocessing"` record of its data_schedule (the record
`mojolearn train` has always written there, so its checkpoints, old ones included, carry it
and no state hash moves): per input feature a `mean` and a standard deviation `sd` (float64;
an image model's features are its C·H·W values, row-major, and its raw rows flat),
optionally the `classes` names in class order, the feature `columns`, and a regressor's
`target_mean` and `target_sd`. With one, the entries that SCORE rows take raw rows:
`predict_logits`, `predict`, `predict_proba`, `evaluate` (a regressor's targets too) and the
ONNX export (Sub/Div nodes before the network, Mul/Add after a regressor's output). The
entries that TRAIN (`train_step`, `train_steps`, `fit`, ...) take the network's inputs, the
rows `trainer.standardize(X)` gives: the statistics are fitted on the training rows, and
whoever fits them standardizes the training rows once, as `train` does, so a step costs no
per-row Python work and every pinned state hash stays. `trainer.preprocessing = None` drops it.

The arithmetic is `train`'s (`standardize_rows`): per value `(x - mean) / sd` in float64,
rounded once to float32, 0.0 where sd is 0. x is the value as given: a float64 row (nested
lists of numbers, or a float64 NumPy array or torch tensor, read by `tolist()`) is taken
exactly, so `train`'s own rows get the bits it trained on; any other buffer is read as the
trainers read X (float32). This is host Python work per value, O(rows x features).
"""

from __future__ import annotations

import array as _pyarray
import math

from .._buffers.array import Array
from .._runtime.portable import round_f32
from . import batch as _batch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

KEY = "preprocessing"


def standardize_rows(
    raw_rows: Sequence[Sequence[float]], means: Sequence[float], sds: Sequence[float]
) -> tuple[tuple[float, ...], ...]:
    """Per-feature (x - mean) / sd of every row, rounded once to float32 (0.0 where sd is 0):
    a tuple of float32-valued row tuples. `train`, `predict` and the trainers all do it here."""
    width = len(means)
    out = []
    for row in raw_rows:
        out.append(
            tuple(
                round_f32((row[j] - means[j]) / sds[j]) if sds[j] > 0.0 else 0.0
                for j in range(width)
            )
        )
    return tuple(out)


def finite_numbers(value: object, n: int, at_least: float | None) -> bool:
    """Whether `value` is a list of n finite numbers (each >= `at_least` unless None)."""
    return (
        type(value) is list
        and len(value) == n
        and all(
            type(x) in (int, float) and math.isfinite(x) and (at_least is None or x >= at_least)
            for x in value
        )
    )


def problem(record: object, inputs: int, classes: int | None) -> str | None:
    """Why `record` is not a standardization for `inputs` features and `classes` outputs of
    a classifier (None: a regressor), None when it is one."""
    if type(record) is not dict:
        return f"must be a dict holding 'mean' and 'sd', got {type(record).__name__}"
    for key, at_least in (("mean", None), ("sd", 0.0)):
        if not finite_numbers(record.get(key), inputs, at_least):
            bound = " >= 0" if at_least is not None else ""
            return f"{key} must be a list of {inputs} finite numbers{bound} (one per input)"
    names = record.get("classes")
    if names is not None and (
        type(names) is not list
        or not all(type(c) is str for c in names)
        or classes is None
        or len(names) > classes
    ):
        return f"classes must be a list of at most {classes} class names (a classifier's)"
    target = [record.get("target_mean"), record.get("target_sd")]
    if target != [None, None] and (
        classes is not None
        or not finite_numbers(target[:1], 1, None)
        or not finite_numbers(target[1:], 1, 0.0)
    ):
        return "target_mean and target_sd must be finite numbers (sd >= 0) of a regressor"
    return None


def held(schedule: dict[str, Any] | None) -> dict[str, Any] | None:
    """The standardization a (checked) data_schedule holds, None without one."""
    record = schedule.get(KEY) if schedule else None
    return record if type(record) is dict else None


def _raw_rows(X: Any, width: int, read: Callable[[Any], Array]) -> list[list[float]]:
    """X's rows as Python floats: a float64 NumPy array or torch tensor and nested lists
    exactly, any other buffer as the trainer reads X (float32)."""
    if isinstance(X, (list, tuple)) or "float64" in str(getattr(X, "dtype", "")):
        rows = X.tolist() if hasattr(X, "tolist") else X
        if (
            len(rows) < 1
            or not all(isinstance(r, (list, tuple)) and len(r) == width for r in rows)
            or not all(type(v) in (int, float) for r in rows for v in r)
        ):
            raise ValueError(f"X must be rows of {width} numbers each (at least one row)")
        return [[float(v) for v in r] for r in rows]
    x = read(X)
    n = x._shape[0]
    values: list[Any] = x._mv.tolist()  # floats: a float32 buffer
    return [values[i * width : (i + 1) * width] for i in range(n)]


def network_inputs(record: dict[str, Any], X: Any, read: Callable[[Any], Array], api: str) -> Array:
    """The float32 (n, features) network inputs of raw rows X (see the module docstring);
    ValueError naming the row and column of a non-finite value or one whose standardized
    value is past float32's range."""
    means, sds = record["mean"], record["sd"]
    width = len(means)
    try:
        rows = _raw_rows(X, width, read)
    except ValueError as exc:
        raise ValueError(f"{api}: {exc}") from None
    flat = _pyarray.array("f")
    for i, row in enumerate(standardize_rows(rows, means, sds)):
        if not all(map(math.isfinite, row)):
            j = next(j for j, v in enumerate(row) if not math.isfinite(v))
            raise ValueError(
                f"{api}: X row {i}, column {j}: {rows[i][j]!r} standardizes to a value that "
                f"is not a finite float32 ((x - mean) / sd with the recorded mean "
                f"{means[j]!r} and sd {sds[j]!r})"
            )
        flat.extend(row)
    return Array._wrap(flat, (len(rows), width), "<f4")


def raw_targets(record: dict[str, Any], targets: Any) -> Any:
    """A regressor's raw targets standardized with the recorded target mean and sd (float32
    Array); a classifier's targets as given."""
    if record.get("target_sd") is None:
        return targets
    values = targets.tolist() if hasattr(targets, "tolist") else list(targets)
    flat = [v[0] if isinstance(v, list) and len(v) == 1 else v for v in values]
    z = standardize_rows([[float(v)] for v in flat], [record["target_mean"]], [record["target_sd"]])
    column = _pyarray.array("f", (r[0] for r in z))
    return Array._wrap(column, (len(column), 1), "<f4")


def target_units(record: dict[str, Any] | None, z: Array) -> Array:
    """A regressor's outputs in the target's units, z * target_sd + target_mean in float64
    rounded once to float32 (the outputs as given without a recorded target)."""
    if record is None or record.get("target_sd") is None:
        return z
    sd, mean = record["target_sd"], record["target_mean"]
    out = _pyarray.array("f", (round_f32(v * sd + mean) for v in z._mv.tolist()))
    return Array._wrap(out, z._shape, "<f4")


def preprocessing_metadata(schedule: dict[str, Any] | None) -> dict[str, str]:
    """An export's metadata entry for a held standardization: {"preprocessing": its JSON}
    (the weights take the standardized inputs; a reader applies it), else {}."""
    record = held(schedule)
    if record is None:
        return {}
    import json

    return {KEY: json.dumps(record, separators=(",", ":"), sort_keys=True)}


def bake_onnx(onnx: Any, model: Any, record: dict[str, Any] | None) -> None:
    """Put the standardization into an exported ONNX `model` (input `input`, output
    `logits`): Sub(mean) and Div(sd, 1 where sd is 0) then Mul(0 where sd is 0) before the
    network, and a regressor's Mul(target_sd), Add(target_mean) after it, all float32."""
    if record is None:
        return
    helper, f32, graph = onnx.helper, onnx.TensorProto.FLOAT, model.graph
    # Per-feature constants take one example's shape ((C, H, W) for an image model), so they
    # broadcast over the batch axis.
    example = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim[1:]]

    def const(name: str, values: list[float], vector: bool = True) -> str:
        shape = example if vector else []
        graph.initializer.append(helper.make_tensor(name, f32, shape, values))
        return name

    for node in graph.node:  # the network now reads the standardized input
        node.input[:] = ["standardize.output" if i == "input" else i for i in node.input]
    sds = record["sd"]
    steps = [
        helper.make_node(
            "Sub",
            ["input", const("standardize.mean", record["mean"])],
            ["standardize.centered"],
            name="standardize.sub",
        ),
        helper.make_node(
            "Div",
            ["standardize.centered", const("standardize.sd", [s if s > 0 else 1.0 for s in sds])],
            ["standardize.scaled"],
            name="standardize.div",
        ),
        helper.make_node(
            "Mul",
            ["standardize.scaled", const("standardize.mask", [1.0 if s > 0 else 0.0 for s in sds])],
            ["standardize.output"],
            name="standardize.mask",
        ),
    ]
    nodes = steps + list(graph.node)
    if record.get("target_sd") is not None:
        for node in nodes:
            node.output[:] = ["logits.standardized" if o == "logits" else o for o in node.output]
        sd = const("target.sd", [float(record["target_sd"])], False)
        mean = const("target.mean", [float(record["target_mean"])], False)
        nodes.append(
            helper.make_node(
                "Mul", ["logits.standardized", sd], ["target.scaled"], name="target.mul"
            )
        )
        nodes.append(
            helper.make_node("Add", ["target.scaled", mean], ["logits"], name="target.add")
        )
    del graph.node[:]
    graph.node.extend(nodes)


class Preprocessing:
    """The trainers' `preprocessing` and `standardize`: a mixin of `MLPCore` and `Trainer`
    (each gives `_schedule`, `_API`, `data_schedule`, `_read_inputs` and `_preprocess_sizes`)."""

    __slots__ = ()

    @property
    def preprocessing(self: Any) -> dict[str, Any] | None:
        """The standardization the trainer holds (a copy; settable; None: none).

                A dict: `mean` and `sd` (one float64 per input feature), optionally `classes` (the
                class names, in class order), `columns` (the feature names) and a regressor's
                `target_mean` and `target_sd` (an image model's `input_shape=(C, H, W)`: one per pixel and
        channel, its raw rows flat, C·H·W values row-major). With one, `predict_logits`, `predict`,
                `predict_proba`, `evaluate` and `export_onnx` take RAW rows and standardize them
                ((x - mean) / sd in float64, rounded once to float32; 0 where sd is 0); the training
                entries take the network's inputs (`standardize`). It lives in the data_schedule's
                "preprocessing" record, so checkpoints carry it (`mojolearn train` writes it there).
        """
        record = held(self._schedule)
        return None if record is None else dict(self.data_schedule[KEY])

    @preprocessing.setter
    def preprocessing(self: Any, value: dict[str, Any] | None) -> None:
        schedule = dict(self._schedule or {})
        if value is None:
            schedule.pop(KEY, None)
        else:
            why = problem(value, *self._preprocess_sizes())
            if why:
                raise ValueError(f"{self._API}: preprocessing {why}")
            schedule[KEY] = dict(value)
        self.data_schedule = schedule or {KEY: None}

    def standardize(self: Any, X: Any) -> Array:
        """The network's inputs for raw rows X: what `predict` feeds the network, and what
        `train_step` takes.

        Args:
            X: raw rows (n, features): nested lists or float64 arrays (read exactly), or any
                float32 buffer the trainer takes.

        Returns:
            A fresh float32 Array (n, features).

        Raises:
            ValueError: the trainer holds no preprocessing, a wrong shape, or a value that
                does not standardize to a finite float32.
        """
        record = held(self._schedule)
        if record is None:
            raise ValueError(f"{self._API}: standardize needs a preprocessing (none is held)")
        return network_inputs(record, X, self._read_inputs, self._API)

    def _network_inputs(self: Any, X: Any) -> Any:
        """X itself without a standardization, else the network's inputs of raw rows X."""
        record = held(self._schedule)
        return X if record is None else network_inputs(record, X, self._read_inputs, self._API)


class ModelPreprocessing(Preprocessing):
    """`Preprocessing` for `Trainer`: a mixin (the trainer gives `_spec` and `_API`)."""

    __slots__ = ()

    def _read_inputs(self: Any, X: Any) -> Array:
        """X as the scoring entries read it."""
        return _batch.inputs(X, self._spec, None)

    def _preprocess_sizes(self: Any) -> tuple[int, int | None]:
        """(features, classes or None for a regressor) a standardization must fit: one mean
        and sd per input value (an image's per pixel and channel: raw rows are flat, C·H·W)."""
        spec = self._spec
        classes = None if spec.loss == "mse" else math.prod(spec.output_shape)
        return math.prod(spec.input_shape), classes
