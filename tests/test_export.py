"""safetensors and ONNX export/import (issue 29): `save_safetensors` / `from_safetensors` round
trips (ours, bit for bit; and torch's, through `safetensors.torch`), the metadata, every refusal
of a wrong file (ValueError naming the tensor, nothing built, nothing written), atomic saves,
`export_onnx` run in onnxruntime against `predict_logits`, and the ImportError hints. Each test
needing safetensors / torch / onnx / onnxruntime / NumPy skips with the reason where it is
absent; the safetensors path itself needs neither NumPy nor torch."""

import array
import json
import os
import random
import sys

import mojolearn as ml
import pytest
from mojolearn import checkpoint
from mojolearn._mlp import export as _export
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
from mojolearn._runtime import files as _files

from tests.helpers import PKG_PARENT, run_python

# (name, factory(seed) -> trainer): the reference's small network, a softmax regression
# (one Linear layer) and a deeper one.
SMALL = (
    "small-8-16-3",
    lambda s: ml.SmallMLPTrainer(*_spec.init_small_mlp(s), data_schedule={"a": 1}),
)
SHAPES = [
    SMALL,
    ("softmax-11-4", lambda s: ml.MLPTrainer([11, 4], seed=s, data_schedule={"a": 1})),
    (
        "deep-10-32-24-16-5",
        lambda s: ml.MLPTrainer([10, 32, 24, 16, 5], seed=s, data_schedule={"a": 1}),
    ),
]


def _trained(make, seed, steps=4):
    """A trainer after `steps` AdamW steps on fresh random batches (weights off their init)."""
    t = make(seed % (1 << 32))
    inputs, classes = t.layer_sizes[0], t.layer_sizes[-1]
    for X, y in _rng.batches(seed, 9, steps, inputs, classes):
        t.train_step(X, y)
    return t


def _x(seed, rows, inputs):
    return _rng.batches(seed ^ 0x5EED, rows, 1, inputs, 2)[0][0]


def _header(path):
    """The JSON header of a safetensors file, read by hand (the format's plain reference)."""
    data = path.read_bytes()
    return json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])


def _listing(folder):
    """{name: bytes} of the files in `folder`."""
    return {p.name: p.read_bytes() for p in folder.iterdir()}


# ---------------------------------------------------------------- safetensors: ours


@pytest.mark.parametrize("make", [m for _, m in SHAPES], ids=[n for n, _ in SHAPES])
def test_safetensors_round_trip_is_bit_exact(tmp_path, seed, make):
    pytest.importorskip("safetensors")
    t = _trained(make, seed)
    path = tmp_path / "w.safetensors"
    t.save_safetensors(path)
    back = ml.MLPTrainer.from_safetensors(path, lr=0.02, weight_decay=0.0)
    assert back.layer_sizes == t.layer_sizes and back.step_ == 0
    assert back.data_schedule == {"source": "safetensors"}
    assert (back.lr, back.weight_decay) == (0.02, 0.0)
    want, got = t.weights_, back.weights_
    assert list(got) == list(want)
    for name in want:
        assert got[name].shape == want[name].shape
        assert got[name].tobytes() == want[name].tobytes(), name
    X = _x(seed, 17, t.layer_sizes[0])
    assert back.predict_logits(X).tobytes() == t.predict_logits(X).tobytes()
    # A trainer from the file trains as a trainer with the same weights does.
    same = ml.MLPTrainer(
        t.layer_sizes,
        list(want.values()),
        data_schedule={"source": "safetensors"},
        lr=0.02,
        weight_decay=0.0,
    )
    for X, y in _rng.batches(seed + 1, 5, 2, t.layer_sizes[0], t.layer_sizes[-1]):
        assert back.train_step(X, y)["loss"] == same.train_step(X, y)["loss"]
    assert back.state_hash() == same.state_hash()


def test_safetensors_file_names_dtypes_shapes_and_metadata(tmp_path, seed):
    st = pytest.importorskip("safetensors")
    t = _trained(SHAPES[2][1], seed)
    path = tmp_path / "w.safetensors"
    t.save_safetensors(path)
    tensors = dict(st.deserialize(path.read_bytes()))
    assert sorted(tensors) == sorted(
        ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias", "6.weight", "6.bias"]
    )
    w = t.weights_
    for l in range(4):
        for kind, ours in (("weight", f"weight{l + 1}"), ("bias", f"bias{l + 1}")):
            got = tensors[f"{2 * l}.{kind}"]
            assert got["dtype"] == "F32"
            assert tuple(got["shape"]) == w[ours].shape
            assert bytes(got["data"]) == w[ours].tobytes()
    meta = _header(path)["__metadata__"]
    assert json.loads(meta["layer_sizes"]) == t.layer_sizes == [10, 32, 24, 16, 5]
    assert meta["arithmetic_profile"] == checkpoint.PROFILE
    assert meta["numeric_mode"] == t.numeric_mode_used()
    assert meta["step"] == str(t.step_) == "4"
    assert meta["state_hash"] == t.state_hash()
    assert meta["format"] == "pt" and meta["producer"].startswith("mojolearn ")
    assert all(type(v) is str for v in meta.values())


