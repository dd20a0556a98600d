"""Checks exp32/log32/tanh32/sigmoid32/erf32: the SIMD form equals the scalar form bit for bit
on every lane (random bit patterns, ranges used by the loss and the activations, specials),
known correctly rounded values, and the special cases (NaN, ±inf, ±0, subnormals,
overflow/underflow edges). Accuracy in ulps over >= 10^6 points is measured in
tests/test_portable_math.py through the binding.

Run: mojo run -I mojo --fp-mode contract=off mojo/tests/test_portable_math.mojo
"""
from std.memory import bitcast
from std.testing import TestSuite, assert_equal, assert_true
from std.utils.numerics import inf, isnan, nan

from training.portable_math import (erf32, erf32_scalar, exp32, exp32_scalar, log32,
                                    log32_scalar, sigmoid32, sigmoid32_scalar, tanh32,
                                    tanh32_scalar)


def _bits(x: Float32) -> UInt32:
    return bitcast[DType.uint32, 1](x)


def _from_bits(u: UInt32) -> Float32:
    return bitcast[DType.float32, 1](u)


struct Rng(Movable):
    """An xorshift64*: a fresh seed per run from the clock, printed on failure."""

    var state: UInt64

    def __init__(out self, seed: UInt64):
        self.state = seed | 1

    def next(mut self) -> UInt64:
        self.state ^= self.state >> 12
        self.state ^= self.state << 25
        self.state ^= self.state >> 27
        return self.state * 0x2545F4914F6CDD1D


def _seed() -> UInt64:
    from std.time import perf_counter_ns
    return UInt64(perf_counter_ns())


comptime TANH = 0
comptime SIGMOID = 1
comptime ERF = 2


