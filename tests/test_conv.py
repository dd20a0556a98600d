"""Conv2d, MaxPool2d, AvgPool2d (issue 37) on the model engine against the pure-Python
reference of docs/ARITHMETIC.md "Models" (tests/reference/conv.py): bit for bit in identical
mode on fresh random image models (channels 1..5, non-square kernels, stride 1 and 2, padding
0..2, overlapping pools, ties, a Residual around a conv: the accumulating input gradient); a
Trainer's steps against torch in float64; refusals at construction and in the binding's
program check."""

import array
import math
import random

import mojolearn as ml
import pytest
from mojolearn import nn
from mojolearn._model.program import OP_CONV2D, OP_MAXPOOL2D, Program, pack
from mojolearn._model.spec import ModelSpec

from tests.reference import model as ref
from tests.reference.f32 import f32
from tests.test_model_engine import _bits, _data, _step, identical


def _conv(rng, c, h, w):
    """A random Conv2d that fits a (c, h, w) image, and its output shape."""
    for _ in range(100):
        k = (rng.randrange(1, 5), rng.randrange(1, 5))
        s = (rng.choice([1, 2]), rng.choice([1, 2]))
        p = (rng.randrange(0, 3), rng.randrange(0, 3))
        if k[0] <= h + 2 * p[0] and k[1] <= w + 2 * p[1]:
            break
    layer = nn.Conv2d(c, rng.randrange(1, 6), k, s, p, bias=rng.random() < 0.8)
    return layer, layer._output_shape((c, h, w), "test")


def _image_model(rng, loss):
    c, h, w = rng.randrange(1, 6), rng.randrange(3, 10), rng.randrange(3, 10)
    shape = (c, h, w)
    layers = []
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(5)
        if kind <= 1:
            layer, shape = _conv(rng, *shape)
            layers.append(layer)
        elif kind == 2 and min(shape[1:]) >= 2:
            k = (rng.randrange(1, min(shape[1], 3) + 1), rng.randrange(1, min(shape[2], 3) + 1))
            stride = rng.choice([None, 1, (1, 2), 2])  # stride < kernel: overlapping windows
            pool = rng.choice([nn.MaxPool2d, nn.AvgPool2d])(k, stride)
            layers.append(pool)
            shape = pool._output_shape(shape, "test")
        elif kind == 3:
            layers.append(rng.choice([nn.ReLU(), nn.Tanh()]))
        else:  # a Residual: its conv's input gradient continues the skip's chain
            ch = shape[0]
            inner = [nn.Conv2d(ch, ch, 3, padding=1), nn.ReLU()]
            if min(shape[1:]) >= 3:
                inner.append(nn.MaxPool2d(3, 1))
                inner.append(nn.Conv2d(ch, ch, 3, padding=2))
            layers.append(nn.Residual(*inner))
    classes = rng.randrange(2, 5) if loss == "cross_entropy" else rng.randrange(1, 3)
    layers += [nn.Flatten(), nn.Linear(math.prod(shape), classes)]
    return ModelSpec(nn.Sequential(*layers), (c, h, w), loss)


def _check(spec, rng, rows, x=None):
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    xs, y = _data(rng, spec, rows)
    x = xs if x is None else x
    program = Program(spec, 3)
    losses, outputs, grads, _ = _step(spec, program, params, x, y, rows, mode=1)
    want_loss, want_out, want_grads = ref.step(spec, params, x, y, rows, 3, 1, True)
    assert _bits(outputs) == _bits(want_out), spec.model
    assert _bits(losses) == _bits([want_loss]), spec.model
    assert _bits(grads) == _bits(want_grads), spec.model


@identical
@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
@pytest.mark.parametrize("trial", range(10))
def test_a_random_image_model_step_is_the_references_bit_for_bit(seed, loss, trial):
    rng = random.Random(seed + trial)
    _check(_image_model(rng, loss), rng, rng.randrange(1, 4))


@identical
def test_pool_ties_go_to_the_first_element_and_overlaps_add_in_window_order(seed):
    """Inputs from four values, so windows hold ties; stride 1 < kernel 3: overlapping."""
    rng = random.Random(seed)
    spec = ModelSpec(
        nn.Sequential(
            nn.MaxPool2d(3, 1), nn.AvgPool2d((2, 3), (1, 2)), nn.Flatten(), nn.Linear(12, 3)
        ),
        (2, 6, 8),
        "cross_entropy",
    )
    rows = 3
    x = [rng.choice([-1.0, 0.0, 0.5, 2.0]) for _ in range(rows * 96)]
    _check(spec, rng, rows, x)