def test_safetensors_needs_neither_numpy_nor_torch(tmp_path):
    pytest.importorskip("safetensors")
    path = str(tmp_path / "w.safetensors")
    out = run_python(
        f"import sys; sys.path.insert(0, {PKG_PARENT!r}); import mojolearn as ml\n"
        f"from mojolearn._mlp import rng as _rng\nfrom mojolearn._mlp import spec as _spec\n"
        f"t = ml.MLPTrainer([6, 9, 3], seed=4, data_schedule={{'a': 1}})\n"
        f"X, y = _rng.batches(5, 7, 1, 6, 3)[0]; t.train_step(X, y)\n"
        f"t.save_safetensors({path!r})\n"
        f"u = ml.MLPTrainer.from_safetensors({path!r})\n"
        f"print(u.predict_logits(X).tobytes() == t.predict_logits(X).tobytes(),"
        f" 'numpy' in sys.modules, 'torch' in sys.modules)",
        block_numpy=True,
    )
    assert out.split() == ["True", "False", "False"]


# ---------------------------------------------------------------- safetensors: torch's


@pytest.mark.parametrize("make", [m for _, m in SHAPES], ids=[n for n, _ in SHAPES])
def test_our_file_loads_into_to_torch_model(tmp_path, seed, make):
    pytest.importorskip("safetensors")
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    t = _trained(make, seed)
    path = tmp_path / "w.safetensors"
    t.save_safetensors(path)
    # Another trainer's network of the same sizes: loading must replace every weight.
    model = ml.MLPTrainer(
        t.layer_sizes, seed=(seed + 1) % (1 << 32), data_schedule={"a": 1}
    ).to_torch()
    model.load_state_dict(load_file(path))  # strict: the same names and shapes
    for (name, p), ours in zip(model.state_dict().items(), t.weights_.values()):
        assert p.dtype == torch.float32
        assert torch.equal(p, torch.from_dlpack(ours)), name
    X = _x(seed, 13, t.layer_sizes[0])
    with torch.no_grad():
        theirs = model(torch.from_dlpack(X))
    # torch's own summation order differs from the identical-mode kernels: a tolerance.
    assert torch.allclose(theirs, torch.from_dlpack(t.predict_logits(X)), rtol=0, atol=1e-5)


def test_torch_written_file_matches_from_torch(tmp_path, seed):
    pytest.importorskip("safetensors")
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")  # safetensors.torch.save_file converts through NumPy
    from safetensors.torch import save_file

    torch.manual_seed(seed % (1 << 63))
    seq = torch.nn.Sequential(
        torch.nn.Linear(7, 12),
        torch.nn.ReLU(),
        torch.nn.Linear(12, 9),
        torch.nn.ReLU(),
        torch.nn.Linear(9, 4),
    )
    for _ in range(3):  # trained, not as initialized (plain SGD: torch.optim needs NumPy)
        seq.zero_grad()
        torch.nn.functional.cross_entropy(
            seq(torch.randn(16, 7)), torch.randint(0, 4, (16,))
        ).backward()
        with torch.no_grad():
            for p in seq.parameters():
                p -= 0.1 * p.grad
    path = tmp_path / "torch.safetensors"
    save_file(seq.state_dict(), path)  # no metadata: the sizes come from the shapes
    kw = dict(data_schedule={"run": 3}, lr=0.005, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.1)
    ours = ml.MLPTrainer.from_safetensors(path, **kw)
    ref = ml.MLPTrainer.from_torch(seq, **kw)
    assert ours.layer_sizes == [7, 12, 9, 4]
    assert ours.state_hash() == ref.state_hash()
    X = torch.randn(11, 7)
    assert ours.predict_logits(X).tobytes() == ref.predict_logits(X).tobytes()


# ---------------------------------------------------------------- safetensors: refusals


