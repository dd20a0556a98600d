"""A trainer's weights out to, and back in from, the formats other tools read.

The functions take a trainer's `state_dict()` (and give back layer sizes and weights), never
a trainer: the trainers call them from thin methods (`save_safetensors`, `export_onnx`,
`MLPTrainer.from_safetensors`). The packages they write with are optional extras, imported
only on use; a missing one is an ImportError naming what to `pip install`.

safetensors file (through the package's framework-free API, `serialize` / `deserialize`: no
NumPy, no torch):

- Tensors MUST be named as `MLPTrainer.to_torch().state_dict()` names them: Linear layer l
  (0-based) is module 2l of the `nn.Sequential`, so weight1, bias1, weight2, ... are
  `0.weight`, `0.bias`, `2.weight`, ...; float32 (F32), weights (out, in), biases (out,), so
  `to_torch()`'s model loads `safetensors.torch.load_file(path)` as it is.
- The metadata (str -> str) holds `format` ("pt": torch's names and layout, the tag torch
  tools look for), `producer`, `layer_sizes` (a JSON list), `arithmetic_profile`,
  `numeric_mode`, `step` and `state_hash` (of the whole state the weights were taken from: the
  file holds the weights only, a checkpoint holds the rest).
- Reading, a file MUST hold exactly the tensors of some layer sizes, float32, finite, each of
  its layer's shape; metadata MAY be absent (a file written by torch), and when `layer_sizes`
  is there the shapes MUST agree with it. Other metadata is ignored. A refused file is a
  ValueError naming the tensor and what was expected.

ONNX model (inference only, written with the `onnx` package at opset `OPSET`, IR version
`IR_VERSION`, which onnx >= 1.8 and onnxruntime >= 1.6 accept): input `input` float32
[batch, inputs] (a symbolic batch), a `Gemm` (transB=1, the torch layout as it is) per layer
with a `Relu` between two, output `logits` float32 [batch, classes]. Initializers carry the
safetensors names; the model's metadata_props carry the same metadata.

Both writes are atomic (`_files.write_atomic`: the whole file is made in memory first).
"""

from __future__ import annotations

import importlib
import json
import math

from .._buffers.array import frombytes
from .._model.preprocessing import bake_onnx, held, preprocessing_metadata
from .._runtime import files as _files
from . import codec as _ckpt
from .spec import MAX_LAYERS, MAX_PARAMS, LayerSizes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import os
    from types import ModuleType
    from typing import Any

    from .._buffers.array import Array
    from .core import MLPCore

OPSET = 13
IR_VERSION = 7  # the IR version of opset 13 (onnx.helper.VERSION_TABLE), not onnx's newest
# The largest safetensors file read: every parameter of the largest admissible model, plus a
# header (ours is a few KB; 1 MiB leaves room for another tool's metadata).
MAX_FILE_BYTES = 4 * MAX_PARAMS + (1 << 20)
_METADATA = "__metadata__"


# What to install for each optional package, spelled out (tests read every hint the package prints).
_INSTALL = {"safetensors": "pip install safetensors", "onnx": "pip install onnx"}


