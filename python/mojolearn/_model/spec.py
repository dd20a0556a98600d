"""A model's spec: an `nn.Sequential` with one example's input shape and a loss, checked once,
giving every layer's shapes, the flat parameter layout under torch's `state_dict` names, the
seeded initialization and the JSON record a checkpoint keeps.

The flat buffer (and the gradients and moments) holds the tensors in torch's
`Sequential.state_dict()` order: layers in order, depth first into containers, each layer's
tensors in its own order (`weight` then `bias`), each row-major. Shapes exclude the batch axis.
"""

from __future__ import annotations

import math
import operator

from .._buffers.alloc import empty
from .._mlp.rng import SplitMix64, _check_seed
from .._runtime.portable import round_f32
from .layers import MAX_FEATURES, Embedding, Layer, Linear, ReLU, Sequential, _Stack, from_json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from .._buffers.array import Array

LOSSES = ("cross_entropy", "mse")
MAX_PARAMS = 1 << 26  # as the MLP's bound (_mlp/spec.py)
MAX_RANK = 4  # one example's axes: (F,), (T, D), (C, H, W) and one to spare


def check_input_shape(value: object, api: str) -> tuple[int, ...]:
    """`input_shape` as a tuple of ints in [1, MAX_FEATURES], rank 1 to MAX_RANK."""
    if isinstance(value, bool) or hasattr(type(value), "__index__"):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_RANK:
        raise TypeError(
            f"{api}: input_shape must be a tuple of 1 to {MAX_RANK} ints (one example's shape "
            f"without the batch axis, e.g. (10,)), got {value!r}"[:300]
        )
    out = []
    for i, d in enumerate(value):
        if isinstance(d, bool) or not hasattr(type(d), "__index__"):
            raise TypeError(f"{api}: input_shape[{i}] must be an int, got {type(d).__name__}")
        n = operator.index(d)
        if not 1 <= n <= MAX_FEATURES:
            raise ValueError(f"{api}: input_shape[{i}] must be in [1, {MAX_FEATURES}], got {n}")
        out.append(n)
    return tuple(out)