def _serialize(tensors, metadata=None):
    """safetensors bytes of {name: (dtype, shape, raw bytes)} (the package's own writer)."""
    import safetensors as st

    keep, specs = [], {}
    for name, (dtype, shape, raw) in tensors.items():
        buf = array.array("B", raw)
        keep.append(buf)
        if hasattr(st, "TensorSpec"):
            specs[name] = st.TensorSpec(
                dtype=dtype, shape=list(shape), data_ptr=buf.buffer_info()[0], data_len=len(raw)
            )
        else:
            specs[name] = {"dtype": dtype, "shape": list(shape), "data": raw}
    return bytes(st.serialize(specs, metadata=metadata))


def _f32(values):
    return array.array("f", values).tobytes()


def _good(rng, sizes=(5, 7, 3)):
    """{name: ('float32', shape, bytes)} of random finite weights of `sizes`."""
    out = {}
    for l, (i, o) in enumerate(zip(sizes, sizes[1:])):
        out[f"{2 * l}.weight"] = (
            "float32",
            (o, i),
            _f32([rng.uniform(-1, 1) for _ in range(o * i)]),
        )
        out[f"{2 * l}.bias"] = ("float32", (o,), _f32([rng.uniform(-1, 1) for _ in range(o)]))
    return out


def _meta(sizes):
    return {"layer_sizes": json.dumps(sizes)}


def _edit(fn, meta=None):
    def make(rng):
        tensors = _good(rng)
        fn(rng, tensors)
        return _serialize(tensors, meta)

    return make


def _with_value(name, index, value):
    def fn(rng, t):
        dtype, shape, raw = t[name]
        vals = array.array("f", raw)
        vals[index % len(vals)] = value
        t[name] = (dtype, shape, vals.tobytes())

    return fn


def _pop(*names):
    return lambda rng, t: [t.pop(n) for n in names]


def _put(name, dtype, shape, raw=None):
    def fn(rng, t):
        size = 1
        for d in shape:
            size *= d
        t[name] = (
            dtype,
            shape,
            raw if raw is not None else _f32([rng.uniform(-1, 1) for _ in range(size)]),
        )

    return fn


REFUSALS = [
    ("missing bias", _edit(_pop("2.bias")), r"missing \['2\.bias'\], unexpected \[\]"),
    ("missing first weight", _edit(_pop("0.weight")), r"missing \['0\.weight'\]"),
    (
        "extra tensor",
        _edit(_put("0.weight_orig", "float32", (7, 5))),
        r"missing \[\], unexpected \['0\.weight_orig'\]",
    ),
    ("odd module index", _edit(_put("1.weight", "float32", (7, 7))), r"unexpected \['1\.weight'\]"),
    ("a layer too many", _edit(_put("4.weight", "float32", (2, 3))), r"missing \['4\.bias'\]"),
    (
        "float64 weight",
        _edit(_put("0.weight", "float64", (7, 5), bytes(8 * 35))),
        r"tensor '0\.weight' must be float32 \(F32\), got F64",
    ),
    (
        "float16 bias",
        _edit(_put("2.bias", "float16", (3,), bytes(6))),
        r"tensor '2\.bias' must be float32 \(F32\), got F16",
    ),
    (
        "bias of 2 dims",
        _edit(_put("0.bias", "float32", (7, 1))),
        r"tensor '0\.bias' must have 1 dimension\(s\), got shape \(7, 1\)",
    ),
    (
        "weight of 1 dim",
        _edit(_put("2.weight", "float32", (21,))),
        r"tensor '2\.weight' must have 2 dimension\(s\)",
    ),
    (
        "bias too short",
        _edit(_put("0.bias", "float32", (6,))),
        r"tensor '0\.bias' must have shape \(7,\) for layer sizes \[5, 7, 3\]",
    ),
    (
        "layers do not chain",
        _edit(_put("2.weight", "float32", (3, 6))),
        r"tensor '2\.weight' must have shape \(3, 7\)",
    ),
    (
        "nan weight",
        _edit(_with_value("2.weight", 4, float("nan"))),
        r"tensor '2\.weight' must be finite \(flat index 4 is nan\)",
    ),
    (
        "inf bias",
        _edit(_with_value("0.bias", 6, float("-inf"))),
        r"tensor '0\.bias' must be finite \(flat index 6 is -inf\)",
    ),
    (
        "metadata width disagrees",
        _edit(lambda r, t: None, _meta([5, 8, 3])),
        r"tensor '0\.weight' must have shape \(8, 5\) for layer sizes \[5, 8, 3\] \(the file's metadata\), got \(7, 5\)",
    ),
    (
        "metadata inputs disagree",
        _edit(lambda r, t: None, _meta([6, 7, 3])),
        r"tensor '0\.weight' must have shape \(7, 6\)",
    ),
    (
        "metadata layer count disagrees",
        _edit(lambda r, t: None, _meta([5, 7, 7, 3])),
        r"missing \['4\.weight', '4\.bias'\]",
    ),
    (
        "metadata not json",
        _edit(lambda r, t: None, {"layer_sizes": "5,7,3"}),
        r"metadata layer_sizes must be a JSON list of ints, got '5,7,3'",
    ),
    (
        "metadata not ints",
        _edit(lambda r, t: None, {"layer_sizes": "[5, 7.0, 3]"}),
        r"metadata layer_sizes must be a JSON list of ints",
    ),
    (
        "metadata one class",
        _edit(lambda r, t: None, {"layer_sizes": "[5, 1]"}),
        r"metadata: layer_sizes\[-1\] \(classes\) must be >= 2",
    ),
    (
        "one class",
        lambda rng: _serialize(_good(rng, (5, 1))),
        r"layer_sizes\[-1\] \(classes\) must be >= 2",
    ),
    ("no tensors", lambda rng: _serialize({}), r"missing \['0\.weight', '0\.bias'\]"),
    (
        "not safetensors",
        lambda rng: b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!",
        r"is not a safetensors file",
    ),
    ("truncated", lambda rng: _serialize(_good(rng))[:-5], r"is not a safetensors file"),
    ("empty file", lambda rng: b"", r"is not a safetensors file"),
]


