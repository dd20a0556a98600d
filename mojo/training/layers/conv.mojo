"""Conv2d on NCHW through im2col and the GEMM (docs/ARITHMETIC.md "Models: Conv2d"; mirror
tests/reference/conv.py). Every dot product is one GEMM chain, so its k order is the pinned
order and every tile, width and thread count gives the same bits:

  forward  y[b,oc,oh,ow] = f32(chain over (ic, kh, kw) ascending from +0.0 + bias[oc])
           C (oc × B·positions) = W (oc × ic·kh·kw) · cols, cols[(ic,kh,kw), (b,oh,ow)] the
           input under each tap (+0.0 for padding)
  dW       chain over (b, oh, ow) ascending: (cols · dYᵀ)ᵀ, dY (oc × B·positions)
  db       Σ over (b, oh, ow) ascending from +0.0
  dX       chain over (oc, kh, kw) ascending: Wt (ic × oc·kh·kw) · g, g[(oc,kh,kw),
           (b,ih,iw)] the output gradient each tap reaches the input from (+0.0 where none
           does); continued from the value already there when accumulating (as a Linear's)

A padded or unreached tap is a product with +0.0: the same bits as skipping it (a chain from
+0.0 never holds -0.0, and v + ±0 = v for every other v).

The op's two private tensors (program.py OP_CONV2D) hold, for the whole batch: `work`, the
forward's cols (kept for dW) and, on the gradient side, g; `mid`, the product in channel-major
(C, B, H, W) order (the forward's, then dX's) and, on the gradient side, dY in that order.
Program words: (C,H,W) (OC,KH,KW) (SH,SW,relu) (PH,PW), each packed 21 bits a size (`unpack`;
relu 1: a ReLU after it is fused, as a Linear's: its output is the ReLU's, the backward masks
dY by it first),
the weight's offset | (bias offset + 1) << 32, and work | mid << 32 (per-example offsets).
"""
from std.math import fma
from std.sys import simd_width_of

from training.config import F32P
from training.layers.elementwise import relu_apply
from training.mlp import relu_backward
from training.pool import split_gemm

comptime W = simd_width_of[DType.float32]()  # the build's lanes (16 in x86-64-v4, 8 in v3): independent outputs, the same bits at any width


def _pow2_at_least(x: Int) -> Int:
    var p = 1
    while p < x:
        p *= 2
    return p


def unpack(word: Int, i: Int) -> Int:
    """Size i of a word packed by program.py's `pack` (21 bits each)."""
    return (word >> (21 * i)) & ((1 << 21) - 1)


@fieldwise_init
struct ConvDims(ImplicitlyCopyable):
    """One Conv2d's sizes: input (c, h, w), oc kernels of kh × kw, stride, padding."""

    var c: Int
    var h: Int
    var w: Int
    var oc: Int
    var kh: Int
    var kw: Int
    var sh: Int
    var sw: Int
    var ph: Int
    var pw: Int

    @staticmethod
    def of(image: Int, kernel: Int, stride: Int, padding: Int) -> ConvDims:
        return ConvDims(unpack(image, 0), unpack(image, 1), unpack(image, 2), unpack(kernel, 0),
                        unpack(kernel, 1), unpack(kernel, 2), unpack(stride, 0),
                        unpack(stride, 1), unpack(padding, 0), unpack(padding, 1))

    def oh(self) -> Int:
        return (self.h + 2 * self.ph - self.kh) // self.sh + 1

    def ow(self) -> Int:
        return (self.w + 2 * self.pw - self.kw) // self.sw + 1

    def positions(self) -> Int:
        return self.oh() * self.ow()

    def taps(self) -> Int:
        """The forward's k: ic·kh·kw."""
        return self.c * self.kh * self.kw


@always_inline
def _zero(dst: F32P, n: Int):
    var i = 0
    while i + W <= n:
        dst.unsafe_offset(i).unsafe_store(SIMD[DType.float32, W](0.0))
        i += W
    while i < n:
        dst[unsafe_offset=i] = 0.0
        i += 1


@always_inline
def _copy(src: F32P, dst: F32P, n: Int):
    var i = 0
    while i + W <= n:
        dst.unsafe_offset(i).unsafe_store(src.unsafe_load[width=W](i))
        i += W
    while i < n:
        dst[unsafe_offset=i] = src[unsafe_offset=i]
        i += 1


