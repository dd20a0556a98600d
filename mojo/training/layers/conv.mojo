"""Conv2d on NCHW through im2col and the GEMM (docs/ARITHMETIC.md "Models: Conv2d"; mirror
tests/reference/conv.py). Every dot product is one GEMM chain, so its k order is the pinned
order and every tile, width and thread count gives the same bits:

  forward  y[b,oc,oh,ow] = f32(chain over (ic, kh, kw) ascending from +0.0 + bias[oc])
           (strides above 1) C (oc × B·positions) = W (oc × ic·kh·kw) · cols,
           cols[(ic,kh,kw), (b,oh,ow)] the input under each tap (+0.0 for padding)
  dW       chain over (b, oh, ow) ascending: (cols · dYᵀ)ᵀ, dY (oc × B·positions)
  db       Σ over (b, oh, ow) ascending from +0.0
  dX       chain over (oc, kh, kw) ascending: Wt (ic × oc·kh·kw) · g, g[(oc,kh,kw),
           (b,ih,iw)] the output gradient each tap reaches the input from (+0.0 where none
           does); continued from the value already there when accumulating (as a Linear's)

A padded or unreached tap is a product with +0.0: the same bits as skipping it (a chain from
+0.0 never holds -0.0, and v + ±0 = v for every other v).

At stride 1 (the common case) nothing goes through im2col: the forward and dX are direct
correlations of a zero-padded plane (`_correlate`: SIMD lanes along the padded rows, a register
block of output channels sharing each load; or, for the forward where that wastes less, output
channels in the lanes and each point's taps broadcast, `_forward_lanes`), dW a direct kernel
with output channels in the lanes (`_weight_grad_s1`, which sums db's chains in the same loop
over dY laid out channel-last; under a masking 2 × 2 max pool, conv_pooled.mojo's kernel over
the points its windows picked); each lane still runs exactly the chain above, so the bits are
the GEMM path's (the tests compare both with the reference).

The op's two private tensors (program.py OP_CONV2D) hold, for the whole batch: `work`, the
forward's cols (kept for dW) and, on the gradient side, g; `mid`, the product in channel-major
(C, B, H, W) order (the forward's, then dX's) and, on the gradient side, dY in that order.
Program words: (C,H,W) (OC,KH,KW) (SH,SW,relu) (PH,PW), each packed 21 bits a size (`unpack`;
relu 1: a ReLU after it is fused, as a Linear's: its output is the ReLU's, the backward masks
dY by it first; relu 2: the same, but the MaxPool2d that alone reads the output has masked dY
in its backward already, pool2d.mojo),
the weight's offset | (bias offset + 1) << 32, and work | mid << 32 (per-example offsets).
"""
from std.math import fma
from std.sys import simd_width_of
from std.utils import StaticTuple

from training.config import F32P, I64P
from training.gemm import transpose8
from training.tails import load_first, store_first
from training.layers.elementwise import relu_apply
from training.layers.conv_pooled import PooledDw, pooled_dw_fits, pooled_dw_part
from training.layers.pool2d import (U8P, PoolDims, masked_places_backward, maxpool2x2,
                                    places_into_planes)
from training.mlp import relu_backward
from training.pool import PartFn, part_range, parts_for, pool_threads, split_gemm, split_parts

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
    if i < n:
        store_first[W](dst.unsafe_offset(i), SIMD[DType.float32, W](0.0), n - i)


