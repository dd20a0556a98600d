"""The project's own float32 exp, log, tanh, logistic (sigmoid) and erf: fixed range reduction,
fixed polynomials, fixed evaluation order, no FMA, no vendor math (ARITHMETIC.md "exp and log"
and "tanh, sigmoid and erf").

API (each also has a branchy scalar twin with the same bits, for scalar loops):
    exp32[w](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]     exp32_scalar(x: Float32)
    log32[w](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]     log32_scalar(x: Float32)
    tanh32[w](x)                                                       tanh32_scalar(x)
    sigmoid32[w](x)   (1/(1 + e^−x))                                   sigmoid32_scalar(x)
    erf32[w](x)                                                        erf32_scalar(x)
Every lane of the SIMD form gives the bits of the scalar form, so any SIMD width and any
schedule across independent outputs keeps identical-mode results. `tests/reference/
portable_math.py` mirrors every float32 operation here and matches bit for bit.

exp32(x), after clamping x to [-104, 89] (exp of the clamps is 0 and +inf after rounding):
    n = floor(x·LOG2E + 0.5)              round to nearest; |n| <= 150
    r = (x − n·LN2_HI) − n·LN2_LO         Cody–Waite: n·LN2_HI is exact (9 + 8 bits)
    p = ((((E0·r + E1)·r + E2)·r + E3)·r + E4)·r + E5       Horner
    y = ((p·(r·r)) + r) + 1               y in [0.7, 1.42]
    exp = (y·2^k1)·2^k2                   k1 + k2 = n; y·2^k1 is exact and normal, so the
                                          second product is the only rounding: correct into
                                          the subnormal range and overflow exactly at inf
    k1, k2 = (n+64, −64) when n < −126; (n−1, 1) when n > 127; else (n, 0)
    NaN → NaN, +inf → +inf, −inf → +0.
log32(x):
    subnormal x is scaled by 2^25 first (exact); x = m·2^e with m in [0.5, 1)
    if m < SQRT_HALF: e = e − 1, f = (m + m) − 1  else f = m − 1         (both exact)
    z = f·f
    p = (((((((L0·f + L1)·f + L2)·f + L3)·f + L4)·f + L5)·f + L6)·f + L7)·f + L8   Horner
    y = (p·f)·z;  y = y + LN2_LO·e;  y = y + (−0.5)·z;  v = f + y;  v = v + LN2_HI·e
    +0/−0 → −inf, x < 0 → NaN, +inf → +inf, NaN → NaN.
Coefficients: the single-precision minimax sets of Cephes' expf/logf (public domain ideas,
our own code). In `identical` builds (`--fp-mode contract=off`) every line above is one
binary32 operation; `fast` builds let the compiler contract to FMA (a different ±1 ulp).

Measured error against correctly rounded float32 (exp/log in binary64 rounded once), by
`tests/test_portable_math.py` over >= 10^6 points each, identical mode:
    exp32: max 1 ulp on [-104, 88.72] (uniform and bit-pattern samples, subnormal results
           included); overflows to +inf from x = 88.72284 exactly like correctly rounded exp,
           underflows to 0 below -103.972084 exactly like it.
    log32: max 1 ulp over all positive finite float32 (bit-pattern samples, subnormals
           included; exhaustive over [0.5, 2) in the Python reference).
tanh32, sigmoid32, erf32 (operation sequences in ARITHMETIC.md "tanh, sigmoid and erf") are
built from exp32 and binary32 + − × ÷ and exact sign-bit operations. Measured over every
float32 of their unsaturated ranges: tanh32 max 1 ulp, erf32 max 2 ulp (at one input,
x = 1.0025244; 1 elsewhere), sigmoid32 max 2 ulp (x < 0; 1 ulp for x >= 0).
"""
from std.math import floor
from std.memory import bitcast
from std.utils.numerics import inf, nan

comptime F32 = DType.float32

comptime EXP_HI_CLAMP = Float32(89.0)
comptime EXP_LO_CLAMP = Float32(-104.0)
comptime LOG2E = Float32(1.44269504088896341)
comptime LN2_HI = Float32(0.693359375)
comptime LN2_LO = Float32(-2.12194440e-4)
comptime E0 = Float32(1.9875691500e-4)
comptime E1 = Float32(1.3981999507e-3)
comptime E2 = Float32(8.3334519073e-3)
comptime E3 = Float32(4.1665795894e-2)
comptime E4 = Float32(1.6666665459e-1)
comptime E5 = Float32(5.0000001201e-1)

