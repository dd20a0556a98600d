"""Float32 helpers for the pure-Python references: rounding, the fused multiply-add, hex bit
patterns, ulp distance.

Python floats are binary64; one binary64 `+ - * /` of two float32 values followed by `f32()`
is the correctly rounded binary32 result (53 >= 2*24 + 2), so references can compute
`f32(f32(a) * f32(b))` and get the kernel's bits. Subnormals survive; overflow gives ±inf.
`fma32(a, b, c)` is profile v2's fused multiply-add: `a*b + c` rounded once to float32.
"""

import math
import struct

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_F32_MAX = 3.4028234663852886e38
# Halfway between FLT_MAX and 2**128: values at or above it round to inf (ties-to-even goes up).
_OVERFLOW = 3.4028235677973366e38


def f32(x):
    """`x` rounded to the nearest float32 (ties to even), as a Python float; ±inf on overflow."""
    x = float(x)
    if math.isfinite(x) and abs(x) >= _OVERFLOW:
        return math.copysign(math.inf, x)
    return _F32.unpack(_F32.pack(x))[0]


_D64 = struct.Struct("<d")
_INF = math.inf


def fma32(a, b, c):
    """Profile v2's fused multiply-add: `a*b + c` of three float32 values (Python floats holding
    float32 values), rounded once to the nearest float32 (ties to even), as IEEE 754
    fusedMultiplyAdd in binary32. NaN when IEEE gives NaN (inf*0, inf - inf, a NaN input; the
    payload is unspecified), ±inf on overflow, subnormal results exact to the last bit.

    How (all binary64, no NumPy, no integers):
    1. `p = a*b` is exact: two 24-bit significands give at most 48 <= 53 bits, and
       2**-298 <= |p| <= 2**256 (or p == 0) lies in binary64's normal range.
    2. TwoSum: `s = p + c` rounded, and `e` with `p + c == s + e` exactly (Knuth; exact in
       round-to-nearest without overflow, and |p + c| < 2**257).
    3. Round to odd: when `e != 0` and the last bit of `s` is 0, step `s` one binary64 ulp toward
       `e`. The exact sum x = p + c then lies strictly between `s` and that neighbour, and of the
       two exactly one is odd, so `s` becomes RO(x), x rounded to odd at 53 bits (when `e == 0`,
       s == x). A nonzero x is a multiple of 2**-298, so it is a normal binary64: full 53 bits.
    4. `f32(s)`. Every float32 value and every midpoint of two neighbouring float32 values (the
       subnormal ones, odd multiples of 2**-150, and the overflow threshold 2**128 - 2**103
       included) has at most 24 + 1 significant bits, so it is a binary64 number whose last bit
       is 0 (53 >= 24 + 2 leaves 28 zero bits). If x is not a binary64 number, RO(x) is odd, so
       it is none of those points, and none lies between x and RO(x) (no binary64 number does).
       So x and RO(x) are on the same side of every float32 value and midpoint, and rounding to
       nearest even in binary32 (with its overflow to ±inf) takes both to the same float32:
       f32(RO(x)) == RN32(a*b + c). This is Boldo and Melquiond's round-to-odd theorem for
       53 >= 24 + 2; 53 >= 2*24 is what makes step 1 exact, so 53 >= 2*24 + 2 covers both.
    Zeros: x == 0 exactly only when p == c == 0, where `p + c` already has IEEE's sign (-0 only
    for -0 + -0), or when p == -c != 0, where round-to-nearest gives +0, IEEE's exact-cancellation
    zero; e == 0 in both. A nonzero x too small for float32 rounds to a zero of its own sign.
    Non-finite: an inf or NaN input makes `s` inf or NaN by IEEE's rules for `*` and `+` (p is
    finite for finite inputs), `e` is then NaN, and `s` is the result.
    """
    p = a * b
    s = p + c
    z = s - p
    e = (p - (s - z)) + (c - z)
    if e:
        if e != e:
            return s
        if not _D64.pack(s)[0] & 1:
            s = math.nextafter(s, _INF if e > 0.0 else -_INF)
    if -_OVERFLOW < s < _OVERFLOW:
        return _F32.unpack(_F32.pack(s))[0]
    return s if s != s else math.copysign(_INF, s)


def bits(x):
    """The float32 bit pattern of `x` (rounded first) as an unsigned int."""
    return _U32.unpack(_F32.pack(f32(x)))[0]


def from_bits(u):
    """The float32 whose bit pattern is the unsigned int `u`."""
    return _F32.unpack(_U32.pack(u & 0xFFFFFFFF))[0]


def hexf(x):
    """The float32 bit pattern of `x` as 8 hex digits, e.g. '3f800000' for 1.0."""
    return f"{bits(x):08x}"


def from_hex(h):
    """Inverse of `hexf`."""
    return from_bits(int(h, 16))


def _ordinal(x):
    """A monotone integer key: consecutive float32 values differ by 1, and -0 == +0."""
    u = bits(x)
    return -(u & 0x7FFFFFFF) if u & 0x80000000 else u


def ulp_distance(a, b):
    """How many float32 steps apart `a` and `b` are (0 for -0 vs +0); inf when either is NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.inf
    return abs(_ordinal(a) - _ordinal(b))


def hex_list(values):
    """Bit patterns of a sequence of floats, for exact comparisons with readable failures."""
    return [hexf(v) for v in values]
