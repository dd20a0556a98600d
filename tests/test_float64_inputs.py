"""float64 and Python lists into `Trainer` and `MLPTrainer` (issue 36): one round to the nearest
float32 (ties to even), then the same bits as the float32 values; NaN, infinity and values that
overflow float32 refused by name; `SmallMLPTrainer` keeps the reference's float32-only refusal."""

import array
import random
import struct

import mojolearn as ml
import pytest
from mojolearn import nn


def _trainer(kind):
    if kind == "mlp":
        return ml.MLPTrainer([4, 8, 3], seed=3, data_schedule={"a": 1})
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    return ml.Trainer(model, input_shape=(4,), seed=3)


def _doubles(rng, n, k):
    # Values with bits below float32's precision, so the rounding is exercised.
    return [[rng.uniform(-3, 3) for _ in range(k)] for _ in range(n)]


def _f32(rows):
    """The float32 value of each double, by struct (a C cast: round to nearest, ties to even)."""
    return ml.Array.from_list(
        [[struct.unpack("f", struct.pack("f", v))[0] for v in r] for r in rows]
    )


@pytest.mark.parametrize("kind", ["mlp", "model"])
def test_float64_and_lists_give_the_bits_of_their_float32_rounding(kind):
    rng = random.Random()
    rows = _doubles(rng, 6, 4)
    # Ties: halfway between two float32 neighbours, rounded to the even one.
    rows[0][:2] = [1.0 + 2.0**-24, 1.0 + 3 * 2.0**-24]
    labels = [rng.randrange(3) for _ in rows]
    flat = array.array("d", [v for r in rows for v in r])
    doubles = memoryview(flat).cast("B").cast("d", (6, 4))
    want = _trainer(kind)
    ref = want.train_step(_f32(rows), ml.Array.from_list(labels, "<i4"))
    for X, y in (
        (doubles, labels),
        (rows, tuple(labels)),
        (ml.Array.from_list(rows, "<f8"), labels),
    ):
        t = _trainer(kind)
        got = t.train_step(X, y)
        assert got["loss"] == ref["loss"]
        assert got["logits"].tobytes() == ref["logits"].tobytes()
        assert t.state_hash() == want.state_hash()
        assert t.predict_logits(X).tobytes() == want.predict_logits(_f32(rows)).tobytes()
        assert t.evaluate(X, y) == want.evaluate(_f32(rows), labels)


@pytest.mark.parametrize("kind", ["mlp", "model"])
def test_strided_float64_numpy_and_fit_take_the_same_bits(kind):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng()
    X = rng.standard_normal((40, 8))[:, ::2]  # strided float64
    y = rng.integers(0, 3, 40)
    a, b = _trainer(kind), _trainer(kind)
    ha = ml.fit(a, X, y, epochs=2, batch_size=8, seed=1)
    hb = ml.fit(b, X.astype(np.float32), y.astype(np.int32), epochs=2, batch_size=8, seed=1)
    assert ha == hb and a.state_hash() == b.state_hash()
    assert a.predict(np.asfortranarray(X)).tobytes() == b.predict(X.astype(np.float32)).tobytes()


@pytest.mark.parametrize("kind", ["mlp", "model"])
def test_non_finite_and_overflowing_doubles_are_refused_by_name(kind):
    api = "MLPTrainer" if kind == "mlp" else "Trainer"
    t = _trainer(kind)
    before = t.state_hash()
    big = 2.0**128 - 2.0**103  # the least double that rounds to float32 infinity
    just_below = 2.0**128 - 2.0**103 - 2.0**75
    cases = [
        (
            [[0.0] * 4, [0.0, 0.0, big, 0.0]],
            ValueError,
            "X must fit in float32: example 1, element 2",
        ),
        (
            [[0.0] * 4, [0.0, -big, 0.0, 0.0]],
            ValueError,
            "X must fit in float32: example 1, element 1",
        ),
        ([[0.0, float("nan"), 0.0, 0.0]] * 2, ValueError, "X must be finite: example 0, element 1"),
        (
            [[0.0, 0.0, 0.0, float("-inf")]] * 2,
            ValueError,
            "X must be finite: example 0, element 3",
        ),
        ([[0.0, True, 0.0, 0.0]] * 2, TypeError, "X must hold numbers, got bool"),
        ([[0.0] * 4, [0.0] * 3], ValueError, "X: nested lists must be rectangular"),
    ]
    for X, error, words in cases:
        with pytest.raises(error) as info:
            t.train_step(X, [0, 1])
        assert str(info.value).startswith(f"{api}: {words}"), str(info.value)
    with pytest.raises(TypeError, match=f"{api}: targets must hold integers"):
        t.train_step([[0.0] * 4] * 2, [0, 1.0])
    assert t.state_hash() == before and t.step_ == 0
    t.predict_logits([[just_below, 0.0, 0.0, 0.0]])  # the largest float32: taken


def test_small_mlp_trainer_keeps_the_float32_only_refusal():
    t = ml.SmallMLPTrainer(*ml.init_small_mlp(0), data_schedule={"a": 1})
    doubles = memoryview(array.array("d", [0.5] * 8)).cast("B").cast("d", (2, 4))
    with pytest.raises(TypeError, match="SmallMLPTrainer: X must be float32, got float64"):
        t.train_step(doubles, array.array("i", [0, 1]))
    with pytest.raises(TypeError, match="SmallMLPTrainer: X must be a float32 buffer"):
        t.train_step([[0.5] * 4] * 2, array.array("i", [0, 1]))
    with pytest.raises(TypeError, match="SmallMLPTrainer: X must be float32, got float64"):
        t.predict(doubles)
    assert t.step_ == 0
