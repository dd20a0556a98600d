"""The model engine (training/model.mojo through the binding's `model_step`) against the
pure-Python reference of docs/ARITHMETIC.md "Models" (tests/reference/model.py): bit for bit
in identical mode, on fresh random models (Linear, ReLU, GELU (both forms), Tanh, Sigmoid,
LayerNorm, Dropout, Flatten, nested Residuals), inputs of rank 1 and 2, both losses; and an MLP program gives `mlp_train_step`'s
bits (the MLP is a case of the engine)."""

import array
import random
import struct

import pytest
from mojolearn import nn
from mojolearn._model.program import Program
from mojolearn._model.spec import ModelSpec
from mojolearn._runtime import backend as _backend

from tests.reference import model as ref
from tests.reference.f32 import f32
from tests.reference.optim import adam_step

identical = pytest.mark.skipif(
    _backend.numeric_mode_used() != "identical", reason="bit-for-bit checks are identical mode's"
)
HYPER = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)


def _f(values):
    return array.array("f", values)


def _bits(values):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def _step(
    spec, program, params, x, targets, rows, mode=1, k=1, t=1, state=None, first_row=0, divide_by=0
):
    """One `model_step` call; (losses, outputs, grads, new params/m/v)."""
    total = spec.total
    m, v = state or ([0.0] * total, [0.0] * total)
    p_in, m_in, v_in = _f(params), _f(m), _f(v)
    new = [_f([0.0] * total) for _ in range(3)]
    losses, outputs, grads = _f([0.0] * k), _f([0.0] * (rows * program.outputs)), _f([0.0] * total)
    tgt = array.array("i" if spec.loss == "cross_entropy" else "f", targets)
    xs = _f(x)
    # the activations and their gradients, filled with NaN: every value is written before it
    # is read, so nothing of the scratch's may reach a result
    scratch = _f([float("nan")] * (rows * (2 * program.arena + program.positions)))
    addrs = [program.address] + [
        a.buffer_info()[0]
        for a in (xs, tgt, p_in, m_in, v_in, *new, losses, outputs, grads, scratch)
    ]
    h = HYPER
    _backend.binding().model_step(
        addrs,
        [rows, mode, k, t, h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"], total]
        + [first_row, divide_by, 0],
    )
    return list(losses), list(outputs), list(grads), [list(a) for a in new]


def _layers(rng, width, depth=0):
    """A random stack acting on the last axis of `width`; returns (layers, output width)."""
    out = []
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(8 if depth < 2 else 6)
        if kind == 0:
            w = rng.randrange(1, 9)
            out.append(nn.Linear(width, w, bias=rng.random() < 0.8))
            width = w
        elif kind == 1:
            out.append(nn.ReLU())
        elif kind == 2:
            out.append(
                nn.LayerNorm(
                    width, eps=rng.choice([1e-5, 1e-3]), elementwise_affine=rng.random() < 0.7
                )
            )
        elif kind == 3:
            out.append(nn.Dropout(rng.choice([0.0, 0.1, 0.5])))
        elif kind == 4:
            w = rng.randrange(2, 9)
            out += [nn.Linear(width, w), nn.ReLU()]
            width = w
        elif kind == 5:
            out.append(
                rng.choice([nn.GELU(), nn.GELU(approximate="tanh"), nn.Tanh(), nn.Sigmoid()])
            )
        else:
            inner, w = _layers(rng, width, depth + 1)
            if w != width:
                inner.append(nn.Linear(w, width))
            out.append(nn.Residual(*inner) if kind == 6 else nn.Sequential(*inner))
    return out, width


def _model(rng, loss):
    rank2 = rng.random() < 0.4
    width = rng.randrange(1, 7)
    shape = (rng.randrange(1, 4), width) if rank2 else (width,)
    layers, w = _layers(rng, width)
    classes = rng.randrange(2, 5) if loss == "cross_entropy" else rng.randrange(1, 3)
    if rank2 and loss == "mse" and rng.random() < 0.5:
        layers.append(nn.Flatten())
        w = shape[0] * w
    layers.append(nn.Linear(w, classes))
    return ModelSpec(nn.Sequential(*layers), shape, loss)


def _data(rng, spec, rows):
    n_in = 1
    for d in spec.input_shape:
        n_in *= d
    x = [f32(rng.gauss(0, 1)) for _ in range(rows * n_in)]
    outs = 1
    for d in spec.output_shape:
        outs *= d
    if spec.loss == "mse":
        return x, [f32(rng.gauss(0, 1)) for _ in range(rows * outs)]
    classes = spec.output_shape[-1]
    return x, [rng.randrange(classes) for _ in range(rows * outs // classes)]


@identical
@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
@pytest.mark.parametrize("trial", range(12))
def test_a_random_model_step_is_the_references_bit_for_bit(seed, loss, trial):
    rng = random.Random(seed + trial)
    spec = _model(rng, loss)
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    rows = rng.randrange(1, 6)
    x, y = _data(rng, spec, rows)
    model_seed = rng.randrange(1 << 64)
    t = rng.randrange(1, 100)
    program = Program(spec, model_seed)
    losses, outputs, grads, _ = _step(spec, program, params, x, y, rows, mode=1, t=t)
    want_loss, want_out, want_grads = ref.step(spec, params, x, y, rows, model_seed, t, True)
    assert _bits(outputs) == _bits(want_out), spec.model
    assert _bits(losses) == _bits([want_loss]), spec.model
    assert _bits(grads) == _bits(want_grads), spec.model


@identical
@pytest.mark.parametrize("loss, shape", [("cross_entropy", (5,)), ("mse", (3, 5))])
def test_every_activation_bit_for_bit_across_simd_lanes_and_tail(seed, loss, shape):
    """GELU (both forms), Tanh and Sigmoid on wide inputs (N(0, 3²)), element counts past the
    SIMD width with a tail, and each one reading a Residual's input (ACCUMULATE)."""
    rng = random.Random(seed)
    model = nn.Sequential(
        nn.Linear(5, 11),
        nn.GELU(),
        nn.Residual(nn.Tanh(), nn.Linear(11, 11), nn.GELU(approximate="tanh")),
        nn.Residual(nn.Sigmoid()),
        nn.Residual(nn.GELU(approximate="tanh"), nn.Tanh(), nn.Sigmoid(), nn.GELU()),
        nn.Linear(11, 3),
    )
    spec = ModelSpec(model, shape, loss)
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    rows = rng.randrange(5, 9)
    x, y = _data(rng, spec, rows)
    x = [f32(3 * v) for v in x]
    t = rng.randrange(1, 100)
    program = Program(spec, 5)
    losses, outputs, grads, _ = _step(spec, program, params, x, y, rows, mode=1, t=t)
    want_loss, want_out, want_grads = ref.step(spec, params, x, y, rows, 5, t, True)
    assert _bits(outputs) == _bits(want_out)
    assert _bits(losses) == _bits([want_loss])
    assert _bits(grads) == _bits(want_grads)


@identical
def test_train_mode_runs_adamw_over_the_flat_buffer_k_steps(seed):
    rng = random.Random(seed)
    spec = ModelSpec(
        nn.Sequential(
            nn.Linear(4, 6),
            nn.ReLU(),
            nn.Residual(nn.LayerNorm(6), nn.Dropout(0.25), nn.Linear(6, 6)),
            nn.Linear(6, 3),
        ),
        (4,),
        "cross_entropy",
    )
    params = [v for t in spec.init(7) for v in t]
    rows, k = 5, 3
    x, y = _data(rng, spec, rows * k)
    program = Program(spec, 11)
    losses, _, _, (p, m, v) = _step(spec, program, params, x, y, rows, mode=2, k=k, t=4)
    rp, rm, rv = list(params), [0.0] * spec.total, [0.0] * spec.total
    for i in range(k):
        xb, yb = x[i * rows * 4 : (i + 1) * rows * 4], y[i * rows : (i + 1) * rows]
        loss, _, g = ref.step(spec, rp, xb, yb, rows, 11, 4 + i, True)
        assert _bits(losses[i : i + 1]) == _bits([loss])
        h = HYPER
        (rp,), _, (rm,), (rv,), _, _ = adam_step(
            [rp],
            [g],
            [rm],
            [rv],
            4 + i,
            h["lr"],
            h["beta1"],
            h["beta2"],
            h["eps"],
            h["weight_decay"],
            decoupled=True,
            maximize=False,
        )
    assert _bits(p) == _bits(rp) and _bits(m) == _bits(rm) and _bits(v) == _bits(rv)


@identical
def test_forward_mode_leaves_dropout_out(seed):
    rng = random.Random(seed)
    spec = ModelSpec(nn.Sequential(nn.Linear(5, 8), nn.Dropout(0.5), nn.Linear(8, 2)), (5,), "mse")
    plain = ModelSpec(nn.Sequential(nn.Linear(5, 8), nn.Linear(8, 2)), (5,), "mse")
    params = [v for t in spec.init(3) for v in t]
    x, y = _data(rng, spec, 4)
    _, out, _, _ = _step(spec, Program(spec, 1), params, x, y, 4, mode=0)
    _, want, _, _ = _step(plain, Program(plain, 1), params, x, y, 4, mode=0)
    assert out == want
    _, trained, _, _ = _step(spec, Program(spec, 1), params, x, y, 4, mode=1)
    assert trained != want  # dropout is active in a training pass


@identical
@pytest.mark.parametrize("sizes", [[8, 16, 3], [5, 3], [6, 9, 7, 4], [64, 128, 10]])
def test_an_mlp_program_gives_the_mlp_steps_bits(seed, sizes):
    rng = random.Random(seed)
    layers = []
    for i, o in zip(sizes, sizes[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    spec = ModelSpec(nn.Sequential(*layers[:-1]), (sizes[0],), "cross_entropy")
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    rows, k = rng.randrange(1, 40), 2
    x, y = _data(rng, spec, rows * k)
    losses, outputs, grads, new = _step(
        spec, Program(spec, 0), params, x, y, rows, mode=2, k=k, t=1
    )
    # the MLP's own fused entry
    total = spec.total
    sz = array.array("q", sizes)
    p_in, zeros = _f(params), _f([0.0] * total)
    out_state = [_f([0.0] * total) for _ in range(3)]
    l2, lg, g2, dx = (
        _f([0.0] * k),
        _f([0.0] * rows * sizes[-1]),
        _f([0.0] * total),
        _f([0.0] * rows * sizes[0]),
    )
    xs, ys = _f(x), array.array("i", y)
    h = HYPER
    _backend.binding().mlp_train_step(
        [
            xs.buffer_info()[0],
            ys.buffer_info()[0],
            p_in.buffer_info()[0],
            zeros.buffer_info()[0],
            zeros.buffer_info()[0],
        ]
        + [a.buffer_info()[0] for a in out_state]
        + [
            l2.buffer_info()[0],
            lg.buffer_info()[0],
            g2.buffer_info()[0],
            dx.buffer_info()[0],
            sz.buffer_info()[0],
        ],
        [
            len(sizes) - 1,
            rows,
            2,
            k,
            1,
            h["lr"],
            h["beta1"],
            h["beta2"],
            h["eps"],
            h["weight_decay"],
            0,
        ],
    )
    assert _bits(losses) == _bits(l2) and _bits(outputs) == _bits(lg) and _bits(grads) == _bits(g2)
    assert [_bits(a) for a in new] == [_bits(a) for a in out_state]


@pytest.mark.parametrize(
    "patch, words",
    [
        (lambda w: w.__setitem__(0, 2), "program version 2"),
        (lambda w: w.__setitem__(9, 99), "op code 99"),
        (lambda w: w.__setitem__(10, 1 << 40), "src"),
        (lambda w: w.__setitem__(14, 10_000), "weight"),
        (lambda w: w.__setitem__(3, 5), "outside"),
    ],
)
def test_a_bad_program_is_refused_before_anything_runs(patch, words):
    spec = ModelSpec(nn.Sequential(nn.Linear(4, 3)), (4,), "cross_entropy")
    program = Program(spec, 0)
    patch(program.words)
    with pytest.raises(ValueError, match=words):
        _step(spec, program, spec.init(0)[0] + spec.init(0)[1], [0.5] * 8, [0, 1], 2)


def test_class_ids_outside_the_classes_are_refused():
    spec = ModelSpec(nn.Sequential(nn.Linear(4, 3)), (4,), "cross_entropy")
    params = [v for t in spec.init(0) for v in t]
    with pytest.raises(ValueError, match=r"targets\[1\] = 3 is not a class in \[0, 3\)"):
        _step(spec, Program(spec, 0), params, [0.5] * 8, [0, 3], 2)


@identical
@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
def test_a_microbatch_is_its_rows_of_the_whole_batch(seed, loss):
    """A microbatch pass (first_row, divide_by: ARITHMETIC.md "Data parallel") draws the
    Dropout masks of its rows in the whole batch: its outputs are those rows of the whole
    batch's training pass, bit for bit; at first_row 0 they are not. Its divisor scales the
    loss and every gradient: twice its own count halves them exactly (a power of two commutes
    with rounding)."""
    rng = random.Random(seed)
    classes = rng.randrange(2, 5)
    model = nn.Sequential(
        nn.Linear(6, 8),
        nn.LayerNorm(8),
        nn.Dropout(0.5),
        nn.Residual(nn.Linear(8, 8), nn.GELU(), nn.Dropout(0.25)),
        nn.Linear(8, classes if loss == "cross_entropy" else 3),
    )
    spec = ModelSpec(model, (6,), loss)
    program = Program(spec, rng.randrange(1 << 64))
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    rows, r0 = 8, rng.randrange(1, 6)
    m = rng.randrange(1, rows - r0 + 1)
    x, y = _data(rng, spec, rows)
    n_out = program.outputs
    per_y = 1 if loss == "cross_entropy" else n_out
    t = rng.randrange(1, 50)
    _, whole, _, _ = _step(spec, program, params, x, y, rows, t=t)
    xs, ys = x[r0 * 6 : (r0 + m) * 6], y[r0 * per_y : (r0 + m) * per_y]
    part = _step(spec, program, params, xs, ys, m, t=t, first_row=r0, divide_by=rows * per_y)
    assert _bits(part[1]) == _bits(whole[r0 * n_out : (r0 + m) * n_out])
    _, at_zero, _, _ = _step(spec, program, params, xs, ys, m, t=t)
    assert at_zero != part[1]  # the mask follows the row's place in the batch
    own = _step(spec, program, params, xs, ys, m, t=t, first_row=r0)
    halved = _step(spec, program, params, xs, ys, m, t=t, first_row=r0, divide_by=2 * m * per_y)
    assert _bits(halved[0]) == _bits([v / 2 for v in own[0]])
    assert _bits(halved[2]) == _bits([v / 2 for v in own[2]])
    assert any(own[2])


def test_a_microbatch_divisor_below_its_own_count_is_refused(seed):
    spec = ModelSpec(nn.Sequential(nn.Linear(3, 2)), (3,), "mse")
    params = [0.5] * spec.total
    x, y = _data(random.Random(seed), spec, 4)
    with pytest.raises(ValueError, match=r"divide_by 7 is below this batch's 8 loss terms"):
        _step(spec, Program(spec, 0), params, x, y, 4, divide_by=7)
    with pytest.raises(ValueError, match=r"first_row must be an integer in \[0, "):
        _step(spec, Program(spec, 0), params, x, y, 4, first_row=-1)


@identical
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_on_many_rows_is_the_references_bit_for_bit(seed, affine):
    # More rows than SIMD lanes (the row sums run 8 or 16 rows at a time, one per lane), and a
    # count that leaves a tail of rows done one by one; an offset mean and a Residual's
    # accumulated input gradient.
    rng = random.Random(seed)
    d = rng.randrange(3, 40)
    model = nn.Sequential(
        nn.Linear(5, d),
        nn.Residual(nn.LayerNorm(d, elementwise_affine=affine), nn.Linear(d, d)),
        nn.LayerNorm(d, eps=1e-3, elementwise_affine=affine),
        nn.Linear(d, 3),
    )
    spec = ModelSpec(model, (3, 5), "cross_entropy")
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    rows = rng.randrange(11, 23)  # × 3 positions: 33 to 66 LayerNorm rows
    x = [f32(rng.gauss(4.0, 2.0)) for _ in range(rows * 15)]
    y = [rng.randrange(3) for _ in range(rows * 3)]
    losses, outputs, grads, _ = _step(spec, Program(spec, 1), params, x, y, rows, mode=1)
    want_loss, want_out, want_grads = ref.step(spec, params, x, y, rows, 1, 1, True)
    assert _bits(outputs) == _bits(want_out)
    assert _bits(losses) == _bits([want_loss]) and _bits(grads) == _bits(want_grads)


def test_a_residual_ending_in_a_linear_sums_in_place():
    """y = x + f(x) overwrites f(x) when a plain Linear makes it (its backward never reads
    its output): f(x)'s gradient is then y's own, not a copy. Not after a fused ReLU or an
    activation (their backward reads their output), nor when f is empty. The bits: every
    Residual test above, against the reference."""
    from mojolearn._model.program import OP_ADD, OP_LINEAR

    def in_place(*layers):
        spec = ModelSpec(nn.Sequential(*layers, nn.Linear(8, 2)), (8,), "mse")
        ops = Program(spec, 1).ops
        sums = [op for op in ops if op[0] == OP_ADD]
        for op in sums:  # in place: the sum's output is the Linear's
            assert op[2] != op[4] or any(o[0] == OP_LINEAR and o[2] == op[2] for o in ops)
        return [op[2] == op[4] for op in sums]

    assert in_place(nn.Residual(nn.LayerNorm(8), nn.Linear(8, 8))) == [True]
    for inner in ([nn.Linear(8, 8), nn.ReLU()], [nn.Linear(8, 8), nn.Tanh()], [nn.Flatten()]):
        assert in_place(nn.Residual(*inner)) == [False], inner
    # nested: the inner sum (emitted first) in place, the outer one (after it) not
    nested = nn.Residual(nn.Linear(8, 8), nn.Residual(nn.LayerNorm(8), nn.Linear(8, 8)))
    assert in_place(nested) == [True, False]


@identical
@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
def test_a_model_ending_in_a_residual_sum_in_place_is_the_references(seed, loss):
    """The last op is the in-place sum, not the Linear before it (which writes the same
    buffer): the cross-entropy is taken after the sum, not in the Linear's epilogue."""
    rng = random.Random(seed)
    model = nn.Sequential(nn.Linear(5, 4), nn.Residual(nn.LayerNorm(4), nn.Linear(4, 4)))
    spec = ModelSpec(model, (5,), loss)
    params = [v for t in spec.init(rng.randrange(1 << 32)) for v in t]
    rows = 7
    x = [f32(rng.gauss(0.0, 1.0)) for _ in range(rows * 5)]
    y = (
        [rng.randrange(4) for _ in range(rows)]
        if loss == "cross_entropy"
        else [f32(rng.gauss(0.0, 1.0)) for _ in range(rows * 4)]
    )
    losses, outputs, grads, _ = _step(spec, Program(spec, 1), params, x, y, rows, mode=1)
    want_loss, want_out, want_grads = ref.step(spec, params, x, y, rows, 1, 1, True)
    assert _bits(outputs) == _bits(want_out)
    assert _bits(losses) == _bits([want_loss]) and _bits(grads) == _bits(want_grads)
