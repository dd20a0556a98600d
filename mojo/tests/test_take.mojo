# take_rows (training/take.mojo) against a plain scalar gather, byte by byte, on random bytes and
# random int32 / int64 indices (negative ones included): shapes that break memcpy sizes and
# blocks (1-byte rows, odd row widths, one row, empty axes), and the refusal of an index out of
# range at every position, with nothing written.
from std.random import random_ui64, seed
from std.testing import TestSuite, assert_equal

from training.take import first_bad_index, take_rows


def _fill_random(mut buf: List[UInt8]):
    for i in range(len(buf)):
        buf[i] = UInt8(random_ui64(0, 255))


def _addr(buf: List[UInt8]) -> Int:
    return Int(buf.unsafe_ptr())


def _random_indices(mut idx32: List[Int32], mut idx64: List[Int64], n: Int, rows: Int):
    for i in range(n):
        var r = Int(random_ui64(0, UInt64(2 * rows - 1))) - rows  # [-rows, rows)
        idx32[i] = Int32(r)
        idx64[i] = Int64(r)


def scalar_take(src: List[UInt8], idx: List[Int64], outer: Int, rows: Int,
                inner: Int) -> List[UInt8]:
    """The reference: one byte at a time, a negative index + rows."""
    var n = len(idx)
    var out = List[UInt8](length=outer * n * inner, fill=0)
    for o in range(outer):
        for i in range(n):
            var r = Int(idx[i])
            if r < 0:
                r += rows
            for b in range(inner):
                out[(o * n + i) * inner + b] = src[(o * rows + r) * inner + b]
    return out^


def _check_case(outer: Int, rows: Int, inner: Int, n: Int) raises:
    var src = List[UInt8](length=outer * rows * inner, fill=0)
    _fill_random(src)
    var idx32 = List[Int32](length=n, fill=0)
    var idx64 = List[Int64](length=n, fill=0)
    _random_indices(idx32, idx64, n, rows)
    var want = scalar_take(src, idx64, outer, rows, inner)
    for itemsize in [4, 8]:
        var got = List[UInt8](length=outer * n * inner, fill=0)
        var at = Int(idx32.unsafe_ptr()) if itemsize == 4 else Int(idx64.unsafe_ptr())
        assert_equal(take_rows(_addr(src), _addr(got), at, itemsize, n, outer, rows, inner), -1)
        for b in range(len(want)):
            assert_equal(got[b], want[b], String("byte ", b, " of (", outer, ", ", n, ", ",
                                                 inner, "), itemsize ", itemsize))
    # Addresses were taken as Ints: keep the lists alive past every call that read them.
    _ = src^
    _ = idx32^
    _ = idx64^


def test_take_rows_matches_scalar_gather() raises:
    seed()
    for outer in [1, 2, 3]:
        for rows in [1, 2, 5, 16, 61]:
            for inner in [1, 3, 4, 8, 120, 257]:
                for n in [0, 1, 7, 16, 33]:
                    _check_case(outer, rows, inner, n)


def test_realistic_batch_matches() raises:
    seed()
    _check_case(1, 1000, 784 * 4, 256)  # a 256-row batch of 784 float32 features
    _check_case(1, 300, 30 * 4, 16)


def test_out_of_range_is_refused_at_every_position_writing_nothing() raises:
    seed()
    var rows = 9
    var inner = 12
    var n = 11
    var src = List[UInt8](length=rows * inner, fill=0)
    _fill_random(src)
    for pos in range(n):
        for bad in [rows, rows + 5, -rows - 1, -1000000]:
            var idx32 = List[Int32](length=n, fill=0)
            var idx64 = List[Int64](length=n, fill=0)
            _random_indices(idx32, idx64, n, rows)
            idx32[pos] = Int32(bad)
            idx64[pos] = Int64(bad)
            if pos + 1 < n:  # a later bad index must not be reported instead
                idx32[pos + 1] = Int32(rows + 1)
                idx64[pos + 1] = Int64(rows + 1)
            for itemsize in [4, 8]:
                var dst = List[UInt8](length=n * inner, fill=0xAB)
                var at = Int(idx32.unsafe_ptr()) if itemsize == 4 else Int(idx64.unsafe_ptr())
                assert_equal(take_rows(_addr(src), _addr(dst), at, itemsize, n, 1, rows, inner),
                             pos)
                assert_equal(first_bad_index(at, itemsize, n, rows), pos)
                for b in range(len(dst)):
                    assert_equal(dst[b], UInt8(0xAB))
            _ = idx32^
            _ = idx64^
    _ = src^


def test_int64_indices_beyond_int32_are_refused() raises:
    var idx = List[Int64](length=2, fill=0)
    idx[1] = Int64(1) << 40
    assert_equal(first_bad_index(Int(idx.unsafe_ptr()), 8, 2, 5), 1)
    idx[1] = -(Int64(1) << 40)
    assert_equal(first_bad_index(Int(idx.unsafe_ptr()), 8, 2, 5), 1)
    _ = idx^


def test_empty_axes_and_no_rows() raises:
    # rows = 0: every index is out of range; inner = 0 or outer = 0: indices checked, no copy.
    var idx = List[Int64](length=3, fill=0)
    var at = Int(idx.unsafe_ptr())
    assert_equal(take_rows(0, 0, at, 8, 3, 1, 0, 4), 0)
    assert_equal(take_rows(0, 0, at, 8, 3, 1, 2, 0), -1)
    assert_equal(take_rows(0, 0, at, 8, 3, 0, 2, 4), -1)
    assert_equal(take_rows(0, 0, 0, 8, 0, 1, 2, 4), -1)
    _ = idx^


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
