"""`Trainer`'s torch, safetensors and ONNX interop (issue 35): `to_torch` has torch's layers,
our state_dict names and bytes, and computes `predict_logits`; `from_torch` reads it (and a
hand-built torch model) back, refusing other modules by name and layer path; safetensors files
carry torch's names and round-trip bit for bit, every wrong tensor refused by name; the ONNX
graph runs in onnxruntime like the torch model and `predict_logits`, for models of every layer
on rank-1 and rank-2 inputs.

Comparisons with `predict_logits` on a model with GELU, Tanh or Sigmoid skip while the binding
refuses their op codes (their kernels are merged on another branch); the torch and ONNX sides of
those models are checked regardless. Each test skips where torch / safetensors / onnx /
onnxruntime / NumPy is absent.
"""

import json
import os
import pickle
import random
import re
import sys

import mojolearn as ml
import pytest
from mojolearn import nn
from mojolearn._model import export as _export

from tests.helpers import PKG_PARENT, run_python
from tests.reference.f32 import f32
from tests.test_export import _serialize

# (name, model, input_shape, loss): every layer on rank-1 and rank-2 inputs, and models of the
# layers whose kernels the binding runs today (so `predict_logits` is compared everywhere).
MODELS = [
    (
        "every-layer-rank1",
        nn.Sequential(
            nn.Linear(6, 16),
            nn.ReLU(),
            nn.Residual(nn.LayerNorm(16), nn.Linear(16, 16), nn.GELU()),
            nn.Dropout(0.2),
            nn.Tanh(),
            nn.Linear(16, 8, bias=False),
            nn.Sigmoid(),
            nn.LayerNorm(8, eps=1e-3, elementwise_affine=False),
            nn.GELU(approximate="tanh"),
            nn.Sequential(nn.Flatten(), nn.Linear(8, 3)),
        ),
        (6,),
        "cross_entropy",
    ),
    (
        "every-layer-rank2",
        nn.Sequential(
            nn.Linear(5, 8),
            nn.GELU(),
            nn.Residual(nn.LayerNorm(8), nn.Linear(8, 8), nn.Tanh()),
            nn.Sigmoid(),
            nn.Dropout(0.1),
            nn.Linear(8, 8, bias=False),
            nn.ReLU(),
            nn.LayerNorm(8),
            nn.GELU(approximate="tanh"),
            nn.Flatten(),
            nn.Linear(32, 3),
        ),
        (4, 5),
        "cross_entropy",
    ),
    (
        "kernels-today-rank1",
        nn.Sequential(
            nn.Linear(6, 16),
            nn.ReLU(),
            nn.Residual(nn.LayerNorm(16), nn.Linear(16, 16), nn.ReLU()),
            nn.Dropout(0.3),
            nn.Sequential(nn.Linear(16, 8, bias=False), nn.LayerNorm(8, elementwise_affine=False)),
            nn.Linear(8, 3),
        ),
        (6,),
        "cross_entropy",
    ),
    (
        "kernels-today-rank2-mse",
        nn.Sequential(
            nn.Linear(4, 6),
            nn.ReLU(),
            nn.Residual(nn.Linear(6, 6)),
            nn.LayerNorm(6, eps=1e-4),
            nn.Flatten(),
            nn.Linear(18, 2),
        ),
        (3, 4),
        "mse",
    ),
    (
        "kernels-today-rank2-positions",
        nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Dropout(0.5), nn.Linear(6, 3)),
        (3, 4),
        "cross_entropy",
    ),
    (
        "cnn-rank3",
        nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(4, 5, 2, stride=(1, 2), padding=1, bias=False),
            nn.Tanh(),
            nn.AvgPool2d(2, 1),
            nn.Residual(nn.Conv2d(5, 5, (3, 1), padding=(1, 0))),
            nn.Flatten(),
            nn.Linear(20, 3),
        ),
        (2, 8, 6),
        "cross_entropy",
    ),
]
IDS = [m[0] for m in MODELS]
CASES = pytest.mark.parametrize("name,model,shape,loss", MODELS, ids=IDS)


