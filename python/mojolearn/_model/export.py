"""`Trainer`'s weights and model out to, and back in from, torch, safetensors and ONNX.

`ModelExport` is a mixin of `Trainer` (it uses the trainer's spec, its published flat
parameters and its lock, and builds new trainers through the public constructor). torch,
safetensors and onnx are optional and imported only on use (a missing one is an ImportError
saying what to `pip install`, as `MLPTrainer`'s); nothing here imports them at import time.

torch (`to_torch` / `Trainer.from_torch`): every `mojolearn.nn` layer is its torch namesake
(`Linear`, `ReLU`, `GELU(approximate)`, `Tanh`, `Sigmoid`, `LayerNorm(d, eps,
elementwise_affine)`, `Dropout(p)`, `Flatten()`, `Conv2d`, `MaxPool2d`, `AvgPool2d` (torch's
defaults for every option ours lacks: no dilation, groups, pool padding or ceil_mode),
`Sequential`), and `nn.Residual` is this
module's `Residual`: a `torch.nn.Sequential` subclass whose forward is `x + f(x)`, so its
children are named "0", "1", ... and the state_dict names are ours ("3.1.weight"). The text
layers: `nn.Embedding` is torch's, the other two this package's torch modules (`_model/torch_text.py`).
`Trainer.from_torch` reads exactly these classes (subclasses are refused: one may override
`forward`), and as a Residual only ours (`torch_residual()`): a class of another library is
refused by name even when it is called "Residual", since nothing says its forward is `x + f(x)`.

safetensors (`save_safetensors` / `Trainer.from_safetensors`): the tensors under torch's
`state_dict` names, float32, torch's shapes (a `to_torch()` model loads the file as it is);
metadata `format` ("pt"), `producer`, `model` (the JSON record: layers, input shape, loss),
`arithmetic_profile`, `numeric_mode`, `step`, `state_hash`. A file holds tensors only, so
reading one takes the structure from the caller (`model=`, `input_shape=`): every tensor's name,
dtype, shape and values are checked against it, and a file that records a model (ours) must
record that same model and input shape.

ONNX (`export_onnx`): an inference graph at opset `OPSET` (17: LayerNormalization exists; GELU
decomposed, as opset 17 has no Gelu), input `input` float32 [batch, *input_shape], output
`logits` float32 [batch, *output_shape]. Linear: `Gemm` (transB=1) on rank-2 activations,
`Transpose`·`MatMul` (+ `Add`) on higher ranks; ReLU, Tanh, Sigmoid: their ops; GELU:
`x·0.5·(1 + Erf(x·(1/√2)))`, or with approximate="tanh" `x·0.5·(1 + Tanh(√(2/π)·(x +
0.044715·x³)))` (torch's formulas); LayerNorm: `LayerNormalization` (axis -1; a constant
scale of ones without the affine tensors); Dropout: nothing (inference); Flatten: `Flatten`
(axis 1, i.e. (batch, -1)); Conv2d: `Conv` (pads [ph, pw, ph, pw]); MaxPool2d, AvgPool2d:
`MaxPool`, `AveragePool` (no padding, floor sizes); Residual: `Add`. Initializers carry the state_dict names and the
trainer's bytes; metadata_props carry the safetensors metadata.
"""

from __future__ import annotations

import json

from .._mlp import codec as _ckpt
from .._mlp import export as _mlp_export
from .._runtime import backend as _backend
from .._runtime import files as _files
from . import layers as L
from . import preprocessing as _pre
from . import torch_text as _text

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import os
    from types import ModuleType
    from typing import Any

    import torch

    from .._buffers.array import Array
    from .._buffers.types import BufferLike
    from .trainer import Trainer

OPSET = 17
IR_VERSION = 8  # opset 17's IR version (onnx.helper.VERSION_TABLE), not onnx's newest
_API = "Trainer"

_residual: Any = None  # the torch Residual class, made on first use (torch is optional)


