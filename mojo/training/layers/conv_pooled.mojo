"""A stride-1 conv's dW and db under the masking 2 × 2 max pool after it, from the pool's
gradient and window places (conv.mojo `conv2d_backward`'s `places`: both of LeNet-5's convs).

The chains are conv.mojo's (over (b, oh, ow) ascending from +0.0), but only the points a window
picked are on them: every other point's dY is +0.0, and a product +0.0 · x with x finite adds
±0.0, which leaves a chain (never -0.0) as it is, so skipping it gives the same bits. Every
example's x is checked (a padded x as each part lays it out, an unpadded one in ranges of the
examples, one a part): one that is not finite makes the kernel refuse (it returns False and
the caller runs the dense kernel, whose chains take those products).

Lanes are a tap row's kw taps (x read in vectors along the padded row at each picked point),
one register a (channel, input plane, tap row); a channel's picks are laid out a window row at
a time in chain order (the picks in the windows' top row by window, then those in their bottom
row; a masked window's pick is a product +0.0 in the top row, so every channel has one pick a
window and two or three channels run side by side, each fma hiding the others' latency). A
part takes a range of output channels: each reads only its channels' gradient and places (the
dense kernel's parts split the taps, and each laid out every example's whole dY for itself).

LeNet-5 at batch 256 on an Intel Xeon (AVX-512), one process, alternating: a quarter of the
points and no dY laid out made its step 12 % faster on one thread and 15 % on two."""
from std.atomic import Atomic
from std.math import fma
from std.sys import simd_width_of
from std.sys.intrinsics import compressed_store, masked_load
from std.utils import StaticTuple

from training.checks import first_nonfinite
from training.config import F32P, I32P, I64P
from training.layers.pool2d import NO_PLACE, U8P
from training.pool import part_range
from training.tails import lanes_below, load_first, store_first

comptime PL = 8  # a tap row's taps in a vector (kw <= PL)
# tap rows a channel: two channels' accumulators, a broadcast and a load fit 16 registers
comptime PMAX_KH = 7
# The most accumulators (channels side by side × tap rows): 14 of the 16 registers in
# x86-64-v3; 24 of 32 in x86-64-v4, where three channels' picks side by side beat two and one
# (a lone channel's chains wait on the fma latency: parts of 3 channels on 2 threads).
comptime _ACCS = 24 if simd_width_of[DType.float32]() >= 16 else 14
comptime _V = SIMD[DType.float32, PL]
comptime PV = 16  # windows a vector in `_picks`


def _iota() -> SIMD[DType.int32, PV]:
    var v = SIMD[DType.int32, PV](0)
    comptime for l in range(PV):
        v[l] = Int32(l)
    return v


comptime _IOTA = _iota()


def pooled_dw_fits(kh: Int, kw: Int) -> Bool:
    return kh <= PMAX_KH and kw <= PL


@fieldwise_init
struct PooledDw(ImplicitlyCopyable):
    """The call (addresses and sizes): x (rows × c × h × w), the pool's gradient g and places
    (rows × oc × qh × qw), dW (oc × c × kh × kw) and db (0: none); `bad`: an Int64 a part sets
    when an example's x is not finite."""

    var x: Int
    var g: Int
    var places: Int
    var gw: Int
    var gb: Int
    var bad: Int
    var rows: Int
    var c: Int
    var h: Int
    var w: Int
    var oc: Int
    var kh: Int
    var kw: Int
    var ph: Int
    var pw: Int

    def wp(self) -> Int:
        return self.w + 2 * self.pw

    def plane(self) -> Int:
        return (self.h + 2 * self.ph) * self.wp()

    def qh(self) -> Int:
        return (self.h + 2 * self.ph - self.kh + 1) // 2

    def qw(self) -> Int:
        return (self.w + 2 * self.pw - self.kw + 1) // 2


def pooled_dw_part(c: PooledDw, part: Int, parts: Int):
    """Part `part` of `parts` (a range of channels) of dW and db; where an example's x is not
    finite, it sets the Int64 at c.bad to 1 (then dW and db are not all written)."""
    var r = part_range(c.oc, part, parts)
    if not _pooled_range(c, r[0], r[1], part_range(c.rows, part, parts)):
        Atomic[Int64].store(I64P(unsafe_from_address=c.bad), 1)


