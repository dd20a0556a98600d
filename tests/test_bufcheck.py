"""_bufcheck, _intake and _buffer: layout probes, dtype-strict conversion, addresses — every
refusal."""

import array
import struct

import pytest
from mojolearn import Array
from mojolearn._buffers import alloc as _buffer
from mojolearn._buffers import array as _array
from mojolearn._buffers import formats as _bufcheck
from mojolearn._buffers import intake as _intake
from mojolearn._mlp import batches as _batches


def test_probe_reports_layout():
    pb = _intake.probe(array.array("f", [1, 2, 3]))
    assert (pb.format, pb.itemsize, pb.shape, pb.ndim, pb.c_contiguous, pb.readonly) == (
        "f",
        4,
        (3,),
        1,
        True,
        False,
    )
    pb = _intake.probe(bytes(8))
    assert pb.readonly and pb.format == "B"
    pb = _intake.probe(Array.from_list([[1.0, 2.0], [3.0, 4.0]]))
    assert pb.shape == (2, 2) and pb.nbytes == 16 and pb.c_contiguous


def test_probe_refuses_non_buffers():
    with pytest.raises(TypeError, match="buffer protocol"):
        _intake.probe([1.0, 2.0])


def test_format_predicates():
    assert _bufcheck.is_native_f32("f") and _bufcheck.is_native_f32("<f")
    assert not _bufcheck.is_native_f32(">f") and not _bufcheck.is_native_f32("d", 8)
    assert _bufcheck.is_int32("i", 4) and _bufcheck.is_int32("l", 4)
    assert not _bufcheck.is_int32("I", 4) and not _bufcheck.is_int32("q", 8)
    assert _bufcheck.is_integer("B") and not _bufcheck.is_integer("f")
    assert _bufcheck.dtype_name("d", 8) == "float64"
    assert _bufcheck.dtype_name("Q", 8) == "uint64"


def test_as_f32_c_refuses_float64_by_name():
    with pytest.raises(TypeError, match=r"weights must be float32, got float64"):
        _intake.as_f32_c(array.array("d", [1.0]), name="weights")


def test_as_f32_c_refuses_ints_and_non_buffers():
    with pytest.raises(TypeError, match="X must be float32, got int32"):
        _intake.as_f32_c(array.array("i", [1]), name="X")
    with pytest.raises(TypeError, match="X must be a float32 buffer"):
        _intake.as_f32_c([1.0, 2.0], name="X")


def test_as_f32_c_wrong_ndim():
    with pytest.raises(ValueError, match="X must have 2 dimensions"):
        _intake.as_f32_c(array.array("f", [1.0]), ndim=2, name="X")


def test_as_f32_c_borrows_contiguous_and_copies_strided():
    src = array.array("f", [float(i) for i in range(6)])
    arr, copied = _intake.as_f32_c(src)
    assert not copied and arr._addr == src.buffer_info()[0]
    view = memoryview(src)[::2]
    arr, copied = _intake.as_f32_c(view)
    assert copied and arr.tolist() == [0.0, 2.0, 4.0]


def test_as_f32_c_copies_numpy_transposed():
    np = pytest.importorskip("numpy")
    n = np.arange(6, dtype=np.float32).reshape(2, 3).T
    arr, copied = _intake.as_f32_c(n, ndim=2)
    assert copied and arr.shape == (3, 2) and arr.tolist() == n.tolist()


def test_as_i32_c_converts_any_integer_format():
    for code in "bBhHiIlLqQ":
        arr, copied = _intake.as_i32_c(array.array(code, [0, 1, 2]), name="targets")
        assert arr.dtype == "<i4" and arr.tolist() == [0, 1, 2]
    arr, copied = _intake.as_i32_c(array.array("i", [5, 6]))
    assert not copied


def test_as_i32_c_refuses_out_of_range_and_floats():
    with pytest.raises(ValueError, match="targets holds 2147483648, outside the int32 range"):
        _intake.as_i32_c(array.array("q", [0, 2**31]), name="targets")
    with pytest.raises(ValueError, match="targets holds -2147483649"):
        _intake.as_i32_c(array.array("q", [-(2**31) - 1]), name="targets")
    with pytest.raises(TypeError, match="targets must hold integers, got float32"):
        _intake.as_i32_c(array.array("f", [0.0]), name="targets")


def test_as_i32_c_numpy_int64_labels():
    np = pytest.importorskip("numpy")
    arr, copied = _intake.as_i32_c(np.array([0, 2, 1], dtype=np.int64), ndim=1, name="y")
    assert copied and arr.tolist() == [0, 2, 1]
    with pytest.raises(ValueError, match="y holds 4294967296"):
        _intake.as_i32_c(np.array([1 << 32]), name="y")
    strided = np.arange(10, dtype=np.int32)[::3]
    arr, copied = _intake.as_i32_c(strided)
    assert copied and arr.tolist() == [0, 3, 6, 9]


def test_addr_refuses_readonly_and_strided():
    with pytest.raises(ValueError, match="grad is read-only"):
        _intake.addr(bytes(8), name="grad")
    with pytest.raises(ValueError, match="grad is read-only"):
        _intake.addr(Array.from_buffer(memoryview(struct.pack("<f", 1.0)).cast("f")), name="grad")
    with pytest.raises(ValueError, match="C-contiguous"):
        _intake.addr(memoryview(bytearray(16)).cast("f")[::2], name="grad")
    with pytest.raises(ValueError, match="C-contiguous"):
        _intake.addr_ro(memoryview(bytearray(16)).cast("f")[::2], name="x")


def test_addresses_point_at_the_data():
    import ctypes

    src = bytearray(struct.pack("<3f", 1.0, 2.0, 3.0))
    address = _intake.addr(src, name="x")
    assert ctypes.c_float.from_address(address + 4).value == 2.0
    ro = struct.pack("<2f", 7.0, 8.0)
    assert ctypes.c_float.from_address(_intake.addr_ro(ro) + 4).value == 8.0


def test_frombytes_and_le_bytes_round_trip():
    raw = struct.pack("<4f", 1.0, -0.0, 3.5, float("inf"))
    arr = _array.frombytes(raw, "<f4", (2, 2))
    assert arr.shape == (2, 2) and _buffer.le_bytes(arr) == raw
    with pytest.raises(ValueError, match="do not hold"):
        _array.frombytes(raw[:-1], "<f4", (2, 2))
    assert _buffer.le_bytes(array.array("i", [1, -1])) == struct.pack("<2i", 1, -1)


def test_all_finite_runs_in_the_binding():
    assert _batches.all_finite(Array.from_list([1.0, -2.0, 3.4e38]))
    for bad in (float("nan"), float("inf"), float("-inf")):
        values = [0.0] * 37
        values[29] = bad  # past the SIMD blocks: the scalar tail is checked too
        assert not _batches.all_finite(Array.from_list(values))
        values = [0.0] * 37
        values[3] = bad
        assert not _batches.all_finite(Array.from_list(values))
    assert _batches.all_finite(Array.from_list([]))
    with pytest.raises(TypeError, match="float32"):
        _batches.all_finite(array.array("d", [1.0]))


def test_as_i32_c_refuses_non_native_byte_order():
    np = pytest.importorskip("numpy")
    for dtype in (">i4", ">i8"):
        with pytest.raises(TypeError, match="targets must hold native-endian integers"):
            _intake.as_i32_c(np.array([0, 1, 2], dtype=dtype), name="targets")