@identical
@pytest.mark.parametrize("out_channels", [6, 12, 16])
def test_stride_one_weight_and_bias_gradients_from_channel_last_dy(seed, out_channels):
    """dY laid out channel-last in blocks of 8 (the last block partly padding at 6 and 12
    channels, its points 8 at a time then a tail: 5 x 7 = 35 points), which dW and the bias
    chains read."""
    rng = random.Random(seed)
    conv = nn.Conv2d(3, out_channels, (2, 3), padding=(1, 1))
    spec = ModelSpec(
        nn.Sequential(conv, nn.ReLU(), nn.Flatten(), nn.Linear(out_channels * 35, 3)),
        (3, 4, 7),
        "cross_entropy",
    )
    _check(spec, rng, 3)


@identical
@pytest.mark.parametrize("ties", [False, True])
def test_the_two_by_two_max_pool_kernels_are_the_references(seed, ties):
    """MaxPool2d(2)'s vector kernels (windows in 16, 8, 4 lanes, then one at a time): an odd
    image (41 x 59: 29 windows a row, an uncovered last row and column), and, in a
    Residual, an input gradient continued from the skip's (accumulate)."""
    rng = random.Random(seed)
    for shape, body in (
        ((2, 41, 59), [nn.MaxPool2d(2)]),
        ((2, 40, 40), [nn.Residual(nn.MaxPool2d(2), nn.Conv2d(2, 2, 1, padding=10))]),
    ):
        front = [nn.Conv2d(2, 2, 1), *body]  # the conv: the pool's input has a gradient
        features = math.prod(ModelSpec(nn.Sequential(*front), shape, "mse").output_shape)
        model = nn.Sequential(*front, nn.Flatten(), nn.Linear(features, 3))
        spec = ModelSpec(model, shape, "cross_entropy")
        rows = 2
        n = rows * math.prod(shape)
        x = [rng.choice([-1.0, 0.0, 0.5, 2.0]) if ties else rng.uniform(-2, 2) for _ in range(n)]
        _check(spec, rng, rows, [f32(v) for v in x])


@identical
@pytest.mark.parametrize(
    "shape, middle",
    [
        ((3, 11, 12), nn.Conv2d(4, 4, (2, 3), 2, (2, 1))),  # stride 2: the GEMM's dX
        ((6, 5, 37), nn.Conv2d(4, 7, (3, 2), 1, (2, 1))),  # stride 1: rows past 2 vectors
        ((5, 4, 9), nn.Conv2d(4, 5, 3, 1, 3)),  # padding past the kernel
        # grids along each output row (16 points of 14; 8 of 8), odd vector counts: the
        # middle conv and the Residual's, forward and dX (written and continued)
        ((2, 11, 14), nn.Conv2d(4, 3, 5)),
        ((2, 7, 8), nn.Conv2d(4, 3, (3, 5), 1, (1, 2))),
    ],
)
def test_a_convs_input_gradient_reaches_the_conv_before_it(seed, shape, middle):
    """Conv, AvgPool, conv: the second conv's dX (written or, in a Residual, continued from
    the skip's) is what the first conv's dW and db are made of."""
    rng = random.Random(seed)
    c = shape[0]
    first = nn.Conv2d(c, 4, 1)
    for body, out in (
        ([nn.AvgPool2d(1), middle], middle.out_channels),
        ([nn.Residual(nn.Conv2d(4, 4, 3, padding=1))], 4),
    ):
        after = [nn.ReLU(), nn.Conv2d(out, 2, 1, bias=False)]
        probe = ModelSpec(nn.Sequential(first, *body, *after, nn.Flatten()), shape, "mse")
        layers = [first, *body, *after, nn.Flatten(), nn.Linear(probe.output_shape[0], 2)]
        _check(ModelSpec(nn.Sequential(*layers), shape, "mse"), rng, 3)


