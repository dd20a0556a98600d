"""MaxPool2d and AvgPool2d on NCHW, no padding, floor output sizes (docs/ARITHMETIC.md
"Models: MaxPool2d, AvgPool2d"; mirror tests/reference/conv.py).

  max      the window's first element, replaced by each later one that is strictly greater
           (row-major: ties go to the first); the backward adds each output's gradient to
           that element
  avg      (Σ of the window row-major from +0.0) / f32(kh·kw); the backward adds each
           output's gradient / f32(kh·kw) to every element of its window
Backward: each plane's value starts at +0.0 and takes the additions in output order (rows,
then columns, ascending: overlapping windows add in that order); the input's gradient is that
value, or existing + value when `accumulate`.

The common 2 × 2, stride-2 max pool has vector kernels (`maxpool2x2`, lanes are windows) with
the same bits; its forward keeps each window's place (a byte an output: the place of its
maximum, 0-3 row-major, or NO_PLACE), and its backward (`places_backward`) reads those, never
its input again. Other windows, and a 2 × 2 pool given no places, run the scalar kernels.

A max pool whose input is the output of a fused Conv2d + ReLU that nothing else reads
(`masked`) applies that ReLU's backward mask too: an input's gradient is its value when the
input is > 0, else +0.0 — the bits of masking afterwards, one pass over the planes instead of
two (LeNet-5's first conv: 4.8 MB of planes a batch of 256).

Program words (program.py OP_MAXPOOL2D, OP_AVGPOOL2D): (C,H,W) (KH,KW) (SH,SW) packed, masked,
and the places' offset in the activations (0: none).
"""
from std.sys import simd_width_of
from std.sys.intrinsics import masked_load, masked_store

from training.config import F32P
from training.tails import lanes_below, load_first, store_first
from training.layers.conv import unpack
from training.pool import PartFn, part_range, parts_for, split_parts

comptime F32 = DType.float32
comptime U8P = Pointer[UInt8, MutAnyOrigin]
comptime NO_PLACE = 4  # a window place: its maximum's (0-3, row-major), or none (masked)
comptime W = simd_width_of[F32]()  # the build's lanes: windows side by side in the 2 × 2 kernels


@fieldwise_init
struct PoolDims(ImplicitlyCopyable):
    var planes: Int  # rows × channels
    var h: Int
    var w: Int
    var kh: Int
    var kw: Int
    var sh: Int
    var sw: Int

    @staticmethod
    def of(rows: Int, image: Int, kernel: Int, stride: Int) -> PoolDims:
        return PoolDims(rows * unpack(image, 0), unpack(image, 1), unpack(image, 2),
                        unpack(kernel, 0), unpack(kernel, 1), unpack(stride, 0),
                        unpack(stride, 1))

    def oh(self) -> Int:
        return (self.h - self.kh) // self.sh + 1

    def ow(self) -> Int:
        return (self.w - self.kw) // self.sw + 1


@always_inline
def _argmax(x: F32P, d: PoolDims, oh: Int, ow: Int) -> Int:
    """The index in its plane of the window's largest element (the first of ties)."""
    var at = oh * d.sh * d.w + ow * d.sw
    var best = at
    var m = x[unsafe_offset=at]
    for i in range(d.kh):
        for j in range(d.kw):
            var v = x[unsafe_offset=at + i * d.w + j]
            if v > m:
                m = v
                best = at + i * d.w + j
    return best


@fieldwise_init
struct _Call(ImplicitlyCopyable):
    """One call's tensors (addresses) and sizes, read by its parts (each a range of planes)."""

    var x: Int
    var y: Int  # the forward's output, or the backward's dy
    var dx: Int
    var d: PoolDims
    var is_max: Bool
    var accumulate: Bool
    var masked: Bool
    var idx: Int  # a 2 × 2 max pool's window places (bytes), or 0


comptime ELEMENT_WORK = 16  # a scalar window element against a GEMM's vector multiply-add


def _split(pool: Int, run: PartFn, call: _Call):
    var work = call.d.planes * call.d.h * call.d.w * ELEMENT_WORK
    split_parts(pool, run, call, parts_for(pool, call.d.planes, work))


def maxpool2d_forward(x: F32P, y: F32P, idx: Int, masked: Bool, rows: Int, image: Int,
                      kernel: Int, stride: Int, pool: Int):
    """The planes shared over `pool` (training/pool.mojo). `idx` (2 × 2 windows at stride 2;
    0: none) receives each window's place for the backward: a byte an output, the place of
    its maximum, or NO_PLACE when `masked` and the maximum is not > 0."""
    var d = PoolDims.of(rows, image, kernel, stride)
    _split(pool, _max_part, _Call(Int(x), Int(y), 0, d, True, False, masked, idx))


