"""Learning-rate schedules and the portable host math under them: the project's cosine
against math.cos (accuracy only: the schedules never call math.cos), float32 rounding, the
schedule shapes at their boundaries, refusals, and the optimizer reading lr_at(t) one-based."""

import array
import math
import random
import struct

import mojolearn
import pytest
from mojolearn import ConstantLR, WarmupCosineLR, WarmupLinearLR
from mojolearn._runtime.portable import cospi, f32_in_range, round_f32

from tests.reference.f32 import f32, hexf


def test_round_f32_matches_struct_rounding_and_handles_overflow(seed):
    r = random.Random(seed)
    for _ in range(2000):
        x = r.uniform(-1, 1) * 10.0 ** r.randint(-45, 38)
        assert hexf(round_f32(x)) == hexf(f32(x)), (seed, x)
        assert round_f32(x) == struct.unpack("<f", struct.pack("<f", x))[0]
    assert round_f32(3.5e38) == math.inf and round_f32(-1e300) == -math.inf
    assert round_f32(1e-46) == 0.0 and round_f32(2e-45) == 2**-149 * 1  # subnormal kept


def test_round_f32_none_policy_gives_none_exactly_where_float32_holds_no_finite_value(seed):
    # The one rounding helper, with the checks' policy: None where the IEEE result is not
    # finite (past the float32 range, or a NaN or infinite input), the same value elsewhere.
    r = random.Random(seed)
    edge = [
        3.4028235677973366e38,
        math.nextafter(3.4028235677973366e38, 0.0),
        3.4028234663852886e38,
    ]
    values = [r.uniform(-1, 1) * 10.0 ** r.randint(-46, 39) for _ in range(2000)]
    for x in values + edge + [-x for x in edge] + [math.inf, -math.inf, math.nan]:
        expected = f32(x)
        got = round_f32(x, overflow="none")
        if math.isfinite(expected):
            assert hexf(got) == hexf(expected), (seed, x)
        else:
            assert got is None, (seed, x)
    assert round_f32(3.4028235677973366e38, overflow="none") is None  # the tie goes up
    with pytest.raises(ValueError, match="overflow must be 'inf' or 'none', got 'nan'"):
        round_f32(1.0, overflow="nan")


def test_f32_in_range_checks_the_value_and_its_float32_rounding(seed):
    # Against a plain reference: both x and f32(x) finite and inside the range (ends closed or
    # open); 1 names x itself, 2 its rounding.
    r = random.Random(seed)

    def inside(v, lo, hi, lo_open, hi_open):
        if not math.isfinite(v):
            return False
        return (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)

    ends = [0.0, 1.0, -math.inf, math.inf, -2.5, 1e-45]
    near = [0.0, 1.0, 1e-50, 0.99999999, 1.00000001, 1e39, -1e-50, 2.5, -2.5, 1e-45, 3e-46]
    for _ in range(3000):
        lo, hi = sorted(r.sample(ends, 2))
        lo_open, hi_open = r.random() < 0.5, r.random() < 0.5
        x = r.choice(near + [math.nan, math.inf, -math.inf, r.uniform(-3, 3)])
        expected = (
            1
            if not inside(x, lo, hi, lo_open, hi_open)
            else 2
            if not inside(f32(x), lo, hi, lo_open, hi_open)
            else 0
        )
        assert f32_in_range(x, lo, hi, lo_open, hi_open) == expected, (seed, x, lo, hi)
    assert f32_in_range(0.99999999, 0.0, 1.0, hi_open=True) == 2  # rounds to 1.0
    assert f32_in_range(1e-50, 0.0, lo_open=True) == 2  # rounds to 0.0
    assert f32_in_range(1e39) == 2 and f32_in_range(math.inf) == 1  # finite only


def test_cospi_is_accurate_and_exact_at_the_landmarks(seed):
    r = random.Random(seed)
    worst = 0.0
    for _ in range(5000):
        p = r.uniform(-4.0, 4.0)
        worst = max(worst, abs(cospi(p) - math.cos(math.pi * p)))
    # math.cos(math.pi * p) itself carries the rounding of pi * p (up to ~1.5e-15 here).
    assert worst < 4e-15, f"seed {seed}: worst abs error {worst}"
    assert cospi(0.0) == 1.0 and cospi(1.0) == -1.0 and cospi(0.5) == 0.0
    assert cospi(2.0) == 1.0 and cospi(-1.0) == -1.0
    for p in (0.125, 0.3125, 0.71875):  # dyadic, so 1 - p is exact in the test too
        assert cospi(p) == -cospi(1.0 - p)  # the reflection is exact by construction
    with pytest.raises(ValueError):
        cospi(math.nan)


@pytest.mark.parametrize("cls", [ConstantLR, WarmupLinearLR, WarmupCosineLR])
def test_warmup_is_linear_from_zero_and_reaches_peak(cls, seed):
    r = random.Random(seed)
    peak, w = r.uniform(1e-4, 1.0), r.randint(1, 50)
    s = cls(peak, warmup_steps=w, total_steps=w + r.randint(1, 100), min_lr=0.0)
    pk = f32(peak)
    for t in range(1, w + 1):
        assert hexf(s.lr_at(t)) == hexf(f32(pk * t / w)), (seed, t)
    assert s.lr_at(w) == pk


