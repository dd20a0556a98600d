"""GELU (erf and tanh forms), Tanh and Sigmoid, forward and backward (docs/ARITHMETIC.md
"Models"; mirror tests/reference/layers.py). Every output element is a fixed sequence of
binary32 operations on its own inputs, built on the portable float32 functions
(training/portable_math.mojo): SIMD lanes over independent elements with their SIMD forms, the
tail with their scalar twins, the same bits at any width.

Constants, each rounded once to float32 (decimal → binary32):
    SQRT1_2 = 1/√2, INV_SQRT_2PI = 1/√(2π), BETA = √(2/π), KAPPA = 0.044715,
    KAPPA3 = 3·0.044715 = 0.134145.
Forward (y) and the value each backward multiplies the incoming gradient g by (d), one binary32
operation per step, left to right as written:
    GELU none:  c = 1 + erf32(x·SQRT1_2);  y = (x·0.5)·c
                d = (c·0.5) + x·(exp32((x·x)·(−0.5))·INV_SQRT_2PI)
    GELU tanh:  t = tanh32(BETA·(x + KAPPA·((x·x)·x)));  y = (x·0.5)·(1 + t)
                d = ((1 + t)·0.5) + ((x·0.5)·(1 − t·t))·(BETA·(1 + KAPPA3·(x·x)))
    Tanh:       y = tanh32(x);     d = 1 − y·y          (from the output y)
    Sigmoid:    y = sigmoid32(x);  d = y·(1 − y)        (from the output y)
    dx = g·d, or dx = dx + g·d when the input's gradient is already written (ACCUMULATE).
"""
from std.bit import count_trailing_zeros
from std.sys import simd_width_of
from training.config import F32P, I64P
from training.pool import PartFn, part_range, parts_for, split_parts
from training.portable_math import (erf32, erf32_scalar, erf32_small, exp32, exp32_scalar,
                                    sigmoid32, sigmoid32_scalar, tanh32, tanh32_scalar)

comptime W = simd_width_of[DType.float32]()  # the build's lanes (16 in x86-64-v4, 8 in v3): independent outputs, the same bits at any width
comptime F32 = DType.float32

comptime SQRT1_2 = Float32(0.70710678118654752440)
comptime INV_SQRT_2PI = Float32(0.39894228040143267794)
comptime BETA = Float32(0.79788456080286535588)
comptime KAPPA = Float32(0.044715)
comptime KAPPA3 = Float32(0.134145)

# What `_value` computes from (a, g): the forward reads a = x, the backward a = y and
# multiplies g by the derivative (GELU has loops of its own: its backward reuses a value of
# its forward).
comptime TANH_FWD = 2
comptime SIGMOID_FWD = 3
comptime TANH_BWD = 6
comptime SIGMOID_BWD = 7


@always_inline
def _tanh[w: Int](x: SIMD[F32, w]) -> SIMD[F32, w]:
    comptime if w == 1:
        return tanh32_scalar(x[0])
    else:
        return tanh32[w](x)


@always_inline
def _sigmoid[w: Int](x: SIMD[F32, w]) -> SIMD[F32, w]:
    comptime if w == 1:
        return sigmoid32_scalar(x[0])
    else:
        return sigmoid32[w](x)


@always_inline
def _erf[w: Int](x: SIMD[F32, w]) -> SIMD[F32, w]:
    comptime if w == 1:
        return erf32_scalar(x[0])
    else:
        return erf32[w](x)


@always_inline
def _exp[w: Int](x: SIMD[F32, w]) -> SIMD[F32, w]:
    comptime if w == 1:
        return exp32_scalar(x[0])
    else:
        return exp32[w](x)


@always_inline
def _gelu_tanh_t[w: Int](x: SIMD[F32, w]) -> SIMD[F32, w]:
    """tanh32(BETA·(x + KAPPA·x³)), x³ = (x·x)·x."""
    var x3 = (x * x) * x
    return _tanh[w](BETA * (x + KAPPA * x3))


@always_inline
def _value[w: Int, kind: Int](a: SIMD[F32, w], g: SIMD[F32, w]) -> SIMD[F32, w]:
    comptime if kind == TANH_FWD:
        return _tanh[w](a)
    elif kind == SIGMOID_FWD:
        return _sigmoid[w](a)
    elif kind == TANH_BWD:
        return g * (1.0 - a * a)
    else:
        return g * (a * (1.0 - a))


def _map[kind: Int](a: F32P, g: F32P, dst: F32P, n: Int, accumulate: Bool):
    var i = 0
    while i + W <= n:
        var v = _value[W, kind](a.unsafe_load[width=W](i), g.unsafe_load[width=W](i))
        if accumulate:
            v = dst.unsafe_load[width=W](i) + v
        dst.unsafe_offset(i).unsafe_store(v)
        i += W
    while i < n:
        var v = _value[1, kind](a[unsafe_offset=i], g[unsafe_offset=i])[0]
        if accumulate:
            v = dst[unsafe_offset=i] + v
        dst[unsafe_offset=i] = v
        i += 1


