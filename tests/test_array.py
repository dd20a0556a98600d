"""mojolearn.Array: ownership, layout, interop (NumPy, memoryview) and the NumPy-free helpers."""

import array
import math
import random
import struct
import sys

import pytest
from mojolearn import Array, empty, zeros


def test_owned_array_from_nested_list():
    a = Array.from_list([[1.5, -2.0, 3.0], [4.0, 5.0, 6.25]])
    assert a.shape == (2, 3) and a.dtype == "<f4" and a.size == 6 and len(a) == 2
    assert a.tolist() == [[1.5, -2.0, 3.0], [4.0, 5.0, 6.25]]
    assert a[1, 2] == 6.25 and a[-1, 0] == 4.0
    assert a[1].tolist() == [4.0, 5.0, 6.25] and a[1].shape == (3,)
    assert a.tobytes() == struct.pack("<6f", 1.5, -2.0, 3.0, 4.0, 5.0, 6.25)


def test_values_round_to_float32():
    a = Array.from_list([0.1])
    assert a[0] == struct.unpack("<f", struct.pack("<f", 0.1))[0] != 0.1


def test_int_dtypes_and_io_dtypes():
    i = Array.from_list([[1, -2], [3, 2**31 - 1]], dtype="<i4")
    assert i.tolist() == [[1, -2], [3, 2**31 - 1]] and i.itemsize == 4
    d = Array.from_list([1e300, -1e-300], dtype="<f8")
    assert d.tolist() == [1e300, -1e-300]
    q = Array.from_list([2**62, -5], dtype="<i8")
    assert q.tolist() == [2**62, -5]
    with pytest.raises(TypeError, match="dtype"):
        Array.from_list([1], dtype="<f2")
    with pytest.raises(TypeError, match="dtype"):
        Array((1,), dtype="<f2")


def test_ragged_lists_refused():
    with pytest.raises(ValueError, match="rectangular"):
        Array.from_list([[1.0, 2.0], [3.0]])


def test_address_fixed_and_copy_independent():
    a = zeros((4, 4))
    addr = a.__array_interface__["data"][0]
    b = a.copy()
    b[0, 0] = 7.0
    assert a[0, 0] == 0.0 and b[0, 0] == 7.0
    assert a.__array_interface__["data"][0] == addr != b.__array_interface__["data"][0]