comptime SQRT_HALF = Float32(0.707106781186547524)
comptime MIN_NORMAL = Float32(1.17549435e-38)
comptime SUBNORMAL_SCALE = Float32(33554432.0)  # 2^25
comptime L0 = Float32(7.0376836292e-2)
comptime L1 = Float32(-1.1514610310e-1)
comptime L2 = Float32(1.1676998740e-1)
comptime L3 = Float32(-1.2420140846e-1)
comptime L4 = Float32(1.4249322787e-1)
comptime L5 = Float32(-1.6668057665e-1)
comptime L6 = Float32(2.0000714765e-1)
comptime L7 = Float32(-2.4999993993e-1)
comptime L8 = Float32(3.3333331174e-1)


@always_inline
def _is_nan[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.bool, w]:
    """NaN test on the bits: SIMD `ne` is an ordered compare (false for NaN)."""
    return (bitcast[DType.uint32, w](x) & 0x7FFFFFFF).gt(0x7F800000)


@always_inline
def _pow2[w: Int](k: SIMD[DType.int32, w]) -> SIMD[DType.float32, w]:
    """2^k as float32 for k in [-126, 127] (built from the exponent bits, exact)."""
    return bitcast[F32, w]((k + 127).cast[DType.uint32]() << 23)


# ---------------------------------------------------------------- exp