def torch_residual() -> type[torch.nn.Sequential]:
    """The torch module class `to_torch` gives an `nn.Residual` (made once; imports torch).

    A `torch.nn.Sequential` subclass whose forward is `x + super().forward(x)`: its children
    are named by index, so its state_dict names are mojolearn's (`"3.1.weight"`); picklable as
    `mojolearn._model.export.Residual`. `Trainer.from_torch` reads it back as `nn.Residual`.

    Returns:
        The class.
    """
    global _residual
    if _residual is None:
        import torch

        class Residual(torch.nn.Sequential):
            """`y = x + f(x)`, f its layers in order (mojolearn's `nn.Residual` in torch)."""

            def forward(self, input: torch.Tensor) -> torch.Tensor:
                out: torch.Tensor = super().forward(input)  # type: ignore[no-untyped-call]
                return input + out

        Residual.__module__, Residual.__qualname__ = __name__, "Residual"
        _residual = Residual
    return _residual  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    # Unpickling a saved `to_torch()` model finds the Residual class here.
    if name == "Residual":
        return torch_residual()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _metadata(trainer: Trainer) -> dict[str, str]:
    """The text metadata of an export (caller holds the trainer's lock: one state)."""
    from .._runtime.version import version

    return {
        "format": "pt",
        "producer": f"mojolearn {version()}",
        "model": json.dumps(trainer._spec.record(), separators=(",", ":")),
        "arithmetic_profile": _ckpt.PROFILE,
        "numeric_mode": str(_backend.binding().mode),
        "step": str(trainer.step_),
        "state_hash": trainer.state_hash(),
        **_pre.preprocessing_metadata(trainer._schedule),
    }


def _tensors(trainer: Trainer) -> list[Array]:
    """The current parameters in the spec's order (fresh Arrays; caller holds the lock)."""
    weights = trainer.weights_
    return [weights[n] for n in trainer._spec.names]


# ---------------------------------------------------------------- torch


def _torch_name(module: object) -> str:
    """`torch.nn.Conv2d` for torch's own modules, `package.module.Class` for any other."""
    cls = type(module)
    where = cls.__module__
    if where.startswith("torch.nn.modules."):
        where = "torch.nn"
    return f"{where}.{cls.__qualname__}"


def _to_torch(torch: ModuleType, layer: L.Layer) -> Any:
    """The torch module of a layer description (fresh parameters; the caller loads ours)."""
    f32 = torch.float32
    if isinstance(layer, L._Stack):
        cls = torch_residual() if isinstance(layer, L.Residual) else torch.nn.Sequential
        return cls(*(_to_torch(torch, child) for child in layer.layers))
    if isinstance(layer, L.Linear):
        return torch.nn.Linear(layer.in_features, layer.out_features, layer.bias, dtype=f32)
    if isinstance(layer, L.LayerNorm):
        return torch.nn.LayerNorm(
            layer.normalized_shape, layer.eps, layer.elementwise_affine, dtype=f32
        )
    if isinstance(layer, L.Conv2d):
        return torch.nn.Conv2d(
            layer.in_channels,
            layer.out_channels,
            layer.kernel_size,
            layer.stride,
            layer.padding,
            bias=layer.bias,
            dtype=f32,
        )
    if isinstance(layer, (L.MaxPool2d, L.AvgPool2d)):
        pool = torch.nn.MaxPool2d if isinstance(layer, L.MaxPool2d) else torch.nn.AvgPool2d
        return pool(layer.kernel_size, layer.stride)
    if isinstance(layer, L.GELU):
        return torch.nn.GELU(approximate=layer.approximate)
    if isinstance(layer, L.Dropout):
        return torch.nn.Dropout(layer.p)
    text = _text.to_torch(torch, layer)
    if text is not None:
        return text
    simple = {L.ReLU: "ReLU", L.Tanh: "Tanh", L.Sigmoid: "Sigmoid", L.Flatten: "Flatten"}
    return getattr(torch.nn, simple[type(layer)])()


def _own_tensors(module: Any) -> list[str]:
    """The names of the parameters and buffers a module holds itself (not its children's)."""
    own = [n for n, _ in module.named_parameters(recurse=False)]
    return own + [n for n, _ in module.named_buffers(recurse=False)]


