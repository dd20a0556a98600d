"""The project's own float32 exp/log (mojo/training/portable_math.mojo), through the binding's
`portable_math_eval` entry:

- the pure-Python mirror (tests/reference/portable_math.py) gives the kernel's bits on fresh
  random inputs, every function form (SIMD and scalar), specials and subnormals included;
- the measured max ulp error against correctly rounded exp/log (binary64 `math.exp`/`math.log`
  rounded once to float32) over >= 10^6 points each, printed, within the stated bound;
- exp overflows to +inf and underflows to 0 at exactly the inputs where the rounded exp does;
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
from tests.reference.portable_math import exp32, log32

EXP_SIMD, EXP_SCALAR, LOG_SIMD, LOG_SCALAR = 0, 1, 2, 3
# Stated bound (docs/ARITHMETIC.md): the measured maximum is 1 ulp for both; the goal is 2.
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


def test_entry_refuses_bad_calls():
    b = _backend.binding()
    xs = array.array("f", [1.0])
    with pytest.raises(ValueError, match="portable_math_eval: expected 2 addresses"):
        b.portable_math_eval([xs.buffer_info()[0]], [1, 0])
    with pytest.raises(ValueError, match="portable_math_eval: n must be"):
        b.portable_math_eval([xs.buffer_info()[0], xs.buffer_info()[0]], [-1, 0])
    with pytest.raises(ValueError, match="portable_math_eval: function must be"):
        b.portable_math_eval([xs.buffer_info()[0], xs.buffer_info()[0]], [1, 4])
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
for src, fn in ((xs, 0), (ls, 2)):
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
    xs = array.array("f", (rng.uniform(-104.0, 88.72) for _ in range(100000)))
    ls = array.array("f", (rng.uniform(1e-30, 1e6) for _ in range(100000)))
    for src, hexed, fn, name in ((xs, first[0], math.exp, "exp"), (ls, first[1], math.log, "log")):
        got = array.array("f", bytes.fromhex(hexed))
        worst, at = _max_ulp(src, got, array.array("f", map(fn, src)))
        print(f"fast {name}32: max {worst} ulp over {len(src)} points")
        assert worst <= ULP_BOUND, f"seed={seed}: fast {name}32 {worst} ulp off at {at!r}"