def _trainer(seed, model, shape, loss, **kw):
    """A trainer with fresh random weights (LayerNorm's too: not its ones and zeros)."""
    rng = random.Random(seed)
    spec = ml.Trainer(model, input_shape=shape, loss=loss)._spec
    weights = {}
    for n, s in zip(spec.names, spec.shapes):
        size = 1
        for d in s:
            size *= d
        values = [f32(rng.gauss(0, 0.6)) for _ in range(size)]
        weights[n] = ml.Array.from_list(values).reshape(s)
    return ml.Trainer(model, input_shape=shape, loss=loss, weights=weights, seed=seed, **kw)


def _x(seed, rows, shape):
    rng = random.Random(seed ^ 0x5EED)
    size = 1
    for d in shape:
        size *= d
    return ml.Array.from_list([f32(rng.gauss(0, 1.5)) for _ in range(rows * size)]).reshape(
        (rows, *shape)
    )


def _flat_bytes(weights):
    return b"".join(w.tobytes() for w in weights.values())


def _logits_or_skip(t, X):
    """`t.predict_logits(X)`, or a skip while the binding refuses an op code of the model
    (GELU, Tanh and Sigmoid: op codes 6 to 8)."""
    try:
        return t.predict_logits(X)
    except ValueError as exc:
        if "op code" in str(exc):
            pytest.skip("GELU/Tanh/Sigmoid kernels not merged yet")
        raise


def _close(np, got, want, tol=1e-5):
    """Within float32 rounding of each other: `tol` relative, `tol` absolute near zero."""
    assert got.shape == want.shape and got.dtype == np.float32
    bound = tol * np.maximum(1.0, np.abs(want))
    assert (np.abs(got - want) <= bound).all(), float(np.abs(got - want).max())


def _bytes(tensor):
    """A torch tensor's bytes, without NumPy (the NumPy-free pass runs the torch checks)."""
    import torch

    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).tolist())


def _torch_forward(module, X):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    with torch.no_grad():
        return module(torch.from_numpy(np.asarray(X).copy())).numpy()


# ---------------------------------------------------------------- to_torch


@CASES
def test_to_torch_has_torchs_layers_our_names_and_bytes(seed, name, model, shape, loss):
    torch = pytest.importorskip("torch")
    t = _trainer(seed, model, shape, loss)
    module = t.to_torch()
    assert type(module) is torch.nn.Sequential and module.training
    state = module.state_dict()
    assert list(state) == list(t._spec.names)
    for n, w in t.weights_.items():
        assert state[n].dtype == torch.float32 and tuple(state[n].shape) == w.shape
        assert _bytes(state[n]) == w.tobytes()

    def walk(ours, theirs):  # every layer is its torch namesake, settings included
        if isinstance(ours, (nn.Sequential, nn.Residual)):
            want = (
                _export.torch_residual() if isinstance(ours, nn.Residual) else torch.nn.Sequential
            )
            assert type(theirs) is want and len(theirs) == len(ours)
            for a, b in zip(ours, theirs):
                walk(a, b)
            return
        assert type(theirs).__name__ == type(ours).__name__
        for arg in ours._args:
            got = getattr(theirs, arg)
            if arg == "normalized_shape":
                got = got[0]
            elif arg == "bias" and isinstance(ours, (nn.Linear, nn.Conv2d)):
                got = got is not None
            elif isinstance(got, int) and arg in ("kernel_size", "stride"):  # torch's pools
                got = (got, got)
            assert got == getattr(ours, arg), (ours, arg)

    walk(t.model, module)


@CASES
def test_to_torch_computes_predict_logits(seed, name, model, shape, loss):
    pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    t = _trainer(seed, model, shape, loss)
    module = t.to_torch().eval()
    # torch's GELU, tanh, sigmoid, LayerNorm and convolutions are kernels of their own (other
    # sums, other approximations): through a dozen layers they drift from ours by more than
    # 1e-5 on a rare input (seed 4991769697819360970, every-layer-rank2, 33 rows: 1.32e-5 at an
    # output of -0.41, where 2100 other draws of every case stayed under 4.3e-6), so 1e-4, as
    # for ONNX Runtime below; a wrong export is off by far more.
    for rows in (1, 7, 33):
        X = _x(seed + rows, rows, shape)
        want = np.asarray(_logits_or_skip(t, X))
        _close(np, _torch_forward(module, X), want, tol=1e-4)


