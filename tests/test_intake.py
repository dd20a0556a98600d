"""The one intake (`_intake`, `_reader`, the binding's `intake_read`): the binding's fast accept
agrees with the slow path's layout wherever it accepts, every input kind reaches the same
address, refusals are named, and the buffer layer has no import circle."""

import array
import ast
import pathlib

import mojolearn as ml
import pytest
from mojolearn._buffers import intake as _intake

PKG = pathlib.Path(ml.__file__).parent


def _kinds():
    values = [float(i) for i in range(12)]
    out = [
        array.array("f", values),
        memoryview(array.array("f", values)).cast("B").cast("f", (3, 4)),
        ml.Array.from_list(values, "<f4").reshape((3, 4)),
        memoryview(array.array("f", values))[::2],
        memoryview(array.array("f", values)).toreadonly(),
        array.array("d", values),
        array.array("i", range(12)),
        array.array("q", range(12)),
        bytes(16),
        [1.0],
    ]
    try:
        import numpy as np

        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        out += [
            a,
            a[:, ::2],
            a.T,
            a.astype(">f4"),
            a.astype(np.float64),
            np.zeros((0, 4), np.float32),
        ]
    except ImportError:
        pass
    try:
        import torch

        t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        out += [t, t.t(), t.double(), torch.arange(3), torch.zeros(0)]
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("obj", _kinds(), ids=lambda o: type(o).__name__)
def test_fast_accept_is_a_subset_of_the_slow_path(obj):
    for ndim in (None, 1, 2):
        for writable in (False, True):
            fast = _intake.borrowed_f32(obj, ndim, writable)
            if fast is None:
                continue
            _, address, shape = fast
            layout = _intake.probe(obj)
            assert layout.format in ("f", "<f", "=f") and layout.c_contiguous and layout.nbytes
            assert (layout.address, layout.shape) == (address, shape)
            assert ndim is None or layout.ndim == ndim
            assert not (writable and layout.readonly)


def test_every_kind_reaches_the_same_memory():
    np = pytest.importorskip("numpy")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    address = a.__array_interface__["data"][0]
    assert _intake.f32(a, "a", 2)[1:] == (address, (2, 4))
    assert _intake.f32(memoryview(a), "a", 2)[1:] == (address, (2, 4))
    assert _intake.f32(ml.from_dlpack(a), "a", 2)[1:] == (address, (2, 4))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(a)
    keep, at, shape = _intake.f32(t, "t", 2, writable=True)
    # Read through torch's C exchange API where it has one: the tensor itself holds the
    # memory; an older torch's is exported, and the capsule holds it.
    exchange = hasattr(type(t), "__dlpack_c_exchange_api__")
    assert (at, shape) == (address, (2, 4)) and (keep is t) == exchange


def test_labels_take_signed_32_and_64_bit_only():
    assert _intake.labels(array.array("q", [0, 1]), 2, "y")[2] == 8
    assert _intake.labels(array.array("i", [0, 1]), 2, "y")[2] == 4
    assert _intake.labels(array.array("B", [0, 1]), 2, "y") is None  # converted by the caller
    assert _intake.labels(array.array("i", [0, 1]), 3, "y") is None  # wrong length


def test_refusals_are_named():
    with pytest.raises(TypeError, match="w must be float32, got float64"):
        _intake.f32(array.array("d", [1.0]), "w")
    with pytest.raises(ValueError, match="w must have 2 dimensions, got shape"):
        _intake.f32(array.array("f", [1.0]), "w", 2)
    with pytest.raises(ValueError, match="g is read-only; it is updated in place"):
        _intake.f32(memoryview(array.array("f", [1.0])).toreadonly(), "g", writable=True)
    with pytest.raises(ValueError, match="g must be C-contiguous"):
        _intake.f32(memoryview(array.array("f", [1.0, 2.0, 3.0, 4.0]))[::2], "g", writable=True)
    with pytest.raises(TypeError, match="buffer protocol or DLPack"):
        _intake.probe(object())


def test_more_than_eight_dimensions_are_refused_by_name():
    np = pytest.importorskip("numpy")
    for _ in range(2):  # also when the first NumPy array the process sees is such a one
        with pytest.raises(ValueError, match="at most 8 dimensions"):
            _intake.probe(np.zeros((1,) * 9, np.float32))
    with pytest.raises(
        ValueError, match="at most 8 dimensions without suboffsets are supported, got 9 dimensions"
    ):
        ml.matmul(np.zeros((1,) * 9, np.float32), np.zeros((1, 1), np.float32))


def test_torch_refusals_are_named():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"b: from_dlpack: Tensor refused to export .*detach"):
        ml.matmul(torch.ones(2, 2), torch.ones(2, 2, requires_grad=True))
    with pytest.raises(TypeError, match=r"a must be float32, got bfloat16"):
        ml.matmul(torch.ones(2, 2, dtype=torch.bfloat16), torch.ones(2, 2))
    # A strided tensor is copied into C order, as a strided NumPy array is (issue 30 row 4).
    z = torch.arange(6.0).reshape(3, 2)
    assert ml.cross_entropy(z.t(), torch.tensor([0, 1])) == ml.cross_entropy(
        z.t().contiguous(), torch.tensor([0, 1])
    )


def _package_imports(name):
    """The package modules a `_buffers` module imports, as paths relative to the package."""
    tree = ast.parse((PKG / "_buffers" / name).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = ("_buffers/" if node.level == 1 else "") + (node.module or "").replace(".", "/")
            if node.module is None or node.module in ("_runtime",):
                found.update(f"{base.rstrip('/')}/{a.name}".lstrip("/") for a in node.names)
            else:
                found.add(base)
    return found


def _typing_only_imports(name):
    """Relative imports inside `if TYPE_CHECKING:` blocks (not made at run time)."""
    tree = ast.parse((PKG / "_buffers" / name).read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.level == 1:
                    found.add(f"_buffers/{stmt.module}")
    return found


def test_the_buffer_layer_has_no_import_circle():
    assert _package_imports("formats.py") == set()  # a leaf
    assert _package_imports("reader.py") == set()  # the runtime hands it the binding
    assert _package_imports("array.py") <= {
        "_buffers/reader",
        "_buffers/formats",
        "_buffers/dlpack",
        "_buffers/take",
        "_buffers/indexing",
    }
    assert _package_imports("indexing.py") - _typing_only_imports("indexing.py") == set()
    assert _package_imports("take.py") <= {"_buffers/reader", "_buffers/formats", "_buffers/array"}
    assert "_buffers/array" not in _package_imports("take.py") - _typing_only_imports("take.py")
    assert "_buffers/intake" not in _package_imports("dlpack.py")