def _from_torch(
    torch: ModuleType, module: Any, path: str, weights: dict[str, Any], what: str
) -> L.Layer:
    """The description of a torch module, its tensors put in `weights` under `path`'s names;
    ValueError naming the layer's path and class for anything mojolearn.nn cannot hold."""
    cls, name = type(module), _torch_name(module)
    where = f"{what}: layer {path}" if path else f"{what}: module"
    nn = torch.nn
    if cls is nn.Sequential or cls is torch_residual():
        children = list(module)
        if not children:
            raise ValueError(f"{where} is an empty {name} (mojolearn.nn containers hold >= 1)")
        if _own_tensors(module):
            raise ValueError(f"{where} ({name}) holds tensors of its own: {_own_tensors(module)}")
        inner = [
            _from_torch(torch, c, f"{path}.{i}" if path else str(i), weights, what)
            for i, c in enumerate(children)
        ]
        make: Any = L.Residual if cls is not nn.Sequential else L.Sequential
        return _described(make, inner, where, name)
    try:
        text = _text.from_torch(torch, module, where)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} ({name}): {exc}") from None
    if text is not None:
        for tensor in text[1]:
            value = module.get_parameter(tensor)
            weights[f"{path}.{tensor}"] = _float32(torch, value, f"{where} ({name}) {tensor}")
        return text[0]
    expected = {nn.Linear: 2, nn.LayerNorm: 2, nn.Conv2d: 2}.get(cls, 0)
    if cls not in _leaves(nn):
        raise ValueError(f"{where} is {name}, which mojolearn.nn has no layer for")
    own = _own_tensors(module)
    if len(own) > expected or any(n not in ("weight", "bias") for n in own):
        raise ValueError(f"{where} ({name}) holds tensors mojolearn would not keep: {own}")
    if cls is nn.Linear:
        layer = _described(
            L.Linear,
            [module.in_features, module.out_features, module.bias is not None],
            where,
            name,
        )
    elif cls is nn.LayerNorm:
        shape = tuple(module.normalized_shape)
        if len(shape) != 1:
            raise ValueError(
                f"{where} is {name} over the last {len(shape)} axes {shape}; mojolearn.nn's "
                f"LayerNorm normalizes the last axis only (normalized_shape an int)"
            )
        if module.elementwise_affine and module.bias is None:
            raise ValueError(
                f"{where} is {name} with elementwise_affine but bias=False; mojolearn.nn's "
                f"LayerNorm has both weight and bias, or neither"
            )
        layer = _described(
            L.LayerNorm,
            [shape[0], float(module.eps), bool(module.elementwise_affine)],
            where,
            name,
        )
    elif cls in (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d):
        layer = _image_layer(torch, module, where, name)
    elif cls is nn.GELU:
        layer = _described(L.GELU, [module.approximate], where, name)
    elif cls is nn.Dropout:
        layer = _described(L.Dropout, [float(module.p)], where, name)
    elif cls is nn.Flatten:
        if (module.start_dim, module.end_dim) != (1, -1):
            raise ValueError(
                f"{where} is {name}(start_dim={module.start_dim}, end_dim={module.end_dim}); "
                f"mojolearn.nn's Flatten flattens every axis after the batch axis (1, -1) only"
            )
        layer = L.Flatten()
    else:
        layer = {nn.ReLU: L.ReLU, nn.Tanh: L.Tanh, nn.Sigmoid: L.Sigmoid}[cls]()
    for tensor in ("weight", "bias"):
        value = getattr(module, tensor, None) if expected else None
        if value is not None:
            weights[f"{path}.{tensor}"] = _float32(torch, value, f"{where} ({name}) {tensor}")
    return layer


def _leaves(nn: Any) -> tuple[Any, ...]:
    return (
        nn.Linear,
        nn.ReLU,
        nn.GELU,
        nn.Tanh,
        nn.Sigmoid,
        nn.LayerNorm,
        nn.Dropout,
        nn.Flatten,
        nn.Conv2d,
        nn.MaxPool2d,
        nn.AvgPool2d,
    )