@pytest.mark.parametrize("make,message", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_from_safetensors_refusals_name_the_tensor_and_build_nothing(tmp_path, seed, make, message):
    pytest.importorskip("safetensors")
    path = tmp_path / "bad.safetensors"
    path.write_bytes(make(random.Random(seed)))
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=message) as info:
        ml.MLPTrainer.from_safetensors(path)
    assert str(info.value).startswith("MLPTrainer.from_safetensors: ")
    assert _listing(tmp_path) == before


def test_the_unedited_refusal_base_is_accepted(tmp_path, seed):
    """The refusal table edits a file that is otherwise accepted, with or without metadata."""
    pytest.importorskip("safetensors")
    for meta in (None, _meta([5, 7, 3]), {"format": "pt", "other": "ignored"}):
        tensors = _good(random.Random(seed))
        path = tmp_path / "good.safetensors"
        path.write_bytes(_serialize(tensors, meta))
        t = ml.MLPTrainer.from_safetensors(path)
        assert t.layer_sizes == [5, 7, 3]
        assert t.weights_["weight2"].tobytes() == tensors["2.weight"][2]


def test_from_safetensors_refuses_paths_sizes_and_settings(tmp_path, seed, monkeypatch):
    pytest.importorskip("safetensors")
    with pytest.raises(ValueError, match=r"from_safetensors: .* is a folder, not a regular file"):
        ml.MLPTrainer.from_safetensors(tmp_path)
    with pytest.raises(FileNotFoundError):
        ml.MLPTrainer.from_safetensors(tmp_path / "absent.safetensors")
    path = tmp_path / "w.safetensors"
    path.write_bytes(_serialize(_good(random.Random(seed))))
    monkeypatch.setattr(_export, "MAX_FILE_BYTES", 100)
    with pytest.raises(ValueError, match=r"from_safetensors: .* is larger than 100 bytes"):
        ml.MLPTrainer.from_safetensors(path)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"MLPTrainer: invalid learning rate -1.0"):
        ml.MLPTrainer.from_safetensors(path, lr=-1.0)
    with pytest.raises(ValueError, match=r"data_schedule numbers must be finite"):
        ml.MLPTrainer.from_safetensors(path, data_schedule={"x": float("nan")})


# ---------------------------------------------------------------- atomic saves