def _pad_checked(x: F32P, xp: F32P, c: PooledDw) -> Bool:
    """One example's x planes into xp's zero-padded ones; whether every value was finite (by
    the exponent bits: a fast build's arithmetic may assume no infinity or NaN)."""
    comptime EXP = SIMD[DType.uint32, PV](0x7F800000)
    var bad = SIMD[DType.bool, PV](fill=False)
    var wp = c.wp()
    for ic in range(c.c):
        for u in range(c.h):
            var src = x.unsafe_offset((ic * c.h + u) * c.w)
            var dst = xp.unsafe_offset(ic * c.plane() + (u + c.ph) * wp + c.pw)
            for v in range(0, c.w, PV):
                var n = min(PV, c.w - v)
                var row = load_first[PV](src.unsafe_offset(v), n)
                bad = bad | (row.to_bits[DType.uint32]() & EXP).eq(EXP)
                store_first[PV](dst.unsafe_offset(v), row, n)
    return not bad.reduce_or()


def _picks(ip: U8P, gp: F32P, qw_all: Int, qh: Int, wp: Int, offs: I32P, vals: F32P):
    """Window row qh of one channel: each window's pick (its point's offset in the padded
    plane, +0.0 + its gradient; a masked window's: its top left point, +0.0) in chain order at
    offs and vals (qw_all of them), PV windows at a time (compressed stores: the picks in the
    windows' top row, then those in their bottom row)."""
    var at = 0
    comptime for LOW in range(2):
        var q = 0
        while q < qw_all:
            var valid = lanes_below[PV](qw_all - q)
            var k = masked_load[PV](ip.unsafe_offset(q), valid, SIMD[DType.uint8, PV](0)).cast[
                DType.int32]()
            var g = load_first[PV](gp.unsafe_offset(q), qw_all - q)
            var placed = k.ne(Int32(NO_PLACE))
            var pick = valid & ((k >> 1).eq(1) if LOW == 1 else (k >> 1).ne(1))
            var v = placed.select(SIMD[DType.float32, PV](0.0) + g, SIMD[DType.float32, PV](0.0))
            var off = Int32((2 * qh + LOW) * wp + 2 * q) + 2 * _IOTA + (k & 1)
            compressed_store(off, offs.unsafe_offset(at), pick)
            compressed_store(v, vals.unsafe_offset(at), pick)
            at += Int(pick.cast[DType.int32]().reduce_add())
            q += PV


@always_inline
def _products[KH: Int, G: Int](xp: F32P, wp: Int, offs: I32P, vals: F32P, n: Int, stride: Int,
                          acc_at: F32P, acc_stride: Int, bias_at: F32P, bias: Bool):
    """The products of n picks (G channels', `stride` apart in offs and vals) with x's tap rows
    (one input plane at xp), onto the chains at acc_at (G × KH vectors, channel g's at
    g·acc_stride) and, with `bias`, the bias chains at bias_at."""
    var acc = StaticTuple[_V, G * KH](fill=_V(0.0))
    var bacc = StaticTuple[Float32, G](fill=0.0)
    comptime for g in range(G):
        comptime for i in range(KH):
            acc[g * KH + i] = acc_at.unsafe_load[width=PL](g * acc_stride + i * PL)
        if bias:
            bacc[g] = bias_at[unsafe_offset=g]
    for e in range(n):
        comptime for g in range(G):
            var v = vals[unsafe_offset=g * stride + e]
            var at = xp.unsafe_offset(Int(offs[unsafe_offset=g * stride + e]))
            comptime for i in range(KH):
                acc[g * KH + i] = fma(_V(v), at.unsafe_load[width=PL](i * wp), acc[g * KH + i])
            if bias:
                bacc[g] = bacc[g] + v
    comptime for g in range(G):
        comptime for i in range(KH):
            acc_at.unsafe_offset(g * acc_stride + i * PL).unsafe_store(acc[g * KH + i])
        if bias:
            bias_at[unsafe_offset=g] = bacc[g]