def test_to_torch_residual_is_x_plus_f_of_x_and_pickles(seed):
    torch = pytest.importorskip("torch")
    t = _trainer(seed, nn.Sequential(nn.Residual(nn.Linear(4, 4), nn.Tanh())), (4,), "mse")
    module = t.to_torch()
    X = torch.randn(5, 4, generator=torch.Generator().manual_seed(seed % (1 << 63)))
    inner = module[0]
    with torch.no_grad():
        assert torch.equal(inner(X), X + torch.tanh(inner[0](X)))
        back = pickle.loads(pickle.dumps(module))
        assert type(back[0]) is _export.torch_residual() and torch.equal(back(X), module(X))


# ---------------------------------------------------------------- from_torch


@CASES
def test_from_torch_of_to_torch_gives_the_same_model_and_weights(seed, name, model, shape, loss):
    torch = pytest.importorskip("torch")
    t = _trainer(seed, model, shape, loss)
    module = t.to_torch()
    back = ml.Trainer.from_torch(module, input_shape=shape, loss=loss, lr=0.02, seed=7)
    assert (back.model, back.input_shape, back.loss) == (model, shape, loss)
    assert _flat_bytes(back.weights_) == _flat_bytes(t.weights_)
    with torch.no_grad():  # copies both ways: neither trainer sees the module change
        for p in module.parameters():
            p.add_(1.0)
    assert _flat_bytes(back.weights_) == _flat_bytes(t.weights_)
    assert back.step_ == 0 and back.lr == 0.02 and back.data_schedule == {"source": "torch"}
    assert all(not any(m._mv) for m in (back._state[1], back._state[2])), "fresh moments"
    # state_hash includes the settings: equal to the same weights given to the constructor
    same = ml.Trainer(
        model,
        input_shape=shape,
        loss=loss,
        weights=t.weights_,
        lr=0.02,
        seed=7,
        data_schedule={"source": "torch"},
    )
    assert back.state_hash() == same.state_hash()


def test_from_torch_reads_a_hand_built_model(seed):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    from collections import OrderedDict

    torch.manual_seed(seed % (1 << 63))
    residual = _export.torch_residual()
    module = torch.nn.Sequential(
        OrderedDict(
            fc=torch.nn.Linear(5, 12, dtype=torch.float64),  # rounded to float32 on the way
            act=torch.nn.ReLU(inplace=True),
            block=residual(torch.nn.LayerNorm((12,), eps=1e-4), torch.nn.Linear(12, 12)),
            drop=torch.nn.Dropout(0.25),
            head=torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 4, bias=False)),
        )
    )
    with torch.no_grad():  # LayerNorm off its ones and zeros
        module.block[0].weight.normal_()
        module.block[0].bias.normal_()
    t = ml.Trainer.from_torch(module, input_shape=(5,))
    assert t.model == nn.Sequential(
        nn.Linear(5, 12),
        nn.ReLU(),
        nn.Residual(nn.LayerNorm(12, eps=1e-4), nn.Linear(12, 12)),
        nn.Dropout(0.25),
        nn.Sequential(nn.Flatten(), nn.Linear(12, 4, bias=False)),
    )
    tensors = list(module.state_dict().values())
    assert list(t.weights_) == [
        "0.weight",
        "0.bias",
        "2.0.weight",
        "2.0.bias",
        "2.1.weight",
        "2.1.bias",
        "4.1.weight",
    ]
    for ours, theirs in zip(t.weights_.values(), tensors):
        assert ours.tobytes() == _bytes(theirs.detach().float())
    X = _x(seed, 9, (5,))
    _close(np, np.asarray(t.predict_logits(X)), _torch_forward(module.float().eval(), X))