def avgpool2d_forward(x: F32P, y: F32P, rows: Int, image: Int, kernel: Int, stride: Int,
                      pool: Int):
    var d = PoolDims.of(rows, image, kernel, stride)
    _split(pool, _avg_part, _Call(Int(x), Int(y), 0, d, False, False, False, 0))


def pool2d_backward(x: F32P, dy: F32P, dx: F32P, idx: Int, rows: Int, image: Int, kernel: Int,
                    stride: Int, is_max: Bool, accumulate: Bool, masked: Bool, pool: Int):
    """dx of a MaxPool2d (`is_max`, its windows' maxima found again in x, or read from the
    places its forward kept in `idx`) or an AvgPool2d; `masked`: where x is not > 0, +0.0 (a
    max pool's, never accumulating)."""
    var d = PoolDims.of(rows, image, kernel, stride)
    _split(pool, _backward_part, _Call(Int(x), Int(dy), Int(dx), d, is_max, accumulate,
                                       masked, idx))


def masked_places_backward(idx: U8P, dy: F32P, dx: F32P, planes: Int, h: Int, w: Int,
                           pool: Int):
    """dx of the masking 2 × 2 max pool after a conv, from its places (conv.mojo: where the
    conv's own kernel for its dW refused to read them)."""
    var d = PoolDims(planes, h, w, 2, 2, 2, 2)
    _split(pool, _backward_part, _Call(0, Int(dy), Int(dx), d, True, False, True, Int(idx)))


def _max_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.d.planes, part, parts)
    if _is_2x2(c.d):
        maxpool2x2(F32P(unsafe_from_address=c.x), F32P(unsafe_from_address=c.y),
                    U8P(unsafe_from_address=c.idx), c.masked, c.d, r[0], r[1])
        return
    _maxpool(F32P(unsafe_from_address=c.x), F32P(unsafe_from_address=c.y), c.d, r[0], r[1])


def _avg_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.d.planes, part, parts)
    _avgpool(F32P(unsafe_from_address=c.x), F32P(unsafe_from_address=c.y), c.d, r[0], r[1])


def _backward_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.d.planes, part, parts)
    if c.is_max and c.idx != 0:  # (a 2 × 2 pool's, from its forward)
        places_backward(U8P(unsafe_from_address=c.idx), F32P(unsafe_from_address=c.y),
                        F32P(unsafe_from_address=c.dx), c.d, c.accumulate, r[0], r[1])
        return
    _backward(F32P(unsafe_from_address=c.x), F32P(unsafe_from_address=c.y),
              F32P(unsafe_from_address=c.dx), c.d, c.is_max, c.accumulate, c.masked, r[0],
              r[1])


@always_inline
def _is_2x2(d: PoolDims) -> Bool:
    """The common max pool (2 × 2 windows, stride 2), which has vector kernels."""
    return d.kh == 2 and d.kw == 2 and d.sh == 2 and d.sw == 2


@always_inline
def _max2x2[V: Int](top: F32P, w: Int, n: Int) -> Tuple[SIMD[F32, V], SIMD[DType.int32, V]]:
    """n <= V windows side by side, their top-left at top[0], top[2], ... (row stride w):
    each maximum and its place in the window (0-3, row-major), taken as `_argmax` takes them:
    the first element, replaced by each later one that is strictly greater (ties: the first).
    Lanes past n read nothing (their results are never stored)."""
    var r0 = load_first[2 * V](top, 2 * n).deinterleave()
    var r1 = load_first[2 * V](top.unsafe_offset(w), 2 * n).deinterleave()
    var m = rebind[SIMD[F32, V]](r0[0])
    var at = SIMD[DType.int32, V](0)
    comptime for i in range(1, 4):
        var v = rebind[SIMD[F32, V]](r0[1] if i == 1 else (r1[0] if i == 2 else r1[1]))
        var gt = v.gt(m)
        m = gt.select(v, m)
        at = gt.select(SIMD[DType.int32, V](i), at)
    return (m, at)


@always_inline
def _max2x2_row[V: Int](xp: F32P, yp: F32P, w: Int, oh: Int, ow: Int, n: Int, ip: U8P,
                        masked: Bool):
    """Outputs ow..ow+n of row oh (n <= V); their places at ip[ow:ow+n] unless ip is null."""
    var best = _max2x2[V](xp.unsafe_offset(2 * oh * w + 2 * ow), w, n)
    store_first[V](yp.unsafe_offset(ow), best[0], n)
    if Int(ip) != 0:
        var places = _masked_places[V](best, masked).cast[DType.uint8]()
        if n >= V:
            ip.unsafe_offset(ow).unsafe_store(places)
        else:
            masked_store[V](places, ip.unsafe_offset(ow), lanes_below[V](n))


