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
from training.pool import PartFn, part_range, parts_for, split_parts


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


comptime ELEMENT_WORK = 16  # a scalar window element against a GEMM's vector multiply-add


def _split(pool: Int, run: PartFn, call: _Call):
    var work = call.d.planes * call.d.h * call.d.w * ELEMENT_WORK
    split_parts(pool, run, Int(Pointer(to=call)), parts_for(pool, call.d.planes, work))
    _ = call.x  # the parts read `call` through its address


def maxpool2d_forward(x: F32P, y: F32P, rows: Int, image: Int, kernel: Int, stride: Int,
                      pool: Int):
    """The planes shared over `pool` (training/pool.mojo)."""
    var d = PoolDims.of(rows, image, kernel, stride)
    _split(pool, _max_part, _Call(Int(x), Int(y), 0, d, True, False))


def avgpool2d_forward(x: F32P, y: F32P, rows: Int, image: Int, kernel: Int, stride: Int,
                      pool: Int):
    var d = PoolDims.of(rows, image, kernel, stride)
    _split(pool, _avg_part, _Call(Int(x), Int(y), 0, d, False, False))


def pool2d_backward(x: F32P, dy: F32P, dx: F32P, rows: Int, image: Int, kernel: Int,
                    stride: Int, is_max: Bool, accumulate: Bool, pool: Int):
    """dx of a MaxPool2d (`is_max`, its windows' maxima found again in x) or an AvgPool2d."""
    var d = PoolDims.of(rows, image, kernel, stride)
    _split(pool, _backward_part, _Call(Int(x), Int(dy), Int(dx), d, is_max, accumulate))


def _max_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.d.planes, part, parts)
    _maxpool(F32P(unsafe_from_address=c.x), F32P(unsafe_from_address=c.y), c.d, r[0], r[1])


def _avg_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.d.planes, part, parts)
    _avgpool(F32P(unsafe_from_address=c.x), F32P(unsafe_from_address=c.y), c.d, r[0], r[1])


def _backward_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.d.planes, part, parts)
    _backward(F32P(unsafe_from_address=c.x), F32P(unsafe_from_address=c.y),
              F32P(unsafe_from_address=c.dx), c.d, c.is_max, c.accumulate, r[0], r[1])


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
              first: Int, last: Int):
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
            out[unsafe_offset=i] = (out[unsafe_offset=i] + v[unsafe_offset=i] if accumulate
                                    else v[unsafe_offset=i])
    _ = plane_list^