@identical
def test_many_channels_fill_whole_register_blocks(seed):
    """11 and 20 output channels: the stride-1 kernels' blocks of 6 and 4 channels (forward,
    dX) and of one and two 8-lane vectors (dW), with partial ones."""
    rng = random.Random(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 11, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(11, 20, (2, 3)),
        nn.Tanh(),
        nn.Conv2d(20, 7, 1),
        nn.Flatten(),
        nn.Linear(7 * 5 * 5, 3),
    )
    _check(ModelSpec(model, (3, 6, 7), "cross_entropy"), rng, 2)


def test_construction_refuses_bad_sizes_by_name():
    with pytest.raises(ValueError, match="Conv2d: kernel_size must be an int in"):
        nn.Conv2d(1, 2, 0)
    with pytest.raises(ValueError, match=r"Conv2d: stride\[1\] must be an int in"):
        nn.Conv2d(1, 2, 3, stride=(1, -1))
    with pytest.raises(ValueError, match="Conv2d: padding must be an int in"):
        nn.Conv2d(1, 2, 3, padding=-1)
    with pytest.raises(ValueError, match="kernel_size must be an int or a pair"):
        nn.MaxPool2d((2, 2, 2))
    with pytest.raises(TypeError, match="AvgPool2d: kernel_size must be an int"):
        nn.AvgPool2d(2.0)
    cases = [
        (
            nn.Conv2d(1, 2, 5, padding=1),
            (1, 2, 8),
            r"layer 0 Conv2d.*kernel 5x5 is larger "
            r"than its padded input 4x10 \(input shape \(1, 2, 8\)\)",
        ),
        (nn.Conv2d(3, 2, 3), (1, 8, 8), r"layer 0 Conv2d.*expects 3 input channels, gets 1"),
        (
            nn.MaxPool2d(3),
            (2, 2, 8),
            r"layer 0 MaxPool2d\(3\).*kernel 3x3 is larger than its "
            r"input 2x8",
        ),
        (nn.AvgPool2d(2), (64,), r"layer 0 AvgPool2d\(2\) takes images .*input shape \(64,\)"),
    ]
    for layer, shape, msg in cases:
        with pytest.raises(ValueError, match=msg):
            ModelSpec(nn.Sequential(layer, nn.Flatten(), nn.Linear(1, 2)), shape, "mse")
    with pytest.raises(
        ValueError,
        match=r"layer 3 Linear\(10, 2\) expects 10 input features, "
        r"gets 16",
    ):
        ModelSpec(
            nn.Sequential(nn.Conv2d(1, 4, 3), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(10, 2)),
            (1, 6, 6),
            "mse",
        )


def test_descriptions_print_record_and_compare_by_value():
    conv = nn.Conv2d(1, 6, 5, padding=2)
    assert repr(conv) == "Conv2d(1, 6, (5, 5), padding=(2, 2))"
    assert conv == nn.Conv2d(1, 6, (5, 5), 1, (2, 2)) and hash(conv) == hash(
        eval(repr(conv), vars(nn))
    )
    assert repr(nn.MaxPool2d(2)) == "MaxPool2d(2)" and nn.MaxPool2d(2) == nn.MaxPool2d(2, 2)
    assert repr(nn.AvgPool2d((2, 3), 1)) == "AvgPool2d((2, 3), stride=(1, 1))"
    model = nn.Sequential(conv, nn.ReLU(), nn.AvgPool2d((2, 3), 1))
    record = model.to_json()
    assert record["layers"][0]["kernel_size"] == [5, 5]
    assert nn.from_json(record) == model
    spec = ModelSpec(model, (1, 8, 8), "mse")
    assert spec.names == ("0.weight", "0.bias") and spec.shapes == ((6, 1, 5, 5), (6,))
    assert spec.output_shape == (6, 7, 6)


def test_conv_init_draws_torchs_bound_from_the_seeded_generator():
    """kaiming_uniform(a=√5) and the bias both come to U(-b, b), b = 1/√(in·kh·kw)."""
    spec = ModelSpec(nn.Sequential(nn.Conv2d(3, 8, (2, 5)), nn.Flatten()), (3, 9, 9), "mse")
    w, b = spec.init(4)
    bound = 1 / math.sqrt(3 * 2 * 5)
    assert len(w) == 8 * 3 * 2 * 5 and len(b) == 8
    assert all(abs(v) <= bound for v in w + b) and max(map(abs, w)) > 0.9 * bound
    assert spec.init(4) == [w, b] and spec.init(5) != [w, b]