def _refusals(torch):
    """(case, module, input_shape, exception, message regex) of modules from_torch refuses."""
    T = torch.nn

    class Residual(T.Sequential):  # someone else's: nothing says its forward is x + f(x)
        def forward(self, x):
            return x + super().forward(x)

    class MyLinear(T.Linear):
        pass

    relu = T.ReLU()
    relu.register_buffer("scale", torch.ones(1))
    bad = T.Linear(4, 4)
    with torch.no_grad():
        bad.weight[1, 2] = float("nan")
    return [
        (
            "conv",
            T.Sequential(T.Linear(4, 4), T.Sequential(T.ReLU(), T.Conv1d(1, 1, 1))),
            (4,),
            ValueError,
            r"^Trainer\.from_torch: layer 1\.1 is torch\.nn\.Conv1d, which mojolearn\.nn has "
            r"no layer for$",
        ),
        (
            "conv dilation",
            T.Sequential(T.Conv2d(1, 2, 3, dilation=2), T.Flatten()),
            (1, 8, 8),
            ValueError,
            r"^Trainer\.from_torch: layer 0 is torch\.nn\.Conv2d with dilation=\(2, 2\); "
            r"mojolearn\.nn's Conv2d supports only dilation=\(1, 1\)$",
        ),
        (
            "pool ceil_mode",
            T.Sequential(T.MaxPool2d(2, ceil_mode=True), T.Flatten()),
            (1, 8, 8),
            ValueError,
            r"^Trainer\.from_torch: layer 0 is torch\.nn\.MaxPool2d with ceil_mode=True; "
            r"mojolearn\.nn's MaxPool2d supports only ceil_mode=False$",
        ),
        (
            "batchnorm",
            T.Sequential(T.BatchNorm1d(4)),
            (4,),
            ValueError,
            r"layer 0 is torch\.nn\.BatchNorm1d, which",
        ),
        (
            "identity",
            T.Sequential(T.Linear(4, 4), T.Identity()),
            (4,),
            ValueError,
            r"layer 1 is torch\.nn\.Identity, which",
        ),
        (
            "other residual",
            T.Sequential(T.Linear(4, 4), Residual(T.ReLU())),
            (4,),
            ValueError,
            r"layer 1 is \S*Residual, which mojolearn\.nn has no layer for",
        ),
        (
            "subclass",
            T.Sequential(MyLinear(4, 4)),
            (4,),
            ValueError,
            r"layer 0 is \S*MyLinear, which",
        ),
        (
            "layernorm 2d",
            T.Sequential(T.LayerNorm((3, 4))),
            (3, 4),
            ValueError,
            r"layer 0 is torch\.nn\.LayerNorm over the last 2 axes \(3, 4\)",
        ),
        (
            "layernorm no bias",
            T.Sequential(T.LayerNorm(4, bias=False)),
            (4,),
            ValueError,
            r"layer 0 is torch\.nn\.LayerNorm with elementwise_affine but bias=False",
        ),
        (
            "flatten dims",
            T.Sequential(T.Flatten(start_dim=2)),
            (3, 4),
            ValueError,
            r"layer 0 is torch\.nn\.Flatten\(start_dim=2, end_dim=-1\)",
        ),
        (
            "dropout 1",
            T.Sequential(T.Linear(4, 4), T.Dropout(1.0)),
            (4,),
            ValueError,
            r"layer 1 \(torch\.nn\.Dropout\): Dropout: p must be in \[0, 1\)",
        ),
        (
            "empty",
            T.Sequential(T.Linear(4, 4), T.Sequential()),
            (4,),
            ValueError,
            r"layer 1 is an empty torch\.nn\.Sequential",
        ),
        (
            "extra buffer",
            T.Sequential(relu),
            (4,),
            ValueError,
            r"layer 0 \(torch\.nn\.ReLU\) holds tensors mojolearn would not keep: \['scale'\]",
        ),
        (
            "meta",
            T.Sequential(T.Linear(4, 3, device="meta")),
            (4,),
            ValueError,
            r"layer 0 \(torch\.nn\.Linear\) weight is a meta tensor",
        ),
        (
            "nan",
            T.Sequential(bad),
            (4,),
            ValueError,
            r"Trainer: weights\['0\.weight'\] must be finite \(flat index 6",
        ),
        (
            "widths",
            T.Sequential(T.Linear(4, 8), T.Linear(7, 2)),
            (4,),
            ValueError,
            r"layer 1 Linear\(7, 2\) expects 7 input features, gets 8",
        ),
        (
            "input shape",
            T.Sequential(T.Linear(4, 8)),
            (5,),
            ValueError,
            r"layer 0 Linear\(4, 8\) expects 4 input features, gets 5",
        ),
        (
            "root linear",
            T.Linear(4, 4),
            (4,),
            TypeError,
            r"^Trainer\.from_torch: module must be a torch\.nn\.Sequential, got torch\.nn\.Linear$",
        ),
        (
            "root residual",
            _export.torch_residual()(T.Linear(4, 4)),
            (4,),
            TypeError,
            r"module must be a torch\.nn\.Sequential, got mojolearn\._model\.export\.Residual",
        ),
    ]