def _require(package: str, what: str) -> ModuleType:
    """The optional package `package`, imported; ImportError saying what to install if absent."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        # Installed but broken (e.g. onnx without its NumPy) is not "not installed": say so.
        why = "is not installed" if exc.name == package else f"could not be imported ({exc})"
        raise ImportError(
            f"{what} needs the {package} package, which {why}: {_INSTALL[package]}"
        ) from exc


def torch_names(layers: int) -> list[str]:
    """The `nn.Sequential(Linear, ReLU, ..., Linear).state_dict()` names of an MLP of `layers`
    Linear layers (module 2l is layer l), in parameter order: 0.weight, 0.bias, 2.weight, ..."""
    return [f"{2 * l}.{kind}" for l in range(layers) for kind in ("weight", "bias")]


def _weights(state: dict[str, Any]) -> tuple[LayerSizes, list[Array]]:
    """(layer sizes, tensors in parameter order) of a `state_dict()`."""
    spec = LayerSizes(state["architecture"])
    return spec, [state["weights"][n] for n in spec.names]


def metadata(state: dict[str, Any]) -> dict[str, str]:
    """The text metadata of an export of a `state_dict()`."""
    from .._runtime.version import version

    return {
        "format": "pt",
        "producer": f"mojolearn {version()}",
        "layer_sizes": json.dumps(state["architecture"], separators=(",", ":")),
        "arithmetic_profile": _ckpt.PROFILE,
        "numeric_mode": state["numeric_mode"],
        "step": str(state["optimizer"]["step"]),
        "state_hash": _ckpt.state_hash(_ckpt.encode_state(state)),
        **preprocessing_metadata(state["data_schedule"]),
    }


# ---------------------------------------------------------------- safetensors


def _serialize(
    st: ModuleType, names: list[str], weights: list[Array], meta: dict[str, str]
) -> bytes:
    """The safetensors bytes of `weights` under `names`. safetensors 0.8 takes `TensorSpec`s
    (addresses: `weights` keeps the memory alive meanwhile); before it, dicts of bytes."""
    spec_type = getattr(st, "TensorSpec", None)
    tensors: dict[str, Any] = {}
    for name, w in zip(names, weights):
        if spec_type is None:
            tensors[name] = {"dtype": "float32", "shape": list(w.shape), "data": w.tobytes()}
        else:
            tensors[name] = spec_type(
                dtype="float32", shape=list(w.shape), data_ptr=w._addr, data_len=w.nbytes
            )
    return bytes(st.serialize(tensors, metadata=meta))


def save_safetensors(path: str | os.PathLike[str], state: dict[str, Any], api: str) -> None:
    """Write the weights of `state` (a `state_dict()`) to a safetensors file, atomically."""
    what = f"{api}.save_safetensors"
    st = _require("safetensors", what)
    spec, weights = _weights(state)
    data = _serialize(st, torch_names(spec.layers), weights, metadata(state))
    _files.write_atomic(path, data, what)


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    """The file's bytes, at most MAX_FILE_BYTES (checked before it is read)."""
    try:
        return _ckpt.read_bounded(path, MAX_FILE_BYTES, _ckpt.FILE_SCHEMA)
    except ValueError as exc:  # its messages name a checkpoint: name the caller instead
        raise ValueError(f"{what}: {str(exc).removeprefix('checkpoint: ')}") from None


def _file_metadata(data: bytes) -> dict[str, Any]:
    """The `__metadata__` of a file `deserialize` accepted (its header is valid JSON)."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    meta = header.get(_METADATA) if type(header) is dict else None
    return meta if type(meta) is dict else {}


def _declared_sizes(meta: dict[str, Any], what: str) -> list[int] | None:
    """The metadata's `layer_sizes` as a checked list, or None when it has none."""
    if "layer_sizes" not in meta:
        return None
    text = meta["layer_sizes"]
    try:
        sizes = json.loads(text)
    except (TypeError, ValueError):
        sizes = None
    if type(sizes) is not list or not all(type(w) is int for w in sizes):
        raise ValueError(
            f"{what}: metadata layer_sizes must be a JSON list of ints, got {text!r}"[:300]
        )
    return list(LayerSizes(sizes, f"{what}: metadata").sizes)