@pytest.mark.parametrize(
    "word, value, msg",
    [
        (3, pack(1, 40, 40), "src"),  # an image larger than the arena holds
        (4, pack(4, 9, 3), "bad image sizes"),  # kernel taller than the padded input
        (5, pack(0, 1), "bad image sizes"),  # stride 0
        (5, pack(1, 1, 3), "bad fused ReLU flag"),
        (5, pack(1, 1, 2), "without the masking MaxPool2d"),  # no pool after it
        (7, 10**6, "weight"),  # outside the flat buffer
        (7, 0 | (10**6 << 32), "bias"),
        (8, 10**9, "work"),
        (8, 10**9 << 32, "mid"),
    ],
)
def test_the_binding_refuses_a_bad_conv_record(word, value, msg):
    spec = ModelSpec(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Flatten()), (1, 6, 6), "mse")
    program = Program(spec, 1)
    assert program.ops[0][0] == OP_CONV2D
    rec = 9 + 0 * 10  # HEADER + op 0 × RECORD
    program.words[rec + word] = value
    rng = random.Random(0)
    params = [v for t in spec.init(1) for v in t]
    x, y = _data(rng, spec, 2)
    with pytest.raises(ValueError, match=msg):
        _step(spec, program, params, x, y, 2)


def test_a_conv_followed_by_a_relu_is_one_op():
    """As a Linear's: the ReLU is the conv's epilogue (the same bits: the tests above); with a
    MaxPool2d after it, the pool masks the gradient (ReLU flag 2, the pool's word 6)."""
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten())
    ops = Program(ModelSpec(model, (1, 6, 6), "mse"), 1).ops
    assert [op[0] for op in ops] == [OP_CONV2D, OP_MAXPOOL2D, 2]  # OP_RELU after the pool
    assert ops[0][5] == pack(1, 1, 2) and ops[1][6] == 1
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.AvgPool2d(2), nn.MaxPool2d(1))
    ops = Program(ModelSpec(model, (1, 6, 6), "mse"), 1).ops
    assert ops[0][5] == pack(1, 1, 1) and ops[1][6] == 0 and ops[2][6] == 0


@identical
@pytest.mark.parametrize("pool", [(2, None), (3, 2), (3, 1), ((2, 3), (1, 2))])
def test_a_max_pool_after_a_fused_conv_relu_masks_its_gradient(seed, pool):
    """The pool's backward masks by its input (the ReLU's output): windows whose maximum is
    +0.0 give +0.0, as the conv's own mask did; odd images (a 2 x 2 pool leaves a row and a
    column uncovered), overlapping windows, in a Residual too (the skip's gradient reaches the
    conv's input, never the pool's masked one)."""
    rng = random.Random(seed)
    skip = [
        nn.Conv2d(3, 3, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(3, 1),
        nn.Conv2d(3, 3, 3, padding=2),
    ]
    for shape, body in (
        ((2, 9, 11), [nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(*pool)]),
        ((3, 8, 8), [nn.Residual(*skip)]),  # its own pool, whatever the parameter
    ):
        front = ModelSpec(nn.Sequential(*body), shape, "mse")
        model = nn.Sequential(*body, nn.Flatten(), nn.Linear(math.prod(front.output_shape), 3))
        spec = ModelSpec(model, shape, "cross_entropy")
        ops = Program(spec, 1).ops
        assert [op[5] for op in ops if op[0] == OP_CONV2D][0] == pack(1, 1, 2)
        rows = 2
        x = [rng.choice([-1.0, -0.5, 0.0, 0.5]) for _ in range(rows * math.prod(shape))]
        _check(spec, rng, rows, x)


def test_the_binding_refuses_a_pool_window_past_its_image():
    spec = ModelSpec(
        nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4, 1)), (1, 4, 4), "mse"
    )
    program = Program(spec, 1)
    assert program.ops[0][0] == OP_MAXPOOL2D
    program.words[9 + 4] = pack(5, 1)
    x, y = _data(random.Random(0), spec, 1)
    with pytest.raises(ValueError, match="bad image sizes"):
        _step(spec, program, [v for t in spec.init(1) for v in t], x, y, 1)


