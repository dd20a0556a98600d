"""Array.take: one binding call gathers entries along an axis, bit for bit, for every dtype and
every kind of index; compared with a pure-Python gather of the raw bytes on fresh random data
(and with numpy.take where NumPy is installed); refusals named, the source never changed."""

import array
import math
import os
import pickle
import random
import subprocess
import sys

import pytest
from mojolearn import Array, zeros
from mojolearn._buffers.array import frombytes

DTYPES = ("<f4", "<i4", "<f8", "<i8")


def _random_array(rng, shape, dtype):
    """Random BYTES (NaN payloads, subnormals, any int): take must move them unchanged."""
    size = math.prod(shape) * int(dtype[2])
    return frombytes(rng.randbytes(size), dtype, shape)


def _reference(raw, shape, itemsize, indices, axis):
    """The gather of `indices` along `axis`, from the raw C-order bytes, one row at a time."""
    outer = math.prod(shape[:axis])
    rows = shape[axis]
    inner = math.prod(shape[axis + 1 :]) * itemsize
    out = bytearray()
    for o in range(outer):
        for i in indices:
            r = i + rows if i < 0 else i
            start = (o * rows + r) * inner
            out += raw[start : start + inner]
    return bytes(out)


def _random_indices(rng, rows, n):
    return [rng.randrange(-rows, rows) for _ in range(n)] if rows else []


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_matches_a_byte_gather_on_random_data(dtype):
    rng = random.Random()
    for _ in range(60):
        shape = tuple(rng.randrange(1, 6) for _ in range(rng.randrange(1, 5)))
        a = _random_array(rng, shape, dtype)
        before = a.tobytes()
        axis = rng.randrange(-len(shape), len(shape))
        ax = axis % len(shape)
        idx = _random_indices(rng, shape[ax], rng.randrange(0, 9))
        got = a.take(idx, axis=axis)
        want_shape = shape[:ax] + (len(idx),) + shape[ax + 1 :]
        assert got.shape == want_shape and got.dtype == dtype
        assert got.tobytes() == _reference(before, shape, int(dtype[2]), idx, ax)
        assert a.tobytes() == before  # the source is not changed


def test_take_rows_of_a_realistic_batch():
    rng = random.Random()
    X = _random_array(rng, (1000, 784), "<f4")
    idx = [rng.randrange(1000) for _ in range(256)]
    got = X.take(idx)
    assert got.shape == (256, 784)
    assert got.tobytes() == _reference(X.tobytes(), (1000, 784), 4, idx, 0)


def _index_kinds(idx):
    """The same int list as every kind of index the API accepts (NumPy and torch if present)."""
    out = [
        ("list", list(idx)),
        ("tuple", tuple(idx)),
        ("array.array q", array.array("q", idx)),
        ("array.array i", array.array("i", idx)),
        ("array.array h", array.array("h", idx)),
        ("memoryview", memoryview(array.array("q", idx))),
        (
            "strided memoryview",
            memoryview(array.array("i", [v for i in idx for v in (i, 99)]))[::2],
        ),
        ("Array <i4", Array.from_list(list(idx), "<i4")),
        ("Array <i8", Array.from_list(list(idx), "<i8")),
    ]
    try:
        import numpy as np
    except ImportError:
        return out
    out += [
        ("numpy int64", np.array(idx, np.int64)),
        ("numpy int32", np.array(idx, np.int32)),
        ("numpy int8", np.array(idx, np.int8)),
        ("numpy strided", np.array([v for i in idx for v in (i, 99)], np.int64)[::2]),
        ("numpy int64 scalars", [np.int64(i) for i in idx]),
    ]
    try:
        import torch
    except ImportError:
        return out
    out += [
        ("torch int64", torch.tensor(idx, dtype=torch.int64)),
        ("torch int32", torch.tensor(idx, dtype=torch.int32)),
        ("torch strided", torch.tensor([v for i in idx for v in (i, 99)])[::2]),
    ]
    return out


def test_every_kind_of_index_gives_the_same_rows():
    rng = random.Random()
    a = _random_array(rng, (13, 5), "<f4")
    idx = [rng.randrange(-13, 13) for _ in range(11)]
    want = _reference(a.tobytes(), (13, 5), 4, idx, 0)
    for name, kind in _index_kinds(idx):
        got = a.take(kind)
        assert got.shape == (11, 5), name
        assert got.tobytes() == want, name


def test_range_and_empty_indices():
    rng = random.Random()
    a = _random_array(rng, (6, 3), "<i8")
    assert a.take(range(1, 6, 2)).tobytes() == _reference(a.tobytes(), (6, 3), 8, [1, 3, 5], 0)
    for empty in ([], (), range(0), array.array("q"), Array((0,), "<i4")):
        got = a.take(empty)
        assert got.shape == (0, 3) and got.tobytes() == b""
    assert zeros((0, 4)).take([]).shape == (0, 4)
    assert zeros((3, 0)).take([2, -3, 0]).shape == (3, 0)
    assert zeros((2, 0, 3)).take([1], axis=2).shape == (2, 0, 1)