def _image_layer(torch: ModuleType, module: Any, where: str, name: str) -> L.Layer:
    """A torch Conv2d, MaxPool2d or AvgPool2d as ours, refusing by name any option ours lacks
    (dilation, groups, padding modes and string paddings, pool padding, ceil_mode,
    count_include_pad=False, divisor_override, return_indices)."""
    nn = torch.nn

    def pair(v: Any) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else tuple(v)

    if type(module) is nn.Conv2d:
        unsupported = {
            "dilation": (pair(module.dilation), (1, 1)),
            "groups": (module.groups, 1),
            "padding_mode": (module.padding_mode, "zeros"),
            "padding": (isinstance(module.padding, str), False),
        }
        args: list[Any] = [
            module.in_channels,
            module.out_channels,
            pair(module.kernel_size),
            pair(module.stride),
            module.padding if isinstance(module.padding, str) else pair(module.padding),
            module.bias is not None,
        ]
        make: Any = L.Conv2d
    else:
        is_max = type(module) is nn.MaxPool2d
        unsupported = {
            "padding": (pair(module.padding), (0, 0)),
            "ceil_mode": (module.ceil_mode, False),
        }
        if is_max:
            unsupported["dilation"] = (pair(module.dilation), (1, 1))
            unsupported["return_indices"] = (module.return_indices, False)
        else:
            unsupported["divisor_override"] = (module.divisor_override, None)
        args = [pair(module.kernel_size), pair(module.stride)]
        make = L.MaxPool2d if is_max else L.AvgPool2d
    for option, (value, plain) in unsupported.items():
        if value != plain:
            shown = module.padding if option == "padding" else value
            raise ValueError(
                f"{where} is {name} with {option}={shown!r}; mojolearn.nn's {make.__name__} "
                f"supports only {option}={plain!r}"
            )
    return _described(make, args, where, name)


def _described(make: Any, args: list[Any], where: str, name: str) -> L.Layer:
    """`make(*args)`, its refusal (a size or p out of range) as a ValueError naming the layer."""
    try:
        return make(*args)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} ({name}): {exc}") from None


def _float32(torch: ModuleType, value: Any, what: str) -> Any:
    """A detached, contiguous float32 CPU copy of a floating tensor (float64 rounds to nearest,
    float16 and bfloat16 convert exactly); ValueError for any other dtype or a meta tensor."""
    t = value.detach()
    if t.is_meta:
        raise ValueError(f"{what} is a meta tensor (no values to copy)")
    if not t.is_floating_point():
        raise ValueError(f"{what} must be a floating tensor, got {t.dtype}")
    return t.to(device="cpu", dtype=torch.float32, copy=True).contiguous()


# ---------------------------------------------------------------- safetensors


def _read_safetensors(path: str | os.PathLike[str], what: str) -> tuple[dict[str, Any], bytes]:
    st = _mlp_export._require("safetensors", what)
    data = _mlp_export._read(path, what)
    try:
        flat = st.deserialize(data)
    except Exception as exc:  # SafetensorError (a bare Exception subclass): a broken file
        raise ValueError(
            f"{what}: {_files.shown(_files.fspath(path))!r} is not a safetensors file ({exc})"
        ) from None
    return {name: t for name, t in flat}, data


def _checked_tensors(
    tensors: dict[str, Any], names: tuple[str, ...], shapes: tuple[Any, ...], what: str
) -> dict[str, BufferLike]:
    """The file's tensors as float32 Arrays by name, each checked against the model's."""
    missing = [n for n in names if n not in tensors]
    extra = sorted(set(tensors) - set(names))
    if missing or extra:
        raise ValueError(
            f"{what}: the file must hold exactly the model's tensors {list(names)}, missing "
            f"{missing}, unexpected {extra}"[:500]
        )
    out: dict[str, BufferLike] = {}
    for name, shape in zip(names, shapes):
        t = tensors[name]
        if t["dtype"] != "F32":
            raise ValueError(f"{what}: tensor {name!r} must be float32 (F32), got {t['dtype']}")
        if tuple(t["shape"]) != tuple(shape):
            raise ValueError(
                f"{what}: tensor {name!r} must have shape {tuple(shape)} for this model, got "
                f"{tuple(t['shape'])}"
            )
        out[name] = _mlp_export._finite(name, bytes(t["data"]), tuple(shape), what)
    return out


