"""`fma32` (tests/reference/f32.py), profile v2's fused multiply-add, against the hardware.

The reference is libm's `fmaf` through ctypes (glibc's is correctly rounded: the hardware fma
where the CPU has one, else an exact software path); it is first checked on a double-rounding
trap and on exact ties, and the tests skip, saying why, when libm or a correct `fmaf` is
missing. Every result is compared bit for bit (-0 is not +0; NaN only needs to be NaN) on more
than 10**6 triples in CI (10**7 with MOJOLEARN_LONG_TESTS=1), in families: random bit patterns,
random normal-range values, exact and near ties (three constructions, normal and subnormal),
subnormal inputs and results, overflow and the edge of FLT_MAX, total cancellation, and every
combination of the special values (signed zeros, infinities, NaN) in every position. A sample
of every family is also checked against an exact rational rounding (`fractions.Fraction`)
written here, which also proves that the tie families really hold ties and that naive double
rounding `f32(a*b + c)` fails on them. Random parts use the printed seed. NumPy is not used.
"""

import array
import ctypes
import ctypes.util
import math
import os
import random
from fractions import Fraction

import pytest

from tests.reference.f32 import bits, f32, fma32, from_bits, hexf

LONG = os.environ.get("MOJOLEARN_LONG_TESTS") == "1"
SCALE = 10 if LONG else 1
# Triples per family in CI; the sum is checked to be >= 10**6 below.
SIZES = {
    "bits": 300_000,
    "normal": 430_000,
    "ties_sum": 40_000,
    "ties_product": 50_000,
    "ties_cancel": 40_000,
    "subnormal": 60_000,
    "overflow": 40_000,
    "cancellation": 40_000,
}
EXACT_SAMPLE = 1500  # per family, against the Fraction rounding
FLT_MAX = 3.4028234663852886e38
NAN = math.nan
INF = math.inf


def _libm_fmaf():
    name = ctypes.util.find_library("m")
    if name is None:
        return None, "ctypes.util.find_library('m') found no libm"
    try:
        fn = ctypes.CDLL(name).fmaf
    except (OSError, AttributeError) as exc:
        return None, f"libm ({name}) has no usable fmaf: {exc}"
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float] * 3
    a = 1.0 + 2.0**-12  # a*a = 1 + 2**-11 + 2**-24: a float32 tie, even below
    checks = [
        ((a, a, 2.0**-60), 1.0 + 2.0**-11 + 2.0**-23),  # binary64 loses c; the tie breaks up
        ((a, a, -(2.0**-60)), 1.0 + 2.0**-11),
        ((a, a, 0.0), 1.0 + 2.0**-11),  # the exact tie, to even
        ((a, -a, 1.0 + 2.0**-11), -(2.0**-24)),
    ]
    for args, want in checks:
        if fn(*args) != want:
            return (
                None,
                f"libm ({name}) fmaf{args} = {fn(*args)!r}, not the correctly rounded {want!r}",
            )
    return fn, ""


FMAF, WHY_NOT = _libm_fmaf()
needs_fmaf = pytest.mark.skipif(FMAF is None, reason=f"no correctly rounded fmaf: {WHY_NOT}")


# ---------------------------------------------------------------- exact rational reference


def _signbit(x):
    return math.copysign(1.0, x) < 0


def exact_fma32(a, b, c):
    """(RN32(a*b + c) computed with rationals, how far the exact sum is from a float32 midpoint
    in units of the float32 quantum (0 at a tie; None when exact)). Finite inputs only."""
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:
        if (a == 0 or b == 0) and c == 0 and _signbit(a) != _signbit(b) and _signbit(c):
            return -0.0, None
        return 0.0, None
    neg = x < 0
    x = -x if neg else x
    e = x.numerator.bit_length() - x.denominator.bit_length()  # 2**(e-1) < x < 2**(e+1)
    if Fraction(2) ** e > x:
        e -= 1
    q = max(e, -126) - 23  # the float32 quantum at x is 2**q
    scaled = x / Fraction(2) ** q
    n, r = divmod(scaled.numerator, scaled.denominator)
    den = scaled.denominator
    if 2 * r > den or (2 * r == den and n & 1):
        n += 1
    off = None if r == 0 else abs(Fraction(2 * r - den, 2 * den))
    value = INF if n * Fraction(2) ** q > FLT_MAX else math.ldexp(n, q)
    return (-value if neg else value), off