def _layer_count(names: set[str], declared: list[int] | None) -> int:
    """The layers the file is read as: the metadata's, else one per even module index up to
    the highest named (so a tensor missing in the middle is reported missing)."""
    if declared is not None:
        return len(declared) - 1
    top = 0
    for name in names:
        index, _, kind = name.partition(".")
        if kind in ("weight", "bias") and index.isdigit() and int(index) % 2 == 0:
            top = max(top, int(index) // 2 + 1)
    return max(1, min(top, MAX_LAYERS))


def _check_names(names: set[str], layers: int, what: str) -> list[str]:
    """The expected tensor names of `layers` layers, in parameter order; ValueError naming
    the missing and unexpected ones when the file's differ."""
    expected = torch_names(layers)
    missing = [n for n in expected if n not in names]
    extra = sorted(names - set(expected))
    if missing or extra:
        linear = f"{layers} Linear layer{'s' * (layers > 1)}"
        raise ValueError(
            f"{what}: the file must hold the tensors {expected} (an nn.Sequential of "
            f"{linear}), missing {missing}, unexpected {extra}"[:400]
        )
    return expected


def _sizes(
    tensors: dict[str, dict[str, Any]], names: list[str], declared: list[int] | None, what: str
) -> LayerSizes:
    """The layer sizes the tensors hold (checked against `declared` when given): each tensor
    float32 and of its layer's shape."""
    for name in names:
        t = tensors[name]
        if t["dtype"] != "F32":
            raise ValueError(f"{what}: tensor {name!r} must be float32 (F32), got {t['dtype']}")
        ndim = 2 if name.endswith("weight") else 1
        if len(t["shape"]) != ndim:
            raise ValueError(
                f"{what}: tensor {name!r} must have {ndim} dimension(s), got shape "
                f"{tuple(t['shape'])}"
            )
    sizes = declared
    if sizes is None:
        weights = [tensors[n]["shape"] for n in names[::2]]
        sizes = [weights[0][1]] + [shape[0] for shape in weights]
    source = "the file's metadata" if declared is not None else "read from the weights' shapes"
    for i, name in enumerate(names):
        l = i // 2
        want = (sizes[l + 1], sizes[l]) if i % 2 == 0 else (sizes[l + 1],)
        got = tuple(tensors[name]["shape"])
        if got != want:
            raise ValueError(
                f"{what}: tensor {name!r} must have shape {want} for layer sizes {sizes} "
                f"({source}), got {got}"[:300]
            )
    return LayerSizes(sizes, what)


def _finite(name: str, raw: bytes, shape: tuple[int, ...], what: str) -> Array:
    """The tensor as a fresh float32 Array; ValueError naming it when a value is not finite."""
    arr = frombytes(raw, "<f4", shape)
    bad = next((i for i, x in enumerate(arr._mv.tolist()) if not math.isfinite(x)), None)
    if bad is not None:
        raise ValueError(
            f"{what}: tensor {name!r} must be finite (flat index {bad} is {arr._mv[bad]!r})"
        )
    return arr


def load_safetensors(path: str | os.PathLike[str], what: str) -> tuple[list[int], list[Array]]:
    """(layer sizes, float32 Arrays weight1, bias1, ...) of a safetensors file of an MLP,
    every tensor checked (see the module docstring); ValueError naming what is wrong."""
    st = _require("safetensors", what)
    data = _read(path, what)
    try:
        flat = st.deserialize(data)
    except Exception as exc:  # SafetensorError (a bare Exception subclass): a broken file
        raise ValueError(
            f"{what}: {_files.shown(_files.fspath(path))!r} is not a safetensors file ({exc})"
        ) from None
    tensors = {name: t for name, t in flat}
    declared = _declared_sizes(_file_metadata(data), what)
    names = _check_names(set(tensors), _layer_count(set(tensors), declared), what)
    spec = _sizes(tensors, names, declared, what)
    weights = [
        _finite(n, bytes(tensors[n]["data"]), shape, what) for n, shape in zip(names, spec.shapes)
    ]
    return list(spec.sizes), weights


# ---------------------------------------------------------------- ONNX


def _onnx_model(
    onnx: ModuleType, spec: LayerSizes, weights: list[Array], meta: dict[str, str]
) -> Any:
    """The inference graph (Gemm, Relu, ..., Gemm) of `spec` holding `weights`."""
    helper, f32 = onnx.helper, onnx.TensorProto.FLOAT
    names = torch_names(spec.layers)
    initializers = [
        helper.make_tensor(n, f32, list(w.shape), w.tobytes(), raw=True)
        for n, w in zip(names, weights)
    ]
    nodes, x = [], "input"
    for l in range(spec.layers):
        last = l == spec.layers - 1
        y = "logits" if last else f"{2 * l}.output"
        nodes.append(
            helper.make_node(
                "Gemm", [x, names[2 * l], names[2 * l + 1]], [y], name=f"{2 * l}", transB=1
            )
        )
        if not last:
            x = f"{2 * l + 1}.output"
            nodes.append(helper.make_node("Relu", [y], [x], name=f"{2 * l + 1}"))
    graph = helper.make_graph(
        nodes,
        "mojolearn_mlp",
        [helper.make_tensor_value_info("input", f32, ["batch", spec.inputs])],
        [helper.make_tensor_value_info("logits", f32, ["batch", spec.classes])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        producer_name="mojolearn",
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    helper.set_model_props(model, meta)
    return model


def export_onnx(path: str | os.PathLike[str], state: dict[str, Any], api: str) -> None:
    """Write the inference graph of `state` (a `state_dict()`) as an ONNX model, checked with
    `onnx.checker.check_model`, atomically."""
    what = f"{api}.export_onnx"
    onnx = _require("onnx", what)
    spec, weights = _weights(state)
    model = _onnx_model(onnx, spec, weights, metadata(state))
    bake_onnx(onnx, model, held(state["data_schedule"]))
    onnx.checker.check_model(model)
    _files.write_atomic(path, model.SerializeToString(), what)


class Export:
    """The trainers' export methods: a mixin of `MLPCore` (the functions above do the work)."""

    __slots__ = ()

    def save_safetensors(  # type: ignore[misc]  # self: the MLPCore this class mixes into
        self: MLPCore, path: str | os.PathLike[str]
    ) -> None:
        """Write the current weights to a safetensors file, atomically (needs safetensors).

        The tensors carry the names, dtype and shapes of `MLPTrainer.to_torch().state_dict()`
        (`0.weight`, `0.bias`, `2.weight`, ...: float32, (out, in) and (out,)), so a torch
        model of these layer sizes loads `safetensors.torch.load_file(path)`; the metadata
        holds `layer_sizes`, `arithmetic_profile`, `numeric_mode`, `step` and `state_hash`,
        and `preprocessing` (its JSON) when the trainer holds a standardization: the weights
        take STANDARDIZED rows, and `from_safetensors` gives the bare network (set its
        `preprocessing` from that entry). Weights only: a checkpoint holds the whole state.

        Args:
            path: the file (replaced if it exists; a reader sees the old file or the new one).

        Raises:
            ImportError: the safetensors package is not installed (`pip install safetensors`).
            ValueError: `path` names something other than a regular file; nothing is written.
            OSError: the file cannot be written.

        Example:
            >>> trainer.save_safetensors("model.safetensors")
            >>> MLPTrainer.from_safetensors("model.safetensors").layer_sizes
        """
        save_safetensors(path, self.state_dict(), self._API)

    def export_onnx(  # type: ignore[misc]  # self: the MLPCore this class mixes into
        self: MLPCore, path: str | os.PathLike[str]
    ) -> None:
        """Write the network, for inference, as an ONNX model, atomically (needs onnx).

        Input `input`: float32 [batch, inputs] (any batch); output `logits`: float32 [batch,
        classes]; one `Gemm` per layer with a `Relu` between two, at ONNX opset 13. The model
        passes `onnx.checker.check_model` and carries the safetensors metadata. A trainer
        holding a standardization (`preprocessing`) exports a graph of RAW rows: Sub, Div and
        Mul nodes standardize `input` first (in float32, so within a few ulps of `predict`).

        Args:
            path: the file (replaced if it exists; a reader sees the old file or the new one).

        Raises:
            ImportError: the onnx package is not installed (`pip install onnx`).
            ValueError: `path` names something other than a regular file; nothing is written.
            OSError: the file cannot be written.

        Example:
            >>> trainer.export_onnx("model.onnx")
            >>> onnxruntime.InferenceSession("model.onnx").run(None, {"input": X})[0]
        """
        export_onnx(path, self.state_dict(), self._API)