def _gather_row(src: F32P, n_src: Int, dst: F32P, n_dst: Int, mul: Int, div: Int, shift: Int):
    """dst[i] = src[(i·mul + shift) / div] where that divides and lands in [0, n_src), else
    +0.0: a row of cols (mul the stride, div 1) or of g (mul 1, div the stride)."""
    if mul == 1 and div == 1:  # stride 1: a shifted copy between zeros
        var lo = min(max(-shift, 0), n_dst)
        var hi = max(min(n_src - shift, n_dst), lo)
        _zero(dst, lo)
        _copy(src.unsafe_offset(lo + shift), dst.unsafe_offset(lo), hi - lo)
        _zero(dst.unsafe_offset(hi), n_dst - hi)
        return
    for i in range(n_dst):
        var t = i * mul + shift
        var v = Float32(0.0)
        if t >= 0 and t % div == 0 and t // div < n_src:
            v = src[unsafe_offset=t // div]
        dst[unsafe_offset=i] = v


@no_inline
def _channel_major(src: F32P, dst: F32P, rows: Int, ch: Int, n: Int, to_cm: Bool):
    """(rows, ch, n) to (ch, rows, n) when `to_cm`, else back."""
    for r in range(rows):
        for c in range(ch):
            var nchw = (r * ch + c) * n
            var cm = (c * rows + r) * n
            if to_cm:
                _copy(src.unsafe_offset(nchw), dst.unsafe_offset(cm), n)
            else:
                _copy(src.unsafe_offset(cm), dst.unsafe_offset(nchw), n)


@no_inline
def conv2d_forward(x: F32P, y: F32P, p: F32P, work: F32P, mid: F32P, rows: Int, image: Int,
                   kernel: Int, stride: Int, padding: Int, params: Int):
    """y (rows × oc × oh × ow) of x (rows × c × h × w); keeps the batch's cols in `work`."""
    var d = ConvDims.of(image, kernel, stride, padding)
    var relu = unpack(stride, 2) != 0
    var b = (params >> 32) - 1
    var oh_all = d.oh()
    var ow_all = d.ow()
    var pos = oh_all * ow_all
    var n = rows * pos
    for ic in range(d.c):
        for i in range(d.kh):
            for j in range(d.kw):
                var row = work.unsafe_offset(((ic * d.kh + i) * d.kw + j) * n)
                for r in range(rows):
                    var plane = x.unsafe_offset((r * d.c + ic) * d.h * d.w)
                    for oh in range(oh_all):
                        var dst = row.unsafe_offset(r * pos + oh * ow_all)
                        var ih = oh * d.sh - d.ph + i
                        if ih < 0 or ih >= d.h:
                            _zero(dst, ow_all)
                        else:
                            _gather_row(plane.unsafe_offset(ih * d.w), d.w, dst, ow_all, d.sw, 1,
                                        j - d.pw)
    split_gemm(0, p.unsafe_offset(params & 0xFFFFFFFF), work, mid, d.oc, n, d.taps(), False,
               False, False)
    for r in range(rows):
        for o in range(d.oc):
            var src = mid.unsafe_offset((o * rows + r) * pos)
            var dst = y.unsafe_offset((r * d.oc + o) * pos)
            if b < 0:
                _copy(src, dst, pos)
                if relu:
                    relu_apply(dst, dst, pos)
                continue
            var bias = p[unsafe_offset=b + o]  # after the chain, one rounded add: Linear's
            var k = 0
            while k + W <= pos:
                dst.unsafe_offset(k).unsafe_store(
                    _epilogue[W](src.unsafe_load[width=W](k) + bias, relu))
                k += W
            while k < pos:
                dst[unsafe_offset=k] = _epilogue[1](src[unsafe_offset=k] + bias, relu)[0]
                k += 1


@always_inline
def _epilogue[V: Int](z: SIMD[DType.float32, V], relu: Bool) -> SIMD[DType.float32, V]:
    """A fused ReLU's `z > 0 ? z : +0.0` (the GEMM epilogue's), or z."""
    return z.gt(0).select(z, SIMD[DType.float32, V](0.0)) if relu else z


def _row_sums[V: Int](m: F32P, dst: F32P, first: Int, last: Int, n: Int) -> Int:
    """dst[o] = Σ m[o, :] ascending from +0.0 for rows first.. in blocks of V lanes (lane i
    row o + i, read with a stride of n); returns the first row left."""
    var o = first
    while o + V <= last:
        var acc = SIMD[DType.float32, V](0.0)
        var base = m.unsafe_offset(o * n)
        for j in range(n):
            acc = acc + base.unsafe_offset(j).unsafe_strided_load[width=V](n)
        for i in range(V):
            dst[unsafe_offset=o + i] = acc[i]
        o += V
    return o


@no_inline
def conv2d_backward(y: F32P, dy: F32P, work: F32P, g: F32P, mid: F32P, dy_cm: F32P, p: F32P,
                    grads: F32P, dx: F32P, rows: Int, image: Int, kernel: Int, stride: Int,
                    padding: Int, params: Int, need: Bool, accumulate: Bool):
    """dW and db written into `grads`; dx (when `need`) written, or its chains continued from
    the values there when `accumulate`. `work` holds the forward's cols; g, mid and dy_cm
    are scratch (the private tensors' gradient and activation sides)."""
    var d = ConvDims.of(image, kernel, stride, padding)
    var w_at = params & 0xFFFFFFFF
    var b = (params >> 32) - 1
    var pos = d.positions()
    var n = rows * pos
    if unpack(stride, 2) != 0:  # the fused ReLU: mask by its output, in place
        relu_backward(y, dy, dy, rows, d.oc * pos)
    _channel_major(dy, dy_cm, rows, d.oc, pos, True)
    # dWᵀ (taps × oc) = cols · dYᵀ: the same chains as dY · colsᵀ (k is (b, oh, ow) either
    # way), with the long cols read row by row when packed rather than gathered down columns
    var taps = d.taps()
    var dwt_list = List[Float32](length=taps * d.oc, fill=0)
    var dwt = F32P(unsafe_from_address=Int(dwt_list.unsafe_ptr()))
    split_gemm(0, work, dy_cm, dwt, taps, d.oc, n, False, True, False)
    var gw = grads.unsafe_offset(w_at)
    for o in range(d.oc):
        for k in range(taps):
            gw[unsafe_offset=o * taps + k] = dwt[unsafe_offset=k * d.oc + o]
    _ = dwt_list^
    if b >= 0:
        var gb = grads.unsafe_offset(b)
        var o = _row_sums[W](dy_cm, gb, 0, d.oc, n)
        o = _row_sums[4](dy_cm, gb, o, d.oc, n)
        _ = _row_sums[1](dy_cm, gb, o, d.oc, n)
    if need and d.sh == 1 and d.sw == 1:
        _input_grad_s1(dy, p.unsafe_offset(w_at), dx, rows, d, accumulate)
    elif need:
        _input_grad(dy, p.unsafe_offset(w_at), dx, g, mid, rows, d, accumulate)


@always_inline
def _s1_block[NB: Int](dyp: F32P, wgt: F32P, grid: F32P, q: Int, ic0: Int, d: ConvDims,
                       plane: Int, wp: Int, cs: Int, accumulate: Bool):
    """Input channels ic0.. ic0+NB-1 at 2·W consecutive points q.. of the extended grid (cs
    floats a channel): each lane's chain over (oc, kh, kw) ascending, from +0.0 or from
    `grid` (the value there)."""
    comptime T = _pow2_at_least(2 * NB * W)  # SIMD lengths are powers of two
    var acc = SIMD[DType.float32, T](0.0)
    if accumulate:
        comptime for t in range(NB):
            comptime for v in range(2):
                acc = acc.insert[offset=(2 * t + v) * W](
                    grid.unsafe_load[width=W]((ic0 + t) * cs + q + v * W))
    var taps = d.kh * d.kw
    for o in range(d.oc):
        var base = dyp.unsafe_offset(o * plane + q)
        var wo = wgt.unsafe_offset((o * d.c + ic0) * taps)
        for i in range(d.kh):
            for j in range(d.kw):
                var at = (d.kh - 1 - i) * wp + (d.kw - 1 - j)
                var a0 = base.unsafe_load[width=W](at)
                var a1 = base.unsafe_load[width=W](at + W)
                comptime for t in range(NB):
                    var wv = SIMD[DType.float32, W](wo[unsafe_offset=t * taps + i * d.kw + j])
                    comptime o0 = 2 * t * W
                    acc = acc.insert[offset=o0](fma(a0, wv, acc.slice[W, offset=o0]()))
                    acc = acc.insert[offset=o0 + W](fma(a1, wv, acc.slice[W, offset=o0 + W]()))
    comptime for t in range(NB):
        comptime for v in range(2):
            grid.unsafe_offset((ic0 + t) * cs + q + v * W).unsafe_store(
                acc.slice[W, offset=(2 * t + v) * W]())


@no_inline
def _input_grad_s1(dy: F32P, wgt: F32P, dx: F32P, rows: Int, d: ConvDims, accumulate: Bool):
    """dX at stride 1 without a GEMM, the same chains: dY zero-padded to (h + kh - 1) ×
    (w + kw - 1) planes, so that input point (ih, iw) reads tap (kh, kw) of channel oc at
    plane point (ih + kh-1 - kh', iw + kw-1 - kw'); a padded point is a product with +0.0
    (the same bits as skipping it). Points run in vectors along each row of the padded width
    (the extended grid; its kw - 1 extra points a row are computed and dropped)."""
    var oh_all = d.oh()
    var ow_all = d.ow()
    var hp = d.h + d.kh - 1
    var wp = d.w + d.kw - 1
    var plane = hp * wp
    var ext = d.h * wp
    var cs = (ext + 2 * W - 1) // (2 * W) * (2 * W)  # a channel's points, whole vector pairs
    var slack = 4 * W + d.kw  # vectors run past the last point and read past the last row
    var dyp_list = List[Float32](length=d.oc * plane + slack, fill=0)
    var dyp = F32P(unsafe_from_address=Int(dyp_list.unsafe_ptr()))
    var grid_list = List[Float32](length=d.c * cs + slack, fill=0)
    var grid = F32P(unsafe_from_address=Int(grid_list.unsafe_ptr()))
    var hw = d.h * d.w
    var top = d.kh - 1 - d.ph  # dY row u sits at padded row u + top
    var left = d.kw - 1 - d.pw
    var u0 = max(-top, 0)
    var u1 = min(oh_all, hp - top)
    var v0 = max(-left, 0)
    var v1 = min(ow_all, wp - left)
    for r in range(rows):
        for o in range(d.oc):
            var src = dy.unsafe_offset((r * d.oc + o) * oh_all * ow_all)
            for u in range(u0, u1):
                _copy(src.unsafe_offset(u * ow_all + v0),
                      dyp.unsafe_offset(o * plane + (u + top) * wp + v0 + left), v1 - v0)
        var dxr = dx.unsafe_offset(r * d.c * hw)
        if accumulate:
            for ic in range(d.c):
                for ih in range(d.h):
                    _copy(dxr.unsafe_offset(ic * hw + ih * d.w), grid.unsafe_offset(ic * cs + ih * wp),
                          d.w)
        var q = 0
        while q < ext:
            var ic = 0
            while ic + 6 <= d.c:
                _s1_block[6](dyp, wgt, grid, q, ic, d, plane, wp, cs, accumulate)
                ic += 6
            if ic + 4 <= d.c:
                _s1_block[4](dyp, wgt, grid, q, ic, d, plane, wp, cs, accumulate)
                ic += 4
            if ic + 2 <= d.c:
                _s1_block[2](dyp, wgt, grid, q, ic, d, plane, wp, cs, accumulate)
                ic += 2
            while ic < d.c:
                _s1_block[1](dyp, wgt, grid, q, ic, d, plane, wp, cs, accumulate)
                ic += 1
            q += 2 * W
        for ic in range(d.c):
            for ih in range(d.h):
                _copy(grid.unsafe_offset(ic * cs + ih * wp), dxr.unsafe_offset(ic * hw + ih * d.w),
                      d.w)
    _ = dyp_list^
    _ = grid_list^


@no_inline
def _input_grad(dy: F32P, wgt: F32P, dx: F32P, g: F32P, dx_cm: F32P, rows: Int, d: ConvDims,
                accumulate: Bool):
    var kt = d.oc * d.kh * d.kw  # the chain's length: (oc, kh, kw)
    var hw = d.h * d.w
    var oh_all = d.oh()
    var ow_all = d.ow()
    var pos = oh_all * ow_all
    var n = rows * hw
    var wt_list = List[Float32](length=d.c * kt, fill=0)
    var wt = F32P(unsafe_from_address=Int(wt_list.unsafe_ptr()))
    for o in range(d.oc):
        for ic in range(d.c):
            for i in range(d.kh):
                for j in range(d.kw):
                    wt[unsafe_offset=ic * kt + (o * d.kh + i) * d.kw + j] = wgt[
                        unsafe_offset=((o * d.c + ic) * d.kh + i) * d.kw + j]
    for o in range(d.oc):
        for i in range(d.kh):
            for j in range(d.kw):
                var row = g.unsafe_offset(((o * d.kh + i) * d.kw + j) * n)
                for r in range(rows):
                    var plane = dy.unsafe_offset((r * d.oc + o) * pos)
                    for ih in range(d.h):
                        var dst = row.unsafe_offset(r * hw + ih * d.w)
                        var th = ih + d.ph - i  # oh·sh when tap i of output row oh reads ih
                        if th < 0 or th % d.sh != 0 or th // d.sh >= oh_all:
                            _zero(dst, d.w)
                        else:
                            _gather_row(plane.unsafe_offset((th // d.sh) * ow_all), ow_all, dst,
                                        d.w, 1, d.sw, d.pw - j)
    if accumulate:
        _channel_major(dx, dx_cm, rows, d.c, hw, True)
    split_gemm(0, wt, g, dx_cm, d.c, n, kt, False, False, accumulate)
    _channel_major(dx_cm, dx, rows, d.c, hw, False)
    _ = wt_list^
