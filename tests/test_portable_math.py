"""The project's own float32 exp/log/tanh/sigmoid/erf (mojo/training/portable_math.mojo),
through the binding's `portable_math_eval` entry:

- the pure-Python mirror (tests/reference/portable_math.py) gives the kernel's bits on fresh
  random inputs, every function form (SIMD and scalar), specials, subnormals and -0.0 included;
- the measured max ulp error against correctly rounded results (binary64 `math.exp`,
  `math.log`, `math.tanh`, `math.erf` and the logistic function, rounded once to float32) over
  >= 10^6 points each, small arguments included, printed, within the stated bound;
- exp overflows to +inf and underflows to 0 at exactly the inputs where the rounded exp does;
- the special values of tanh, sigmoid and erf (NaN, ±inf, ±0, the saturation to ±1);
- fast mode: within the same bound, and the same bits twice.
"""

import array
import math
import random
import struct

import pytest
from mojolearn._runtime import backend as _backend

from tests.helpers import run_python
from tests.reference.f32 import from_bits, hexf, ulp_distance
from tests.reference.portable_math import erf32, exp32, log32, sigmoid32, tanh32

EXP_SIMD, EXP_SCALAR, LOG_SIMD, LOG_SCALAR = 0, 1, 2, 3
TANH_SIMD, TANH_SCALAR, SIGMOID_SIMD, SIGMOID_SCALAR, ERF_SIMD, ERF_SCALAR = 4, 5, 6, 7, 8, 9
# Stated bound (docs/ARITHMETIC.md): measured maxima 1 ulp for exp, log and tanh, 2 for
# sigmoid, 2 for erf at a single input (1.0025244, checked below) and 1 elsewhere; the bound is
# 2 for every function.
ULP_BOUND = 2
EXP_LO, EXP_HI = -104.0, 88.72283935546875  # above EXP_HI the rounded exp is +inf
POINTS = 1_000_000


def _eval(xs, function):
    """The kernel's f(x) for the float32 values in `xs` (an array('f'))."""
    ys = array.array("f", bytes(4 * len(xs)))
    _backend.binding().portable_math_eval(
        [xs.buffer_info()[0], ys.buffer_info()[0]], [len(xs), function]
    )
    return ys


def _ordinals(values):
    """Monotone integer keys of float32 values (consecutive floats differ by 1)."""
    u = array.array("I", values.tobytes())
    return [-(b & 0x7FFFFFFF) if b & 0x80000000 else b for b in u]


def _max_ulp(xs, got, ref):
    """(max ulp distance, the x where it occurs) between two finite-or-inf float32 arrays."""
    worst, at = 0, None
    for x, a, b in zip(xs, _ordinals(got), _ordinals(ref)):
        d = abs(a - b)
        if d > worst:
            worst, at = d, x
    return worst, at


def _random_bits(rng, n, keep):
    out = array.array("f")
    while len(out) < n:
        x = from_bits(rng.getrandbits(32))
        if keep(x):
            out.append(x)
    return out


def _same_bits(a, b):
    return hexf(a) == hexf(b) or (math.isnan(a) and math.isnan(b))


SPECIALS = [
    0.0,
    -0.0,
    math.inf,
    -math.inf,
    math.nan,
    1.0,
    -1.0,
    2.0**-149,
    2.0**-126,
    -(2.0**-149),
    3.4028234663852886e38,
    88.72283935546875,
    88.72284698486328,
    -103.97208404541016,
    -103.9720916748047,
    89.0,
    -104.0,
    1e-30,
    -1e-30,
]


@pytest.mark.parametrize("function", [EXP_SIMD, EXP_SCALAR, LOG_SIMD, LOG_SCALAR])
def test_python_mirror_is_bit_exact(seed, function):
    rng = random.Random(seed)
    xs = array.array("f", SPECIALS)
    xs.extend(_random_bits(rng, 6000, lambda x: True))
    xs.extend(array.array("f", (rng.uniform(-110.0, 95.0) for _ in range(4000))))
    xs.extend(array.array("f", (rng.uniform(-20.0, 0.0) for _ in range(2000))))
    xs.extend(array.array("f", (rng.uniform(1.0, 1e6) for _ in range(2000))))
    xs.extend(array.array("f", (from_bits(rng.randrange(1, 1 << 23)) for _ in range(500))))
    got = _eval(xs, function)
    mirror = exp32 if function in (EXP_SIMD, EXP_SCALAR) else log32
    for x, y in zip(xs, got):
        want = mirror(x)
        assert _same_bits(y, want), (
            f"seed={seed} f={function} x={x!r} ({hexf(x)}): kernel "
            f"{hexf(y)} mirror {hexf(want)}, "
            f"{ulp_distance(y, want)} ulp apart"
        )


