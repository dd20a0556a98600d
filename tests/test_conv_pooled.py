"""A stride-1 conv's dW and db under the masking 2 x 2 max pool after it, from that pool's
gradient and window places (training/layers/conv_pooled.mojo: only the points the windows
picked): the pure-Python reference's bits (tests/reference, which takes every point's product)
for every channel grouping, kernel, padding and odd image, first in the model or after another
conv (its dX then also from the places, or from the dY the pool's backward writes where the
padding is as wide as the kernel); past its registers and where x is not finite, the dense
kernel's (which takes the +0.0 products too: NaN where x is infinite)."""

import math
import random

import pytest
from mojolearn import nn
from mojolearn._model.program import OP_CONV2D, Program, pack
from mojolearn._model.spec import ModelSpec

from tests.reference import model as ref
from tests.reference.f32 import f32
from tests.test_conv import _check
from tests.test_model_engine import _data, _step, identical


def _pooled_model(rng, first):
    """Conv2d + ReLU + MaxPool2d(2) with random sizes (channels 1..9: groups of 3, 2 and 1
    side by side; kernels to 7 x 8, the kernel's register bound), as the model's first layer or
    after another conv (whose input gradient the second conv's backward then computes)."""
    c, oc = rng.randrange(1, 4), rng.randrange(1, 10)
    kh, kw = rng.randrange(1, 8), rng.randrange(1, 9)
    ph, pw = rng.randrange(0, 3), rng.randrange(0, 3)
    h = rng.randrange(max(2, kh - 2 * ph + 1), kh - 2 * ph + 9)  # odd and even outputs
    w = rng.randrange(max(2, kw - 2 * pw + 1), kw - 2 * pw + 9)
    body = [
        nn.Conv2d(c, oc, (kh, kw), padding=(ph, pw), bias=rng.random() < 0.8),
        nn.ReLU(),
        nn.MaxPool2d(2),
    ]
    shape = (c, h, w)
    if not first:
        body = [nn.Conv2d(2, c, 1), *body]
        shape = (2, h, w)
    front = ModelSpec(nn.Sequential(*body, nn.Flatten()), shape, "mse")
    model = nn.Sequential(*body, nn.Flatten(), nn.Linear(front.output_shape[0], 3))
    return ModelSpec(model, shape, "cross_entropy")


@identical
@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("trial", range(8))
def test_a_conv_under_a_masking_pool_gives_the_references_dw_and_db(seed, first, trial):
    rng = random.Random(seed * 31 + trial)
    spec = _pooled_model(rng, first)
    ops = Program(spec, 1).ops
    convs = [op for op in ops if op[0] == OP_CONV2D]
    assert convs[-1][5] == pack(1, 1, 2)  # its ReLU masked by the pool that keeps places
    rows = rng.randrange(1, 4)
    # values from a few, so that windows tie and some maxima are +0.0 (masked windows)
    x = [
        rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0])
        for _ in range(rows * math.prod(spec.input_shape))
    ]
    _check(spec, rng, rows, x)


@identical
@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("kernel", [(8, 3), (3, 9)])
def test_kernels_past_its_registers_take_the_dense_dw_with_the_same_bits(seed, kernel, first):
    """The conv's dY written by the pool's backward the model skipped, then the dense
    kernel's chains over every point (and, after another conv, dX's from the places)."""
    rng = random.Random(seed)
    body = [nn.Conv2d(2, 5, kernel, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
    shape = (2, 12, 13)
    if not first:
        body = [nn.Conv2d(3, 2, 1), nn.ReLU(), *body]
        shape = (3, 12, 13)
    front = ModelSpec(nn.Sequential(*body, nn.Flatten()), shape, "mse")
    spec = ModelSpec(
        nn.Sequential(*body, nn.Flatten(), nn.Linear(front.output_shape[0], 3)),
        shape,
        "cross_entropy",
    )
    _check(spec, rng, 2)


@identical
@pytest.mark.parametrize("first", [True, False])
def test_an_infinite_input_takes_the_dense_dw_whose_chains_turn_nan(seed, first):
    """An input of -inf under positive weights: every output that reads it is -inf, which the
    ReLU and the pool mask, so the forward and the loss stay finite; the reference's dW chains
    take +0.0 · -inf = NaN there. The kernel that skips those products would give finite
    weights: it refuses, and the dense kernel's NaNs make the step refuse its result at the
    reference's first NaN (the binding returns no gradient that is not finite). After another
    conv, the -inf is that conv's overflow (4 · -2e38), spread by an average pool."""
    rng = random.Random(seed)
    shape = (1, 10, 10) if first else (1, 11, 11)
    body = [nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
    if not first:
        body = [nn.Conv2d(1, 1, 1), nn.AvgPool2d(2, 1), *body]
    front = ModelSpec(nn.Sequential(*body, nn.Flatten()), shape, "mse")
    spec = ModelSpec(
        nn.Sequential(*body, nn.Flatten(), nn.Linear(front.output_shape[0], 3)),
        shape,
        "cross_entropy",
    )
    params = [abs(v) + 0.01 for t in spec.init(rng.randrange(1 << 32)) for v in t]
    if not first:
        params[0] = 4.0  # the 1 x 1 conv's weight
    rows = 2
    x = [f32(rng.uniform(0.1, 1.0)) for _ in range(rows * math.prod(shape))]
    for r in range(rows):
        x[r * math.prod(shape) + 4 * shape[2] + 5] = float("-inf") if first else -2e38
    _, y = _data(rng, spec, rows)
    want_loss, want_out, want_grads = ref.step(spec, params, x, y, rows, 3, 1, True)
    assert math.isfinite(want_loss) and all(map(math.isfinite, want_out))
    first_bad = next(i for i, v in enumerate(want_grads) if not math.isfinite(v))
    conv = len(body) - 3  # the pooled conv's index: its dW
    assert spec.offsets[spec.names.index(f"{conv}.weight")] <= first_bad
    assert first_bad < spec.offsets[spec.names.index(f"{conv}.bias")]
    with pytest.raises(RuntimeError, match=f"'grads' is not finite at index {first_bad}$"):
        _step(spec, Program(spec, 3), params, x, y, rows, mode=1)