# ---------------------------------------------------------------- value builders


def _f(sign, exp, mant):
    """The float32 with sign bit `sign`, unbiased exponent `exp` (-127 = subnormal/zero), 23-bit
    fraction `mant`."""
    return from_bits((sign << 31) | ((exp + 127) << 23) | (mant & 0x7FFFFF))


def _normal(rng, lo, hi):
    return _f(rng.getrandbits(1), rng.randint(max(lo, -126), min(hi, 127)), rng.getrandbits(23))


def _odd(rng, bits_len):
    """A random odd integer of exactly `bits_len` bits."""
    if bits_len <= 1:
        return 1
    return (1 << (bits_len - 1)) | (rng.getrandbits(bits_len - 1) | 1)


def _sign(rng):
    return -1.0 if rng.getrandbits(1) else 1.0


def _bits_triples(rng, n):
    raw = array.array("f")
    raw.frombytes(rng.getrandbits(96 * n).to_bytes(12 * n, "little"))
    v = raw.tolist()
    return list(zip(v[0::3], v[1::3], v[2::3]))


def _normal_triples(rng, n):
    """Normal a and b with exponents in [-45, 45], c normal within 2**±30 of a*b, a quarter of
    them within a binade of a*b and of the opposite sign (partial cancellation)."""
    ints = []
    rand, bitsof = rng.random, rng.getrandbits
    for _ in range(n):
        ea, eb = int(rand() * 91) - 45, int(rand() * 91) - 45
        sa, sb = bitsof(1), bitsof(1)
        if rand() < 0.25:
            ec, sc = ea + eb + int(rand() * 3) - 1, 1 - (sa ^ sb)
        else:
            ec, sc = ea + eb + int(rand() * 61) - 30, bitsof(1)
        m = bitsof(69)
        ints += (
            (sa << 31) | ((ea + 127) << 23) | (m & 0x7FFFFF),
            (sb << 31) | ((eb + 127) << 23) | ((m >> 23) & 0x7FFFFF),
            (sc << 31) | ((ec + 127) << 23) | (m >> 46),
        )
    v = array.array("f", array.array("I", ints).tobytes()).tolist()
    return list(zip(v[0::3], v[1::3], v[2::3]))