@always_inline
def _masked_places[V: Int](best: Tuple[SIMD[F32, V], SIMD[DType.int32, V]],
                           masked: Bool) -> SIMD[DType.int32, V]:
    """The windows' places, NO_PLACE where `masked` and the maximum is not > 0."""
    if not masked:
        return best[1]
    return best[0].gt(SIMD[F32, V](0.0)).select(best[1], SIMD[DType.int32, V](NO_PLACE))


@always_inline
def _scatter2x2[V: Int](at: SIMD[DType.int32, V], gp: F32P, dst: F32P, w: Int, oh: Int, ow: Int,
                        n: Int, accumulate: Bool):
    """The input gradient of outputs ow..ow+n of row oh (n <= V; their windows' 4n
    elements): +0.0 + g at each window's place `at` (none at NO_PLACE), +0.0 elsewhere
    (`_backward`'s plane value), added to dst when `accumulate`."""
    var g = SIMD[F32, V](0.0) + load_first[V](gp.unsafe_offset(ow), n)
    var zero = SIMD[F32, V](0.0)
    comptime for r in range(2):
        var left = at.eq(SIMD[DType.int32, V](2 * r)).select(g, zero)
        var right = at.eq(SIMD[DType.int32, V](2 * r + 1)).select(g, zero)
        var row = dst.unsafe_offset((2 * oh + r) * w + 2 * ow)
        var v = rebind[SIMD[F32, 2 * V]](left.interleave(right))
        if accumulate:
            v = load_first[2 * V](row, 2 * n) + v
        store_first[2 * V](row, v, 2 * n)


@no_inline
def maxpool2x2(x: F32P, y: F32P, idx: U8P, masked: Bool, d: PoolDims, first: Int, last: Int):
    """`_maxpool` for 2 × 2 windows at stride 2: rows of outputs in vectors of W, the tail in
    one vector of 8 or W with masked loads and stores (the same maxima: lanes are windows);
    each window's place into idx too, unless it is null."""
    var oh_all = d.oh()
    var ow_all = d.ow()
    for c in range(first, last):
        var xp = x.unsafe_offset(c * d.h * d.w)
        var yp = y.unsafe_offset(c * oh_all * ow_all)
        for oh in range(oh_all):
            var yr = yp.unsafe_offset(oh * ow_all)
            var ir = idx.unsafe_offset((c * oh_all + oh) * ow_all) if Int(idx) != 0 else idx
            var ow = 0
            while ow + W <= ow_all:
                _max2x2_row[W](xp, yr, d.w, oh, ow, W, ir, masked)
                ow += W
            var n = ow_all - ow
            if n > 8:
                _max2x2_row[W](xp, yr, d.w, oh, ow, n, ir, masked)
            elif n > 0:
                _max2x2_row[8](xp, yr, d.w, oh, ow, n, ir, masked)


@always_inline
def _place_grad[V: Int](ip: U8P, gp: F32P, dst: F32P, w: Int, oh: Int, ow: Int, n: Int,
                        accumulate: Bool):
    """`_scatter2x2` at the places the forward kept (ip[ow:ow+n])."""
    var at: SIMD[DType.int32, V]
    if n >= V:
        at = ip.unsafe_offset(ow).unsafe_load[width=V]().cast[DType.int32]()
    else:
        at = masked_load[V](ip.unsafe_offset(ow), lanes_below[V](n),
                            SIMD[DType.uint8, V](NO_PLACE)).cast[DType.int32]()
    _scatter2x2[V](at, gp, dst, w, oh, ow, n, accumulate)


@no_inline
def places_backward(idx: U8P, dy: F32P, dx: F32P, d: PoolDims, accumulate: Bool, first: Int,
                     last: Int):
    """`_backward` of a 2 × 2, stride-2 max pool from the window places of its forward
    (`maxpool2x2`'s idx, the mask in them; windows do not overlap: each input takes at most
    one gradient, written window by window), so x is not read again (LeNet-5's first pool:
    0.3 MB of places a batch of 256, where its input is 4.8 MB); the last row and column when
    h or w is odd take +0.0 (added when `accumulate`). The conv before a masking pool reads
    the places and the gradient for its dW and dX itself (conv_pooled.mojo, conv.mojo)."""
    var hw = d.h * d.w
    for c in range(first, last):
        var out = dx.unsafe_offset(c * hw)
        _plane_places(idx, dy, out, d.w, d, c, accumulate)
        for oh in range(d.oh()):  # an odd width's last column
            for r in range(2 * oh, 2 * oh + 2):
                for j in range(2 * d.ow(), d.w):
                    _untouched(out, r * d.w + j, accumulate)
        for i in range(2 * d.oh() * d.w, hw):  # an odd height's last row
            _untouched(out, i, accumulate)


