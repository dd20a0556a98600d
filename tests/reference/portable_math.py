"""Pure-Python mirror of `mojo/training/portable_math.mojo` (exp32, log32, tanh32, sigmoid32,
erf32), op by op.

Every binary32 operation of the kernel is one binary64 operation here, rounded once with
`f32` (exact mirror: binary64 holds every product/sum of two float32 values to within one
rounding, so the result equals the correctly rounded binary32 operation). The integer and
bit manipulations (floor, exponent extraction, 2^k from bits, |x| and the sign copy) are exact
in both.
"""

import math

from .f32 import bits, f32, from_bits

LOG2E = f32(1.44269504088896341)
LN2_HI = f32(0.693359375)
LN2_LO = f32(-2.12194440e-4)
EXP_COEFFS = tuple(
    f32(c)
    for c in (
        1.9875691500e-4,
        1.3981999507e-3,
        8.3334519073e-3,
        4.1665795894e-2,
        1.6666665459e-1,
        5.0000001201e-1,
    )
)
EXP_HI_CLAMP = 89.0
EXP_LO_CLAMP = -104.0

SQRT_HALF = f32(0.707106781186547524)
MIN_NORMAL = 2.0**-126
SUBNORMAL_SCALE = 2.0**25
LOG_COEFFS = tuple(
    f32(c)
    for c in (
        7.0376836292e-2,
        -1.1514610310e-1,
        1.1676998740e-1,
        -1.2420140846e-1,
        1.4249322787e-1,
        -1.6668057665e-1,
        2.0000714765e-1,
        -2.4999993993e-1,
        3.3333331174e-1,
    )
)


def exp32(x):
    """The kernel's float32 e^x, as a Python float holding a float32 value."""
    x = f32(x)
    if math.isnan(x):
        return x
    xc = min(max(x, EXP_LO_CLAMP), EXP_HI_CLAMP)
    n = float(math.floor(f32(f32(xc * LOG2E) + 0.5)))
    r = f32(f32(xc - f32(n * LN2_HI)) - f32(n * LN2_LO))
    p = EXP_COEFFS[0]
    for c in EXP_COEFFS[1:]:
        p = f32(f32(p * r) + c)
    y = f32(f32(f32(p * f32(r * r)) + r) + 1.0)
    k = int(n)
    k1, k2 = (k + 64, -64) if k < -126 else (k - 1, 1) if k > 127 else (k, 0)
    return f32(f32(y * 2.0**k1) * 2.0**k2)


def log32(x):
    """The kernel's float32 natural log, as a Python float holding a float32 value."""
    x = f32(x)
    if math.isnan(x):
        return x
    if x < 0.0:
        return math.nan
    if x == 0.0:
        return -math.inf
    if x == math.inf:
        return x
    e = 0
    if x < MIN_NORMAL:
        x = f32(x * SUBNORMAL_SCALE)
        e = -25
    b = bits(x)
    e += ((b >> 23) & 0xFF) - 126
    m = from_bits((b & 0x007FFFFF) | 0x3F000000)
    if m < SQRT_HALF:
        e -= 1
        f = f32(f32(m + m) - 1.0)
    else:
        f = f32(m - 1.0)
    fe = float(e)
    z = f32(f * f)
    p = LOG_COEFFS[0]
    for c in LOG_COEFFS[1:]:
        p = f32(f32(p * f) + c)
    y = f32(f32(p * f) * z)
    y = f32(y + f32(LN2_LO * fe))
    y = f32(y + f32(-0.5 * z))
    v = f32(f + y)
    return f32(v + f32(LN2_HI * fe))


# ---------------------------------------------------------------- tanh, sigmoid, erf

SIGN = 0x80000000
TANH_SMALL = 0.625
TANH_COEFFS = tuple(
    f32(c)
    for c in (
        -5.70498872745e-3,
        2.06390887954e-2,
        -5.37397155531e-2,
        1.33314422036e-1,
        -3.33332819422e-1,
    )
)
ERF_COEFFS = tuple(
    f32(c)
    for c in (
        7.853861353153693e-5,
        -8.010193625184903e-4,
        5.188327685732524e-3,
        -2.685381193529856e-2,
        1.128358514861418e-1,
        -3.761262582423300e-1,
        1.28379165726710e-1,  # Cephes' 1.128379165726710 minus the 1 kept exact
    )
)
ERFC_P_COEFFS = tuple(
    f32(c)
    for c in (
        2.326819970068386e-2,
        -1.387039388740657e-1,
        3.687424674597105e-1,
        -5.824733027278666e-1,
        6.210004621745983e-1,
        -4.944515323274145e-1,
        3.404879937665872e-1,
        -2.741127028184656e-1,
        5.638259427386472e-1,
    )
)
ERFC_R_COEFFS = tuple(
    f32(c)
    for c in (
        -1.047766399936249e1,
        1.297719955372516e1,
        -7.495518717768503e0,
        2.921019019210786e0,
        -1.015265279202700e0,
        4.218463358204948e-1,
        -2.820767439740514e-1,
        5.641895067754075e-1,
    )
)


def _horner(coeffs, z):
    p = coeffs[0]
    for c in coeffs[1:]:
        p = f32(f32(p * z) + c)
    return p


def _with_sign_of(r, x):
    """|r| carrying the sign bit of x (exact bit operations)."""
    return from_bits((bits(r) & ~SIGN) | (bits(x) & SIGN))


def tanh32(x):
    """The kernel's float32 tanh, as a Python float holding a float32 value."""
    x = f32(x)
    if math.isnan(x) or x == 0.0:
        return x
    ax = abs(x)
    if ax < TANH_SMALL:
        z = f32(x * x)
        p = _horner(TANH_COEFFS, z)
        return f32(f32(f32(p * z) * x) + x)
    e = exp32(f32(ax + ax))
    r = f32(1.0 - f32(2.0 / f32(e + 1.0)))
    return _with_sign_of(r, x)


def sigmoid32(x):
    """The kernel's float32 logistic function 1/(1 + e^-x), as a Python float (float32 value)."""
    x = f32(x)
    if math.isnan(x):
        return x
    e = exp32(-abs(x))
    d = f32(1.0 + e)
    return f32(e / d) if x < 0.0 else f32(1.0 / d)


def erf32(x):
    """The kernel's float32 erf, as a Python float holding a float32 value."""
    x = f32(x)
    if math.isnan(x):
        return x
    ax = abs(x)
    if ax <= 1.0:
        z = f32(x * x)
        return f32(x + f32(x * _horner(ERF_COEFFS, z)))
    e = exp32(-f32(ax * ax))
    q = f32(1.0 / ax)
    y = f32(q * q)
    p = _horner(ERFC_P_COEFFS if ax < 2.0 else ERFC_R_COEFFS, y)
    c = f32(f32(e * q) * p)
    return _with_sign_of(f32(1.0 - c), x)