def _pooled_range(c: PooledDw, o_lo: Int, o_hi: Int, mine: Tuple[Int, Int]) -> Bool:
    """Channels [o_lo, o_hi) over every example; False at the first x found not finite. An
    unpadded x is read where it lies (but the last example's, whose vectors past its last
    row's taps would read past its end), and the part checks only examples `mine` of it: the
    parts' ranges cover every example, and one part's False sends every part's dW to the
    dense kernel. Each part copying every example in a padded layout of its own was a
    seventh of its time on two threads (LeNet-5's second conv at batch 256 on an Intel Xeon:
    the copies 117 µs of a 750 µs part, the reads in place and the checks 39)."""
    var n_o = o_hi - o_lo
    if n_o <= 0:
        return True
    var wp = c.wp()
    var plane = c.plane()
    var qh_all = c.qh()
    var qw_all = c.qw()
    var q_all = qh_all * qw_all
    var per_o = c.c * c.kh * PL  # a channel's chains
    var acc_list = List[Float32](length=n_o * per_o + n_o, fill=0)
    var acc = F32P(unsafe_from_address=Int(acc_list.unsafe_ptr()))
    var bias_acc = acc.unsafe_offset(n_o * per_o)
    var xp_list = List[Float32](length=c.c * plane + PL * (wp + 1), fill=0)  # borders: +0.0
    var xp = F32P(unsafe_from_address=Int(xp_list.unsafe_ptr()))
    var offs_list = List[Int32](length=n_o * q_all, fill=0)
    var offs = I32P(unsafe_from_address=Int(offs_list.unsafe_ptr()))
    var vals_list = List[Float32](length=n_o * q_all, fill=0)
    var vals = F32P(unsafe_from_address=Int(vals_list.unsafe_ptr()))
    var hw = c.h * c.w
    var bias = c.gb != 0
    var x = F32P(unsafe_from_address=c.x)
    var in_place = c.ph == 0 and c.pw == 0
    if in_place and first_nonfinite(x.unsafe_offset(mine[0] * c.c * hw),
                                     (mine[1] - mine[0]) * c.c * hw) >= 0:
        return False
    for r in range(c.rows):
        var xr = x.unsafe_offset(r * c.c * hw)
        if not in_place or r == c.rows - 1:
            if not _pad_checked(xr, xp, c):
                return False
            xr = xp
        for o in range(n_o):
            var at = (r * c.oc + o_lo + o) * q_all
            for qh in range(qh_all):
                _picks(U8P(unsafe_from_address=c.places + at + qh * qw_all),
                       F32P(unsafe_from_address=c.g).unsafe_offset(at + qh * qw_all), qw_all,
                       qh, wp, offs.unsafe_offset(o * q_all + qh * qw_all),
                       vals.unsafe_offset(o * q_all + qh * qw_all))
        var o = 0
        while o < n_o:
            var rest = n_o - o
            var g = 2 if rest == 4 or (rest >= 3 and 3 * c.kh > _ACCS) else min(3, rest)
            for ic in range(c.c):
                var b = bias and ic == 0
                comptime for KH in range(1, PMAX_KH + 1):
                    if c.kh == KH:
                        comptime for G in range(1, 4):
                            comptime if G * KH <= _ACCS or G == 1:
                                if g == G:
                                    _products[KH, G](xr.unsafe_offset(ic * plane), wp,
                                                offs.unsafe_offset(o * q_all),
                                                vals.unsafe_offset(o * q_all), q_all, q_all,
                                                acc.unsafe_offset(o * per_o + ic * KH * PL),
                                                per_o, bias_acc.unsafe_offset(o), b)
            o += g
    var gw = F32P(unsafe_from_address=c.gw)
    for o in range(n_o):
        for t in range(c.c * c.kh):
            for j in range(c.kw):
                gw[unsafe_offset=((o_lo + o) * c.c * c.kh + t) * c.kw + j] = acc[
                    unsafe_offset=o * per_o + t * PL + j]
        if bias:
            F32P(unsafe_from_address=c.gb)[unsafe_offset=o_lo + o] = bias_acc[unsafe_offset=o]
    _ = acc_list^
    _ = xp_list^
    _ = offs_list^
    _ = vals_list^
    return True
