"""Conv2d on NCHW through im2col and the GEMM (docs/ARITHMETIC.md "Models: Conv2d"; mirror
tests/reference/conv.py). Every dot product is one GEMM chain, so its k order is the pinned
order and every tile, width and thread count gives the same bits:

  forward  y[b,oc,oh,ow] = f32(chain over (ic, kh, kw) ascending from +0.0 + bias[oc])
           C (oc × positions) = W (oc × ic·kh·kw) · colsᵀ, cols[(oh,ow), (ic,kh,kw)] the
           input under each tap (+0.0 for padding), one example at a time
  dW       chain over (b, oh, ow) ascending: dY_b · cols_b, example by example, each product
           continuing the chain from the last one's C (exact: C holds the float32 chain value)
  db       Σ over (b, oh, ow) ascending from +0.0
  dX       chain over (oc, kh, kw) ascending: Wt (ic × oc·kh·kw) · gᵀ, g[(ih,iw), (oc,kh,kw)]
           the output gradient each tap reaches the input from (+0.0 where none does)

A padded or unreached tap is a product with +0.0: the same bits as skipping it (a chain from
+0.0 never holds -0.0, and v + ±0 = v for every other v).

Program words (mojolearn/_model/program.py OP_CONV2D): (C,H,W) (OC,KH,KW) (SH,SW) (PH,PW),
each packed 21 bits a size (`unpack`), then the weight's offset | (bias offset + 1) << 32.
"""
from training.config import F32P
from training.pool import split_gemm


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


def _im2col(x: F32P, cols: F32P, d: ConvDims):
    """cols[(oh, ow), (ic, kh, kw)] of one example (row-major: a GEMM row per position)."""
    var k_all = d.taps()
    var ow_all = d.ow()
    for oh in range(d.oh()):
        for ow in range(ow_all):
            var row = cols.unsafe_offset((oh * ow_all + ow) * k_all)
            var k = 0
            for ic in range(d.c):
                var plane = x.unsafe_offset(ic * d.h * d.w)
                for i in range(d.kh):
                    var ih = oh * d.sh - d.ph + i
                    var inside = ih >= 0 and ih < d.h
                    for j in range(d.kw):
                        var iw = ow * d.sw - d.pw + j
                        var v = Float32(0.0)
                        if inside and iw >= 0 and iw < d.w:
                            v = plane[unsafe_offset=ih * d.w + iw]
                        row[unsafe_offset=k] = v
                        k += 1


def conv2d_forward(x: F32P, y: F32P, p: F32P, cols: F32P, rows: Int, image: Int, kernel: Int,
                   stride: Int, padding: Int, params: Int):
    """y (rows × oc × oh × ow) of x (rows × c × h × w); keeps each example's im2col rows in
    `cols` (rows × positions × taps) for the backward."""
    var d = ConvDims.of(image, kernel, stride, padding)
    var wgt = p.unsafe_offset(params & 0xFFFFFFFF)
    var b = (params >> 32) - 1
    var n_in = d.c * d.h * d.w
    var pos = d.positions()
    var k = d.taps()
    for r in range(rows):
        var cb = cols.unsafe_offset(r * pos * k)
        _im2col(x.unsafe_offset(r * n_in), cb, d)
        var yb = y.unsafe_offset(r * d.oc * pos)
        split_gemm(0, wgt, cb, yb, d.oc, pos, k, False, True, False)
        if b >= 0:  # after the chain, one rounded add: Linear's epilogue
            for o in range(d.oc):
                var bias = p[unsafe_offset=b + o]
                var row = yb.unsafe_offset(o * pos)
                for j in range(pos):
                    row[unsafe_offset=j] = row[unsafe_offset=j] + bias


def conv2d_backward(dy: F32P, cols: F32P, p: F32P, grads: F32P, dx: F32P, rows: Int, image: Int,
                    kernel: Int, stride: Int, padding: Int, params: Int, need: Bool,
                    accumulate: Bool):
    """dW and db written into `grads`; dx (when `need`) written, or its chains continued from
    the values there when `accumulate` (as a Linear's)."""
    var d = ConvDims.of(image, kernel, stride, padding)
    var w_at = params & 0xFFFFFFFF
    var b = (params >> 32) - 1
    var pos = d.positions()
    var k = d.taps()
    for r in range(rows):
        split_gemm(0, dy.unsafe_offset(r * d.oc * pos), cols.unsafe_offset(r * pos * k),
                   grads.unsafe_offset(w_at), d.oc, k, pos, False, False, r > 0)
    if b >= 0:
        for o in range(d.oc):
            var s = Float32(0.0)
            for r in range(rows):
                var g = dy.unsafe_offset((r * d.oc + o) * pos)
                for j in range(pos):
                    s = s + g[unsafe_offset=j]
            grads[unsafe_offset=b + o] = s
    if need:
        _input_grad(dy, p.unsafe_offset(w_at), dx, rows, d, accumulate)


def _input_grad(dy: F32P, wgt: F32P, dx: F32P, rows: Int, d: ConvDims, accumulate: Bool):
    var kt = d.oc * d.kh * d.kw  # the chain's length: (oc, kh, kw)
    var hw = d.h * d.w
    var oh_all = d.oh()
    var ow_all = d.ow()
    var pos = oh_all * ow_all
    var wt_list = List[Float32](length=d.c * kt, fill=0)
    var wt = F32P(unsafe_from_address=Int(wt_list.unsafe_ptr()))
    for o in range(d.oc):
        for ic in range(d.c):
            for i in range(d.kh):
                for j in range(d.kw):
                    wt[unsafe_offset=ic * kt + (o * d.kh + i) * d.kw + j] = wgt[
                        unsafe_offset=((o * d.c + ic) * d.kh + i) * d.kw + j]
    var g_list = List[Float32](length=hw * kt, fill=0)
    var g = F32P(unsafe_from_address=Int(g_list.unsafe_ptr()))
    for r in range(rows):
        var dyb = dy.unsafe_offset(r * d.oc * pos)
        for ih in range(d.h):
            for iw in range(d.w):
                var row = g.unsafe_offset((ih * d.w + iw) * kt)
                for o in range(d.oc):
                    for i in range(d.kh):
                        var th = ih + d.ph - i  # oh·sh when tap i of output row oh reads ih
                        var oh = th // d.sh
                        var hit = th >= 0 and th % d.sh == 0 and oh < oh_all
                        for j in range(d.kw):
                            var tw = iw + d.pw - j
                            var ow = tw // d.sw
                            var v = Float32(0.0)
                            if hit and tw >= 0 and tw % d.sw == 0 and ow < ow_all:
                                v = dyb[unsafe_offset=o * pos + oh * ow_all + ow]
                            row[unsafe_offset=(o * d.kh + i) * d.kw + j] = v
        split_gemm(0, wt, g, dx.unsafe_offset(r * d.c * hw), d.c, hw, kt, False, True,
                   accumulate)
    _ = wt_list^
    _ = g_list^