REFUSALS = [
    "conv",
    "conv dilation",
    "pool ceil_mode",
    "batchnorm",
    "identity",
    "other residual",
    "subclass",
    "layernorm 2d",
    "layernorm no bias",
    "flatten dims",
    "dropout 1",
    "empty",
    "extra buffer",
    "meta",
    "nan",
    "widths",
    "input shape",
    "root linear",
    "root residual",
]


@pytest.mark.parametrize("case", REFUSALS)
def test_from_torch_refuses_by_name_and_layer_path(case):
    torch = pytest.importorskip("torch")
    cases = {c[0]: c[1:] for c in _refusals(torch)}
    assert list(cases) == REFUSALS
    module, shape, error, message = cases[case]
    with pytest.raises(error, match=message):
        ml.Trainer.from_torch(module, input_shape=shape)


# ---------------------------------------------------------------- safetensors


def _header(path):
    data = path.read_bytes()
    return json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])


@CASES
def test_safetensors_round_trip_with_torchs_names(tmp_path, seed, name, model, shape, loss):
    pytest.importorskip("safetensors")
    t = _trainer(seed, model, shape, loss)
    path = tmp_path / "m.safetensors"
    t.save_safetensors(path)
    header = _header(path)
    meta = header.pop("__metadata__")
    assert sorted(header) == sorted(t._spec.names)
    for n, w in t.weights_.items():
        assert header[n]["dtype"] == "F32" and tuple(header[n]["shape"]) == w.shape
    assert json.loads(meta["model"]) == t._spec.record()
    assert meta["format"] == "pt" and meta["step"] == "0"
    assert meta["state_hash"] == t.state_hash()
    assert meta["numeric_mode"] == ml.numeric_mode_used()
    back = ml.Trainer.from_safetensors(path, model=model, input_shape=shape, loss=loss, lr=0.5)
    assert _flat_bytes(back.weights_) == _flat_bytes(t.weights_)
    assert back.step_ == 0 and back.lr == 0.5 and back.data_schedule == {"source": "safetensors"}


@CASES
def test_safetensors_files_cross_with_torch(tmp_path, seed, name, model, shape, loss):
    pytest.importorskip("safetensors")
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")  # safetensors.torch converts through NumPy
    from safetensors.torch import load_file, save_file

    t = _trainer(seed, model, shape, loss)
    ours = tmp_path / "ours.safetensors"
    t.save_safetensors(ours)
    module = ml.Trainer(model, input_shape=shape, loss=loss, seed=1).to_torch()
    module.load_state_dict(load_file(ours), strict=True)  # ours loads into torch as it is
    for n, w in t.weights_.items():
        assert _bytes(module.state_dict()[n]) == w.tobytes()
    theirs = tmp_path / "theirs.safetensors"
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(0.5)
    save_file(module.state_dict(), theirs)  # torch's file: no model in its metadata
    back = ml.Trainer.from_safetensors(theirs, model=model, input_shape=shape, loss=loss)
    assert _flat_bytes(back.weights_) == b"".join(_bytes(v) for v in module.state_dict().values())