@pytest.mark.parametrize("cls", [ConstantLR, WarmupLinearLR, WarmupCosineLR])
def test_decay_ends_at_min_lr_at_total_steps_and_stays(cls, seed):
    r = random.Random(seed)
    peak = r.uniform(0.01, 1.0)
    lo = peak * r.uniform(0.0, 0.5)
    w, total = r.randint(0, 10), r.randint(20, 200)
    s = cls(peak, warmup_steps=w, total_steps=total, min_lr=lo)
    values = [s.lr_at(t) for t in range(w + 1, total + 5)]
    assert all(v == f32(v) for v in values)
    assert all(a >= b for a, b in zip(values, values[1:])), seed  # non-increasing after warmup
    assert s.lr_at(total) == f32(lo) == s.lr_at(total + 1000)
    if cls is ConstantLR:
        assert s.lr_at(total - 1) == f32(peak)


def test_linear_and_cosine_follow_their_formulas(seed):
    r = random.Random(seed)
    peak, lo, w, total = f32(r.uniform(0.1, 1)), f32(r.uniform(0, 0.05)), 5, 105
    lin = WarmupLinearLR(peak, w, total, lo)
    cos = WarmupCosineLR(peak, w, total, lo)
    for t in range(w + 1, total):
        prog = (t - w) / (total - w)
        assert lin.lr_at(t) == f32(lo + (peak - lo) * (1.0 - prog))
        assert (
            abs(cos.lr_at(t) - (lo + (peak - lo) * 0.5 * (1 + math.cos(math.pi * prog))))
            <= 2 * abs(cos.lr_at(t)) * 2**-24 + 1e-12
        )
    mid = WarmupCosineLR(1.0, 0, 100, 0.0).lr_at(50)
    assert mid == 0.5


def test_constant_without_total_steps_stays_at_peak():
    s = ConstantLR(0.1, warmup_steps=2)
    assert [s.lr_at(t) for t in (1, 2, 3, 10**9)] == [f32(0.05), f32(0.1), f32(0.1), f32(0.1)]


@pytest.mark.parametrize(
    "cls, kwargs, exc, match",
    [
        (WarmupLinearLR, dict(peak_lr=0.1), ValueError, "needs total_steps"),
        (WarmupCosineLR, dict(peak_lr=0.1, warmup_steps=5), ValueError, "needs total_steps"),
        (ConstantLR, dict(peak_lr=-0.1), ValueError, "peak_lr"),
        (ConstantLR, dict(peak_lr=math.nan), ValueError, "peak_lr"),
        (ConstantLR, dict(peak_lr="0.1"), TypeError, "peak_lr"),
        (ConstantLR, dict(peak_lr=0.1, min_lr=0.2), ValueError, "min_lr"),
        (ConstantLR, dict(peak_lr=0.1, warmup_steps=-1), ValueError, "warmup_steps"),
        (ConstantLR, dict(peak_lr=0.1, warmup_steps=2.0), TypeError, "warmup_steps"),
        (ConstantLR, dict(peak_lr=0.1, warmup_steps=True), TypeError, "warmup_steps"),
        (
            WarmupCosineLR,
            dict(peak_lr=0.1, warmup_steps=10, total_steps=10),
            ValueError,
            "must exceed",
        ),
        (WarmupLinearLR, dict(peak_lr=1e39, total_steps=10), ValueError, "overflows"),
    ],
)
def test_constructor_refusals(cls, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cls(**kwargs)


@pytest.mark.parametrize("cls", [ConstantLR, WarmupLinearLR, WarmupCosineLR])
def test_lr_at_is_one_based(cls):
    s = cls(0.1, 2, 10)
    with pytest.raises(ValueError, match="one-based"):
        s.lr_at(0)
    with pytest.raises(ValueError, match="one-based"):
        s.lr_at(-3)
    with pytest.raises(TypeError):
        s.lr_at(1.0)


def test_optimizer_uses_the_schedule_value_of_each_step(seed):
    r = random.Random(seed)
    sched = WarmupCosineLR(0.5, warmup_steps=3, total_steps=8, min_lr=0.01)
    p = array.array("f", [r.uniform(-1, 1) for _ in range(5)])
    g = array.array("f", [r.uniform(-1, 1) for _ in range(5)])
    want = list(p)
    opt = mojolearn.SGD([p], lr=123.0, lr_schedule=sched)
    for t in range(1, 11):
        lr = sched.lr_at(t)
        want = [f32(x - f32(lr * y)) for x, y in zip(want, g)]
        opt.step([g])
        assert opt.lr == lr
        assert [hexf(x) for x in p] == [hexf(x) for x in want], (seed, t)


def test_schedules_are_exported_from_the_training_module():
    assert mojolearn.training.ConstantLR is ConstantLR
    assert mojolearn.training.WarmupLinearLR is WarmupLinearLR
