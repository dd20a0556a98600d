"""Host scalar math that lands in a result, portable across platforms (docs/ARITHMETIC.md).

Only Python float `+ - * /` (IEEE binary64, round to nearest even) and `math.sqrt` (correctly
rounded) are used, plus exact operations (`abs`, comparisons, `%` by 2.0, integer ops). No
`math.cos` / `math.exp` / `math.log`: libm results may differ by an ulp between platforms.
Results that feed the binding are rounded once to float32 with `round_f32`.
"""

import math
import struct

_F32 = struct.Struct("<f")

# cos and sin Taylor coefficients, 1/(2k)! and 1/(2k+1)!, as exact-as-written double literals.
# On |x| <= pi/4 the first omitted term is below 2e-19, far under a double ulp of the result.
_COS = (
    1.0,
    -1.0 / 2,
    1.0 / 24,
    -1.0 / 720,
    1.0 / 40320,
    -1.0 / 3628800,
    1.0 / 479001600,
    -1.0 / 87178291200,
    1.0 / 20922789888000,
    -1.0 / 6402373705728000,
)
_SIN = (
    1.0,
    -1.0 / 6,
    1.0 / 120,
    -1.0 / 5040,
    1.0 / 362880,
    -1.0 / 39916800,
    1.0 / 6227020800,
    -1.0 / 1307674368000,
    1.0 / 355687428096000,
)
PI = 3.141592653589793


def round_f32(x):
    """`x` rounded to the nearest float32 (ties to even) as a Python float; ±inf on overflow,
    subnormals kept."""
    x = float(x)
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # raised exactly when the correctly rounded value is infinite
        return math.copysign(math.inf, x)


def _poly(coeffs, x2):
    """Horner in x2, highest coefficient first (a fixed evaluation order)."""
    acc = 0.0
    for c in reversed(coeffs):
        acc = acc * x2 + c
    return acc


def _cos_core(x):
    """cos(x) for 0 <= x <= pi/4."""
    return _poly(_COS, x * x)


def _sin_core(x):
    """sin(x) for 0 <= x <= pi/4."""
    return x * _poly(_SIN, x * x)


def cospi(p):
    """cos(pi * p) for any finite p, in double. The range reduction is exact: |p| mod 2, the
    reflections p -> 2 - p and p -> 1 - p, then cos or sin of pi·q on [0, pi/4]. So
    cospi(0) == 1, cospi(0.5) == 0 and cospi(1) == -1 exactly."""
    p = float(p)
    if not math.isfinite(p):
        raise ValueError(f"cospi needs a finite argument, got {p!r}")
    q = abs(p) % 2.0
    if q > 1.0:
        q = 2.0 - q
    sign = 1.0
    if q > 0.5:
        q = 1.0 - q
        sign = -1.0
    if q <= 0.25:
        return sign * _cos_core(PI * q)
    return sign * _sin_core(PI * (0.5 - q))