def test_exp_ulp_error(seed):
    rng = random.Random(seed)
    xs = array.array("f", (rng.uniform(EXP_LO, EXP_HI) for _ in range(POINTS // 2)))
    xs.extend(_random_bits(rng, POINTS // 2, lambda x: EXP_LO <= x <= EXP_HI))
    got = _eval(xs, EXP_SIMD)
    ref = array.array("f", map(math.exp, xs))
    worst, at = _max_ulp(xs, got, ref)
    print(f"exp32: max {worst} ulp over {len(xs)} points of [{EXP_LO}, {EXP_HI}] (at x={at!r})")
    assert worst <= ULP_BOUND, f"seed={seed}: exp32 is {worst} ulp off at x={at!r}"


def test_log_ulp_error(seed):
    rng = random.Random(seed)
    positive = lambda x: 0.0 < x < math.inf  # noqa: E731
    xs = _random_bits(rng, POINTS // 2, positive)
    xs.extend(array.array("f", (rng.uniform(1.0, 1e6) for _ in range(POINTS // 4))))
    xs.extend(array.array("f", (from_bits(rng.randrange(1, 1 << 23)) for _ in range(POINTS // 4))))
    got = _eval(xs, LOG_SIMD)
    ref = array.array("f", map(math.log, xs))
    worst, at = _max_ulp(xs, got, ref)
    print(
        f"log32: max {worst} ulp over {len(xs)} positive float32 points, subnormals "
        f"included (at x={at!r})"
    )
    assert worst <= ULP_BOUND, f"seed={seed}: log32 is {worst} ulp off at x={at!r}"


def test_exp_overflow_and_underflow_match_rounded_exp():
    def around(x, k):
        u = struct.unpack("<I", struct.pack("<f", x))[0]
        return array.array("f", (from_bits(u + d) for d in range(-k, k + 1)))

    for xs in (around(88.72283935546875, 2000), around(-103.97208404541016, 2000)):
        got = _eval(xs, EXP_SIMD)
        ref = array.array("f", map(math.exp, xs))
        for x, a, b in zip(xs, got, ref):
            assert math.isinf(a) == math.isinf(b), f"x={x!r}: kernel {a!r}, rounded exp {b!r}"
            assert (a == 0.0) == (b == 0.0), f"x={x!r}: kernel {a!r}, rounded exp {b!r}"


def test_specials():
    got = _eval(array.array("f", [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0]), EXP_SIMD)
    assert math.isnan(got[0]) and got[1] == math.inf and hexf(got[2]) == "00000000"
    assert got[3] == 1.0 and got[4] == 1.0
    got = _eval(array.array("f", [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1.0]), LOG_SIMD)
    assert math.isnan(got[0]) and got[1] == math.inf and math.isnan(got[2])
    assert got[3] == -math.inf and got[4] == -math.inf and math.isnan(got[5])
    assert hexf(got[6]) == "00000000"


def _logistic(x):
    """1/(1 + e^-x) in binary64, written as e^x/(1 + e^x) for x < 0 (e^-x overflows a double
    from x = -709.8 on; the two forms are the same function)."""
    if x < 0.0:
        e = math.exp(x)
        return e / (1.0 + e)
    return 1.0 / (1.0 + math.exp(-x))


# name: (SIMD code, scalar code, mirror, binary64 reference, the range where it is not ±1/0/1)
ACTIVATIONS = {
    "tanh": (TANH_SIMD, TANH_SCALAR, tanh32, math.tanh, (-9.1, 9.1)),
    "sigmoid": (SIGMOID_SIMD, SIGMOID_SCALAR, sigmoid32, _logistic, (-104.0, 17.0)),
    "erf": (ERF_SIMD, ERF_SCALAR, erf32, math.erf, (-4.0, 4.0)),
}
# Branch points and their neighbours, the saturation points, the sigmoid's subnormal tail.
EDGES = [0.625, 1.0, 2.0, 9.01, 3.92, 16.7, 88.72283935546875, 103.97208404541016, 104.0]


def _neighbours(values):
    out = array.array("f")
    for v in values:
        u = struct.unpack("<I", struct.pack("<f", v))[0]
        for d in (-1, 0, 1):
            out.append(from_bits(u + d))
            out.append(-from_bits(u + d))
    return out


def _small(rng, n):
    """Log-uniform magnitudes in [2^-30, 1] of either sign: relative error near 0."""
    return array.array(
        "f", (rng.choice((-1.0, 1.0)) * 2.0 ** rng.uniform(-30.0, 0.0) for _ in range(n))
    )


@pytest.mark.parametrize(
    "function",
    [TANH_SIMD, TANH_SCALAR, SIGMOID_SIMD, SIGMOID_SCALAR, ERF_SIMD, ERF_SCALAR],
)
def test_activation_mirror_is_bit_exact(seed, function):
    rng = random.Random(seed)
    xs = array.array("f", SPECIALS)
    xs.extend(_neighbours(EDGES))
    xs.extend(_random_bits(rng, 2000, lambda x: True))
    xs.extend(array.array("f", (rng.uniform(-12.0, 12.0) for _ in range(2000))))
    xs.extend(array.array("f", (rng.uniform(-110.0, 20.0) for _ in range(500))))
    xs.extend(_small(rng, 1000))
    # Whole vectors inside one of erf's branch sets (|x| in [1, 2); [1, 4) with no |x| <= 1):
    # erf32 skips the branches no lane of a vector takes.
    for hi in (2.0, 4.0):
        xs.extend(
            array.array("f", (rng.choice((-1.0, 1.0)) * rng.uniform(1.0, hi) for _ in range(500)))
        )
    xs.extend(
        array.array(
            "f",
            (from_bits(rng.randrange(1, 1 << 23) | rng.choice((0, 1 << 31))) for _ in range(300)),
        )
    )
    got = _eval(xs, function)
    mirror = next(m for simd, scalar, m, _, _ in ACTIVATIONS.values() if function in (simd, scalar))
    for x, y in zip(xs, got):
        want = mirror(x)
        assert _same_bits(y, want), (
            f"seed={seed} f={function} x={x!r} ({hexf(x)}): kernel "
            f"{hexf(y)} mirror {hexf(want)}, "
            f"{ulp_distance(y, want)} ulp apart"
        )


def _activation_points(rng, lo, hi):
    """POINTS inputs: uniform over the unsaturated range and over [-3, 3], log-uniform small
    magnitudes, and finite bit patterns (every exponent, subnormals, saturated arguments)."""
    xs = array.array("f", (rng.uniform(lo, hi) for _ in range(POINTS * 2 // 5)))
    xs.extend(array.array("f", (rng.uniform(-3.0, 3.0) for _ in range(POINTS // 5))))
    xs.extend(_small(rng, POINTS // 5))
    xs.extend(_random_bits(rng, POINTS // 5, math.isfinite))
    return xs


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_ulp_error(seed, name):
    simd, scalar, _, ref, (lo, hi) = ACTIVATIONS[name]
    rng = random.Random(seed)
    xs = _activation_points(rng, lo, hi)
    got = _eval(xs, simd)
    worst, at = _max_ulp(xs, got, array.array("f", map(ref, xs)))
    print(f"{name}32: max {worst} ulp over {len(xs)} points (at x={at!r})")
    assert worst <= ULP_BOUND, f"seed={seed}: {name}32 is {worst} ulp off at x={at!r}"
    # The scalar form gives the same bits (the mirror test covers fewer points).
    assert _eval(xs, scalar).tobytes() == got.tobytes()


def test_activation_specials():
    xs = array.array("f", [math.nan, math.inf, -math.inf, 0.0, -0.0, 9.1, -9.1, 4.0, -4.0])
    for name, want in (
        ("tanh", ["nan", "3f800000", "bf800000", "00000000", "80000000", "3f800000", "bf800000"]),
        (
            "erf",
            [
                "nan",
                "3f800000",
                "bf800000",
                "00000000",
                "80000000",
                None,
                None,
                "3f800000",
                "bf800000",
            ],
        ),
        ("sigmoid", ["nan", "3f800000", "00000000", "3f000000", "3f000000"]),
    ):
        simd, scalar, _, _, _ = ACTIVATIONS[name]
        for function in (simd, scalar):
            got = _eval(xs, function)
            for x, y, w in zip(xs, got, want):
                if w == "nan":
                    assert math.isnan(y), f"{name}({x!r}) = {y!r}"
                elif w is not None:
                    assert hexf(y) == w, f"{name}({x!r}) = {hexf(y)}, want {w}"
    # erf32's one 2-ulp input of [0, 4] (found by an exhaustive run, ARITHMETIC.md).
    worst = array.array("f", [1.0025243759155273, -1.0025243759155273])
    for function in (ERF_SIMD, ERF_SCALAR):
        for x, y in zip(worst, _eval(worst, function)):
            assert ulp_distance(y, math.erf(x)) == 2, (x, y)
    # The logistic function's subnormal tail: e^x/(1 + e^x) where 1/(1 + e^-x) would give 0.
    xs = array.array("f", [-88.8, -95.0, -100.0, -103.9])
    got = _eval(xs, SIGMOID_SIMD)
    assert all(0.0 < y < 2.0**-126 for y in got), list(got)


def test_entry_refuses_bad_calls():
    b = _backend.binding()
    xs = array.array("f", [1.0])
    with pytest.raises(ValueError, match="portable_math_eval: expected 2 addresses"):
        b.portable_math_eval([xs.buffer_info()[0]], [1, 0])
    with pytest.raises(ValueError, match="portable_math_eval: n must be"):
        b.portable_math_eval([xs.buffer_info()[0], xs.buffer_info()[0]], [-1, 0])
    with pytest.raises(ValueError, match="portable_math_eval: function must be"):
        b.portable_math_eval([xs.buffer_info()[0], xs.buffer_info()[0]], [1, 10])
    with pytest.raises(ValueError, match="portable_math_eval: address 1 is null"):
        b.portable_math_eval([xs.buffer_info()[0], 0], [1, 0])


_FAST_SCRIPT = """
import array, math, random
from mojolearn._runtime import backend as _backend
b = _backend.binding()
assert b.mode == "fast", b.mode
rng = random.Random({seed})
xs = array.array("f", (rng.uniform(-104.0, 88.72) for _ in range(100000)))
ls = array.array("f", (rng.uniform(1e-30, 1e6) for _ in range(100000)))
ts = array.array("f", (rng.uniform(-9.1, 9.1) for _ in range(100000)))
ss = array.array("f", (rng.uniform(-104.0, 17.0) for _ in range(100000)))
es = array.array("f", (rng.uniform(-4.0, 4.0) for _ in range(100000)))
for src, fn in ((xs, 0), (ls, 2), (ts, 4), (ss, 6), (es, 8)):
    ys = array.array("f", bytes(4 * len(src)))
    b.portable_math_eval([src.buffer_info()[0], ys.buffer_info()[0]], [len(src), fn])
    print(ys.tobytes().hex())
"""


def test_fast_mode_bound_and_repeatability(seed):
    code = _FAST_SCRIPT.format(seed=seed)
    env = {"MOJOLEARN_NUMERIC_MODE": "fast"}
    first = run_python(code, env=env).split()
    assert run_python(code, env=env).split() == first, "fast mode changed bits between runs"
    rng = random.Random(seed)
    cases = []
    for lo, hi, fn, name in (
        (-104.0, 88.72, math.exp, "exp"),
        (1e-30, 1e6, math.log, "log"),
        (-9.1, 9.1, math.tanh, "tanh"),
        (-104.0, 17.0, _logistic, "sigmoid"),
        (-4.0, 4.0, math.erf, "erf"),
    ):
        cases.append((array.array("f", (rng.uniform(lo, hi) for _ in range(100000))), fn, name))
    for (src, fn, name), hexed in zip(cases, first, strict=True):
        got = array.array("f", bytes.fromhex(hexed))
        worst, at = _max_ulp(src, got, array.array("f", map(fn, src)))
        print(f"fast {name}32: max {worst} ulp over {len(src)} points")
        assert worst <= ULP_BOUND, f"seed={seed}: fast {name}32 {worst} ulp off at {at!r}"