def test_reshape_is_a_view():
    a = Array.from_list([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    r = a.reshape(2, 3)
    r[1, 0] = 9.0
    assert a[3] == 9.0 and r.shape == (2, 3) and a.reshape((-1, 2)).shape == (3, 2)
    with pytest.raises(ValueError, match="reshape"):
        a.reshape(4, 2)


def test_indexing_refusals():
    a = zeros((2, 3))
    with pytest.raises(IndexError):
        a[2, 0]
    with pytest.raises(IndexError, match="too many"):
        a[0, 0, 0]
    with pytest.raises(TypeError, match="ints"):
        a[0.5]
    with pytest.raises(TypeError, match="single elements"):
        a[0] = 1.0


def test_reductions_without_numpy():
    a = Array.from_list([3.0, -1.0, 7.5, 7.5, 2.0])
    assert (a.min(), a.max(), a.argmax()) == (-1.0, 7.5, 2)
    assert a.sum() == 19.0
    assert Array.from_list([1, 2, 3], dtype="<i4").sum() == 6
    with pytest.raises(ValueError, match="empty"):
        zeros((0,)).max()


def test_numpy_float16_refused():
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match="unsupported dtype float16"):
        Array.from_buffer(np.zeros(2, dtype=np.float16))


def test_repr_is_useful():
    r = repr(Array.from_list([1.0, 2.0]))
    assert "1.0, 2.0" in r and "<f4" in r and "(2,)" in r
    assert "(20 values)" in repr(zeros((4, 5)))


def test_from_buffer_borrows_and_keeps_alive():
    raw = array.array("f", [1.0, 2.0, 3.0])
    a = Array.from_buffer(raw)
    a[1] = 5.0
    assert raw[1] == 5.0 and a.shape == (3,)
    del raw
    assert a.tolist() == [1.0, 5.0, 3.0]


def test_from_buffer_refusals():
    with pytest.raises(TypeError, match="unsupported dtype uint8"):
        Array.from_buffer(bytes(4))
    with pytest.raises(TypeError, match="unsupported dtype uint32"):
        Array.from_buffer(array.array("I", [1]))
    with pytest.raises(TypeError, match="buffer"):
        Array.from_buffer([1.0])
    strided = memoryview(array.array("f", range(6)))[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        Array.from_buffer(strided)


def test_readonly_borrow_refuses_writes():
    a = Array.from_buffer(memoryview(struct.pack("<2f", 1.0, 2.0)).cast("f"))
    assert a.readonly and a.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 3.0


def test_buffer_protocol_method():
    # memoryview(Array) needs Python 3.12 (PEP 688); the method itself works everywhere.
    a = Array.from_list([[1.0, 2.0], [3.0, 4.0]])
    mv = a.__buffer__(0)
    assert mv.format == "f" and mv.shape == (2, 2) and mv.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    if sys.version_info >= (3, 12):
        assert memoryview(a).shape == (2, 2)


def test_numpy_asarray_is_zero_copy_and_writable():
    np = pytest.importorskip("numpy")
    a = zeros((3, 2))
    n = np.asarray(a)
    assert n.dtype == np.float32 and n.shape == (3, 2) and n.flags.writeable
    n[2, 1] = 4.5
    assert a[2, 1] == 4.5
    a[0, 0] = -1.0
    assert n[0, 0] == -1.0
    i = np.asarray(Array.from_list([1, 2], dtype="<i4"))
    assert i.dtype == np.int32 and i.tolist() == [1, 2]


def test_from_numpy_borrow_shares_memory():
    np = pytest.importorskip("numpy")
    n = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = Array.from_buffer(n)
    a[0, 1] = 42.0
    assert n[0, 1] == 42.0 and a.shape == (2, 3)


def test_empty_and_zeros():
    assert empty((2, 2)).shape == (2, 2) and zeros(3, "<i4").tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="non-negative"):
        zeros((-1,))
    with pytest.raises(TypeError, match="dtype"):
        zeros((1,), "float32")


def test_from_list():
    m = Array.from_list([[1, 2], [3, 4]], "<i4")
    assert m.shape == (2, 2) and m.dtype == "<i4" and m.tolist() == [[1, 2], [3, 4]]
    assert Array.from_list([0.25, 0.5]).dtype == "<f4"
    assert Array.from_list([]).shape == (0,) and Array.from_list(((1.0,), (2.0,))).shape == (2, 1)
    with pytest.raises(TypeError, match="Array.from_list needs a list or tuple"):
        Array.from_list(array.array("f", [1.0]))
    with pytest.raises(TypeError, match="dtype must be one of"):
        Array.from_list([1], "int32")


# -- Array(shape, dtype): zeros, as the reference's constructor ----------------------------------

_DTYPES = ("<f4", "<i4", "<f8", "<i8")


@pytest.mark.parametrize("dtype", _DTYPES)
def test_array_of_a_shape_is_zeros(dtype):
    rng = random.Random()
    for _ in range(20):
        shape = tuple(rng.randrange(0, 5) for _ in range(rng.randrange(0, 4)))
        spellings = [shape, list(shape)] + ([shape[0]] if len(shape) == 1 else [])
        for spelled in spellings:
            a = Array(spelled, dtype)
            assert a.shape == shape and a.dtype == dtype and a.size == math.prod(shape)
            assert a.tobytes() == bytes(a.size * int(dtype[2])) == zeros(shape, dtype).tobytes()
            assert not a.readonly and a.ndim == len(shape)
    assert Array(3).tolist() == [0.0, 0.0, 0.0] and Array(3).dtype == "<f4"
    assert Array(()).shape == () and Array(()).size == 1


def test_array_of_a_shape_owns_fresh_memory():
    a, b = Array((4, 2)), Array((4, 2))
    assert a.__array_interface__["data"][0] != b.__array_interface__["data"][0]
    a[3, 1] = 2.5
    assert b[3, 1] == 0.0 and a.tolist()[3] == [0.0, 2.5]


def test_array_of_a_shape_matches_numpy_zeros():
    np = pytest.importorskip("numpy")
    for shape in ((2, 3), 5, [4, 0, 2], (), (np.int64(2), 3)):
        for dtype in _DTYPES:
            want = np.zeros(shape, dtype)
            got = np.asarray(Array(shape, dtype))
            assert got.shape == want.shape and got.dtype == want.dtype
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize(
    "values",
    [[1.5, 2.0], [[1.0, 2.0], [3.0, 4.0]], [[1, 2]], (2, 3.0), 2.0, "ab", [True], True, None],
)
def test_array_of_values_is_refused_naming_from_list(values):
    with pytest.raises(TypeError, match=r"Array\(shape, dtype\) allocates zeros.*Array\.from_list"):
        Array(values)


def test_array_of_a_buffer_is_refused_naming_from_list_and_from_buffer():
    with pytest.raises(TypeError, match=r"Array\.from_list.*Array\.from_buffer"):
        Array(array.array("f", [1.0, 2.0]))
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match=r"Array\.from_list.*Array\.from_buffer"):
        Array(np.ones(3, np.float32))


def test_array_shape_refusals():
    with pytest.raises(ValueError, match="non-negative"):
        Array((2, -1))
    with pytest.raises(ValueError, match="non-negative"):
        Array(-3)
    with pytest.raises(TypeError, match="dtype must be one of"):
        Array((2,), "float32")