def test_from_safetensors_refuses_wrong_files_by_name(tmp_path, seed):
    pytest.importorskip("safetensors")
    import array

    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Residual(nn.LayerNorm(4)), nn.Linear(4, 2))
    t = _trainer(seed, model, (3,), "cross_entropy")
    good = {n: ("float32", w.shape, w.tobytes()) for n, w in t.weights_.items()}
    other = array.array("f", [f32(random.Random(seed).gauss(0, 1)) for _ in range(2)])
    nan = array.array("f", [0.5] * 12)
    nan[5] = float("nan")
    cases = [
        (
            {k: v for k, v in good.items() if k != "2.0.bias"},
            None,
            r"must hold exactly the model's tensors .* missing \['2\.0\.bias'\], unexpected \[\]",
        ),
        ({**good, "5.weight": good["0.bias"]}, None, r"missing \[\], unexpected \['5\.weight'\]"),
        (
            {**good, "0.bias": ("float32", (2, 2), good["0.bias"][2])},
            None,
            r"tensor '0\.bias' must have shape \(4,\) for this model, got \(2, 2\)",
        ),
        (
            {**good, "3.bias": ("float64", (2,), bytes(16))},
            None,
            r"tensor '3\.bias' must be float32 \(F32\), got F64",
        ),
        ({**good, "3.bias": ("float32", (2,), other.tobytes())}, None, None),
        (
            {**good, "0.weight": ("float32", (4, 3), nan.tobytes())},
            None,
            r"tensor '0\.weight' must be finite \(flat index 5 is nan\)",
        ),
        (
            good,
            {
                "model": json.dumps(
                    {
                        "model": nn.Sequential(
                            nn.Linear(3, 4),
                            nn.Tanh(),
                            nn.Residual(nn.LayerNorm(4)),
                            nn.Linear(4, 2),
                        ).to_json(),
                        "input_shape": [3],
                    }
                )
            },
            r"the file was saved from model Sequential\(Linear\(3, 4\), Tanh\(\), .* not the "
            r"Sequential\(Linear\(3, 4\), ReLU\(\)",
        ),
        (
            good,
            {"model": json.dumps({"model": model.to_json(), "input_shape": [1, 3]})},
            r"saved from input_shape \[1, 3\], not the \[3\] given",
        ),
    ]
    for i, (tensors, meta, message) in enumerate(cases):
        path = tmp_path / f"{i}.safetensors"
        path.write_bytes(_serialize(tensors, meta))
        if message is None:  # a well-formed file: read back exactly
            back = ml.Trainer.from_safetensors(path, model=model, input_shape=(3,))
            assert back.weights_["3.bias"].tobytes() == other.tobytes()
            continue
        with pytest.raises(ValueError, match=r"^Trainer\.from_safetensors: ") as info:
            ml.Trainer.from_safetensors(path, model=model, input_shape=(3,))
        assert re.search(message, str(info.value)), str(info.value)
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"not safetensors at all")
    with pytest.raises(ValueError, match=r"from_safetensors: .* is not a safetensors file"):
        ml.Trainer.from_safetensors(path, model=model, input_shape=(3,))
    with pytest.raises(
        TypeError, match=r"from_safetensors: model must be a mojolearn\.nn\.Sequential"
    ):
        ml.Trainer.from_safetensors(path, model=nn.Linear(3, 2), input_shape=(3,))
    with pytest.raises(ValueError, match=r"from_safetensors: .* is a folder"):
        ml.Trainer.from_safetensors(tmp_path, model=model, input_shape=(3,))


# ---------------------------------------------------------------- ONNX


@CASES
def test_onnx_runs_like_torch_and_predict_logits(tmp_path, seed, name, model, shape, loss):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    t = _trainer(seed, model, shape, loss)
    path = tmp_path / "m.onnx"
    t.export_onnx(path)
    m = onnx.load(str(path))
    onnx.checker.check_model(m, full_check=True)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", _export.OPSET)]
    inits = {i.name: i for i in m.graph.initializer}
    for n, w in t.weights_.items():  # torch's names, the trainer's bytes
        assert tuple(inits[n].dims) == w.shape and inits[n].raw_data == w.tobytes()
    ops = {n.op_type for n in m.graph.node}
    assert "Dropout" not in ops
    props = {p.key: p.value for p in m.metadata_props}
    assert props["state_hash"] == t.state_hash() and json.loads(props["model"]) == t._spec.record()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, tuple(inp.shape[1:])) == ("input", "tensor(float)", shape)
    assert (out.name, tuple(out.shape[1:])) == ("logits", t.output_shape)
    assert isinstance(inp.shape[0], str), "the batch dimension is symbolic"
    module = t.to_torch().eval()
    runs = []
    # ONNX Runtime's kernels (erf, tanh, sigmoid, LayerNorm) are implementations of their own:
    # through a dozen layers they drift from torch's and ours by more than 1e-5 (seed
    # 11797465429323210547, every-layer-rank2: 1.38e-5 at an output near 1), so 1e-4 here.
    for rows in (1, 13, 64):
        X = _x(seed + rows, rows, shape)
        got = session.run(None, {"input": np.asarray(X)})[0]
        _close(np, got, _torch_forward(module, X), tol=1e-4)
        runs.append((X, got))
    for X, got in runs:  # last: skips while the binding lacks a kernel of the model
        _close(np, got, np.asarray(_logits_or_skip(t, X)), tol=1e-4)