def _simd_form[f: Int, w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    comptime if f == TANH:
        return tanh32[w](x)
    elif f == SIGMOID:
        return sigmoid32[w](x)
    else:
        return erf32[w](x)


def _scalar_form[f: Int](x: Float32) -> Float32:
    comptime if f == TANH:
        return tanh32_scalar(x)
    elif f == SIGMOID:
        return sigmoid32_scalar(x)
    else:
        return erf32_scalar(x)


def _check_one[f: Int](x: SIMD[DType.float32, 8], seed: UInt64) raises:
    var v = _simd_form[f, 8](x)
    var v1 = SIMD[DType.float32, 8](0)
    for i in range(8):  # the width-1 form too: the binding's tails use it
        v1[i] = _simd_form[f, 1](x[i])[0]
    for i in range(8):
        var s = _scalar_form[f](x[i])
        for got in [v[i], v1[i]]:
            if _bits(got) != _bits(s) and not (isnan(got) and isnan(s)):
                raise Error(String("function ", f, " (0 tanh, 1 sigmoid, 2 erf): lane != scalar",
                                   " at x=", x[i], " (", hex(_bits(x[i])), ") simd=", got,
                                   " scalar=", s, " seed=", seed))


def _check_activations(x: SIMD[DType.float32, 8], seed: UInt64) raises:
    _check_one[TANH](x, seed)
    _check_one[SIGMOID](x, seed)
    _check_one[ERF](x, seed)


def _check_lanes(x: SIMD[DType.float32, 8], seed: UInt64) raises:
    _check_activations(x, seed)
    var ve = exp32[8](x)
    var vl = log32[8](x)
    for i in range(8):
        var se = exp32_scalar(x[i])
        var sl = log32_scalar(x[i])
        if _bits(ve[i]) != _bits(se) and not (isnan(ve[i]) and isnan(se)):
            raise Error(String("exp32 lane != scalar at x=", x[i], " simd=", ve[i], " scalar=", se,
                               " seed=", seed))
        if _bits(vl[i]) != _bits(sl) and not (isnan(vl[i]) and isnan(sl)):
            raise Error(String("log32 lane != scalar at x=", x[i], " simd=", vl[i], " scalar=", sl,
                               " seed=", seed))


def test_simd_equals_scalar_random_bits() raises:
    var seed = _seed()
    var rng = Rng(seed)
    for _ in range(20000):
        var x = SIMD[DType.float32, 8](0)
        for i in range(8):
            x[i] = _from_bits(UInt32(rng.next() >> 32))
        _check_lanes(x, seed)


def test_simd_equals_scalar_loss_range() raises:
    var seed = _seed()
    var rng = Rng(seed)
    for _ in range(20000):
        var x = SIMD[DType.float32, 8](0)
        for i in range(8):
            # exp arguments of the loss: [-200, 0]; log arguments: [1, 1e6]
            var u = Float32(Float64(rng.next() >> 11) / 9007199254740992.0)
            x[i] = -200.0 * u if i < 4 else 1.0 + 1.0e6 * u
        _check_lanes(x, seed)


def test_specials() raises:
    var specials = SIMD[DType.float32, 8](0.0, -0.0, inf[DType.float32](), -inf[DType.float32](),
                                          nan[DType.float32](), -1.0, 1.0e-45, 88.72284)
    _check_lanes(specials, 0)
    assert_equal(_bits(exp32_scalar(0.0)), _bits(Float32(1.0)))
    assert_equal(_bits(exp32_scalar(-0.0)), _bits(Float32(1.0)))
    assert_equal(_bits(exp32_scalar(inf[DType.float32]())), _bits(inf[DType.float32]()))
    assert_equal(_bits(exp32_scalar(-inf[DType.float32]())), UInt32(0))
    assert_true(isnan(exp32_scalar(nan[DType.float32]())))
    assert_equal(_bits(log32_scalar(1.0)), UInt32(0))
    assert_equal(_bits(log32_scalar(0.0)), _bits(-inf[DType.float32]()))
    assert_equal(_bits(log32_scalar(-0.0)), _bits(-inf[DType.float32]()))
    assert_equal(_bits(log32_scalar(inf[DType.float32]())), _bits(inf[DType.float32]()))
    assert_true(isnan(log32_scalar(-1.0)))
    assert_true(isnan(log32_scalar(-inf[DType.float32]())))
    assert_true(isnan(log32_scalar(nan[DType.float32]())))


def test_known_values() raises:
    # Correctly rounded float32 results (from binary64 exp/log rounded once).
    assert_equal(_bits(exp32_scalar(1.0)), UInt32(0x402DF854))      # e
    assert_equal(_bits(log32_scalar(2.0)), UInt32(0x3F317218))      # ln 2
    assert_equal(_bits(log32_scalar(_from_bits(1))), UInt32(0xC2CE8ED0))  # ln(2^-149) = -103.27893
    assert_equal(_bits(exp32_scalar(-100.0)), UInt32(0x0000001B))   # subnormal result


def test_overflow_underflow_edges() raises:
    # exp overflows exactly from 88.72284 (0x42B17218) on; 0x42B17217 still finite.
    assert_true(exp32_scalar(_from_bits(0x42B17217)) < inf[DType.float32]())
    assert_equal(_bits(exp32_scalar(_from_bits(0x42B17218))), _bits(inf[DType.float32]()))
    # exp(-103.972084) (0xC2CFF1B5) rounds up to the smallest subnormal; the next float down to 0.
    assert_equal(_bits(exp32_scalar(_from_bits(0xC2CFF1B4))), UInt32(1))
    assert_equal(_bits(exp32_scalar(_from_bits(0xC2CFF1B6))), UInt32(0))


def test_activations_simd_equals_scalar_ranges() raises:
    var seed = _seed()
    var rng = Rng(seed)
    for _ in range(40000):
        var x = SIMD[DType.float32, 8](0)
        for i in range(8):
            # Every branch and its edges: tanh's 0.625, erf's 1 and 2, both sigmoid sides,
            # the saturation points (tanh 9.01, erf 3.92) and small arguments.
            var u = Float32(Float64(rng.next() >> 11) / 9007199254740992.0)
            var scale = Float32(0.002) if i == 0 else (Float32(2.5) if i < 4 else Float32(24.0))
            x[i] = scale * (2.0 * u - 1.0)
        _check_activations(x, seed)


def _odd_specials[f: Int]() raises:
    comptime F = DType.float32
    assert_equal(_bits(_scalar_form[f](-0.0)), _bits(Float32(-0.0)))
    assert_equal(_bits(_scalar_form[f](0.0)), UInt32(0))
    assert_equal(_bits(_scalar_form[f](inf[F]())), _bits(Float32(1.0)))
    assert_equal(_bits(_scalar_form[f](-inf[F]())), _bits(Float32(-1.0)))
    assert_true(isnan(_scalar_form[f](nan[F]())))


def test_activation_specials() raises:
    comptime F = DType.float32
    var specials = SIMD[F, 8](0.0, -0.0, inf[F](), -inf[F](), nan[F](), 0.625, 1.0, 2.0)
    _check_lanes(specials, 0)
    _check_lanes(-specials, 0)
    _check_lanes(SIMD[F, 8](1.0e-45, -1.0e-45, 1.0e-38, -1.0e-38, 9.02, -3.93, -88.8, -104.0), 0)
    _odd_specials[TANH]()
    _odd_specials[ERF]()
    assert_equal(_bits(sigmoid32_scalar(0.0)), _bits(Float32(0.5)))
    assert_equal(_bits(sigmoid32_scalar(-0.0)), _bits(Float32(0.5)))
    assert_equal(_bits(sigmoid32_scalar(inf[F]())), _bits(Float32(1.0)))
    assert_equal(_bits(sigmoid32_scalar(-inf[F]())), UInt32(0))
    assert_true(isnan(sigmoid32_scalar(nan[F]())))
    # The subnormal tail: sigmoid(-100) = e^-100 (1 + ...) rounds to the subnormal 0x1B.
    assert_equal(_bits(sigmoid32_scalar(-100.0)), UInt32(0x0000001B))


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