def _split(rng, big, low_exp):
    """(a, b) with a*b == big * 2**low_exp exactly (big odd): a = (big / f) * 2**u and
    b = f * 2**v, f a small odd divisor of big or 1, u + v = low_exp, both float32 when the
    exponents allow (callers check with `_is_f32`)."""
    f = 1
    for d in (3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 37):
        if big % d == 0 and rng.getrandbits(1):
            f = d
            break
    return _place(rng, big // f, f, low_exp)


def _place(rng, a_int, b_int, low_exp):
    """(a_int * 2**u, b_int * 2**(low_exp - u)) for a random u keeping both in range (NaNs when
    none does)."""
    lo_u = max(-149, low_exp - 128 + b_int.bit_length())
    hi_u = min(128 - a_int.bit_length(), low_exp + 149)
    if lo_u > hi_u:
        return NAN, NAN
    mid = min(max((low_exp + 23) // 2, lo_u), hi_u)  # both factors near the same magnitude
    u = rng.randint(lo_u, hi_u) if rng.getrandbits(1) else mid
    return math.ldexp(a_int, u), math.ldexp(b_int, low_exp - u)


def _odd_part(x):
    """(P, L) with |x| == P * 2**L and P odd, for a nonzero finite float."""
    num, den = abs(x).as_integer_ratio()
    if den > 1:
        return num, -(den.bit_length() - 1)
    low = (num & -num).bit_length() - 1
    return num >> low, low


def _is_f32(x):
    return math.isfinite(x) and f32(x) == x


def _ties_sum(rng, n):
    """c random, p = a*b of 1..24 bits whose lowest bit is half c's quantum: mostly exact ties
    (the sum stays in c's binade), else quarter points or exact results."""
    out = []
    while len(out) < n:
        ec = rng.randint(-100, 100)
        c = _normal(rng, ec, ec)
        big = _odd(rng, rng.randint(1, 24))
        a, b = _split(rng, big, ec - 24)
        if _is_f32(a) and _is_f32(b):
            out.append((a * _sign(rng), b, c))
    return out


def _ties_product(rng, n):
    """a*b a 25-bit float32 midpoint (normal or subnormal range) and c in {0, ±tiny}: the exact
    tie, and near ties on either side, most of them lost by binary64 (`p + c == p`)."""
    out = []
    while len(out) < n:
        sub = rng.random() < 0.1
        if sub:  # a subnormal midpoint: an odd multiple of 2**-150 below 2**-126
            a, b = _split(rng, _odd(rng, rng.randint(1, 24)), -150)
            low = -150
        else:  # a 25-bit odd a_int * b_int, its top bit at 2**top
            u = rng.random()
            top = 127 if u < 0.1 else -126 if u < 0.15 else rng.randint(-100, 127)
            low = top - 24
            b_int = _odd(rng, rng.randint(2, 8))
            lo, hi = -(-(1 << 24) // b_int), ((1 << 25) - 1) // b_int
            a_int = rng.randint(lo, hi) | 1
            if a_int * b_int > hi * b_int:
                a_int -= 2
            a, b = _place(rng, a_int, b_int, low)
        if not (_is_f32(a) and _is_f32(b)):
            continue
        kind = rng.randrange(4)
        ec = low - (rng.randint(2, 60) if kind == 2 else rng.randint(1, 3))
        if kind == 0:
            c = 0.0 * _sign(rng)
        elif kind == 1 or ec < -149:
            c = from_bits(1) * _sign(rng)
        else:  # a float32 with its top bit at 2**ec: far below p's lowest bit, or just below
            width = rng.randint(1, min(24, ec + 150))
            c = _sign(rng) * math.ldexp(_odd(rng, width), ec - width + 1)
        out.append((a * _sign(rng), b, c))
    return out


def _ties_cancel(rng, n):
    """48-bit products p = P * 2**L (P odd) and c = -(P with its low 25 bits cleared) * 2**L: a
    massive cancellation whose result is the low 25 bits, an exact tie when bit 24 is set."""
    out = []
    while len(out) < n:
        ea, eb = rng.randint(-40, 40), rng.randint(-40, 40)
        a = _f(rng.getrandbits(1), ea, rng.getrandbits(23) | 1)
        b = _f(rng.getrandbits(1), eb, rng.getrandbits(23) | 1)
        p = a * b
        big, low = _odd_part(p)
        high = (big >> 25) << 25
        if high == 0:
            continue
        if rng.random() < 0.3:  # one quantum of c more or less: a 26-bit or an exact result
            high += rng.choice((-1, 1)) << 25
        c = math.copysign(math.ldexp(high, low), -p)
        if _is_f32(c):
            out.append((a, b, c))
    return out


def _subnormal_triples(rng, n):
    out = []
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 0:  # subnormal inputs anywhere
            a = from_bits((rng.getrandbits(1) << 31) | rng.getrandbits(23))
            b = _normal(rng, -10, 127)
            c = from_bits((rng.getrandbits(1) << 31) | rng.getrandbits(23))
        elif kind == 1:  # normal inputs, a subnormal product, c subnormal or small
            ea = rng.randint(-126, -20)
            eb = rng.randint(-140 - ea, -126 - ea)
            a, b = _normal(rng, ea, ea), _normal(rng, eb, eb)
            c = from_bits((rng.getrandbits(1) << 31) | rng.getrandbits(23 + rng.getrandbits(1)))
        elif kind == 2:  # products far below the subnormals: round to zero or the least one
            ea = rng.randint(-126, -60)
            eb = rng.randint(-126, -150 - ea)
            a, b = _normal(rng, ea, ea), _normal(rng, eb, eb)
            c = rng.choice((0.0, -0.0, from_bits(1), from_bits(0x80000001)))
        else:  # normal c minus a product: a result near FLT_MIN
            ea = rng.randint(-80, -40)
            eb = -126 - ea + rng.randint(-1, 1)
            a, b = _normal(rng, ea, ea), _normal(rng, eb, eb)
            c = math.copysign(_normal(rng, -126, -125), -(a * b))
        out.append((a, b, c))
    return out


def _overflow_triples(rng, n):
    top_a, top_b = math.ldexp(18631, 50), math.ldexp(1801, 53)  # a*b = 2**128 - 2**103
    out = []
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 0:  # the overflow threshold itself, nudged by c
            a, b = top_a * _sign(rng), top_b
            c = rng.choice((0.0, -0.0, from_bits(1), -from_bits(1), 2.0**80, -(2.0**80)))
            c = rng.choice((c, math.ldexp(rng.choice((1, -1, 3, -3)), 102)))
        elif kind == 1:  # products around 2**126 .. 2**129, c large
            ea = rng.randint(30, 97)
            eb = rng.randint(125, 128) - ea
            a, b = _normal(rng, ea, ea), _normal(rng, eb, eb)
            c = _normal(rng, 100, 127)
        elif kind == 2:  # FLT_MAX and its neighbours
            a = rng.choice((FLT_MAX, from_bits(0x7F7FFFFE), from_bits(0x7F000000))) * _sign(rng)
            b = rng.choice((1.0, from_bits(0x3F800001), from_bits(0x3F7FFFFF), 2.0, 0.5))
            c = rng.choice((FLT_MAX, -FLT_MAX, 0.0, math.ldexp(1, 103), -math.ldexp(1, 103)))
        else:  # huge product, cancelled back into range
            ea = rng.randint(64, 127)
            eb = rng.randint(127 - ea, 127)
            a, b = _normal(rng, ea, ea), _normal(rng, eb, eb)
            c = math.copysign(FLT_MAX, -(a * b)) if rng.getrandbits(1) else -FLT_MAX
        out.append((a, b, c))
    return out


def _cancellation_triples(rng, n):
    out = []
    for _ in range(n):
        ea, eb = rng.randint(-60, 60), rng.randint(-60, 60)
        a, b = _normal(rng, ea, ea), _normal(rng, eb, eb)
        kind = rng.randrange(4)
        if kind == 0:  # c = -RN32(a*b): the rounding error of the product, exactly
            c = -f32(a * b)
        elif kind == 1:  # b a power of two: c = -(a*b) exactly, the result +0
            b = math.ldexp(_sign(rng), eb)
            c = -(a * b)
        elif kind == 2:  # -RN32(a*b) one float32 step off (|a*b| >= 2**-120: never zero)
            c = from_bits(bits(-f32(a * b)) + rng.choice((1, -1)))
        else:  # (-a)*b + RN32(a*b), and a*(-b)
            c = f32(a * b)
            a = -a
        out.append((a, b, c))
    return out


def _specials():
    base = [
        0.0,
        from_bits(1),
        from_bits(0x007FFFFF),
        from_bits(0x00800000),
        1.0,
        1.5,
        from_bits(0x3F800001),
        3.0,
        2.0**-75,
        2.0**64,
        FLT_MAX,
        INF,
    ]
    return [v for x in base for v in (x, -x)] + [NAN]


FAMILIES = {
    "bits": _bits_triples,
    "normal": _normal_triples,
    "ties_sum": _ties_sum,
    "ties_product": _ties_product,
    "ties_cancel": _ties_cancel,
    "subnormal": _subnormal_triples,
    "overflow": _overflow_triples,
    "cancellation": _cancellation_triples,
}


# ---------------------------------------------------------------- comparison


def _key(x):
    """`x`, with every NaN replaced by one NaN, so that float32 bytes compare NaN as NaN."""
    return x if x == x else NAN


def _compare_to_hardware(triples, label):
    got = [fma32(a, b, c) for a, b, c in triples]
    want = [FMAF(a, b, c) for a, b, c in triples]
    g = array.array("f", [_key(x) for x in got]).tobytes()
    w = array.array("f", [_key(x) for x in want]).tobytes()
    if g == w:
        return
    bad = [
        i
        for i, (x, y) in enumerate(zip(got, want))
        if not (x != x and y != y) and (x != y or _signbit(x) != _signbit(y))
    ]
    lines = [
        f"fma({hexf(triples[i][0])}, {hexf(triples[i][1])}, {hexf(triples[i][2])}) = "
        f"{hexf(got[i])}, hardware {hexf(want[i])}"
        for i in bad[:10]
    ]
    raise AssertionError(f"{label}: {len(bad)} of {len(triples)} differ:\n" + "\n".join(lines))


def _same(x, y):
    return (x != x and y != y) or (x == y and _signbit(x) == _signbit(y))


# ---------------------------------------------------------------- tests


def test_ci_size_is_at_least_a_million():
    assert sum(SIZES.values()) >= 1_000_000


@needs_fmaf
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fma32_equals_hardware_fma(family, seed):
    rng = random.Random(f"{seed}:{family}")
    n = SIZES[family] * SCALE
    triples = FAMILIES[family](rng, n)
    assert len(triples) == n
    _compare_to_hardware(triples, family)


@needs_fmaf
def test_fma32_equals_hardware_fma_on_every_special_combination():
    """Signed zeros, ±inf, NaN, the subnormal and FLT_MAX edges in all three positions."""
    s = _specials()
    triples = [(a, b, c) for a in s for b in s for c in s]
    _compare_to_hardware(triples, "specials")
    # IEEE's rules, spelled out for the ones that matter most.
    assert math.isnan(fma32(INF, 0.0, 1.0)) and math.isnan(fma32(-0.0, INF, -INF))
    assert math.isnan(fma32(INF, 1.0, -INF)) and fma32(INF, 1.0, FLT_MAX) == INF
    assert fma32(FLT_MAX, 2.0, -FLT_MAX) == FLT_MAX  # the product is not rounded first
    assert hexf(fma32(-0.0, 1.0, -0.0)) == "80000000"
    assert hexf(fma32(0.0, -1.0, 0.0)) == "00000000"
    assert hexf(fma32(3.0, -1.5, 4.5)) == "00000000"  # exact cancellation is +0
    assert hexf(fma32(-(2.0**-75), 2.0**-75, 0.0)) == "80000000"  # underflow keeps the sign


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fma32_equals_exact_rounding(family, seed):
    """A sample of each family against the rational rounding; the tie families must really
    hold exact ties and near ties, and naive double rounding must fail on some of them."""
    rng = random.Random(f"{seed}:{family}:exact")
    triples = [t for t in FAMILIES[family](rng, EXACT_SAMPLE) if all(map(math.isfinite, t))]
    ties = near = naive_wrong = 0
    for a, b, c in triples:
        want, off = exact_fma32(a, b, c)
        got = fma32(a, b, c)
        assert _same(got, want), (
            f"fma({hexf(a)}, {hexf(b)}, {hexf(c)}) = {hexf(got)}, exact {hexf(want)}"
        )
        ties += off == 0
        near += off is not None and 0 < off < Fraction(1, 2**20)
        naive_wrong += not _same(f32(a * b + c), want)
    if family in ("ties_sum", "ties_cancel"):
        assert ties >= len(triples) // 4, (ties, len(triples))
    if family == "ties_product":
        assert ties >= len(triples) // 8 and near >= len(triples) // 4, (ties, near)
        assert naive_wrong >= len(triples) // 20, naive_wrong
    if family == "bits":
        assert len(triples) >= EXACT_SAMPLE // 2


def test_exact_reference_knows_the_edges():
    """The rational rounding itself, on values worked out by hand."""
    a = 1.0 + 2.0**-12
    assert exact_fma32(a, a, 0.0) == (1.0 + 2.0**-11, 0)
    assert exact_fma32(a, a, 2.0**-60)[0] == 1.0 + 2.0**-11 + 2.0**-23
    top = (math.ldexp(18631, 50), math.ldexp(1801, 53))
    assert exact_fma32(*top, 0.0) == (INF, 0)  # the threshold ties to even: up, to inf
    assert exact_fma32(*top, -from_bits(1))[0] == FLT_MAX
    assert exact_fma32(2.0**-75, 2.0**-75, 0.0) == (0.0, 0)  # half the least subnormal
    assert exact_fma32(3.0 * 2.0**-75, 2.0**-75, 0.0)[0] == from_bits(2)  # 1.5 * 2**-149
    assert exact_fma32(-0.0, 1.0, -0.0)[0] == 0.0 and _signbit(exact_fma32(-0.0, 1.0, -0.0)[0])
    assert not _signbit(exact_fma32(3.0, -1.5, 4.5)[0])
    # fma32 agrees, including where binary64 double rounding would not.
    assert fma32(a, a, 2.0**-60) == 1.0 + 2.0**-11 + 2.0**-23
    assert f32(a * a + 2.0**-60) == 1.0 + 2.0**-11
    assert fma32(*top, 0.0) == INF and fma32(*top, -from_bits(1)) == FLT_MAX