@always_inline
def _exp_poly[w: Int](r: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    var p = E0 * r + E1
    p = p * r + E2
    p = p * r + E3
    p = p * r + E4
    p = p * r + E5
    return ((p * (r * r)) + r) + 1.0


def exp32[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Float32 e^x per lane, bit-identical to `exp32_scalar` on every lane."""
    var xc = x.gt(EXP_HI_CLAMP).select(SIMD[DType.float32, w](EXP_HI_CLAMP), x)
    xc = xc.lt(EXP_LO_CLAMP).select(SIMD[DType.float32, w](EXP_LO_CLAMP), xc)
    var is_nan = _is_nan[w](x)
    xc = is_nan.select(SIMD[DType.float32, w](0.0), xc)
    var n = floor(xc * LOG2E + 0.5)
    var r = (xc - n * LN2_HI) - n * LN2_LO
    var y = _exp_poly[w](r)
    var ni = n.cast[DType.int32]()
    var low = ni.lt(-126)
    var high = ni.gt(127)
    var k1 = low.select(ni + 64, high.select(ni - 1, ni))
    var k2 = low.select(SIMD[DType.int32, w](-64), high.select(SIMD[DType.int32, w](1),
                                                               SIMD[DType.int32, w](0)))
    var out = (y * _pow2[w](k1)) * _pow2[w](k2)
    return is_nan.select(x, out)


def exp32_scalar(x: Float32) -> Float32:
    """Float32 e^x with branches instead of lane selects; the same bits as `exp32`."""
    if _is_nan[1](x):
        return x
    var xc = x
    if xc > EXP_HI_CLAMP:
        xc = EXP_HI_CLAMP
    if xc < EXP_LO_CLAMP:
        xc = EXP_LO_CLAMP
    var n = floor(xc * LOG2E + 0.5)
    var r = (xc - n * LN2_HI) - n * LN2_LO
    var y = _exp_poly[1](r)
    var ni = Int(n)
    var k1 = ni
    var k2 = 0
    if ni < -126:
        k1 = ni + 64
        k2 = -64
    elif ni > 127:
        k1 = ni - 1
        k2 = 1
    return (y * _pow2[1](Int32(k1))) * _pow2[1](Int32(k2))


# ---------------------------------------------------------------- log


@always_inline
def _log_core[w: Int](f: SIMD[DType.float32, w], e: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    var z = f * f
    var p = L0 * f + L1
    p = p * f + L2
    p = p * f + L3
    p = p * f + L4
    p = p * f + L5
    p = p * f + L6
    p = p * f + L7
    p = p * f + L8
    var y = (p * f) * z
    y = y + LN2_LO * e
    y = y + Float32(-0.5) * z
    var v = f + y
    return v + LN2_HI * e


def log32[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Float32 natural log per lane, bit-identical to `log32_scalar` on every lane."""
    var ok = x.gt(0.0) & x.lt(inf[F32]())  # positive and finite, not NaN
    var sub = x.lt(MIN_NORMAL)
    var xs = sub.select(x * SUBNORMAL_SCALE, x)
    xs = ok.select(xs, SIMD[DType.float32, w](1.0))
    var b = bitcast[DType.uint32, w](xs)
    var e = ((b >> 23) & 0xFF).cast[DType.int32]() - 126
    e = (ok & sub).select(e - 25, e)
    var m = bitcast[F32, w]((b & 0x007FFFFF) | 0x3F000000)
    var lo = m.lt(SQRT_HALF)
    e = lo.select(e - 1, e)
    var f = lo.select((m + m) - 1.0, m - 1.0)
    var v = _log_core[w](f, e.cast[F32]())
    # Specials, in this order: +inf → +inf, 0 → −inf, negative → NaN, NaN → NaN.
    v = x.eq(inf[F32]()).select(x, v)
    v = x.eq(0.0).select(SIMD[DType.float32, w](-inf[F32]()), v)
    v = x.lt(0.0).select(SIMD[DType.float32, w](nan[F32]()), v)
    return _is_nan[w](x).select(x, v)


def log32_scalar(x: Float32) -> Float32:
    """Float32 natural log with branches instead of lane selects; the same bits as `log32`."""
    if _is_nan[1](x):
        return x
    if x < 0.0:
        return nan[F32]()
    if x == 0.0:
        return -inf[F32]()
    if x == inf[F32]():
        return x
    var xs = x
    var e = Int32(0)
    if x < MIN_NORMAL:
        xs = x * SUBNORMAL_SCALE
        e = -25
    var b = bitcast[DType.uint32, 1](xs)
    e = e + ((b >> 23) & 0xFF).cast[DType.int32]() - 126
    var m = bitcast[F32, 1]((b & 0x007FFFFF) | 0x3F000000)
    var f: Float32
    if m < SQRT_HALF:
        e = e - 1
        f = (m + m) - 1.0
    else:
        f = m - 1.0
    return _log_core[1](f, e.cast[F32]())


# ---------------------------------------------------------------- tanh, sigmoid, erf

comptime ABS_MASK = UInt32(0x7FFFFFFF)
comptime SIGN_MASK = UInt32(0x80000000)

comptime TANH_SMALL = Float32(0.625)
comptime T0 = Float32(-5.70498872745e-3)
comptime T1 = Float32(2.06390887954e-2)
comptime T2 = Float32(-5.37397155531e-2)
comptime T3 = Float32(1.33314422036e-1)
comptime T4 = Float32(-3.33332819422e-1)

# erf(x) = x + x·S(x²) on |x| <= 1: Cephes' x·P(x²) with P's constant 1.128379165726710 split
# as 1 + 0.128379165726710, so the leading term x is exact and only the correction rounds.
comptime S0 = Float32(7.853861353153693e-5)
comptime S1 = Float32(-8.010193625184903e-4)
comptime S2 = Float32(5.188327685732524e-3)
comptime S3 = Float32(-2.685381193529856e-2)
comptime S4 = Float32(1.128358514861418e-1)
comptime S5 = Float32(-3.761262582423300e-1)
comptime S6 = Float32(1.28379165726710e-1)
# erfc(x) = e^(−x²)·(1/x)·P(1/x²) on 1 < x < 2, the same with R on x >= 2 (Cephes' erfcf).
comptime P0 = Float32(2.326819970068386e-2)
comptime P1 = Float32(-1.387039388740657e-1)
comptime P2 = Float32(3.687424674597105e-1)
comptime P3 = Float32(-5.824733027278666e-1)
comptime P4 = Float32(6.210004621745983e-1)
comptime P5 = Float32(-4.944515323274145e-1)
comptime P6 = Float32(3.404879937665872e-1)
comptime P7 = Float32(-2.741127028184656e-1)
comptime P8 = Float32(5.638259427386472e-1)
comptime R0 = Float32(-1.047766399936249e1)
comptime R1 = Float32(1.297719955372516e1)
comptime R2 = Float32(-7.495518717768503e0)
comptime R3 = Float32(2.921019019210786e0)
comptime R4 = Float32(-1.015265279202700e0)
comptime R5 = Float32(4.218463358204948e-1)
comptime R6 = Float32(-2.820767439740514e-1)
comptime R7 = Float32(5.641895067754075e-1)


@always_inline
def _abs[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    return bitcast[F32, w](bitcast[DType.uint32, w](x) & ABS_MASK)


@always_inline
def _with_sign_of[w: Int](r: SIMD[DType.float32, w],
                          x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """|r| with the sign bit of x: restoring the sign of an odd function exactly."""
    var rb = bitcast[DType.uint32, w](r) & ABS_MASK
    return bitcast[F32, w](rb | (bitcast[DType.uint32, w](x) & SIGN_MASK))


@always_inline
def _tanh_small[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    var z = x * x
    var p = T0 * z + T1
    p = p * z + T2
    p = p * z + T3
    p = p * z + T4
    return ((p * z) * x) + x


@always_inline
def _tanh_large[w: Int](e: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """1 − 2/(e + 1) for e = exp32(2|x|): tanh|x| without cancellation for |x| >= 0.625."""
    return 1.0 - 2.0 / (e + 1.0)


def tanh32[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Float32 tanh per lane, bit-identical to `tanh32_scalar` on every lane."""
    var ax = _abs[w](x)
    var large = _with_sign_of[w](_tanh_large[w](exp32[w](ax + ax)), x)
    var out = ax.lt(TANH_SMALL).select(_tanh_small[w](x), large)
    # ±0 by name: the polynomial's (p·z)·x + x turns −0 into +0.
    out = x.eq(0.0).select(x, out)
    return _is_nan[w](x).select(x, out)


def tanh32_scalar(x: Float32) -> Float32:
    """Float32 tanh with branches instead of lane selects; the same bits as `tanh32`."""
    if _is_nan[1](x):
        return x
    if x == 0.0:
        return x
    var ax = _abs[1](x)
    if ax < TANH_SMALL:
        return _tanh_small[1](x)
    return _with_sign_of[1](_tanh_large[1](exp32_scalar(ax + ax)), x)


def sigmoid32[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Float32 logistic 1/(1 + e^−x) per lane, bit-identical to `sigmoid32_scalar`."""
    # e^−|x| never overflows: x < 0 takes e/(1 + e), which keeps the subnormal tail
    # (1/(1 + e^−x) would be 1/inf = 0 from x = −88.7 on).
    var e = exp32[w](-_abs[w](x))
    var d = 1.0 + e
    var out = x.lt(0.0).select(e, SIMD[DType.float32, w](1.0)) / d
    return _is_nan[w](x).select(x, out)


def sigmoid32_scalar(x: Float32) -> Float32:
    """Float32 logistic with branches instead of lane selects; the same bits as `sigmoid32`."""
    if _is_nan[1](x):
        return x
    var e = exp32_scalar(-_abs[1](x))
    var d = 1.0 + e
    if x < 0.0:
        return e / d
    return 1.0 / d


@always_inline
def _erf_small[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    var z = x * x
    var p = S0 * z + S1
    p = p * z + S2
    p = p * z + S3
    p = p * z + S4
    p = p * z + S5
    p = p * z + S6
    return x + x * p


@always_inline
def _erfc_p[w: Int](y: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    var p = P0 * y + P1
    p = p * y + P2
    p = p * y + P3
    p = p * y + P4
    p = p * y + P5
    p = p * y + P6
    p = p * y + P7
    return p * y + P8


@always_inline
def _erfc_r[w: Int](y: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    var p = R0 * y + R1
    p = p * y + R2
    p = p * y + R3
    p = p * y + R4
    p = p * y + R5
    p = p * y + R6
    return p * y + R7


def erf32[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Float32 erf per lane, bit-identical to `erf32_scalar` on every lane. A branch no lane
    takes is not computed (each lane's value is its own branch's either way): a vector of
    |x| <= 1 is one polynomial, where all branches cost an exp, a division and three."""
    var ax = _abs[w](x)
    var small = ax.le(1.0)
    var out: SIMD[DType.float32, w]
    if small.reduce_and():
        out = _erf_small[w](x)
    else:
        var e = exp32[w](-(ax * ax))
        var q = 1.0 / ax
        var y = q * q
        var mid = ax.lt(2.0)
        var p: SIMD[DType.float32, w]
        if mid.reduce_and():
            p = _erfc_p[w](y)
        elif not mid.reduce_or():
            p = _erfc_r[w](y)
        else:
            p = mid.select(_erfc_p[w](y), _erfc_r[w](y))
        out = _with_sign_of[w](1.0 - (e * q) * p, x)
        if small.reduce_or():
            out = small.select(_erf_small[w](x), out)
    return _is_nan[w](x).select(x, out)


def erf32_small[w: Int](x: SIMD[DType.float32, w]) -> Tuple[SIMD[DType.float32, w],
                                                            SIMD[DType.bool, w]]:
    """erf32 on the lanes with |x| <= 1 (one polynomial: their bits), and the mask of those
    lanes: the others (|x| > 1, NaN) need `erf32` itself. GELU's inputs have ~1.5 % of such
    elements, in a fifth of its vectors: gathered for erf32, they cost a fifth as much."""
    return (_erf_small[w](x), _abs[w](x).le(1.0))


def erf32_scalar(x: Float32) -> Float32:
    """Float32 erf with branches instead of lane selects; the same bits as `erf32`."""
    if _is_nan[1](x):
        return x
    var ax = _abs[1](x)
    if ax <= 1.0:
        return _erf_small[1](x)
    var e = exp32_scalar(-(ax * ax))
    var q = 1.0 / ax
    var y = q * q
    var p = _erfc_p[1](y) if ax < 2.0 else _erfc_r[1](y)
    return _with_sign_of[1](1.0 - (e * q) * p, x)