def test_onnx_graph_ops_per_layer(tmp_path, seed):
    onnx = pytest.importorskip("onnx")
    model = nn.Sequential(
        nn.Linear(4, 4),  # rank 3 (B, T, D): MatMul + Add
        nn.GELU(),
        nn.LayerNorm(4, elementwise_affine=False),
        nn.Residual(nn.Dropout(0.5), nn.Sigmoid()),
        nn.Flatten(),
        nn.Linear(8, 3, bias=False),  # rank 2: Gemm
        nn.Dropout(0.1),
    )
    t = _trainer(seed, model, (2, 4), "cross_entropy")
    path = tmp_path / "m.onnx"
    t.export_onnx(path)
    nodes = [(n.name, n.op_type) for n in onnx.load(str(path)).graph.node]
    assert nodes == [
        ("0.transpose", "Transpose"),
        ("0.matmul", "MatMul"),
        ("0", "Add"),
        ("1.half", "Mul"),
        ("1.scale", "Mul"),
        ("1.erf", "Erf"),
        ("1.one_plus", "Add"),
        ("1", "Mul"),
        ("2", "LayerNormalization"),
        ("3.1", "Sigmoid"),
        ("3.add", "Add"),
        ("4", "Flatten"),
        ("5", "Gemm"),
    ]
    cnn = nn.Sequential(nn.Conv2d(1, 2, 3, padding=(1, 2)), nn.MaxPool2d(2), nn.AvgPool2d(1))
    _trainer(seed, nn.Sequential(cnn, nn.Flatten()), (1, 4, 4), "mse").export_onnx(path)
    graph = onnx.load(str(path)).graph
    nodes = [(n.name, n.op_type) for n in graph.node]
    assert nodes == [("0.0", "Conv"), ("0.1", "MaxPool"), ("0.2", "AveragePool"), ("1", "Flatten")]
    attrs = {a.name: list(a.ints) for a in graph.node[0].attribute}
    assert attrs == {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 2, 1, 2]}
    only_dropout = _trainer(seed, nn.Sequential(nn.Dropout(0.3)), (2,), "mse")
    only_dropout.export_onnx(path)
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["Identity"]


# ---------------------------------------------------------------- packages


def test_missing_packages_name_what_to_pip_install(tmp_path, monkeypatch):
    model = nn.Sequential(nn.Linear(3, 2))
    t = ml.Trainer(model, input_shape=(3,))
    path = tmp_path / "w"
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "onnx", None)
    for call, name, package in (
        (lambda: t.save_safetensors(path), "Trainer.save_safetensors", "safetensors"),
        (
            lambda: ml.Trainer.from_safetensors(path, model=model, input_shape=(3,)),
            "Trainer.from_safetensors",
            "safetensors",
        ),
        (lambda: t.export_onnx(path), "Trainer.export_onnx", "onnx"),
    ):
        with pytest.raises(ImportError) as info:
            call()
        assert str(info.value) == (
            f"{name} needs the {package} package, which is not installed: pip install {package}"
        )
    assert os.listdir(tmp_path) == []


def test_a_trainer_imports_no_export_package():
    out = run_python(
        f"import sys; sys.path.insert(0, {PKG_PARENT!r}); import mojolearn as ml\n"
        f"from mojolearn import nn\n"
        f"ml.Trainer(nn.Sequential(nn.Linear(3, 2)), input_shape=(3,)).state_hash()\n"
        f"print(*(m in sys.modules for m in ('torch', 'safetensors', 'onnx', 'numpy')))"
    )
    assert out.split() == ["False"] * 4