class ModelSpec:
    """A checked (model, input_shape, loss): shapes per layer, parameter layout, init."""

    __slots__ = ("model", "input_shape", "loss", "steps", "names", "shapes", "offsets", "total")

    def __init__(self, model: object, input_shape: object, loss: object, api: str = "Trainer"):
        if not isinstance(model, Sequential):
            hint = " (wrap it: nn.Sequential(layer))" if isinstance(model, Layer) else ""
            raise TypeError(
                f"{api}: model must be a mojolearn.nn.Sequential{hint}, got {type(model).__name__}"
            )
        if loss not in LOSSES:
            raise ValueError(f"{api}: loss must be one of {LOSSES}, got {loss!r}"[:200])
        self.model, self.loss = model, loss
        self.input_shape = check_input_shape(input_shape, api)
        # (path, layer, input shape, output shape) of every layer, containers included,
        # in order: what the program is built from.
        self.steps: list[tuple[str, Layer, tuple[int, ...], tuple[int, ...]]] = []
        out = self._walk(model, "", self.input_shape, "model")
        for path, layer, _, _ in self.steps:
            if isinstance(layer, Embedding) and path != "0":
                raise ValueError(
                    f"{api}: layer {path} {layer!r}: an Embedding takes token ids, so only the "
                    f"model's first layer may be one"
                )
        _check_loss(loss, out, api)
        names, shapes, offsets, off = [], [], [], 0
        for path, layer, shape_in, _ in self.steps:
            for name, shape in layer._parameters(shape_in):
                names.append(f"{path}.{name}")
                shapes.append(shape)
                offsets.append(off)
                off += math.prod(shape)
        if off > MAX_PARAMS:
            raise ValueError(
                f"{api}: the model has {off:,} parameters, at most {MAX_PARAMS:,} (2**26) "
                f"are allowed"
            )
        self.names, self.shapes, self.offsets, self.total = (
            tuple(names),
            tuple(shapes),
            tuple(offsets),
            off,
        )

    def _walk(self, layer: Layer, path: str, shape: tuple[int, ...], where: str) -> Any:
        if isinstance(layer, _Stack):
            self.steps.append((path, layer, shape, shape))
            index = len(self.steps) - 1
            out = shape
            for i, child in enumerate(layer.layers):
                sub = f"{path}.{i}" if path else str(i)
                out = self._walk(child, sub, out, f"layer {sub}")
            out = layer._output_shape(shape, where) if path else out  # a Residual checks its own
            self.steps[index] = (path, layer, shape, out)
            return out
        out = layer._output_shape(shape, where)
        self.steps.append((path, layer, shape, out))
        return out

    @property
    def vocabulary(self) -> int:
        """The token ids' range when the model's input is ids (its first layer an Embedding),
        else 0 (float32 inputs)."""
        first = self.model.layers[0]
        return first.num_embeddings if isinstance(first, Embedding) else 0

    @property
    def output_shape(self) -> tuple[int, ...]:
        """One example's output shape."""
        return self.steps[0][3]

    def init(self, seed: int) -> list[list[float]]:
        """The initial tensors (float32 values, row-major, in parameter order): one SplitMix64
        seeded with `seed`, drawn tensor by tensor in that order by each layer's torch default
        (docs/ARITHMETIC.md "Models": a ReLU MLP draws exactly `MLPTrainer`'s values)."""
        rng = SplitMix64(_check_seed(seed))
        out = []
        for _, layer, shape_in, _ in self.steps:  # the walk that laid out `names`
            for tensor, shape in layer._parameters(shape_in):
                out.append([round_f32(v) for v in layer._initial(tensor, shape, rng)])
        return out

    def split(self, flat: Array) -> dict[str, Array]:
        """A flat float32 buffer (params, moments or gradients) as fresh Arrays by name."""
        out = {}
        for name, shape, at in zip(self.names, self.shapes, self.offsets):
            a = empty(shape)
            a._mv[:] = flat._mv[at : at + math.prod(shape)]
            out[name] = a
        return out

    def mlp_sizes(self) -> list[int] | None:
        """`[inputs, hidden..., classes]` when the model is exactly the MLP that `MLPTrainer`
        runs (Linear with bias, ReLU between, cross-entropy on (B, F) inputs), else None."""
        layers = self.model.layers
        if self.loss != "cross_entropy" or len(self.input_shape) != 1 or len(layers) % 2 == 0:
            return None
        sizes = [self.input_shape[0]]
        for i, layer in enumerate(layers):
            if i % 2 == 1:
                if type(layer) is not ReLU:
                    return None
            elif type(layer) is not Linear or not layer.bias:
                return None
            else:
                sizes.append(layer.out_features)
        return sizes

    def record(self) -> dict[str, Any]:
        """The JSON record a checkpoint keeps: model, input shape and loss."""
        return {
            "input_shape": list(self.input_shape),
            "loss": self.loss,
            "model": self.model.to_json(),
        }

    @classmethod
    def from_record(cls, value: object, api: str) -> ModelSpec:
        """The spec of a record, every field checked (ValueError naming what is wrong)."""
        if not isinstance(value, dict) or set(value) != {"input_shape", "loss", "model"}:
            raise ValueError(
                f"{api}: the model record holds exactly input_shape, loss and model, got "
                f"{sorted(value) if isinstance(value, dict) else type(value).__name__}"[:300]
            )
        try:
            return cls(from_json(value["model"]), value["input_shape"], value["loss"], api)
        except TypeError as e:
            raise ValueError(str(e)) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelSpec) and other.record() == self.record()

    def __hash__(self) -> int:
        return hash((self.model, self.input_shape, self.loss))


def _check_loss(loss: object, out: tuple[int, ...], api: str) -> None:
    if loss == "cross_entropy":
        if len(out) > 2 or out[-1] < 2:
            raise ValueError(
                f"{api}: loss='cross_entropy' needs an output of (classes,) or (positions, "
                f"classes) per example with classes >= 2, the model gives {out}"
            )