def _check_recorded_model(data: bytes, record: dict[str, Any], what: str) -> None:
    """A file that records its model (ours) must record the model and input shape given."""
    text = _mlp_export._file_metadata(data).get("model")
    if text is None:
        return
    try:
        recorded = json.loads(text)
    except (TypeError, ValueError):
        recorded = None
    if type(recorded) is not dict:
        raise ValueError(f"{what}: metadata model must be a JSON object, got {text!r}"[:300])
    for key in ("model", "input_shape"):
        if recorded.get(key) != record[key]:
            got, want = recorded.get(key), record[key]
            if key == "model":
                want = L.from_json(want)
                try:
                    got = L.from_json(got)
                except ValueError:
                    pass  # shown as the record it is
            raise ValueError(
                f"{what}: the file was saved from {key} {got!r}, not the {want!r} given"[:500]
            )


# ---------------------------------------------------------------- ONNX


class _Graph:
    """An ONNX graph being built: nodes, initializers, shared constants and fresh names."""

    def __init__(self, onnx: ModuleType) -> None:
        self.helper, self.f32 = onnx.helper, onnx.TensorProto.FLOAT
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._consts: dict[tuple[float, int], str] = {}

    def node(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        out = f"{name}.output"
        self.nodes.append(self.helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def tensor(self, name: str, shape: tuple[int, ...], raw: bytes) -> None:
        self.initializers.append(
            self.helper.make_tensor(name, self.f32, list(shape), raw, raw=True)
        )

    def const(self, value: float, size: int = 0) -> str:
        """A float32 constant: a scalar (size 0) or a vector of `size` copies, made once."""
        key = (value, size)
        if key not in self._consts:
            name = f"const.{len(self._consts)}"
            shape = (size,) if size else ()
            self.initializers.append(
                self.helper.make_tensor(name, self.f32, list(shape), [value] * max(size, 1))
            )
            self._consts[key] = name
        return self._consts[key]


def _onnx_layers(g: _Graph, layer: L.Layer, path: str, x: str, ranks: dict[str, int]) -> str:
    """Emit the nodes of `layer` (at `path`, on the tensor `x`; `ranks`: each layer's input
    rank, the batch axis included); the name of its output."""
    if isinstance(layer, L._Stack):
        y = x
        for i, child in enumerate(layer.layers):
            y = _onnx_layers(g, child, f"{path}.{i}" if path else str(i), y, ranks)
        return g.node("Add", [x, y], f"{path}.add") if isinstance(layer, L.Residual) else y
    if isinstance(layer, L.Linear):
        w, b = f"{path}.weight", f"{path}.bias"
        if ranks[path] == 2:
            return g.node("Gemm", [x, w] + [b] * layer.bias, path, transB=1)
        wt = g.node("Transpose", [w], f"{path}.transpose", perm=[1, 0])
        y = g.node("MatMul", [x, wt], f"{path}.matmul" if layer.bias else path)
        return g.node("Add", [y, b], path) if layer.bias else y
    if isinstance(layer, L.LayerNorm):
        d = layer.normalized_shape
        ab = [f"{path}.weight", f"{path}.bias"] if layer.elementwise_affine else [g.const(1.0, d)]
        return g.node("LayerNormalization", [x] + ab, path, axis=-1, epsilon=layer.eps)
    if isinstance(layer, L.GELU):
        half = g.node("Mul", [x, g.const(0.5)], f"{path}.half")
        if layer.approximate == "none":  # torch: x·0.5·(1 + erf(x·M_SQRT1_2))
            s = g.node("Mul", [x, g.const(0.7071067811865476)], f"{path}.scale")
            e = g.node("Erf", [s], f"{path}.erf")
        else:  # torch: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
            x2 = g.node("Mul", [x, x], f"{path}.square")
            x3 = g.node("Mul", [x2, x], f"{path}.cube")
            c = g.node("Mul", [x3, g.const(0.044715)], f"{path}.cubic")
            inner = g.node("Add", [x, c], f"{path}.inner")
            s = g.node("Mul", [inner, g.const(0.7978845608028654)], f"{path}.scale")
            e = g.node("Tanh", [s], f"{path}.tanh")
        one = g.node("Add", [e, g.const(1.0)], f"{path}.one_plus")
        return g.node("Mul", [half, one], path)
    if isinstance(layer, L.Conv2d):
        kernel, stride, pad = layer.kernel_size, layer.stride, layer.padding
        inputs = [x, f"{path}.weight"] + [f"{path}.bias"] * layer.bias
        return g.node(
            "Conv",
            inputs,
            path,
            kernel_shape=list(kernel),
            strides=list(stride),
            pads=[pad[0], pad[1], pad[0], pad[1]],
        )
    if isinstance(layer, (L.MaxPool2d, L.AvgPool2d)):
        op = "MaxPool" if isinstance(layer, L.MaxPool2d) else "AveragePool"
        k, st = list(layer.kernel_size), list(layer.stride)
        return g.node(op, [x], path, kernel_shape=k, strides=st)
    if isinstance(layer, L.Dropout):
        return x  # inference: the identity
    if isinstance(layer, L.Flatten):
        return g.node("Flatten", [x], path, axis=1)
    if isinstance(layer, (L.Embedding, L.PositionEmbedding, L.CausalSelfAttention)):
        raise ValueError(
            f"{_API}.export_onnx: layer {path} {layer!r} has no ONNX export yet (token "
            f"inputs and attention); use to_torch() and torch.onnx"
        )
    op = {L.ReLU: "Relu", L.Tanh: "Tanh", L.Sigmoid: "Sigmoid"}[type(layer)]
    return g.node(op, [x], path)


def _onnx_model(onnx: ModuleType, trainer: Trainer, meta: dict[str, str]) -> Any:
    spec = trainer._spec
    g = _Graph(onnx)
    for name, w in zip(spec.names, _tensors(trainer)):
        g.tensor(name, w.shape, w.tobytes())
    ranks = {path: 1 + len(shape) for path, _, shape, _ in spec.steps}
    y = _onnx_layers(g, spec.model, "", "input", ranks)
    if g.nodes and g.nodes[-1].output[0] == y:
        g.nodes[-1].output[0] = "logits"  # its only reader is the graph's output
    else:  # the model is the identity in inference (Dropout only)
        g.nodes.append(g.helper.make_node("Identity", [y], ["logits"], name="output"))
    helper = g.helper
    graph = helper.make_graph(
        g.nodes,
        "mojolearn_model",
        [helper.make_tensor_value_info("input", g.f32, ["batch", *spec.input_shape])],
        [helper.make_tensor_value_info("logits", g.f32, ["batch", *spec.output_shape])],
        initializer=g.initializers,
    )
    model = helper.make_model(
        graph,
        producer_name="mojolearn",
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    helper.set_model_props(model, meta)
    return model


# ---------------------------------------------------------------- the mixin


class ModelExport:
    """`Trainer`'s torch, safetensors and ONNX methods (a mixin; see the module docstring)."""

    __slots__ = ()

    def to_torch(self: Trainer) -> torch.nn.Sequential:  # type: ignore[misc]
        """The same model in torch, holding a copy of the current weights. Imports torch.

        Each layer is its torch namesake; an `nn.Residual` is `torch_residual()` (a
        `torch.nn.Sequential` subclass computing `x + f(x)`), so `state_dict()` has exactly
        this trainer's names (`"0.weight"`, `"3.1.bias"`, ...). Float32 on the CPU, in torch's
        default training mode (Dropout active): call `.eval()` for inference.

        Returns:
            A new `torch.nn.Sequential`.

        Raises:
            ImportError: torch is not installed.

        Example:
            >>> module = trainer.to_torch().eval()
            >>> module(torch.from_dlpack(X))  # trainer.predict_logits(X), within float32 rounding
        """
        import torch

        with self._lock:
            weights = self.weights_
        module = _to_torch(torch, self._spec.model)
        # load_state_dict copies the values into the module's own float32 tensors.
        state = {n: torch.from_dlpack(w) for n, w in weights.items()}  # type: ignore[attr-defined]
        module.load_state_dict(state, strict=True)
        return module  # type: ignore[no-any-return]

    @classmethod
    def from_torch(  # type: ignore[misc]  # cls: the Trainer this class mixes into
        cls: type[Trainer],
        module: torch.nn.Sequential,
        *,
        input_shape: object,
        loss: str = "cross_entropy",
        **trainer_kwargs: Any,
    ) -> Trainer:
        """A trainer of a torch model's layers and weights (copied), at step 0 with fresh AdamW
        moments. Imports torch.

        The model is a `torch.nn.Sequential` (exactly; nested ones too) of `Linear`, `ReLU`,
        `GELU`, `Tanh`, `Sigmoid`, `LayerNorm` (an int or 1-tuple `normalized_shape`, with
        both or neither affine tensor), `Dropout`, `Flatten()` (the default dims), `Conv2d`
        (zero padding as ints or pairs, no dilation or groups), `MaxPool2d` and `AvgPool2d`
        (no padding, dilation or ceil_mode), `Embedding` (the plain lookup), the
        PositionEmbedding and CausalSelfAttention classes of `to_torch`
        (`mojolearn._model.torch_text`) and the Residual class of `to_torch`
        (`torch_residual()`). Floating weights of another dtype
        or device are copied to float32 on the CPU (float64 rounds to nearest). Children take
        mojolearn's names by position ("0", "1", ...), whatever their names in torch.

        Args:
            module: the torch model.
            input_shape: one example's shape without the batch axis, e.g. `(10,)`.
            loss: `"cross_entropy"` or `"mse"`, as the constructor's.
            **trainer_kwargs: the constructor's other settings (`seed`, `lr`, ...);
                `data_schedule` defaults to `{"source": "torch"}`.

        Returns:
            The new trainer.

        Raises:
            TypeError: `module` is not a `torch.nn.Sequential`.
            ValueError: a module of another class or with other settings (named by its layer
                path, e.g. `layer 2.1 is torch.nn.Conv2d, which mojolearn.nn has no layer
                for`), shapes that do not chain from `input_shape`, non-finite weights, and
                what the constructor refuses; nothing is built.
        """
        import torch

        what = f"{_API}.from_torch"
        if type(module) is not torch.nn.Sequential:
            raise TypeError(
                f"{what}: module must be a torch.nn.Sequential, got {_torch_name(module)}"
            )
        weights: dict[str, Any] = {}
        model = _from_torch(torch, module, "", weights, what)
        trainer_kwargs.setdefault("data_schedule", {"source": "torch"})
        return cls(model, input_shape=input_shape, loss=loss, weights=weights, **trainer_kwargs)

    def save_safetensors(self: Trainer, path: str | os.PathLike[str]) -> None:  # type: ignore[misc]
        """Write the current weights to a safetensors file, atomically (needs safetensors).

        The tensors carry `to_torch().state_dict()`'s names, float32, torch's shapes, so the
        `to_torch()` model loads `safetensors.torch.load_file(path)` as it is; the metadata
        holds `model` (the JSON record of the layers, input shape and loss),
        `arithmetic_profile`, `numeric_mode`, `step` and `state_hash`, and `preprocessing`
        (its JSON) when the trainer holds a standardization: the weights take STANDARDIZED
        rows, and `from_safetensors` gives the bare model (set its `preprocessing` from that
        entry). Weights only: a checkpoint holds the whole resumable state.

        Args:
            path: the file (replaced if it exists; a reader sees the old file or the new one).

        Raises:
            ImportError: the safetensors package is not installed (`pip install safetensors`).
            ValueError: `path` names something other than a regular file; nothing is written.
            OSError: the file cannot be written.

        Example:
            >>> trainer.save_safetensors("model.safetensors")
            >>> Trainer.from_safetensors("model.safetensors", model=model, input_shape=(10,))
        """
        what = f"{_API}.save_safetensors"
        st = _mlp_export._require("safetensors", what)
        with self._lock:
            tensors, meta = _tensors(self), _metadata(self)
        data = _mlp_export._serialize(st, list(self._spec.names), tensors, meta)
        _files.write_atomic(path, data, what)

    @classmethod
    def from_safetensors(  # type: ignore[misc]  # cls: the Trainer this class mixes into
        cls: type[Trainer],
        path: str | os.PathLike[str],
        *,
        model: object,
        input_shape: object,
        loss: str = "cross_entropy",
        **trainer_kwargs: Any,
    ) -> Trainer:
        """A trainer with the weights of a safetensors file, at step 0 with fresh AdamW moments
        (needs safetensors; no torch).

        A safetensors file holds tensors only, so the model comes from the caller: the file
        must hold exactly the model's tensors under torch's `state_dict` names (its
        `save_safetensors` output, or `safetensors.torch.save_file(m.state_dict(), path)` of
        the same torch model), float32, of the model's shapes, finite. A file that records a
        model in its metadata (ours) must record this model and input shape.

        Args:
            path: the safetensors file.
            model: the `nn.Sequential` the weights belong to.
            input_shape: one example's shape without the batch axis.
            loss: `"cross_entropy"` or `"mse"`, as the constructor's.
            **trainer_kwargs: the constructor's other settings; `data_schedule` defaults to
                `{"source": "safetensors"}`.

        Returns:
            The new trainer.

        Raises:
            ImportError: the safetensors package is not installed (`pip install safetensors`).
            TypeError: what the constructor refuses as a type (e.g. `model`).
            ValueError: a file that is not safetensors, missing or unexpected tensors (named),
                a tensor of another dtype or shape or not finite (named), a recorded model that
                differs, and what the constructor refuses; nothing is built.
            OSError: the file cannot be read.
        """
        from .spec import ModelSpec

        what = f"{_API}.from_safetensors"
        spec = ModelSpec(model, input_shape, loss, what)
        tensors, data = _read_safetensors(path, what)
        _check_recorded_model(data, spec.record(), what)
        weights = _checked_tensors(tensors, spec.names, spec.shapes, what)
        trainer_kwargs.setdefault("data_schedule", {"source": "safetensors"})
        return cls(model, input_shape=input_shape, loss=loss, weights=weights, **trainer_kwargs)

    def export_onnx(self: Trainer, path: str | os.PathLike[str]) -> None:  # type: ignore[misc]
        """Write the model, for inference, as an ONNX model, atomically (needs onnx).

        Input `input`: float32 [batch, *input_shape] (any batch); output `logits`: float32
        [batch, *output_shape] (the model's output, whatever the loss); opset 17, Dropout
        omitted, GELU in its erf or tanh formula (see `mojolearn._model.export`). The model
        passes `onnx.checker.check_model`, its initializers carry the state_dict names, its
        metadata the safetensors metadata. A trainer holding a standardization
        (`preprocessing`) exports a graph of RAW rows: Sub, Div and Mul nodes standardize
        `input` first, and a regressor's output is in the target's units (Mul, Add), all
        float32 (within a few ulps of `predict`).

        Args:
            path: the file (replaced if it exists; a reader sees the old file or the new one).

        Raises:
            ImportError: the onnx package is not installed (`pip install onnx`).
            ValueError: `path` names something other than a regular file, or the model has
                a layer without an ONNX export (Embedding, PositionEmbedding,
                CausalSelfAttention); nothing is written.
            OSError: the file cannot be written.

        Example:
            >>> trainer.export_onnx("model.onnx")
            >>> onnxruntime.InferenceSession("model.onnx").run(None, {"input": X})[0]
        """
        what = f"{_API}.export_onnx"
        onnx = _mlp_export._require("onnx", what)
        with self._lock:
            model = _onnx_model(onnx, self, _metadata(self))
            _pre.bake_onnx(onnx, model, _pre.held(self._schedule))
        onnx.checker.check_model(model)
        _files.write_atomic(path, model.SerializeToString(), what)