@pytest.mark.parametrize("value", [1, 2])
def test_the_binding_refuses_a_pool_mask_without_its_conv(value):
    """A masked MaxPool2d must follow a Conv2d with ReLU flag 2 and read its output."""
    spec = ModelSpec(
        nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4, 1)), (1, 4, 4), "mse"
    )
    program = Program(spec, 1)
    program.words[9 + 6] = value
    x, y = _data(random.Random(0), spec, 1)
    with pytest.raises(ValueError, match="bad pool mask word"):
        _step(spec, program, [v for t in spec.init(1) for v in t], x, y, 1)


def test_a_2x2_max_pool_keeps_its_window_places_for_the_backward():
    """Word 7: a byte an output in the activations for a 2 x 2 MaxPool2d at stride 2 (its
    backward reads them, not its input: the bits of the tests above); 0 for other pools."""
    model = nn.Sequential(
        nn.MaxPool2d(2), nn.MaxPool2d(3, 1), nn.AvgPool2d(2), nn.MaxPool2d(2, 1), nn.Flatten()
    )
    spec = ModelSpec(model, (3, 21, 21), "mse")
    program = Program(spec, 1)
    ops = program.ops
    assert [op[0] for op in ops] == [OP_MAXPOOL2D, OP_MAXPOOL2D, 11, OP_MAXPOOL2D]
    places = ops[0][7]
    assert places > 0 and [op[7] for op in ops[1:]] == [0, 0, 0]
    assert places not in {ops[0][1], ops[0][2]}  # its own floats: 3 x 10 x 10 bytes
    assert ops[1][2] >= places + (3 * 10 * 10 + 3) // 4 or ops[1][2] < places


@identical
def test_a_2x2_max_pool_given_no_places_runs_the_scalar_backward_with_the_same_bits(seed):
    """A program whose 2 x 2 pools keep no places (word 7 zeroed: a hand-made one) finds the
    maxima again in the pools' inputs (the masked one after the input's conv too, whose dW
    then reads the dY that pool's backward wrote): the reference's bits either way."""
    rng = random.Random(seed)
    model = nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(3, 2, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2, 3),
    )
    spec = ModelSpec(model, (2, 9, 11), "cross_entropy")
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    rows = 3
    x = [rng.choice([-1.0, -0.5, 0.0, 0.5]) for _ in range(rows * 2 * 9 * 11)]
    _, y = _data(rng, spec, rows)
    want = ref.step(spec, params, x, y, rows, 3, 1, True)
    for keep in (True, False):
        program = Program(spec, 3)
        pools = [i for i, op in enumerate(program.ops) if op[0] == OP_MAXPOOL2D]
        assert len(pools) == 2 and all(program.ops[i][7] > 0 for i in pools)
        if not keep:
            for i in pools:
                program.words[9 + i * 10 + 7] = 0
        losses, outputs, grads, _ = _step(spec, program, params, x, y, rows, mode=1)
        assert _bits(outputs) == _bits(want[1]) and _bits(grads) == _bits(want[2]), keep
        assert _bits(losses) == _bits([want[0]])


@identical
@pytest.mark.parametrize("stride", [1, 2])
def test_a_conv_runs_the_masking_pool_after_it_with_the_same_bits(seed, stride):
    """A conv whose fused ReLU a 2 x 2 max pool masks runs that pool in its forward (at
    stride 1 example by example, its own output never written; at stride 2 after its GEMM):
    the model's output, loss and gradients are the reference's, the pool at the model's end
    (its output the caller's buffer) and in the middle, odd images included."""
    rng = random.Random(seed)
    for shape, tail in (((2, 9, 11), False), ((1, 12, 12), True)):
        body = [nn.Conv2d(shape[0], 3, 3, stride=stride, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        front = ModelSpec(nn.Sequential(*body, nn.Flatten()), shape, "mse")
        model = front.model
        if tail:
            model = nn.Sequential(*body, nn.Flatten(), nn.Linear(front.output_shape[0], 4))
        spec = ModelSpec(model, shape, "cross_entropy" if tail else "mse")
        ops = Program(spec, 1).ops
        assert ops[0][5] == pack(stride, stride, 2) and ops[1][7] > 0
        _check(spec, rng, 3, [f32(rng.uniform(-1, 1)) for _ in range(3 * math.prod(shape))])


@pytest.mark.parametrize(
    ("pool", "value", "msg"),
    [
        (nn.AvgPool2d(2), 1, "window places for a pool that is not"),
        (nn.MaxPool2d(3, 2), 1, "window places for a pool that is not"),
        (nn.MaxPool2d(2, 1), 1, "window places for a pool that is not"),
        (nn.MaxPool2d(2), 10**9, "places"),  # outside the activations
        (nn.MaxPool2d(2), -5, "places"),
    ],
)
def test_the_binding_refuses_bad_window_places(pool, value, msg):
    n = math.prod(ModelSpec(nn.Sequential(pool, nn.Flatten()), (1, 4, 4), "mse").output_shape)
    spec = ModelSpec(nn.Sequential(pool, nn.Flatten(), nn.Linear(n, 1)), (1, 4, 4), "mse")
    program = Program(spec, 1)
    program.words[9 + 7] = value
    x, y = _data(random.Random(0), spec, 1)
    with pytest.raises(ValueError, match=msg):
        _step(spec, program, [v for t in spec.init(1) for v in t], x, y, 1)


def _cnn():
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, (3, 2), stride=(1, 2)),
        nn.Tanh(),
        nn.AvgPool2d(2, 1),
        nn.Flatten(),
        nn.Linear(6 * 1 * 1, 3),
    )