@pytest.mark.parametrize("kind", ["safetensors", "onnx"])
def test_a_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, seed, monkeypatch, kind):
    pytest.importorskip(kind)
    save = "save_safetensors" if kind == "safetensors" else "export_onnx"
    path = tmp_path / f"w.{kind}"
    getattr(_trained(SMALL[1], seed), save)(path)
    old = path.read_bytes()
    t = _trained(SMALL[1], seed + 1)

    def half(fd, data):  # writes part of the file, then the disk fails
        os.write(fd, bytes(data)[: len(data) // 2])
        raise OSError("injected write failure")

    with monkeypatch.context() as m:
        m.setattr(_files, "write_all", half)
        with pytest.raises(OSError, match="injected"):
            getattr(t, save)(path)
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == [path.name], "no temporary left behind"
    with pytest.raises(ValueError, match=rf"SmallMLPTrainer.{save}: .* is a folder"):
        getattr(t, save)(tmp_path)
    assert os.listdir(tmp_path) == [path.name]
    getattr(t, save)(path)
    assert path.read_bytes() != old


# ---------------------------------------------------------------- ONNX


@pytest.mark.parametrize("make", [m for _, m in SHAPES], ids=[n for n, _ in SHAPES])
def test_onnx_export_runs_in_onnxruntime_like_predict_logits(tmp_path, seed, make):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    np = pytest.importorskip("numpy")
    t = _trained(make, seed)
    path = tmp_path / "m.onnx"
    t.export_onnx(path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", _export.OPSET)]
    layers = len(t.layer_sizes) - 1
    assert [n.op_type for n in model.graph.node] == ["Gemm", "Relu"] * (layers - 1) + ["Gemm"]
    # Initializers: torch's names, the trainer's bytes.
    names = [f"{2 * (i // 2)}.{('weight', 'bias')[i % 2]}" for i in range(2 * layers)]
    assert [i.name for i in model.graph.initializer] == names
    for init, w in zip(model.graph.initializer, t.weights_.values()):
        assert tuple(init.dims) == w.shape and init.raw_data == w.tobytes()
    props = {p.key: p.value for p in model.metadata_props}
    assert (
        props["state_hash"] == t.state_hash() and json.loads(props["layer_sizes"]) == t.layer_sizes
    )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, inp.shape[1]) == ("input", "tensor(float)", t.layer_sizes[0])
    assert (out.name, out.shape[1]) == ("logits", t.layer_sizes[-1])
    assert isinstance(inp.shape[0], str), "the batch dimension is symbolic"
    for rows in (1, 13, 64):
        X = _x(seed + rows, rows, t.layer_sizes[0])
        got = session.run(None, {"input": np.asarray(X)})[0]
        want = np.asarray(t.predict_logits(X))
        assert got.shape == want.shape == (rows, t.layer_sizes[-1]) and got.dtype == np.float32
        assert np.abs(got - want).max() <= 1e-5


# ---------------------------------------------------------------- missing packages


def test_missing_packages_name_what_to_pip_install(tmp_path, monkeypatch):
    t = ml.MLPTrainer([4, 3], seed=1, data_schedule={"a": 1})
    path = tmp_path / "w"
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors fails
    monkeypatch.setitem(sys.modules, "onnx", None)
    for call, name, package in (
        (lambda: t.save_safetensors(path), "MLPTrainer.save_safetensors", "safetensors"),
        (
            lambda: ml.MLPTrainer.from_safetensors(path),
            "MLPTrainer.from_safetensors",
            "safetensors",
        ),
        (lambda: t.export_onnx(path), "MLPTrainer.export_onnx", "onnx"),
    ):
        with pytest.raises(ImportError) as info:
            call()
        message = str(info.value)
        assert (
            message
            == f"{name} needs the {package} package, which is not installed: pip install {package}"
        )
        assert "mojolearn[" not in message
    assert os.listdir(tmp_path) == []


class _BrokenOnnx:
    """A meta-path finder for which `onnx` is installed but its own import of numpy fails."""

    def find_spec(self, name, path=None, target=None):
        if name == "onnx":
            raise ModuleNotFoundError("No module named 'numpy'", name="numpy")
        return None


def test_a_package_that_fails_to_import_is_not_called_missing(tmp_path, monkeypatch):
    t = ml.MLPTrainer([4, 3], seed=1, data_schedule={"a": 1})
    monkeypatch.delitem(sys.modules, "onnx", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BrokenOnnx(), *sys.meta_path])
    with pytest.raises(ImportError) as info:
        t.export_onnx(tmp_path / "m.onnx")
    assert str(info.value) == (
        "MLPTrainer.export_onnx needs the onnx package, which could not be imported "
        "(No module named 'numpy'): pip install onnx"
    )
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert os.listdir(tmp_path) == []


def test_import_mojolearn_does_not_import_the_export_packages():
    # The exporter's module is the trainers' mixin (loaded with them); the packages it uses are
    # imported on use only, and `import mojolearn` alone loads no trainer machinery.
    out = run_python(
        f"import sys; sys.path.insert(0, {PKG_PARENT!r}); import mojolearn as ml\n"
        f"print('mojolearn._mlp.export' in sys.modules)\n"
        f"ml.MLPTrainer([4, 3], seed=1, data_schedule={{'a': 1}}).state_hash()\n"
        f"print(*(m in sys.modules for m in ('safetensors', 'onnx', 'onnxruntime')))"
    )
    assert out.split() == ["False"] * 4