@always_inline
def _gelu_fwd[w: Int](a: SIMD[F32, w], tanh_form: Bool) -> Tuple[SIMD[F32, w], SIMD[F32, w]]:
    """(y, the value the backward reuses): `1 + erf32(x·SQRT1_2)`, or the tanh form's t."""
    if tanh_form:
        var t = _gelu_tanh_t[w](a)
        return ((a * 0.5) * (1.0 + t), t)
    var c = 1.0 + _erf[w](a * SQRT1_2)
    return ((a * 0.5) * c, c)


@always_inline
def _gelu_bwd[w: Int](
    a: SIMD[F32, w], c: SIMD[F32, w], g: SIMD[F32, w], tanh_form: Bool
) -> SIMD[F32, w]:
    """g·GELU'(a) from the forward's `c` (the same float32 the forward formed, so the same
    bits as forming it again)."""
    if tanh_form:
        var left_d = (1.0 + c) * 0.5
        var right_d = 1.0 - c * c
        var inner_d = BETA * (1.0 + KAPPA3 * (a * a))
        return g * (left_d + ((a * 0.5) * right_d) * inner_d)
    var pdf = _exp[w]((a * a) * -0.5) * INV_SQRT_2PI
    return g * (c * 0.5 + a * pdf)


comptime GELU_WORK = 4  # an element against a multiply-add: its erf is costly, but its lines move


@fieldwise_init
struct _Gelu(ImplicitlyCopyable):
    """One GELU call's tensors (addresses), read by its parts (ranges of whole vectors)."""

    var x: Int
    var c: Int
    var g: Int  # the backward's incoming gradient
    var out: Int  # y, or dx
    var n: Int
    var tanh_form: Bool
    var accumulate: Bool