def test_matches_numpy_take():
    np = pytest.importorskip("numpy")
    rng = random.Random()
    for dtype in DTYPES:
        a = _random_array(rng, (7, 4, 3), dtype)
        n = np.asarray(a)
        for axis in (0, 1, 2, -1):
            idx = _random_indices(rng, n.shape[axis], 9)
            want = np.take(n, idx, axis=axis)
            got = a.take(idx, axis=axis)
            assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_take_from_views_and_borrowed_memory():
    rng = random.Random()
    base = _random_array(rng, (4, 6, 5), "<f8")
    row = base[2]  # a view at an offset into base's memory
    idx = [5, 0, -1, 3]
    assert row.take(idx).tobytes() == _reference(row.tobytes(), (6, 5), 8, idx, 0)
    flat = base.reshape(24, 5)
    assert flat.take(idx).tobytes() == _reference(flat.tobytes(), (24, 5), 8, idx, 0)
    raw = rng.randbytes(4 * 20)
    ro = Array.from_buffer(memoryview(raw).cast("f").cast("B").cast("f", (10, 2)))
    assert ro.readonly
    got = ro.take([9, 1])
    assert not got.readonly and got.tobytes() == _reference(raw, (10, 2), 4, [9, 1], 0)


def test_result_is_fresh_owned_and_independent():
    a = Array.from_list([[1.0, 2.0], [3.0, 4.0]])
    got = a.take([1, 1, 0])
    assert not isinstance(got._owner, Array)  # owns its memory: no view of the source
    assert got.__array_interface__["data"][0] != a.__array_interface__["data"][0]
    got[0, 0] = 9.0
    assert a.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    del a
    assert got.tolist() == [[9.0, 4.0], [3.0, 4.0], [1.0, 2.0]]
    assert pickle.loads(pickle.dumps(got)).tolist() == got.tolist() == got.copy().tolist()


def test_out_of_range_names_position_and_value_and_changes_nothing():
    rng = random.Random()
    a = _random_array(rng, (5, 3), "<f4")
    before = a.tobytes()
    for idx, pos, value in (
        ([0, 5], 1, 5),
        ([-6], 0, -6),
        ([1, 2, 3, 4, 100, 7], 4, 100),
        (array.array("q", [0, 1 << 40]), 1, 1 << 40),
        (array.array("i", [-(1 << 31)]), 0, -(1 << 31)),
    ):
        msg = rf"indices\[{pos}\] = {value} is out of bounds for axis 0 with size 5"
        with pytest.raises(IndexError, match=msg):
            a.take(idx)
    with pytest.raises(
        IndexError, match=r"indices\[1\] = 2 is out of bounds for axis 1 with size 2"
    ):
        zeros((3, 2)).take([0, 2], axis=1)
    with pytest.raises(
        IndexError, match=r"indices\[0\] = 0 is out of bounds for axis 0 with size 0"
    ):
        zeros((0, 2)).take([0])
    with pytest.raises(IndexError, match=r"indices\[2\] = 36893488147419103232 is out of bounds"):
        a.take([0, 1, 1 << 65])
    assert a.tobytes() == before


@pytest.mark.parametrize(
    "indices, error, pattern",
    [
        ([0.0], TypeError, r"indices must be ints, got float at indices\[0\]"),
        ([1, "2"], TypeError, r"indices must be ints, got str at indices\[1\]"),
        ([True, False], TypeError, r"indices\[0\] is a bool; indices are positions, not a mask"),
        ([0, True], TypeError, r"indices\[1\] is a bool"),
        ([[0]], TypeError, r"got list at indices\[0\]"),
        (3, TypeError, r"indices must be a list, tuple or range of ints.*got int"),
        ({0, 1}, TypeError, r"got set"),
        (None, TypeError, r"got NoneType"),
        (array.array("f", [0.0]), TypeError, r"indices must hold integers, got float32"),
        (array.array("d", [0.0]), TypeError, r"got float64"),
        (Array.from_list([0.0]), TypeError, r"got float32"),
        (Array.from_list([[0, 1]], "<i8"), ValueError, r"indices must be 1-D, got shape \(1, 2\)"),
        (memoryview(bytes(8)).cast("q", (1, 1)), ValueError, r"must be 1-D"),
        (memoryview(bytes(8)).cast("?"), TypeError, r"got bool"),
    ],
)
def test_index_refusals(indices, error, pattern):
    a = Array.from_list([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(error, match=pattern):
        a.take(indices)
    assert a.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_numpy_and_torch_index_refusals():
    np = pytest.importorskip("numpy")
    a = zeros((3, 2))
    with pytest.raises(TypeError, match="got bool"):
        a.take(np.array([True, False, True]))
    with pytest.raises(TypeError, match="got float64"):
        a.take(np.array([0.0]))
    with pytest.raises(ValueError, match=r"must be 1-D, got shape \(1, 1\)"):
        a.take(np.zeros((1, 1), np.int64))
    with pytest.raises(TypeError, match="native-endian"):
        a.take(np.array([0, 1], ">i8"))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="got float32"):
        a.take(torch.zeros(2))
    with pytest.raises(ValueError, match="C-contiguous int32 or int64 tensor, got int16"):
        a.take(torch.tensor([0, 1], dtype=torch.int16))


def test_axis_refusals():
    a = zeros((2, 3))
    for axis in (2, -3):
        with pytest.raises(ValueError, match=r"axis must be in \[-2, 2\) for an Array of 2"):
            a.take([0], axis=axis)
    for axis in (0.0, None, True):
        with pytest.raises(TypeError, match="axis must be an int"):
            a.take([0], axis=axis)
    with pytest.raises(ValueError, match=r"in \[0, 0\) for an Array of 0 dimensions"):
        Array(()).take([0])


def test_take_does_not_fix_the_numeric_mode():
    # Gathering is host code: like reading a buffer, it may come before set_numeric_mode.
    code = (
        "import mojolearn as ml\n"
        "a = ml.Array.from_list([[1.0], [2.0]]).take([1])\n"
        "ml.set_numeric_mode('fast')\n"
        "print(a.tolist(), ml.numeric_mode_used())\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[[2.0]]", "fast"]
