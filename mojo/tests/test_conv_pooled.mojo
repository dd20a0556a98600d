# training/layers/conv_pooled.mojo against a plain scalar reference: dW chains over every
# point (b, oh, ow) ascending from +0.0 with fma, db sums, dY built from the pool's gradient at
# each window's place (+0.0 elsewhere, at masked windows and in an odd last row or column), on
# fresh random inputs: every size of kernel it takes, channels in groups of 3, 2 and 1, ranges
# of channels (a part's), padding, odd images, an unpadded x read in place and checked in
# ranges of examples. An x with an infinity or a NaN is refused.
from std.math import fma
from std.random import random_float64, random_ui64, seed
from std.testing import TestSuite, assert_equal, assert_false, assert_true

from training.config import F32P
from training.layers.conv_pooled import PMAX_KH, PL, PooledDw, pooled_dw_fits, pooled_dw_part
from training.layers.pool2d import NO_PLACE, U8P
from training.pool import pool_open, split_parts


def _part(ctx: Int, part: Int, parts: Int):
    pooled_dw_part(Pointer[PooledDw, MutAnyOrigin](unsafe_from_address=ctx)[], part, parts)


def _dy(c: PooledDw, r: Int, o: Int, oh: Int, ow: Int) -> Float32:
    """The conv's dY at (r, o, oh, ow), as the pool's backward writes it."""
    var qh = c.qh()
    var qw = c.qw()
    if oh >= 2 * qh or ow >= 2 * qw:
        return 0.0
    var q = ((r * c.oc + o) * qh + oh // 2) * qw + ow // 2
    var k = Int(U8P(unsafe_from_address=c.places)[unsafe_offset=q])
    if k == (oh % 2) * 2 + ow % 2:
        return Float32(0.0) + F32P(unsafe_from_address=c.g)[unsafe_offset=q]
    return 0.0


def _reference(c: PooledDw, gw: F32P, gb: F32P):
    var oh_all = c.h + 2 * c.ph - c.kh + 1
    var ow_all = c.w + 2 * c.pw - c.kw + 1
    var x = F32P(unsafe_from_address=c.x)

    for o in range(c.oc):
        var s: Float32 = 0.0
        for r in range(c.rows):
            for oh in range(oh_all):
                for ow in range(ow_all):
                    s = s + _dy(c, r, o, oh, ow)
        gb[unsafe_offset=o] = s
        for ic in range(c.c):
            for i in range(c.kh):
                for j in range(c.kw):
                    var acc: Float32 = 0.0
                    for r in range(c.rows):
                        for oh in range(oh_all):
                            for ow in range(ow_all):
                                var ih = oh + i - c.ph
                                var iw = ow + j - c.pw
                                var xv: Float32 = 0.0
                                if ih >= 0 and ih < c.h and iw >= 0 and iw < c.w:
                                    xv = x[unsafe_offset=((r * c.c + ic) * c.h + ih) * c.w + iw]
                                acc = fma(_dy(c, r, o, oh, ow), xv, acc)
                    gw[unsafe_offset=((o * c.c + ic) * c.kh + i) * c.kw + j] = acc


def _bits(v: Float32) -> UInt32:
    return v.to_bits[DType.uint32]()


def _case(rows: Int, ch: Int, h: Int, w: Int, oc: Int, kh: Int, kw: Int, ph: Int, pw: Int,
          bad: Float32 = 0.0, pool: Int = 0) raises -> Bool:
    """One random case through `pooled_dw_part` and the reference; False when the kernel
    refused (`bad`, not 0: x holds it). pool 0: one part; else three parts (ranges of channels,
    some empty below 3) of a pool no worker serves: this thread runs them in turn."""
    var oh_all = h + 2 * ph - kh + 1
    var ow_all = w + 2 * pw - kw + 1
    var q = (oh_all // 2) * (ow_all // 2)
    var x = List[Float32](length=rows * ch * h * w, fill=0)
    for i in range(len(x)):
        x[i] = Float32(random_float64(-1, 1))
    if bad != 0:
        x[Int(random_ui64(0, UInt64(len(x) - 1)))] = bad
    var g = List[Float32](length=rows * oc * q, fill=0)
    var places = List[UInt8](length=rows * oc * q, fill=0)
    for i in range(len(g)):
        g[i] = Float32(random_float64(-1, 1))
        places[i] = UInt8(random_ui64(0, NO_PLACE))  # 0-3, or a masked window
    var taps = oc * ch * kh * kw
    var got = List[Float32](length=taps + oc, fill=-7)
    var want = List[Float32](length=taps + oc, fill=0)
    var flag = List[Int64](length=1, fill=0)
    var call = PooledDw(Int(x.unsafe_ptr()), Int(g.unsafe_ptr()), Int(places.unsafe_ptr()),
                        Int(got.unsafe_ptr()), Int(got.unsafe_ptr()) + 4 * taps,
                        Int(flag.unsafe_ptr()), rows, ch, h, w, oc, kh, kw, ph, pw)
    split_parts(pool, _part, call, 3 if pool != 0 else 1)
    if flag[0] != 0:
        return False
    var ref_call = call
    ref_call.gw = Int(want.unsafe_ptr())
    _reference(ref_call, F32P(unsafe_from_address=Int(want.unsafe_ptr())),
               F32P(unsafe_from_address=Int(want.unsafe_ptr()) + 4 * taps))
    for i in range(taps + oc):
        if _bits(got[i]) != _bits(want[i]):
            print("case", rows, ch, h, w, oc, kh, kw, ph, pw, "at", i, got[i], want[i])
        assert_equal(_bits(got[i]), _bits(want[i]))
    _ = x^
    _ = g^
    _ = places^
    _ = flag^
    return True


def test_every_kernel_it_takes_gives_the_references_bits() raises:
    seed()
    for kh in range(1, PMAX_KH + 1):
        for kw in range(1, PL + 1):
            assert_true(pooled_dw_fits(kh, kw))
            var oc = Int(random_ui64(1, 9))
            var ph = Int(random_ui64(0, 2))
            var pw = Int(random_ui64(0, 2))
            var h = kh - 2 * ph + 1 + Int(random_ui64(1, 8))
            var w = kw - 2 * pw + 1 + Int(random_ui64(1, 8))
            assert_true(_case(Int(random_ui64(1, 3)), Int(random_ui64(1, 3)), max(h, 1),
                              max(w, 1), oc, kh, kw, ph, pw))
    assert_false(pooled_dw_fits(PMAX_KH + 1, 3))
    assert_false(pooled_dw_fits(3, PL + 1))


def test_every_channel_count_groups_its_chains() raises:
    seed()
    var pool = pool_open(2)  # three threads' parts
    assert_true(pool != 0, "pool_open")
    for oc in range(1, 11):
        assert_true(_case(2, 2, 12, 11, oc, 5, 5, 2, 2))
        assert_true(_case(2, 2, 12, 11, oc, 5, 5, 2, 2, pool=pool))
    assert_false(_case(2, 1, 9, 9, 7, 3, 3, 1, 1, Float32.MAX, pool))  # any part refuses


def test_an_unpadded_x_is_read_in_place_and_checked_in_parts() raises:
    """Without padding each part reads x where it lies and checks only its range of the
    examples (the last one, copied, in every part): a value that is not finite in any example
    refuses every part's result, whichever part checked it."""
    seed()
    var pool = pool_open(2)
    assert_true(pool != 0, "pool_open")
    for oc in range(1, 8):
        var kh = Int(random_ui64(1, PMAX_KH))
        var kw = Int(random_ui64(1, PL))
        var rows = Int(random_ui64(1, 7))
        var h = kh + Int(random_ui64(1, 9))
        var w = kw + Int(random_ui64(1, 9))
        assert_true(_case(rows, 3, h, w, oc, kh, kw, 0, 0))
        assert_true(_case(rows, 3, h, w, oc, kh, kw, 0, 0, pool=pool))
    for _ in range(12):  # the bad value in a random example: each part's range in turn
        assert_false(_case(5, 2, 10, 10, 4, 5, 5, 0, 0, Float32.MAX, pool))
        assert_false(_case(5, 2, 10, 10, 4, 5, 5, 0, 0, -Float32.MAX))


def test_an_x_that_is_not_finite_is_refused() raises:
    seed()
    assert_false(_case(2, 1, 9, 9, 3, 3, 3, 1, 1, Float32.MAX))  # +inf
    assert_false(_case(2, 1, 9, 9, 3, 3, 3, 1, 1, -Float32.MAX))
    assert_false(_case(2, 1, 9, 9, 3, 3, 3, 1, 1, Float32.MAX_FINITE * 0 / 0))
    assert_true(_case(2, 1, 9, 9, 3, 3, 3, 1, 1, Float32.MAX_FINITE))


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
