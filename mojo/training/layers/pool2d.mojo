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

Program words (program.py OP_MAXPOOL2D, OP_AVGPOOL2D): (C,H,W) (KH,KW) (SH,SW), packed.
"""
from training.config import F32P
from training.layers.conv import unpack


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


@no_inline
def maxpool2d_forward(x: F32P, y: F32P, rows: Int, image: Int, kernel: Int, stride: Int):
    var d = PoolDims.of(rows, image, kernel, stride)
    var oh_all = d.oh()
    var ow_all = d.ow()
    for c in range(d.planes):
        var xp = x.unsafe_offset(c * d.h * d.w)
        var yp = y.unsafe_offset(c * oh_all * ow_all)
        for oh in range(oh_all):
            for ow in range(ow_all):
                yp[unsafe_offset=oh * ow_all + ow] = xp[unsafe_offset=_argmax(xp, d, oh, ow)]


@no_inline
def avgpool2d_forward(x: F32P, y: F32P, rows: Int, image: Int, kernel: Int, stride: Int):
    var d = PoolDims.of(rows, image, kernel, stride)
    var oh_all = d.oh()
    var ow_all = d.ow()
    var count = Float32(d.kh * d.kw)
    for c in range(d.planes):
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
def pool2d_backward(x: F32P, dy: F32P, dx: F32P, rows: Int, image: Int, kernel: Int,
                    stride: Int, is_max: Bool, accumulate: Bool):
    """dx of a MaxPool2d (`is_max`, its windows' maxima found again in x) or an AvgPool2d."""
    var d = PoolDims.of(rows, image, kernel, stride)
    var oh_all = d.oh()
    var ow_all = d.ow()
    var hw = d.h * d.w
    var count = Float32(d.kh * d.kw)
    var plane_list = List[Float32](length=hw, fill=0)
    var v = F32P(unsafe_from_address=Int(plane_list.unsafe_ptr()))
    for c in range(d.planes):
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
            out[unsafe_offset=i] = (out[unsafe_offset=i] + v[unsafe_offset=i] if accumulate
                                    else v[unsafe_offset=i])
    _ = plane_list^