def test_trainer_takes_nchw_or_flat_batches_and_refuses_the_rest_by_name(seed):
    rng = random.Random(seed)
    t = ml.Trainer(_cnn(), input_shape=(1, 8, 8), seed=1)
    a = ml.Trainer(_cnn(), input_shape=(1, 8, 8), seed=1)
    flat = [[f32(rng.gauss(0, 1)) for _ in range(64)] for _ in range(5)]
    y = ml.Array.from_list([rng.randrange(3) for _ in range(5)], "<i4")
    nchw = ml.Array.from_list([[[row[i * 8 : (i + 1) * 8] for i in range(8)]] for row in flat])
    r1 = t.train_step(nchw, y)
    r2 = a.train_step(ml.Array.from_list(flat), y)
    assert r1["loss"] == r2["loss"] and t.state_hash() == a.state_hash()
    before = t.state_hash()
    bad = ml.Array.from_list([[[row[i * 8 : (i + 1) * 8] for i in range(8)]] for row in flat])
    with pytest.raises(
        ValueError,
        match=r"X must have shape \(n, 1, 8, 8\) with n >= 1 or "
        r"\(n, 64\), got \(5, 8, 8\)",
    ):
        t.train_step(bad.reshape((5, 8, 8)), y)
    assert t.state_hash() == before


@identical
def test_identical_mode_state_hash_repeats(seed):
    rng = random.Random(seed)
    X = ml.Array.from_list([[f32(rng.gauss(0, 1)) for _ in range(64)] for _ in range(16)])
    y = ml.Array.from_list([rng.randrange(3) for _ in range(16)], "<i4")
    hashes = []
    for _ in range(2):
        t = ml.Trainer(_cnn(), input_shape=(1, 8, 8), seed=seed % (1 << 64), lr=1e-2)
        for _ in range(3):
            t.train_step(X, y)
        hashes.append(t.state_hash())
    assert hashes[0] == hashes[1]


def test_trainer_steps_follow_torch_in_float64(seed):
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")  # torch.optim needs it (torch._dynamo imports it)
    rng = random.Random(seed)
    t = ml.Trainer(_cnn(), input_shape=(1, 8, 8), seed=seed % (1 << 64), lr=1e-2, weight_decay=0.01)
    model = t.to_torch().double() if hasattr(t, "to_torch") else None
    assert model is not None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, eps=1e-8)
    for _ in range(4):
        xs = [[f32(rng.gauss(0, 1)) for _ in range(64)] for _ in range(8)]
        ys = [rng.randrange(3) for _ in range(8)]
        r = t.train_step(ml.Array.from_list(xs), ml.Array.from_list(ys, "<i4"))
        xt = torch.tensor(xs, dtype=torch.float64).reshape(8, 1, 8, 8)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xt), torch.tensor(ys))
        loss.backward()
        opt.step()
        assert abs(r["loss"] - loss.item()) <= 1e-5 * max(1.0, abs(loss.item()))
    ours = t.weights_
    for name, tensor in model.state_dict().items():
        got = array.array("f", ours[name].tobytes())
        want = tensor.reshape(-1).tolist()
        assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-4, name