@always_inline
def _copy(src: F32P, dst: F32P, n: Int):
    var i = 0
    while i + W <= n:
        dst.unsafe_offset(i).unsafe_store(src.unsafe_load[width=W](i))
        i += W
    if i < n:  # rows of 14 or 28 (LeNet's) are mostly tail
        store_first[W](dst.unsafe_offset(i), load_first[W](src.unsafe_offset(i), n - i), n - i)


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
                   kernel: Int, stride: Int, padding: Int, params: Int, pool: Int,
                   pooled: Int = 0, places: Int = 0):
    """y (rows × oc × oh × ow) of x (rows × c × h × w); keeps the batch's cols in `work`.
    Examples (stride 1) or the GEMM's outputs are shared over `pool` (training/pool.mojo).
    `places` (not 0): the masking 2 × 2 max pool after the conv is run here too, its output
    into `pooled` (an address) and its window places into `places`; at stride 1 each example
    is pooled from an L1 buffer and y is never written (nothing reads it then: the pool's
    backward reads its places; LeNet-5's first conv: 4.8 MB a batch of 256 neither written
    nor read)."""
    var d = ConvDims.of(image, kernel, stride, padding)
    var relu = unpack(stride, 2) != 0
    var b = (params >> 32) - 1
    if d.sh == 1 and d.sw == 1:
        var call = _Call(Int(x), Int(y), Int(p.unsafe_offset(params & 0xFFFFFFFF)), Int(p), b,
                         relu, False, rows, d, pooled, places)
        _split_rows(pool, _forward_part, call, rows * d.oc * d.positions() * d.taps())
        return
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
    split_gemm(pool, p.unsafe_offset(params & 0xFFFFFFFF), work, mid, d.oc, n, d.taps(), False,
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
    var after = _PoolAfter(pooled, places)
    for r in range(rows):
        after.pool(y.unsafe_offset(r * d.oc * pos), r, d)


@fieldwise_init
struct _Call(ImplicitlyCopyable):
    """One stride-1 call's tensors (addresses) and sizes, read by its parts: src (x, or dY for
    dX, or db for dW), dst (y, dx or dW), wgt (the weights, or dY for dW) and p (the
    parameters, the bias at `b`; x for dW)."""

    var src: Int
    var dst: Int
    var wgt: Int
    var p: Int
    var b: Int
    var relu: Bool
    var accumulate: Bool
    var rows: Int
    var d: ConvDims
    # The masking 2 × 2 max pool after the conv, when it keeps places (else 0): the forward
    # pools each example as it goes (y itself never written) into `pooled` and `places`; dX
    # reads that pool's gradient (`pooled`) and `places` in place of dY.
    var pooled: Int
    var places: Int


def _split_rows(pool: Int, run: PartFn, call: _Call, macs: Int):
    """The call's examples cut into parts over the pool (each example's outputs its own)."""
    split_parts(pool, run, call, parts_for(pool, call.rows, macs))


@fieldwise_init
struct _PoolAfter(ImplicitlyCopyable):
    """Where a forward part pools its examples (the masking 2 × 2 max pool after the conv,
    `_Call.pooled` / `places` at the part's first example), or nowhere (places 0)."""

    var pooled: Int
    var places: Int

    def dest(self, y: F32P, ybuf: F32P, r: Int, d: ConvDims) -> F32P:
        """Where example r's output planes go: y's, or the L1 buffer that `pool` reads."""
        return ybuf if self.places != 0 else y.unsafe_offset(r * d.oc * d.positions())

    def pool(self, ybuf: F32P, r: Int, d: ConvDims):
        """Example r's planes (in ybuf) max pooled into `pooled` and `places`."""
        if self.places == 0:
            return
        var pd = PoolDims(d.oc, d.oh(), d.ow(), 2, 2, 2, 2)
        var n = d.oc * pd.oh() * pd.ow()
        maxpool2x2(ybuf, F32P(unsafe_from_address=self.pooled).unsafe_offset(r * n),
                   U8P(unsafe_from_address=self.places + r * n), True, pd, 0, d.oc)


def _forward_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.rows, part, parts)
    var d = c.d
    var fwd = _forward_lanes if _lanes_pay(d) else _forward_s1
    var pooled = d.oc * (d.oh() // 2) * (d.ow() // 2)  # (floats and places an example)
    fwd(F32P(unsafe_from_address=c.src).unsafe_offset(r[0] * d.c * d.h * d.w),
        F32P(unsafe_from_address=c.dst).unsafe_offset(r[0] * d.oc * d.positions()),
        F32P(unsafe_from_address=c.wgt), F32P(unsafe_from_address=c.p), c.b, c.relu,
        r[1] - r[0], d, _PoolAfter(c.pooled + 4 * r[0] * pooled if c.places else 0,
                                   c.places + r[0] * pooled if c.places else 0))


def _input_grad_part(ctx: Int, part: Int, parts: Int):
    _input_grad_range(Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[], part, parts)


def _input_grad_range(c: _Call, part: Int, parts: Int):
    var r = part_range(c.rows, part, parts)
    var d = c.d
    var q = d.oc * (d.oh() // 2) * (d.ow() // 2)  # the masking pool's outputs an example
    _input_grad_s1(F32P(unsafe_from_address=c.src).unsafe_offset(r[0] * d.oc * d.positions()),
                   F32P(unsafe_from_address=c.wgt),
                   F32P(unsafe_from_address=c.dst).unsafe_offset(r[0] * d.c * d.h * d.w),
                   r[1] - r[0], d, c.accumulate, c.places + r[0] * q if c.places else 0,
                   c.pooled + 4 * r[0] * q if c.places else 0)


def _weight_grad_range(c: _Call, part: Int, parts: Int):
    # Part 0, the caller's, takes the last range (the larger when they differ): the caller
    # starts every task at once and claims more of the examples' parts before it, so the
    # inputs each part reads here are more often in its caches. LeNet-5 at batch 256 on an
    # Intel Xeon (perf samples, in-process): the worker spent 4-24 % more time a tap, and the
    # caller waited ~1 ms a step for it with the larger range on the worker, ~0.5 ms after
    # (while each part laid out every example's dY in full). Ranges of single taps: in units
    # of 6, its second conv's 150 went 78 to the caller, 72 to the worker, which then waited
    # (two threads over one, the same process: 1.68x with units of 6, 1.70 of 2, 1.75 of 1).
    var u = part_range(c.d.taps(), parts - 1 - part, parts)
    _weight_grad_s1(F32P(unsafe_from_address=c.p), F32P(unsafe_from_address=c.wgt),
                    F32P(unsafe_from_address=c.dst), F32P(unsafe_from_address=c.src), c.rows,
                    c.d, u[0], u[1])


@always_inline
def _finish(src: F32P, dst: F32P, k: Int, n: Int, bias: Float32, has_bias: Bool, relu: Bool):
    """dst[k:k+n] = the epilogue of src[k:k+n] (n <= W): after the chain, the bias in one
    rounded add (Linear's), then the fused ReLU."""
    var z = load_first[W](src.unsafe_offset(k), n)
    if has_bias:
        z = z + bias
    store_first[W](dst.unsafe_offset(k), _epilogue[W](z, relu), n)


@always_inline
def _epilogue[V: Int](z: SIMD[DType.float32, V], relu: Bool) -> SIMD[DType.float32, V]:
    """A fused ReLU's `z > 0 ? z : +0.0` (the GEMM epilogue's), or z."""
    return z.gt(0).select(z, SIMD[DType.float32, V](0.0)) if relu else z


@always_inline
def _bias_block[U: Int](dy: F32P, gb: F32P, o0: Int, rows: Int, oc: Int, pos: Int):
    """gb[o] = Σ dy[b, o, :] over (b, oh, ow) ascending from +0.0 for the U channels o0..,
    their chains interleaved (independent adds: U at a time instead of one add's latency)."""
    var acc = SIMD[DType.float32, 8](0.0)  # lanes past U unused
    for b in range(rows):
        var base = dy.unsafe_offset((b * oc + o0) * pos)
        for k in range(pos):
            comptime for i in range(U):
                acc[i] = acc[i] + base[unsafe_offset=i * pos + k]
    comptime for i in range(U):
        gb[unsafe_offset=o0 + i] = acc[i]


def _bias_part(ctx: Int, part: Int, parts: Int):
    """The bias gradient of the part's channels (src dY, dst the bias's gradient)."""
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.d.oc, part, parts)
    var dy = F32P(unsafe_from_address=c.src)
    var gb = F32P(unsafe_from_address=c.dst)
    var pos = c.d.positions()
    var o = r[0]
    while o < r[1]:  # up to 8 chains at a time: at 6 channels, 4 + 1 + 1 left two alone
        var u = min(8, r[1] - o)
        comptime for U in range(1, 9):
            if u == U:
                _bias_block[U](dy, gb, o, c.rows, c.d.oc, pos)
        o += u


def _relu_part(ctx: Int, part: Int, parts: Int):
    """The fused ReLU's mask on the part's examples: dY where the output (dst) is > 0."""
    var c = Pointer[_Call, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.rows, part, parts)
    var n = c.d.oc * c.d.positions()
    var dy = F32P(unsafe_from_address=c.src).unsafe_offset(r[0] * n)
    relu_backward(F32P(unsafe_from_address=c.dst).unsafe_offset(r[0] * n), dy, dy, r[1] - r[0], n)


@fieldwise_init
struct _Grads(ImplicitlyCopyable):
    """A stride-1 conv's dW (its first `dw_parts` parts: ranges of channels from the pool's
    picks when `pooled.x` is not 0, else ranges of taps) and dX (the rest, if any: ranges of
    examples) as one task."""

    var dw: _Call
    var dx: _Call
    var dw_parts: Int
    var pooled: PooledDw


def _grads_part(ctx: Int, part: Int, parts: Int):
    var g = Pointer[_Grads, MutAnyOrigin](unsafe_from_address=ctx)[]
    if part < g.dw_parts and g.pooled.x != 0:
        pooled_dw_part(g.pooled, part, g.dw_parts)
    elif part < g.dw_parts:
        _weight_grad_range(g.dw, part, g.dw_parts)
    else:
        _input_grad_range(g.dx, part - g.dw_parts, parts - g.dw_parts)


@no_inline
def conv2d_backward(x: F32P, y: F32P, dy: F32P, work: F32P, g: F32P, mid: F32P, dy_cm: F32P,
                    p: F32P, grads: F32P, dx: F32P, rows: Int, image: Int, kernel: Int,
                    stride: Int, padding: Int, params: Int, need: Bool, accumulate: Bool,
                    pool: Int, places: Int = 0, pool_dy: Int = 0):
    """dW and db written into `grads`; dx (when `need`) written, or its chains continued from
    the values there when `accumulate`. x and y are the forward's input and output; `work`
    holds the forward's cols (strides above 1); g, mid and dy_cm are scratch (the private
    tensors' gradient and activation sides). `places` (not 0): the window places of the
    2 × 2 max pool after this conv (stride 1, its ReLU masked by that pool) and `pool_dy`
    that pool's output gradient, from which dW and db take only the points its windows
    picked (conv_pooled.mojo), and dX lays out dY from them (`_input_grad_s1`): the pool's
    backward does not run, and dy is written here only for a kernel that reads it (LeNet-5 at
    batch 256: its first conv's 4.8 MB of dY and its second's 1.6 MB neither written nor read
    back): dW's where that kernel refuses (x not finite, or kernels past its registers), dX's
    where the padding is as wide as the kernel."""
    var d = ConvDims.of(image, kernel, stride, padding)
    var w_at = params & 0xFFFFFFFF
    var b = (params >> 32) - 1
    var pos = d.positions()
    var n_out = rows * d.oc * pos
    if unpack(stride, 2) == 1:  # the fused ReLU: mask by its output, in place
        var mask = _Call(Int(dy), Int(y), 0, 0, 0, False, False, rows, d, 0, 0)
        _split_rows(pool, _relu_part, mask, n_out)
    var macs = rows * d.oc * pos * d.taps()
    # dY laid out for dX from the pool's places where it fits in the padded planes
    var dx_picks = places != 0 and d.ph < d.kh and d.pw < d.kw
    var dy_written = places == 0
    if need and not dx_picks and not dy_written:
        _pool_backward(places, pool_dy, dy, rows, d, pool)
        dy_written = True
    var dxc = _Call(Int(dy), Int(dx), Int(p.unsafe_offset(w_at)), 0, 0, False, accumulate, rows,
                    d, pool_dy if dx_picks else 0, places if dx_picks else 0)
    var dx_done = False
    if d.sh == 1 and d.sw == 1:
        var bad = List[Int64](length=1, fill=0)
        var pooled = places != 0 and pooled_dw_fits(d.kh, d.kw)
        var picks = PooledDw(Int(x) if pooled else 0, pool_dy, places,
                             Int(grads.unsafe_offset(w_at)),
                             Int(grads.unsafe_offset(b)) if b >= 0 else 0, Int(bad.unsafe_ptr()),
                             rows, d.c, d.h, d.w, d.oc, d.kh, d.kw, d.ph, d.pw)
        # dW's chains run over the examples: the parts share out the channels (from the
        # pool's picks) or the taps (src: the bias gradient, which the part with tap 0 sums
        # as it goes)
        var dw = _Call(Int(grads.unsafe_offset(b)) if b >= 0 else 0,
                       Int(grads.unsafe_offset(w_at)), Int(dy), Int(x), 0, False, False, rows, d,
                       0, 0)
        # one part a thread: each part lays out (or checks and pads) every example for
        # itself, so more parts than threads repeat that work (4 a thread made 2 threads'
        # dW 25 % dearer)
        var parts = min(pool_threads(pool), parts_for(pool, d.oc, macs // 4) if pooled
                        else parts_for(pool, d.taps(), macs))
        # dX's parts (when split) in the same task, after dW's: the thread that ends its
        # range of dW first takes more of the examples' dX. Alone, the static ranges left
        # the calling thread waiting: LeNet-5 at batch 256 on an Intel Xeon (perf's samples,
        # in-process), its waits 557 -> 332 µs a step, two threads over one 1.53 -> 1.70.
        dx_done = need and parts > 1
        if not pooled and not dy_written:
            _pool_backward(places, pool_dy, dy, rows, d, pool)
            dy_written = True
        split_parts(pool, _grads_part, _Grads(dw, dxc, parts, picks),
                    parts + (parts_for(pool, rows, macs) if dx_done else 0))
        if pooled and bad[0] != 0:  # an x not finite: every point's product (NaN chains)
            if not dy_written:
                _pool_backward(places, pool_dy, dy, rows, d, pool)
            picks.x = 0
            split_parts(pool, _grads_part, _Grads(dw, dxc, parts, picks), parts)
        _ = bad^
    else:
        _channel_major(dy, dy_cm, rows, d.oc, pos, True)
        _weight_grad(work, dy_cm, grads.unsafe_offset(w_at), rows * pos, d, pool)
    if b >= 0 and (d.sh != 1 or d.sw != 1):  # (at stride 1 dW's parts sum it)
        var sums = _Call(Int(dy), Int(grads.unsafe_offset(b)), 0, 0, 0, False, False, rows, d,
                         0, 0)
        split_parts(pool, _bias_part, sums, parts_for(pool, d.oc, 4 * n_out))
    if need and not dx_done and d.sh == 1 and d.sw == 1:
        _split_rows(pool, _input_grad_part, dxc, macs)
    elif need and not dx_done:
        _input_grad(dy, p.unsafe_offset(w_at), dx, g, mid, rows, d, accumulate, pool)


def _pool_backward(places: Int, pool_dy: Int, dy: F32P, rows: Int, d: ConvDims, pool: Int):
    """dy from the masking pool's gradient and places: that pool's backward, which the model
    skipped (no input gradient wanted), for the kernel that takes every point."""
    masked_places_backward(U8P(unsafe_from_address=places), F32P(unsafe_from_address=pool_dy),
                           dy, rows * d.oc, d.oh(), d.ow(), pool)


def _weight_grad(work: F32P, dy_cm: F32P, gw: F32P, n: Int, d: ConvDims, pool: Int):
    """dW from the forward's cols (any stride)."""
    # dWᵀ (taps × oc) = cols · dYᵀ: the same chains as dY · colsᵀ (k is (b, oh, ow) either
    # way), with the long cols read row by row when packed rather than gathered down columns
    var taps = d.taps()
    var dwt_list = List[Float32](length=taps * d.oc, fill=0)
    var dwt = F32P(unsafe_from_address=Int(dwt_list.unsafe_ptr()))
    split_gemm(pool, work, dy_cm, dwt, taps, d.oc, n, False, True, False)
    for o in range(d.oc):
        for k in range(taps):
            gw[unsafe_offset=o * taps + k] = dwt[unsafe_offset=k * d.oc + o]
    _ = dwt_list^


@always_inline
def _corr_block[NB: Int](src: F32P, n_src: Int, plane: Int, wgt: F32P, w_src: Int, w_t: Int,
                         grid: F32P, cs: Int, q0: Int, q1: Int, g0: Int, g1: Int, wp: Int,
                         kh: Int, kw: Int, i0: Int, i1: Int, flip: Bool, accumulate: Bool):
    """NB output channels at two vectors of W points of their grids (cs floats apart), at grid
    offsets g0 and g1, reading the source planes from offsets q0 and q1: each lane one chain
    over (source channel, kernel row, kernel column) ascending, from +0.0 or from the grid's
    value, kernel rows [i0, i1) only (the others read padding rows: products with +0.0).
    Source s's plane (row stride wp) is read at q + i·wp + j, or at q + (kh-1-i)·wp + (kw-1-j)
    when `flip`; output t's weight is wgt[s·w_src + t·w_t + i·kw + j]."""
    comptime T = _pow2_at_least(2 * NB * W)  # SIMD lengths are powers of two
    var acc = SIMD[DType.float32, T](0.0)
    if accumulate:
        comptime for t in range(NB):
            acc = acc.insert[offset=2 * t * W](grid.unsafe_load[width=W](t * cs + g0))
            acc = acc.insert[offset=(2 * t + 1) * W](grid.unsafe_load[width=W](t * cs + g1))
    var second = q1 - q0
    for s in range(n_src):
        var base = src.unsafe_offset(s * plane + q0)
        var ws = wgt.unsafe_offset(s * w_src)
        for i in range(i0, i1):
            for j in range(kw):
                var at = (kh - 1 - i) * wp + (kw - 1 - j) if flip else i * wp + j
                var a0 = base.unsafe_load[width=W](at)
                var a1 = base.unsafe_load[width=W](at + second)
                comptime for t in range(NB):
                    var wv = SIMD[DType.float32, W](ws[unsafe_offset=t * w_t + i * kw + j])
                    comptime o0 = 2 * t * W
                    acc = acc.insert[offset=o0](fma(a0, wv, acc.slice[W, offset=o0]()))
                    acc = acc.insert[offset=o0 + W](fma(a1, wv, acc.slice[W, offset=o0 + W]()))
    comptime for t in range(NB):
        grid.unsafe_offset(t * cs + g0).unsafe_store(acc.slice[W, offset=2 * t * W]())
        grid.unsafe_offset(t * cs + g1).unsafe_store(acc.slice[W, offset=(2 * t + 1) * W]())


def _grid_stride(rows: Int, width: Int, wp: Int) -> Int:
    """The grid's row stride for `rows` output rows of `width` points read from planes of row
    stride wp: wp (the extended rows flattened: wp - width extra points a row, into whole
    vector pairs), or width in whole vectors where that computes fewer points (LeNet-5's
    second conv's dX: 14 rows of 16, 224 points, not 14 x 18 = 252 in 256)."""
    var flat = (rows * wp + 2 * W - 1) // (2 * W) * (2 * W)
    var gs = (width + W - 1) // W * W
    return gs if rows * gs < flat else wp


def _grid_floats(rows: Int, gs: Int) -> Int:
    """A channel's grid points (`_grid_stride`'s rows of gs), in whole vector pairs."""
    return (rows * gs + 2 * W - 1) // (2 * W) * (2 * W)


def _correlate(src: F32P, n_src: Int, plane: Int, wgt: F32P, w_src: Int, w_t: Int, grid: F32P,
               cs: Int, n_out: Int, ext: Int, wp: Int, gs: Int, kh: Int, kw: Int, r_lo: Int,
               r_hi: Int, flip: Bool, accumulate: Bool):
    """`_corr_block` over the grids' first ext points (in vector pairs) and every output
    channel, in register blocks of 6, 4, 2 and 1 channels. Grid point u·gs + v reads the
    planes at u·wp + v (gs = wp: one offset for both). Plane rows outside [r_lo, r_hi) are
    padding (zeros): a pair's kernel rows that read only those are skipped, the same bits
    (ARITHMETIC.md, Conv2d), and LeNet-5's second conv's dX computes 27 of 35 rows of taps."""
    var per_row = gs // W
    var k = 0
    while k * W < ext:
        var g0 = k * W
        var g1 = g0 + W
        var q0 = g0
        var q1 = g1
        var u_lo = g0 // wp  # the output rows of the pair's first and last points
        var u_hi = (g0 + 2 * W - 1) // wp
        if gs != wp:  # rows of per_row vectors
            q0 = (k // per_row) * wp + (k % per_row) * W
            q1 = ((k + 1) // per_row) * wp + ((k + 1) % per_row) * W
            u_lo = k // per_row
            u_hi = (k + 1) // per_row
        # kernel row i reads plane row u + i (u + kh-1-i when flipped)
        var lo = max(0, r_lo - u_hi)
        var hi = min(kh, r_hi - u_lo)
        var i0 = kh - hi if flip else lo
        var i1 = kh - lo if flip else hi
        var t = 0
        while t + 6 <= n_out:
            _corr_block[6](src, n_src, plane, wgt.unsafe_offset(t * w_t), w_src, w_t,
                           grid.unsafe_offset(t * cs), cs, q0, q1, g0, g1, wp, kh, kw, i0, i1,
                           flip, accumulate)
            t += 6
        if t + 4 <= n_out:
            _corr_block[4](src, n_src, plane, wgt.unsafe_offset(t * w_t), w_src, w_t,
                           grid.unsafe_offset(t * cs), cs, q0, q1, g0, g1, wp, kh, kw, i0, i1,
                           flip, accumulate)
            t += 4
        if t + 2 <= n_out:
            _corr_block[2](src, n_src, plane, wgt.unsafe_offset(t * w_t), w_src, w_t,
                           grid.unsafe_offset(t * cs), cs, q0, q1, g0, g1, wp, kh, kw, i0, i1,
                           flip, accumulate)
            t += 2
        while t < n_out:
            _corr_block[1](src, n_src, plane, wgt.unsafe_offset(t * w_t), w_src, w_t,
                           grid.unsafe_offset(t * cs), cs, q0, q1, g0, g1, wp, kh, kw, i0, i1,
                           flip, accumulate)
            t += 1
        k += 2


def _pad_planes(src: F32P, dst: F32P, planes: Int, h: Int, w: Int, wp: Int, plane: Int,
                top: Int, left: Int):
    """Each h × w plane of src into dst's planes (plane floats apart, row stride wp) at row
    top, column left, clipped to them; the rest of dst stays as it is (zeros)."""
    var hp = plane // wp
    var u0 = max(-top, 0)
    var u1 = min(h, hp - top)
    var v0 = max(-left, 0)
    var v1 = min(w, wp - left)
    if u1 <= u0 or v1 <= v0:
        return
    for c in range(planes):
        for u in range(u0, u1):
            _copy(src.unsafe_offset((c * h + u) * w + v0),
                  dst.unsafe_offset(c * plane + (u + top) * wp + v0 + left), v1 - v0)


def _lanes_pay(d: ConvDims) -> Bool:
    """Whether the stride-1 forward wastes less with output channels in lanes
    (`_forward_lanes`: oc of them in whole vectors) than with points in lanes along the padded
    rows (`_forward_s1`: pos of its cs grid points are real). LeNet-5's second conv (16
    channels, 10 of every 14 points real, 100 of 160) takes the lanes, its first (6 channels,
    784 of 896) the grid."""
    var ocp = (d.oc + W - 1) // W * W
    var cs = (d.oh() * (d.w + 2 * d.pw) + 2 * W - 1) // (2 * W) * (2 * W)
    # two vectors of channels only where 8 × 2 accumulators leave registers (32 zmm, not 16 ymm)
    return ocp <= (2 * W if W >= 16 else W) and d.oc * cs > d.positions() * ocp


comptime LANE_POINTS = 8  # output points a register block (8 × oc/W accumulators)


@always_inline
def _lanes_block[P: Int, NV: Int](xp: F32P, pts: I64P, p0: Int, taps: I64P, n_taps: Int,
                                  wt: F32P, ocp: Int, tile: F32P):
    """Points pts[p0..p0+P] × channels 0..NV·W into tile (P rows of ocp): each lane one chain
    over the taps ascending ((c, kh, kw): taps[t] is the tap's offset in the padded planes xp,
    wt[t·ocp + o] its weight for channel o), from +0.0."""
    comptime T = _pow2_at_least(P * NV * W)
    var acc = SIMD[DType.float32, T](0.0)
    var at = SIMD[DType.int64, _pow2_at_least(P)](0)
    comptime for q in range(P):
        at[q] = pts[unsafe_offset=p0 + q]
    for t in range(n_taps):
        var src = xp.unsafe_offset(Int(taps[unsafe_offset=t]))
        comptime for v in range(NV):
            var wv = wt.unsafe_load[width=W](t * ocp + v * W)
            comptime for q in range(P):
                var xv = SIMD[DType.float32, W](src[unsafe_offset=Int(at[q])])
                comptime o = (q * NV + v) * W
                acc = acc.insert[offset=o](fma(xv, wv, acc.slice[W, offset=o]()))
    comptime for q in range(P):
        comptime for v in range(NV):
            tile.unsafe_offset(q * ocp + v * W).unsafe_store(
                acc.slice[W, offset=(q * NV + v) * W]())


@no_inline
def _forward_lanes(x: F32P, y: F32P, wgt: F32P, p: F32P, b: Int, relu: Bool, rows: Int,
                   d: ConvDims, after: _PoolAfter):
    """The forward at stride 1 with output channels in SIMD lanes (`_lanes_pay`), the same
    chains as `_forward_s1`: x zero-padded, each point's taps read as broadcasts, blocks of
    LANE_POINTS points; then the bias and ReLU (`_forward_s1`'s epilogue) and 8 × 8
    transposes into the channel planes."""
    var oh_all = d.oh()
    var ow_all = d.ow()
    var pos = oh_all * ow_all
    var wp = d.w + 2 * d.pw
    var plane = (d.h + 2 * d.ph) * wp
    var n_taps = d.taps()
    var ocp = (d.oc + W - 1) // W * W
    var xp_list = List[Float32](length=d.c * plane, fill=0)
    var xp = F32P(unsafe_from_address=Int(xp_list.unsafe_ptr()))
    var ybuf_list = List[Float32](length=d.oc * pos if after.places != 0 else 0, fill=0)
    var ybuf = F32P(unsafe_from_address=Int(ybuf_list.unsafe_ptr()))
    var wt_list = List[Float32](length=n_taps * ocp + LANE_POINTS * ocp, fill=0)
    var wt = F32P(unsafe_from_address=Int(wt_list.unsafe_ptr()))
    var tile = wt.unsafe_offset(n_taps * ocp)
    var idx_list = List[Int64](length=pos + n_taps, fill=0)
    var pts = I64P(unsafe_from_address=Int(idx_list.unsafe_ptr()))
    var taps = pts.unsafe_offset(pos)
    for o in range(d.oc):
        for t in range(n_taps):
            wt[unsafe_offset=t * ocp + o] = wgt[unsafe_offset=o * n_taps + t]
    for oh in range(oh_all):
        for ow in range(ow_all):
            pts[unsafe_offset=oh * ow_all + ow] = Int64(oh * wp + ow)
    for c in range(d.c):
        for i in range(d.kh):
            for j in range(d.kw):
                taps[unsafe_offset=(c * d.kh + i) * d.kw + j] = Int64(c * plane + i * wp + j)
    var bias = SIMD[DType.float32, 2 * W](0.0)
    if b >= 0:
        for o in range(d.oc):
            bias[o] = p[unsafe_offset=b + o]
    for r in range(rows):
        _pad_planes(x.unsafe_offset(r * d.c * d.h * d.w), xp, d.c, d.h, d.w, wp, plane, d.ph,
                    d.pw)
        var yr = after.dest(y, ybuf, r, d)
        var p0 = 0
        while p0 < pos:
            var n = min(LANE_POINTS, pos - p0)
            if ocp == W:
                if n == LANE_POINTS:
                    _lanes_block[LANE_POINTS, 1](xp, pts, p0, taps, n_taps, wt, ocp, tile)
                else:
                    for q in range(n):
                        _lanes_block[1, 1](xp, pts, p0 + q, taps, n_taps, wt, ocp,
                                           tile.unsafe_offset(q * ocp))
            else:
                if n == LANE_POINTS:
                    _lanes_block[LANE_POINTS, 2](xp, pts, p0, taps, n_taps, wt, ocp, tile)
                else:
                    for q in range(n):
                        _lanes_block[1, 2](xp, pts, p0 + q, taps, n_taps, wt, ocp,
                                           tile.unsafe_offset(q * ocp))
            _lanes_store(tile, ocp, n, yr.unsafe_offset(p0), pos, d.oc, bias, b >= 0, relu)
            p0 += n
        after.pool(ybuf, r, d)
    _ = xp_list^
    _ = ybuf_list^
    _ = wt_list^
    _ = idx_list^


@always_inline
def _lanes_store(tile: F32P, ocp: Int, n: Int, dst: F32P, pos: Int, oc: Int,
                 bias: SIMD[DType.float32, 2 * W], with_bias: Bool, relu: Bool):
    """n points of the tile (rows of ocp channels) through the epilogue into the channel
    planes at dst (pos floats apart): whole 8 × 8 blocks by transposes, the rest one by one."""
    for q in range(n):
        comptime for v in range(2):
            if v * W < ocp:
                var row = tile.unsafe_offset(q * ocp + v * W)
                var z = row.unsafe_load[width=W]()
                if with_bias:  # after the chain, one rounded add: Linear's
                    z = z + bias.slice[W, offset=v * W]()
                row.unsafe_store(_epilogue[W](z, relu))
    var o0 = 0
    if n == 8:
        while o0 + 8 <= oc:
            transpose8(tile.unsafe_offset(o0), ocp, dst.unsafe_offset(o0 * pos), pos)
            o0 += 8
    for o in range(o0, oc):
        for q in range(n):
            dst[unsafe_offset=o * pos + q] = tile[unsafe_offset=q * ocp + o]


@no_inline
def _forward_s1(x: F32P, y: F32P, wgt: F32P, p: F32P, b: Int, relu: Bool, rows: Int,
                d: ConvDims, after: _PoolAfter):
    """The forward at stride 1 without im2col, the same chains: x zero-padded, output points
    in vectors along the padded rows (each row's kw - 1 extra points computed and dropped) or
    along each output row (`_grid_stride`)."""
    var oh_all = d.oh()
    var ow_all = d.ow()
    var wp = d.w + 2 * d.pw
    var plane = (d.h + 2 * d.ph) * wp
    var gs = _grid_stride(oh_all, ow_all, wp)
    var cs = _grid_floats(oh_all, gs)
    # vectors run past the last point and read past the last row (a pair's second vector a
    # row past the last one)
    var slack = 4 * W + d.kw + wp
    var xp_list = List[Float32](length=d.c * plane + slack, fill=0)
    var xp = F32P(unsafe_from_address=Int(xp_list.unsafe_ptr()))
    var grid_list = List[Float32](length=d.oc * cs + slack, fill=0)
    var grid = F32P(unsafe_from_address=Int(grid_list.unsafe_ptr()))
    var taps = d.kh * d.kw
    var pos = oh_all * ow_all
    var ybuf_list = List[Float32](length=d.oc * pos if after.places != 0 else 0, fill=0)
    var ybuf = F32P(unsafe_from_address=Int(ybuf_list.unsafe_ptr()))
    for r in range(rows):
        _pad_planes(x.unsafe_offset(r * d.c * d.h * d.w), xp, d.c, d.h, d.w, wp, plane, d.ph,
                    d.pw)
        _correlate(xp, d.c, plane, wgt, taps, d.c * taps, grid, cs, d.oc, oh_all * gs, wp, gs,
                   d.kh, d.kw, d.ph, d.ph + d.h, False, False)
        var yr = after.dest(y, ybuf, r, d)
        for o in range(d.oc):
            var bias = p[unsafe_offset=b + o] if b >= 0 else Float32(0.0)
            for oh in range(oh_all):
                var src = grid.unsafe_offset(o * cs + oh * gs)
                var dst = yr.unsafe_offset(o * pos + oh * ow_all)
                var k = 0
                while k < ow_all:  # (rows of 28, LeNet's: a vector, then a masked one)
                    _finish(src, dst, k, min(W, ow_all - k), bias, b >= 0, relu)
                    k += W
        after.pool(ybuf, r, d)
    _ = xp_list^
    _ = grid_list^
    _ = ybuf_list^


comptime DW_LANES = 8  # output channels a vector (a channel-last dY row, zero padded)
# The most taps a register block: G·NV accumulators, NV dY vectors and a broadcast fit the
# registers (16 of them in x86-64-v3 at NV 1). Taps split into near-equal blocks of at most
# that, so none is padding (LeNet-5's first conv: 25 taps in 12 + 13, not 4 blocks of 8).
comptime DW_TAPS_1 = 13
comptime DW_TAPS_2 = 8


comptime _Vec = SIMD[DType.float32, DW_LANES]


@always_inline
def _dw_point[NV: Int, G: Int, BIAS: Bool](mut acc: StaticTuple[_Vec, G * NV], mut bacc:
        StaticTuple[_Vec, NV], dv: StaticTuple[_Vec, NV], xq: F32P, at: StaticTuple[Int, G]):
    """One point's products: each tap's input (xq + its offset) times the point's dY vectors,
    onto the chains; with BIAS the dY onto the bias chains."""
    comptime for v in range(NV):
        comptime if BIAS:
            bacc[v] = bacc[v] + dv[v]
        comptime for g in range(G):
            acc[g * NV + v] = fma(dv[v], _Vec(xq[unsafe_offset=at[g]]), acc[g * NV + v])


@always_inline
def _dw_block[NV: Int, G: Int, BIAS: Bool](
        xp: F32P, dyr: F32P, dwt: F32P, offs: I64P, t0: Int, oc0: Int, ocp: Int,
        oh_all: Int, ow_all: Int, wp: Int, dbt: F32P):
    """Weights of taps t0..t0+G × output channels oc0.. (NV vectors): each lane one chain over
    this example's (oh, ow) ascending, continued from dwt (channel-last); with BIAS the bias
    chains too, continued from dbt (the dY rows summed in the same loop, where the fmas hide
    their adds' latency: on their own, one chain of rows·oh·ow adds a lane). dyr: the
    example's dY channel-last (rows of ocp lanes, one a point)."""
    comptime V = DW_LANES
    # One 8-lane register per accumulator: slices of one long SIMD value were lowered as
    # halves of 16-lane registers in the x86-64-v4 build, an insert and an extract per fma.
    var acc = StaticTuple[_Vec, G * NV](fill=_Vec(0.0))
    var bacc = StaticTuple[_Vec, NV](fill=_Vec(0.0))
    var at = StaticTuple[Int, G](fill=0)
    comptime for v in range(NV):
        comptime if BIAS:
            bacc[v] = dbt.unsafe_load[width=V](oc0 + v * V)
    comptime for g in range(G):
        at[g] = Int(offs[unsafe_offset=t0 + g])
        comptime for v in range(NV):
            acc[g * NV + v] = dwt.unsafe_load[width=V]((t0 + g) * ocp + oc0 + v * V)
    var dv = StaticTuple[_Vec, NV](fill=_Vec(0.0))
    for oh in range(oh_all):
        var xrow = xp.unsafe_offset(oh * wp)
        var row = dyr.unsafe_offset(oh * ow_all * ocp + oc0)
        for ow in range(ow_all):
            comptime for v in range(NV):
                dv[v] = row.unsafe_load[width=V](ow * ocp + v * V)
            _dw_point[NV, G, BIAS](acc, bacc, dv, xrow.unsafe_offset(ow), at)
    comptime for g in range(G):
        comptime for v in range(NV):
            dwt.unsafe_offset((t0 + g) * ocp + oc0 + v * V).unsafe_store(acc[g * NV + v])
    comptime if BIAS:
        comptime for v in range(NV):
            dbt.unsafe_offset(oc0 + v * V).unsafe_store(bacc[v])


def _dw_taps[NV: Int, GMAX: Int](xp: F32P, dyr: F32P, dwt: F32P, offs: I64P, t_begin: Int,
                                 t_end: Int, oc0: Int, ocp: Int, oh_all: Int, ow_all: Int,
                                 wp: Int, dbt: F32P, bias: Bool):
    """`_dw_block` over taps [t_begin, t_end) in near-equal blocks of at most GMAX; the block
    at tap 0 carries the bias chains when `bias`."""
    var n = t_end - t_begin
    var blocks = (n + GMAX - 1) // GMAX
    for blk in range(blocks):
        var r = part_range(n, blk, blocks)
        var t0 = t_begin + r[0]
        var g = r[1] - r[0]
        var b = bias and t0 == 0
        comptime for G in range(1, GMAX + 1):
            comptime for B in range(2):  # the bias chains
                if g == G and b == (B == 1):
                    _dw_block[NV, G, B == 1](xp, dyr, dwt, offs, t0, oc0, ocp, oh_all, ow_all,
                                             wp, dbt)


@no_inline
def _weight_grad_s1(x: F32P, dy: F32P, gw: F32P, gb: F32P, rows: Int, d: ConvDims,
                    t_begin: Int, t_end: Int):
    """dW at stride 1 without im2col, the same chains (over (b, oh, ow) ascending, from +0.0):
    lanes are output channels (dY channel-last, zero padded to whole vectors), a block of
    taps shares each dY row; x zero-padded as the forward reads it. Each example is laid out
    so just before its products, in buffers of this part's that stay in L1 (LeNet-5's second
    conv: 6.4 KB of dY an example; laid out for a whole batch first, it went to memory and
    back). Only taps [t_begin, t_end) are computed and written; the part with tap 0 writes
    the bias gradient into gb too (unless it is null): lanes' chains over the same rows,
    (b, oh, ow) ascending from +0.0. (Under a masking 2 × 2 max pool, conv_pooled.mojo's
    kernel takes only the points its windows picked.)"""
    comptime V = DW_LANES
    var oh_all = d.oh()
    var ow_all = d.ow()
    var pos = oh_all * ow_all
    var wp = d.w + 2 * d.pw
    var plane = (d.h + 2 * d.ph) * wp
    var taps = d.taps()
    var ocp = (d.oc + V - 1) // V * V
    var dwt_list = List[Float32](length=(taps + 1) * ocp, fill=0)  # chains, channel-last
    var dwt = F32P(unsafe_from_address=Int(dwt_list.unsafe_ptr()))
    var dbt = dwt.unsafe_offset(taps * ocp)  # the bias chains
    var bias = t_begin == 0 and Int(gb) != 0
    var offs_list = List[Int64](length=taps, fill=0)  # each tap's offset in the padded planes
    var offs = I64P(unsafe_from_address=Int(offs_list.unsafe_ptr()))
    for ic in range(d.c):
        for i in range(d.kh):
            for j in range(d.kw):
                offs[unsafe_offset=(ic * d.kh + i) * d.kw + j] = Int64(ic * plane + i * wp + j)
    var padded = d.ph != 0 or d.pw != 0  # (else x is its own padded planes)
    var xp_list = List[Float32](length=d.c * plane if padded else 0, fill=0)  # borders stay +0.0
    var dyt_list = List[Float32](length=pos * ocp, fill=0)
    var dyt = F32P(unsafe_from_address=Int(dyt_list.unsafe_ptr()))
    for r in range(rows):
        var xp = x.unsafe_offset(r * d.c * d.h * d.w)
        if padded:
            var dst = F32P(unsafe_from_address=Int(xp_list.unsafe_ptr()))
            _pad_planes(xp, dst, d.c, d.h, d.w, wp, plane, d.ph, d.pw)
            xp = dst
        _channel_last_rows(dy.unsafe_offset(r * d.oc * pos), dyt, pos, d.oc, ocp)
        var oc0 = 0
        while oc0 + 2 * V <= ocp:
            _dw_taps[2, DW_TAPS_2](xp, dyt, dwt, offs, t_begin, t_end, oc0, ocp, oh_all, ow_all,
                                   wp, dbt, bias)
            oc0 += 2 * V
        if oc0 < ocp:
            _dw_taps[1, DW_TAPS_1](xp, dyt, dwt, offs, t_begin, t_end, oc0, ocp, oh_all, ow_all,
                                   wp, dbt, bias)
    for o in range(d.oc):
        for t in range(t_begin, t_end):
            gw[unsafe_offset=o * taps + t] = dwt[unsafe_offset=t * ocp + o]
        if bias:
            gb[unsafe_offset=o] = dbt[unsafe_offset=o]
    _ = dwt_list^
    _ = offs_list^
    _ = xp_list^
    _ = dyt_list^


def _channel_last_rows(dyr: F32P, dyt: F32P, pos: Int, oc: Int, ocp: Int):
    """One example's dY (oc planes of pos points) channel-last: pos rows of ocp lanes, those
    past oc +0.0 (8 points × 8 channels at a time through registers)."""
    var k = 0
    while k + 8 <= pos:
        var o0 = 0
        while o0 < ocp:
            var real = min(8, oc - o0)
            comptime for R in range(1, 9):  # (lanes past R: +0.0, the padding)
                if real == R:
                    transpose8[R](dyr.unsafe_offset(o0 * pos + k), pos,
                                  dyt.unsafe_offset(k * ocp + o0), ocp)
            o0 += 8
        k += 8
    while k < pos:
        for o in range(oc):
            dyt[unsafe_offset=k * ocp + o] = dyr[unsafe_offset=o * pos + k]
        for o in range(oc, ocp):
            dyt[unsafe_offset=k * ocp + o] = 0.0
        k += 1


@no_inline
def _input_grad_s1(dy: F32P, wgt: F32P, dx: F32P, rows: Int, d: ConvDims, accumulate: Bool,
                   places: Int, pool_dy: Int):
    """dX at stride 1 without a GEMM, the same chains: dY zero-padded to (h + kh - 1) ×
    (w + kw - 1) planes, so that input point (ih, iw) reads tap (kh, kw) of channel oc at
    plane point (ih + kh-1 - kh', iw + kw-1 - kw'); a padded point is a product with +0.0
    (the same bits as skipping it). Points run in vectors along each row of the padded width
    (the extended grid; its kw - 1 extra points a row are computed and dropped), or along
    each row (`_grid_stride`). `places` (not 0): dY is the masking 2 × 2 max pool's input
    gradient, laid out from its places and gradient (`pool_dy`) as its backward writes it,
    and `dy` is not read (LeNet-5's second conv at batch 256: 1.6 MB of dY a step neither
    written by the pool's backward nor read back here)."""
    var wp = d.w + d.kw - 1
    var plane = (d.h + d.kh - 1) * wp
    var gs = _grid_stride(d.h, d.w, wp)
    var cs = _grid_floats(d.h, gs)
    var slack = 4 * W + d.kw + wp  # as `_forward_s1`'s
    var dyp_list = List[Float32](length=d.oc * plane + slack, fill=0)
    var dyp = F32P(unsafe_from_address=Int(dyp_list.unsafe_ptr()))
    var grid_list = List[Float32](length=d.c * cs + slack, fill=0)
    var grid = F32P(unsafe_from_address=Int(grid_list.unsafe_ptr()))
    var hw = d.h * d.w
    var taps = d.kh * d.kw
    var pos = d.oh() * d.ow()
    for r in range(rows):
        # dY row u at padded row u + kh-1-ph (column likewise)
        if places != 0:
            var pd = PoolDims(d.oc, d.oh(), d.ow(), 2, 2, 2, 2)
            var q = d.oc * pd.oh() * pd.ow()
            places_into_planes(U8P(unsafe_from_address=places + r * q),
                               F32P(unsafe_from_address=pool_dy).unsafe_offset(r * q),
                               dyp.unsafe_offset((d.kh - 1 - d.ph) * wp + d.kw - 1 - d.pw), pd,
                               plane, wp)
        else:
            _pad_planes(dy.unsafe_offset(r * d.oc * pos), dyp, d.oc, d.oh(), d.ow(), wp, plane,
                        d.kh - 1 - d.ph, d.kw - 1 - d.pw)
        var dxr = dx.unsafe_offset(r * d.c * hw)
        if accumulate:
            for ic in range(d.c):
                for ih in range(d.h):
                    _copy(dxr.unsafe_offset(ic * hw + ih * d.w),
                          grid.unsafe_offset(ic * cs + ih * gs), d.w)
        _correlate(dyp, d.oc, plane, wgt, d.c * taps, taps, grid, cs, d.c, d.h * gs, wp, gs,
                   d.kh, d.kw, d.kh - 1 - d.ph, d.kh - 1 - d.ph + d.oh(), True, accumulate)
        for ic in range(d.c):
            for ih in range(d.h):
                _copy(grid.unsafe_offset(ic * cs + ih * gs), dxr.unsafe_offset(ic * hw + ih * d.w),
                      d.w)
    _ = dyp_list^
    _ = grid_list^


@no_inline
def _input_grad(dy: F32P, wgt: F32P, dx: F32P, g: F32P, dx_cm: F32P, rows: Int, d: ConvDims,
                accumulate: Bool, pool: Int):
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
    split_gemm(pool, wt, g, dx_cm, d.c, n, kt, False, False, accumulate)
    _channel_major(dx_cm, dx, rows, d.c, hw, False)
    _ = wt_list^