def _span(e: _Gelu, part: Int, parts: Int) -> Tuple[Int, Int]:
    """Elements of part `part`: whole vectors of W (the tail to the last part)."""
    var r = part_range((e.n + W - 1) // W, part, parts)
    return (r[0] * W, min(e.n, r[1] * W))


def _split(pool: Int, run: PartFn, e: _Gelu):
    var vectors = (e.n + W - 1) // W
    split_parts(pool, run, e, parts_for(pool, vectors, e.n * GELU_WORK))


def gelu_forward(x: F32P, y: F32P, c: F32P, n: Int, tanh_form: Bool, pool: Int):
    """y = GELU(x); `c` keeps `1 + erf32(x·SQRT1_2)` (or the tanh form's t) for the
    backward. Ranges of elements shared over `pool` (training/pool.mojo)."""
    _split(pool, _forward_part, _Gelu(Int(x), Int(c), 0, Int(y), n, tanh_form, False))


def _forward_part(ctx: Int, part: Int, parts: Int):
    var e = Pointer[_Gelu, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = _span(e, part, parts)
    var x = F32P(unsafe_from_address=e.x)
    var y = F32P(unsafe_from_address=e.out)
    var c = F32P(unsafe_from_address=e.c)
    var i = r[0]
    # Lanes waiting for erf32's full form: their elements and scaled inputs (at most W - 1
    # left over, then a block's 2W), and room for a block's vector.
    var at_buf = List[Int64](length=4 * W, fill=0)
    var z_buf = List[Float32](length=6 * W, fill=0)
    var at = I64P(unsafe_from_address=Int(at_buf.unsafe_ptr()))
    var zs = F32P(unsafe_from_address=Int(z_buf.unsafe_ptr()))
    var waiting = 0
    while i + 2 * W <= r[1]:
        if e.tanh_form:
            var v = _gelu_fwd[W](x.unsafe_load[width=W](i), True)
            y.unsafe_offset(i).unsafe_store(v[0])
            c.unsafe_offset(i).unsafe_store(v[1])
            i += W
        else:  # two vectors a block: their polynomials' latency chains side by side
            _erf_block[2 * W](x, y, c, i, at, zs, waiting)
            i += 2 * W
    while i + W <= r[1]:
        if e.tanh_form:
            var v = _gelu_fwd[W](x.unsafe_load[width=W](i), True)
            y.unsafe_offset(i).unsafe_store(v[0])
            c.unsafe_offset(i).unsafe_store(v[1])
        else:
            _erf_block[W](x, y, c, i, at, zs, waiting)
        i += W
    _gelu_full(x, y, c, at, zs, waiting)
    _ = len(at_buf) + len(z_buf)
    while i < r[1]:
        var v = _gelu_fwd[1](x[unsafe_offset=i], e.tanh_form)
        y[unsafe_offset=i] = v[0][0]
        c[unsafe_offset=i] = v[1][0]
        i += 1


@always_inline
def _erf_block[G: Int](x: F32P, y: F32P, c: F32P, i: Int, at: I64P, zs: F32P, mut waiting: Int):
    """_gelu_fwd's erf form on G elements at i: erf32's one-polynomial lanes (|x·SQRT1_2| <=
    1) here, the others queued in `at`/`zs` for `_gelu_full` (a whole vector at a time)."""
    var a = x.unsafe_load[width=G](i)
    var z = a * SQRT1_2
    var s = erf32_small[G](z)
    var cv = 1.0 + s[0]
    y.unsafe_offset(i).unsafe_store((a * 0.5) * cv)
    c.unsafe_offset(i).unsafe_store(cv)
    var lane_bits = SIMD[DType.uint32, G](0)
    comptime for l in range(G):
        lane_bits[l] = UInt32(1) << UInt32(l)
    var big = Int(s[1].select(SIMD[DType.uint32, G](0), lane_bits).reduce_or())
    if big == 0:
        return
    var tmp = zs.unsafe_offset(4 * W)
    tmp.unsafe_store(z)
    while big != 0:
        var l = count_trailing_zeros(big)
        big &= big - 1
        at[unsafe_offset=waiting] = Int64(i + l)
        zs[unsafe_offset=waiting] = tmp[unsafe_offset=l]
        waiting += 1
    while waiting >= W:
        _gelu_full(x, y, c, at, zs, W)
        for l in range(W, waiting):
            at[unsafe_offset=l - W] = at[unsafe_offset=l]
            zs[unsafe_offset=l - W] = zs[unsafe_offset=l]
        waiting -= W


def _gelu_full(x: F32P, y: F32P, c: F32P, at: I64P, zs: F32P, n: Int):
    """y and c of the first n queued elements (`at`; zs: their x·SQRT1_2) by erf32 itself,
    in one vector (the lanes past n hold leftovers: computed, never stored)."""
    if n == 0:
        return
    var tmp = zs.unsafe_offset(4 * W)
    tmp.unsafe_store(1.0 + erf32[W](zs.unsafe_load[width=W]()))
    for l in range(n):
        var k = Int(at[unsafe_offset=l])
        c[unsafe_offset=k] = tmp[unsafe_offset=l]
        y[unsafe_offset=k] = (x[unsafe_offset=k] * 0.5) * tmp[unsafe_offset=l]


def gelu_backward(x: F32P, c: F32P, g: F32P, dx: F32P, n: Int, tanh_form: Bool,
                  accumulate: Bool, pool: Int):
    """dx = g·GELU'(x) from the input x and the forward's `c`, or added to dx."""
    _split(pool, _backward_part, _Gelu(Int(x), Int(c), Int(g), Int(dx), n, tanh_form,
                                       accumulate))


def _backward_part(ctx: Int, part: Int, parts: Int):
    var e = Pointer[_Gelu, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = _span(e, part, parts)
    var x = F32P(unsafe_from_address=e.x)
    var c = F32P(unsafe_from_address=e.c)
    var g = F32P(unsafe_from_address=e.g)
    var dx = F32P(unsafe_from_address=e.out)
    var i = r[0]
    while i + W <= r[1]:
        var v = _gelu_bwd[W](x.unsafe_load[width=W](i), c.unsafe_load[width=W](i),
                             g.unsafe_load[width=W](i), e.tanh_form)
        if e.accumulate:
            v = dx.unsafe_load[width=W](i) + v
        dx.unsafe_offset(i).unsafe_store(v)
        i += W
    while i < r[1]:
        var v = _gelu_bwd[1](x[unsafe_offset=i], c[unsafe_offset=i], g[unsafe_offset=i],
                             e.tanh_form)[0]
        if e.accumulate:
            v = dx[unsafe_offset=i] + v
        dx[unsafe_offset=i] = v
        i += 1


def tanh_forward(x: F32P, y: F32P, n: Int):
    _map[TANH_FWD](x, x, y, n, False)


def tanh_backward(y: F32P, g: F32P, dx: F32P, n: Int, accumulate: Bool):
    """dx = g·(1 − y·y) from the output y, or added to dx."""
    _map[TANH_BWD](y, g, dx, n, accumulate)


def sigmoid_forward(x: F32P, y: F32P, n: Int):
    _map[SIGMOID_FWD](x, x, y, n, False)


def sigmoid_backward(y: F32P, g: F32P, dx: F32P, n: Int, accumulate: Bool):
    """dx = g·(y·(1 − y)) from the output y, or added to dx."""
    _map[SIGMOID_BWD](y, g, dx, n, accumulate)
