"""Float32 helpers for the pure-Python references: rounding, hex bit patterns, ulp distance.

Python floats are binary64; one binary64 `+ - * /` of two float32 values followed by `f32()`
is the correctly rounded binary32 result (53 >= 2*24 + 2), so references can compute
`f32(f32(a) * f32(b))` and get the kernel's bits. Subnormals survive; overflow gives ±inf.
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