def places_into_planes(idx: U8P, dy: F32P, dst: F32P, d: PoolDims, plane: Int, row: Int):
    """`places_backward` of every plane into dst's planes `plane` floats apart, rows `row`
    floats apart, written (not added); an odd height's last row and width's last column are
    left as they are (+0.0 in a zeroed buffer: what `places_backward` writes there). The
    conv before a masking pool lays out its dY for dX so (conv.mojo)."""
    for c in range(d.planes):
        _plane_places(idx, dy, dst.unsafe_offset(c * plane), row, d, c, False)


@always_inline
def _plane_places(idx: U8P, dy: F32P, dst: F32P, row: Int, d: PoolDims, c: Int,
                  accumulate: Bool):
    """Plane c's windows: each input's gradient at `dst`, rows `row` floats apart."""
    var oh_all = d.oh()
    var ow_all = d.ow()
    var gp = dy.unsafe_offset(c * oh_all * ow_all)
    for oh in range(oh_all):
        var gr = gp.unsafe_offset(oh * ow_all)
        var ir = idx.unsafe_offset((c * oh_all + oh) * ow_all)
        var ow = 0
        while ow + W <= ow_all:
            _place_grad[W](ir, gr, dst, row, oh, ow, W, accumulate)
            ow += W
        var n = ow_all - ow
        if n > 8:
            _place_grad[W](ir, gr, dst, row, oh, ow, n, accumulate)
        elif n > 0:
            _place_grad[8](ir, gr, dst, row, oh, ow, n, accumulate)


@always_inline
def _untouched(dst: F32P, i: Int, accumulate: Bool):
    """An input in no window: +0.0, or its gradient + 0.0 (`_backward`'s plane value)."""
    dst[unsafe_offset=i] = dst[unsafe_offset=i] + 0.0 if accumulate else Float32(0.0)


@no_inline
def _maxpool(x: F32P, y: F32P, d: PoolDims, first: Int, last: Int):
    var oh_all = d.oh()
    var ow_all = d.ow()
    for c in range(first, last):
        var xp = x.unsafe_offset(c * d.h * d.w)
        var yp = y.unsafe_offset(c * oh_all * ow_all)
        for oh in range(oh_all):
            for ow in range(ow_all):
                yp[unsafe_offset=oh * ow_all + ow] = xp[unsafe_offset=_argmax(xp, d, oh, ow)]


@no_inline
def _avgpool(x: F32P, y: F32P, d: PoolDims, first: Int, last: Int):
    var oh_all = d.oh()
    var ow_all = d.ow()
    var count = Float32(d.kh * d.kw)
    for c in range(first, last):
        var xp = x.unsafe_offset(c * d.h * d.w)
        var yp = y.unsafe_offset(c * oh_all * ow_all)
        for oh in range(oh_all):
            for ow in range(ow_all):
                var at = oh * d.sh * d.w + ow * d.sw
                var s = Float32(0.0)
                for i in range(d.kh):
                    for j in range(d.kw):
                        s = s + xp[unsafe_offset=at + i * d.w + j]
                yp[unsafe_offset=oh * ow_all + ow] = s / count


@no_inline
def _backward(x: F32P, dy: F32P, dx: F32P, d: PoolDims, is_max: Bool, accumulate: Bool,
              masked: Bool, first: Int, last: Int):
    var oh_all = d.oh()
    var ow_all = d.ow()
    var hw = d.h * d.w
    var count = Float32(d.kh * d.kw)
    var plane_list = List[Float32](length=hw, fill=0)
    var v = F32P(unsafe_from_address=Int(plane_list.unsafe_ptr()))
    for c in range(first, last):
        var xp = x.unsafe_offset(c * hw)
        var gp = dy.unsafe_offset(c * oh_all * ow_all)
        var out = dx.unsafe_offset(c * hw)
        for i in range(hw):
            v[unsafe_offset=i] = 0.0
        for oh in range(oh_all):
            for ow in range(ow_all):
                var g = gp[unsafe_offset=oh * ow_all + ow]
                if is_max:
                    var at = _argmax(xp, d, oh, ow)
                    v[unsafe_offset=at] = v[unsafe_offset=at] + g
                else:
                    var share = g / count
                    var at = oh * d.sh * d.w + ow * d.sw
                    for i in range(d.kh):
                        for j in range(d.kw):
                            var e = at + i * d.w + j
                            v[unsafe_offset=e] = v[unsafe_offset=e] + share
        for i in range(hw):
            if masked and not xp[unsafe_offset=i] > 0:
                v[unsafe_offset=i] = 0.0
            out[unsafe_offset=i] = (out[unsafe_offset=i] + v[unsafe_offset=i] if accumulate
                                    else v[unsafe_offset=i])
    _ = plane_list^
