# Checks: first_nonfinite against a plain scalar scan, on random data with NaN/Inf planted at
# every position of blocks and tails; Layout name counts.
from std.memory import bitcast
from std.random import random_float64, random_ui64, seed
from std.testing import TestSuite, assert_equal, assert_false, assert_true

from entries.args import Layout
from training.checks import first_nonfinite, is_finite32
from training.config import F32P


def scalar_first_nonfinite(p: F32P, n: Int) -> Int:
    for i in range(n):
        var x = p[unsafe_offset=i]
        if x != x or x == Float32.MAX_FINITE * 2 or x == -Float32.MAX_FINITE * 2:
            return i
    return -1


def test_is_finite32_classifies_special_values() raises:
    assert_true(is_finite32(Float32(0.0)))
    assert_true(is_finite32(Float32.MAX_FINITE))
    assert_true(is_finite32(bitcast[DType.float32, 1](UInt32(1))))  # smallest subnormal
    assert_false(is_finite32(bitcast[DType.float32, 1](UInt32(0x7F800000))))
    assert_false(is_finite32(bitcast[DType.float32, 1](UInt32(0xFF800000))))
    assert_false(is_finite32(bitcast[DType.float32, 1](UInt32(0x7FC00001))))


def test_first_nonfinite_matches_scalar_scan() raises:
    seed()
    var buf = List[Float32](length=128, fill=0)
    var p = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var specials = [UInt32(0x7F800000), UInt32(0xFF800000), UInt32(0x7FC00000)]
    # n past 96 covers the 32-value blocks, the 8-value vectors and the scalar tail; a second
    # special after the first must not be reported instead.
    var sizes = List[Int]()
    for n in range(0, 41):
        sizes.append(n)
    for n in [63, 64, 65, 71, 95, 96, 97, 99]:
        sizes.append(n)
    for n in sizes:
        for pos in range(-1, n):
            for i in range(n):
                buf[i] = Float32((random_float64() - 0.5) * 1e30)
            if pos >= 0:
                buf[pos] = bitcast[DType.float32, 1](specials[Int(random_ui64(0, 2))])
                var later = Int(random_ui64(UInt64(pos), UInt64(n)))
                buf[later] = bitcast[DType.float32, 1](specials[Int(random_ui64(0, 2))])
            assert_equal(first_nonfinite(p, n), scalar_first_nonfinite(p, n))
            assert_equal(first_nonfinite(p, n), pos)


def test_layout_counts_names() raises:
    comptime L = Layout("e", "a,b,c", "m")
    assert_equal(L.n_addrs(), 3)
    assert_equal(L.n_params(), 1)
    assert_equal(Layout("e", "", "").n_addrs(), 0)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
