"""Host scalar math that lands in a result, portable across platforms (docs/ARITHMETIC.md).

Only Python float `+ - * /` (IEEE binary64, round to nearest even) and `math.sqrt` (correctly
rounded) are used, plus exact operations (`abs`, comparisons, `%` by 2.0, integer ops). No
`math.cos` / `math.exp` / `math.log`: libm results may differ by an ulp between platforms.
Results that feed the binding are rounded once to float32 with `round_f32`, the one rounding
helper of the package; `f32_in_range` is the one float32 range check under the hyperparameter
checks of the optimizers and the trainers.
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


def round_f32(x, overflow="inf"):
    """`x` rounded to the nearest float32 (ties to even) as a Python float, subnormals kept.

    `overflow` says what a value float32 cannot hold becomes. "inf": the IEEE result, ±inf past
    the largest float32 (a NaN or an infinity stays as it is), for arithmetic that carries on.
    "none": None for a result that is not finite (a NaN or an infinite `x` included), for the
    checks that refuse such a value by name."""
    x = float(x)
    try:
        r = _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # raised exactly when the correctly rounded value is infinite
        r = math.copysign(math.inf, x)
    if overflow == "inf":
        return r
    if overflow == "none":
        return r if math.isfinite(r) else None
    raise ValueError(f"round_f32: overflow must be 'inf' or 'none', got {overflow!r}")


def f32_in_range(x, lo=-math.inf, hi=math.inf, lo_open=False, hi_open=False):
    """Where a float `x` and its float32 rounding lie against the range from `lo` to `hi` (each
    end closed unless open; the value must be finite either way): 0 when both lie inside, 1 when
    `x` does not, 2 when `x` does but its rounding does not (0.99999999 rounds to 1.0, 1e-50 to
    0.0, 1e39 to inf). A float32 update uses the rounded value, so a hyperparameter check needs
    both; each caller words its own refusal (the optimizers as torch, the trainers with their
    name)."""
    for code, v in ((1, x), (2, round_f32(x) if math.isfinite(x) else x)):
        if not (
            math.isfinite(v)
            and (v > lo if lo_open else v >= lo)
            and (v < hi if hi_open else v <= hi)
        ):
            return code
    return 0


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


LN2 = 0.6931471805599453  # ln 2 rounded to double


def log(x):
    """ln(x) for finite x > 0, in double, within a few double ulps, the same bits everywhere:
    x = m·2^e with m in [√½, √2) (frexp is exact), then ln(m) = 2·atanh(s), s = (m−1)/(m+1),
    |s| < 0.172, by its series to s^41 (the next term is below 1e-33), Horner in s²."""
    x = float(x)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"log needs a finite positive argument, got {x!r}")
    m, e = math.frexp(x)  # m in [0.5, 1)
    if m < 0.7071067811865476:
        m, e = m * 2.0, e - 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    acc = 0.0
    for k in range(20, -1, -1):
        acc = acc * s2 + 1.0 / (2 * k + 1)
    return e * LN2 + 2.0 * s * acc
