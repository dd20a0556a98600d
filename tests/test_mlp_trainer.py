"""MLPTrainer: any layer sizes, against the pure-Python reference (identical mode, bit for
bit) on fresh random data; the equalities between its entry points; the [8, 16, 3] case
against SmallMLPTrainer; the seeded initialization; state round trips, exact resume in a new
process; every refusal with nothing changed."""

import copy
import os
import pickle
import random
import subprocess
import sys

import mojolearn as ml
import pytest
from mojolearn._mlp import spec as _layers
from mojolearn._mlp import spec as _spec

from tests.helpers import PKG_PARENT
from tests.reference import mlp as R
from tests.reference.f32 import f32

identical_only = pytest.mark.skipif(
    ml.numeric_mode_used() != "identical",
    reason="bit equality with the reference is identical mode's",
)

# (layer sizes, rows, steps): 0 to 4 hidden layers, widths 1..512, classes 2..20, 1..300 rows.
ARCHITECTURES = [
    ([5, 2], 7, 3),
    ([1, 1, 2], 1, 3),
    ([8, 16, 3], 13, 2),
    ([3, 7, 5, 4], 300, 2),
    ([10, 32, 16, 8, 20], 9, 2),
    ([6, 4, 4, 4, 4, 3], 31, 2),
    ([16, 512, 2], 2, 2),
    ([64, 128, 10], 4, 1),
]


def hexes(values):
    return [f"{int.from_bytes(__import__('struct').pack('<f', v), 'little'):08x}" for v in values]


def flat(rows):
    return [v for r in rows for v in r]


def batch(rng, rows, inputs, classes):
    X = [[f32(rng.uniform(-2, 2)) for _ in range(inputs)] for _ in range(rows)]
    y = [rng.randrange(classes) for _ in range(rows)]
    return X, y


def arrays(X, y):
    return ml.Array.from_list(X, "<f4"), ml.Array.from_list(y, "<i4")


def trainer(sizes, seed, **kw):
    return ml.MLPTrainer(sizes, seed=seed, data_schedule={"seed": seed}, **kw)


@identical_only
@pytest.mark.parametrize(
    "sizes,rows,steps", ARCHITECTURES, ids=["-".join(map(str, a[0])) for a in ARCHITECTURES]
)
def test_steps_equal_the_reference_bit_for_bit(seed, sizes, rows, steps):
    rng = random.Random(seed)
    t = trainer(sizes, seed % (1 << 64), lr=0.05)
    d = R.Dims(sizes=sizes)
    p = [v for w in t.weights_.values() for v in w._mv.tolist()]
    m, v, step = [0.0] * d.total, [0.0] * d.total, 0
    cfg = t.state_dict()["config"]
    for _ in range(steps):
        X, y = batch(rng, rows, sizes[0], sizes[-1])
        out = t.train_step(*arrays(X, y), return_input_grad=True)
        ref = R.train_step(
            p,
            m,
            v,
            step,
            X,
            y,
            cfg["lr"],
            cfg["beta1"],
            cfg["beta2"],
            cfg["eps"],
            cfg["weight_decay"],
            d,
        )
        p, m, v, step = ref["params"], ref["m"], ref["v"], ref["step"]
        assert hexes([out["loss"]]) == hexes([ref["loss"]]), f"seed {seed}"
        assert hexes(out["logits"]._mv.tolist()) == hexes(flat(ref["logits"])), f"seed {seed}"
        got = [
            g for n in t.state_dict()["parameter_order"] for g in out["gradients"][n]._mv.tolist()
        ]
        assert hexes(got) == hexes(ref["grads"]), f"seed {seed}"
        assert hexes(out["input_grad"]._mv.tolist()) == hexes(flat(ref["dX"])), f"seed {seed}"
    state = t.state_dict()
    assert state["optimizer"]["step"] == step
    assert hexes(state["optimizer"]["m"]._mv.tolist()) == hexes(m)
    assert hexes(state["optimizer"]["v"]._mv.tolist()) == hexes(v)
    got = [x for n in state["parameter_order"] for x in state["weights"][n]._mv.tolist()]
    assert hexes(got) == hexes(p), f"seed {seed}"


@pytest.mark.parametrize("sizes", [[5, 2], [7, 9, 4], [4, 6, 5, 3]])
def test_train_step_equals_train_steps_equals_grads_then_apply(seed, sizes):
    rng = random.Random(seed)
    data = [arrays(*batch(rng, 6, sizes[0], sizes[-1])) for _ in range(3)]
    a, b, c = (trainer(sizes, 11) for _ in range(3))
    for X, y in data:
        a.train_step(X, y)
        loss, grads = c.loss_and_grads(X, y)
        c.apply_gradients(grads)
    stacked_x = ml.Array.from_list([row for X, _ in data for row in X.tolist()], "<f4")
    stacked_y = ml.Array.from_list([v for _, y in data for v in y.tolist()], "<i4")
    out = b.train_steps(stacked_x, stacked_y, 3)
    assert out["step"] == 3 and len(out["losses"]) == 3
    assert a.state_hash() == b.state_hash() == c.state_hash()


def test_the_8_16_3_case_is_small_mlp_trainer(seed):
    rng = random.Random(seed)
    w = _spec.init_small_mlp(seed % (1 << 64))
    small = ml.SmallMLPTrainer(*w, data_schedule={"s": 1}, lr=0.02)
    general = ml.MLPTrainer([8, 16, 3], weights=list(w), data_schedule={"s": 1}, lr=0.02)
    for _ in range(4):
        X, y = arrays(*batch(rng, rng.randrange(1, 40), 8, 3))
        a, b = (
            small.train_step(X, y, return_input_grad=True),
            general.train_step(X, y, return_input_grad=True),
        )
        assert a["loss"] == b["loss"] and a["logits"].tobytes() == b["logits"].tobytes()
        assert a["input_grad"].tobytes() == b["input_grad"].tobytes()
        for name in ("weight1", "bias1", "weight2", "bias2"):
            assert a["gradients"][name].tobytes() == b["gradients"][name].tobytes(), name
    sa, sb = small.state_dict(), general.state_dict()
    for name, w in sa["weights"].items():
        assert w.tobytes() == sb["weights"][name].tobytes()
    assert sa["optimizer"]["m"].tobytes() == sb["optimizer"]["m"].tobytes()
    assert sa["optimizer"]["v"].tobytes() == sb["optimizer"]["v"].tobytes()
    # The seeded init of [8, 16, 3] is init_small_mlp's.
    seeded = ml.MLPTrainer([8, 16, 3], seed=7, data_schedule={"s": 1}).weights_
    assert [x.tobytes() for x in seeded.values()] == [x.tobytes() for x in _spec.init_small_mlp(7)]


_INIT = """
import hashlib, sys
import mojolearn as ml
sizes = [int(s) for s in sys.argv[1].split(",")]
w = ml.MLPTrainer(sizes, seed=int(sys.argv[2]), data_schedule={"a": 1}).weights_
print(hashlib.sha256(b"".join(x.tobytes() for x in w.values())).hexdigest())
"""


def test_seeded_initialization_is_the_same_in_every_process():
    import hashlib

    for sizes, seed in (([784, 256, 10], 0), ([13, 32, 32, 3], 2**64 - 1)):
        here = ml.MLPTrainer(sizes, seed=seed, data_schedule={"a": 1}).weights_
        mine = hashlib.sha256(b"".join(x.tobytes() for x in here.values())).hexdigest()
        proc = subprocess.run(
            [sys.executable, "-c", _INIT, ",".join(map(str, sizes)), str(seed)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": PKG_PARENT, "PATH": "/usr/bin:/bin"},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == mine
        # torch's default nn.Linear bounds: every value within 1/sqrt(fan_in).
        for name, w in here.items():
            fan_in = sizes[int(name.removeprefix("weight").removeprefix("bias")) - 1]
            assert max(abs(v) for v in w._mv.tolist()) <= 1 / fan_in**0.5


_RESUME = """
import pickle, sys
import mojolearn as ml
state, batches = pickle.loads(sys.stdin.buffer.read())
t = ml.MLPTrainer._from_state(state)
for X, y in batches:
    t.train_step(ml.Array.from_list(X, "<f4"), ml.Array.from_list(y, "<i4"))
print(t.state_hash())
"""


def test_exact_resume_in_a_new_process(seed):
    rng = random.Random(seed)
    sizes = [6, 10, 7, 4]
    data = [batch(rng, 5, 6, 4) for _ in range(6)]
    whole, half = trainer(sizes, 3), trainer(sizes, 3)
    for X, y in data:
        whole.train_step(*arrays(X, y))
    for X, y in data[:3]:
        half.train_step(*arrays(X, y))
    blob = pickle.dumps((half.state_dict(), data[3:]))
    proc = subprocess.run(
        [sys.executable, "-c", _RESUME],
        input=blob,
        capture_output=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=PKG_PARENT),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == whole.state_hash()


def test_state_round_trips_and_copies(seed):
    t = trainer([4, 5, 3], 1)
    X, y = arrays(*batch(random.Random(seed), 3, 4, 3))
    t.train_step(X, y)
    for c in (
        copy.copy(t),
        copy.deepcopy(t),
        pickle.loads(pickle.dumps(t)),
        ml.MLPTrainer._from_state(copy.deepcopy(t.state_dict())),
    ):
        assert c.state_hash() == t.state_hash() and c.layer_sizes == [4, 5, 3]
        c.train_step(X, y)
        assert t.step_ == 1 and c.step_ == 2
    other = trainer([4, 5, 3], 9).load_state_dict(t.state_dict())
    assert other.state_hash() == t.state_hash()


def _snapshot(t):
    s = t.state_dict()
    return (t.state_hash(), s["optimizer"]["step"])


@pytest.mark.parametrize(
    "what,call,exc,pattern",
    [
        (
            "sizes str",
            lambda: ml.MLPTrainer("8,16,3", data_schedule={"a": 1}),
            TypeError,
            r"layer_sizes must be a list or tuple",
        ),
        (
            "sizes float",
            lambda: ml.MLPTrainer([8, 16.0, 3], data_schedule={"a": 1}),
            TypeError,
            r"layer_sizes\[1\] must be an int",
        ),
        (
            "sizes bool",
            lambda: ml.MLPTrainer([8, True, 3], data_schedule={"a": 1}),
            TypeError,
            r"layer_sizes\[1\] must be an int",
        ),
        (
            "sizes str item",
            lambda: ml.MLPTrainer([8, "16", 3], data_schedule={"a": 1}),
            TypeError,
            r"layer_sizes\[1\] must be an int",
        ),
        (
            "one entry",
            lambda: ml.MLPTrainer([8], data_schedule={"a": 1}),
            ValueError,
            r"at least 2 entries",
        ),
        (
            "width 0",
            lambda: ml.MLPTrainer([8, 0, 3], data_schedule={"a": 1}),
            ValueError,
            r"layer_sizes\[1\] must be in \[1, 65536\]",
        ),
        (
            "width huge",
            lambda: ml.MLPTrainer([8, 65537, 3], data_schedule={"a": 1}),
            ValueError,
            r"must be in \[1, 65536\]",
        ),
        (
            "one class",
            lambda: ml.MLPTrainer([8, 16, 1], data_schedule={"a": 1}),
            ValueError,
            r"classes\) must be >= 2",
        ),
        (
            "17 layers",
            lambda: ml.MLPTrainer([4] * 18, data_schedule={"a": 1}),
            ValueError,
            r"17 layers, at most 16",
        ),
        (
            "too many params",
            lambda: ml.MLPTrainer([65536, 65536, 2], data_schedule={"a": 1}),
            ValueError,
            r"at most 67,108,864",
        ),
        (
            "weights count",
            lambda: ml.MLPTrainer([2, 3], [ml.zeros((3, 2))], data_schedule={"a": 1}),
            ValueError,
            r"weights must hold 2 buffers",
        ),
        (
            "weights shape",
            lambda: ml.MLPTrainer(
                [2, 3], [ml.zeros((2, 3)), ml.zeros((3,))], data_schedule={"a": 1}
            ),
            ValueError,
            r"weight1 must have shape \(3, 2\)",
        ),
        (
            "weights dict",
            lambda: ml.MLPTrainer([2, 3], {"weight1": 1}, data_schedule={"a": 1}),
            TypeError,
            r"weights must be None or a list",
        ),
        (
            "weights NaN",
            lambda: ml.MLPTrainer(
                [1, 2],
                [ml.Array.from_list([[float("nan")], [0.0]]), ml.zeros((2,))],
                data_schedule={"a": 1},
            ),
            ValueError,
            r"weight1 must be finite",
        ),
        (
            "seed negative",
            lambda: ml.MLPTrainer([2, 3], seed=-1, data_schedule={"a": 1}),
            ValueError,
            r"seed must be an int in \[0, 2\*\*64\)",
        ),
        (
            "seed float",
            lambda: ml.MLPTrainer([2, 3], seed=1.5, data_schedule={"a": 1}),
            TypeError,
            r"seed must be an int",
        ),
        (
            "lr zero",
            lambda: ml.MLPTrainer([2, 3], data_schedule={"a": 1}, lr=0.0),
            ValueError,
            r"MLPTrainer: invalid learning rate",
        ),
        (
            "schedule empty",
            lambda: ml.MLPTrainer([2, 3], data_schedule={}),
            ValueError,
            r"MLPTrainer: data_schedule must be a non-empty",
        ),
    ],
)
def test_constructor_refusals(what, call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_step_refusals_change_nothing(seed):
    t = trainer([4, 6, 3], 2)
    X, y = arrays(*batch(random.Random(seed), 5, 4, 3))
    t.train_step(X, y)
    before = _snapshot(t)
    bad = [
        (lambda: t.train_step(ml.zeros((5, 3)), y), ValueError, r"X must have shape \(batch, 4\)"),
        (
            lambda: t.train_step(ml.Array.from_list([[1e39] * 4] * 5, "<f8"), y),
            ValueError,
            r"X must fit in float32",
        ),
        (
            lambda: t.train_step(X, ml.Array.from_list([0, 1, 2, 3, 0], "<i4")),
            ValueError,
            r"targets\[3\] = 3",
        ),
        (
            lambda: t.train_step(X, ml.Array.from_list([0, 1], "<i4")),
            ValueError,
            r"targets must have shape \(5,\)",
        ),
        (
            lambda: t.train_step(ml.Array.from_list([[float("inf")] * 4] * 5), y),
            ValueError,
            r"X must be finite",
        ),
        (
            lambda: t.train_step(X, y, return_input_grad=1),
            TypeError,
            r"return_input_grad must be a bool",
        ),
        (lambda: t.train_steps(X, y, 2), ValueError, r"stack k=2 equal batches"),
        (lambda: t.train_steps(X, y, 0), ValueError, r"k must be a positive int"),
        (lambda: t.apply_gradients([ml.zeros((6, 4))]), ValueError, r"exactly 4 buffers"),
        (lambda: t.apply_gradients({"weight1": 1}), TypeError, r"not a dict"),
        (
            lambda: t.apply_gradients(
                [ml.zeros((6, 4)), ml.zeros((6,)), ml.zeros((3, 6)), ml.zeros((2,))]
            ),
            ValueError,
            r"bias2 gradient must have shape \(3,\)",
        ),
        (
            lambda: t.load_state_dict(trainer([4, 7, 3], 1).state_dict()),
            ValueError,
            r"architecture must be \[4, 6, 3\]",
        ),
        (
            lambda: t.load_state_dict(
                ml.SmallMLPTrainer(*_spec.init_small_mlp(0), data_schedule={"a": 1}).state_dict()
            ),
            ValueError,
            r"schema must be 'mojolearn.mlp-trainer.v1'",
        ),
        (lambda: t.predict_logits(ml.zeros((0, 4))), ValueError, r"X must have 1 to \d+ rows"),
        (lambda: t.predict_logits_sessions([]), ValueError, r"at least one batch"),
    ]
    for call, exc, pattern in bad:
        with pytest.raises(exc, match=pattern):
            call()
        assert _snapshot(t) == before, pattern


def test_a_non_finite_step_is_refused_whole():
    t = ml.MLPTrainer(
        [2, 3], [ml.Array.from_list([[3e38, 3e38]] * 3), ml.zeros((3,))], data_schedule={"a": 1}
    )
    before = _snapshot(t)
    with pytest.raises(RuntimeError, match="MLPTrainer: the step produced a non-finite result"):
        t.train_step(ml.Array.from_list([[2.0, 2.0]]), ml.Array.from_list([1], "<i4"))
    assert _snapshot(t) == before


def test_batch_memory_bound_admits_4096_rows_of_784_256_10():
    spec = _layers.LayerSizes([784, 256, 10])
    assert spec.max_rows() >= 4096
    assert spec.batch_bytes(spec.max_rows()) <= _layers.MAX_BATCH_BYTES
    assert spec.batch_bytes(spec.max_rows() + 1) > _layers.MAX_BATCH_BYTES


def test_result_layout_is_the_buffer_order(seed):
    """ResultLayout against the buffer written out region by region: [losses (k) | logits
    (rows x classes) | grads (every parameter) | input_grad (rows x inputs) when asked]."""
    rng = random.Random(seed)
    for _ in range(200):
        sizes = [rng.randint(1, 40) for _ in range(rng.randint(1, 4))] + [rng.randint(2, 20)]
        k, rows, want_dx = rng.randint(1, 300), rng.randint(0, 500), rng.random() < 0.5
        params = sum(o * i + o for i, o in zip(sizes, sizes[1:]))
        regions = [("losses", k), ("logits", rows * sizes[-1]), ("grads", params)]
        regions += [("input_grad", rows * sizes[0])] if want_dx else []
        spec = _spec.LayerSizes(sizes)
        at = _spec.ResultLayout(k, rows, spec, want_dx)
        start = 0
        for name, length in regions:
            assert getattr(at, name) == start, (sizes, k, rows, want_dx, name)
            start += length
        assert at.size == start and (at.k, at.rows) == (k, rows)
        assert want_dx or at.input_grad is None
        key = rows if k == 1 else (k, rows)  # how the steps look theirs up
        cached = spec.layouts[key][want_dx]
        assert cached == at == spec.layouts[k, rows][want_dx] and repr(cached) == repr(at)
        assert spec.layouts[key][want_dx] is cached  # kept, not made again
        assert at != _spec.ResultLayout(k, rows + 1, spec, want_dx)
    grads, size = at.grads, at.size
    with pytest.raises(AttributeError):  # a frozen record
        at.grads = 0
    with pytest.raises(AttributeError):
        del at.size
    assert (at.grads, at.size) == (grads, size)


def _step_buffer(out):
    """The result buffer a step's views share, and its address."""
    buf = out["logits"]._owner
    assert all(g._owner is buf for g in out["gradients"].values())
    return buf, buf.buffer_info()[0]


@pytest.mark.parametrize("small", [True, False], ids=["SmallMLPTrainer", "MLPTrainer"])
@pytest.mark.parametrize("as_array", [True, False], ids=["Array", "memoryview"])
def test_every_step_views_its_buffer_as_result_layout(seed, small, as_array):
    """train_step (SmallMLPTrainer's unrolled views, the core's `_results`; a buffer made
    here or, for a memoryview X, by the binding), train_steps and loss_and_grads."""
    from mojolearn._mlp import rng as _rng

    sizes = [8, 16, 3] if small else [5, 7, 4]
    spec = _spec.LayerSizes(sizes)
    if small:
        t = ml.SmallMLPTrainer(*_spec.init_small_mlp(seed % (1 << 64)), data_schedule={"s": 1})
    else:
        t = trainer(sizes, seed % (1 << 64))
    rows = random.Random(seed).randint(1, 40)
    ((X, y),) = _rng.batches(seed % (1 << 64), rows, 1, sizes[0], sizes[-1])
    ((Xk, yk),) = _rng.batches(seed % (1 << 64) ^ 1, 3 * rows, 1, sizes[0], sizes[-1])
    if not as_array:
        X = memoryview(X.tobytes()).cast("f", [rows, sizes[0]])
    for want_dx in (False, True):
        out = t.train_step(X, y, return_input_grad=want_dx)
        buf, base = _step_buffer(out)
        at = _spec.ResultLayout(1, rows, spec, want_dx)
        assert len(buf) == at.size and buf[at.losses] == out["loss"]
        assert out["logits"]._addr == base + 4 * at.logits
        for name, _, offset, _ in spec.views:
            assert out["gradients"][name]._addr == base + 4 * at.grads + offset, name
        if want_dx:
            assert out["input_grad"]._addr == base + 4 * at.input_grad
            assert out["input_grad"].shape == (rows, sizes[0])
    out = t.train_steps(Xk, yk, 3)
    buf, base = _step_buffer(out)
    at = _spec.ResultLayout(3, rows, spec, False)
    assert len(buf) == at.size and buf[at.losses : at.losses + 3].tolist() == out["losses"]
    assert out["logits"]._addr == base + 4 * at.logits
    assert out["gradients"]["weight1"]._addr == base + 4 * at.grads
    loss, grads = t.loss_and_grads(X, y)
    buf = grads[0]._owner
    at = _spec.ResultLayout(1, rows, spec, False)
    assert len(buf) == at.size and buf[at.losses] == loss
    assert grads[0]._addr == buf.buffer_info()[0] + 4 * at.grads


def test_predictions_and_sessions_agree(seed):
    rng = random.Random(seed)
    t = trainer([5, 8, 4], 4)
    parts = [ml.Array.from_list(batch(rng, n, 5, 4)[0], "<f4") for n in (1, 3, 7)]
    joined = t.predict_logits_sessions(parts)
    assert joined.shape == (11, 4)
    assert joined.tobytes() == b"".join(t.predict_logits(p).tobytes() for p in parts)
    whole = ml.Array.from_list([r for p in parts for r in p.tolist()], "<f4")
    assert t.predict_logits(whole).tobytes() == joined.tobytes()


@identical_only
def test_the_mlp_golden_state_hashes():
    """tests/golden/mlp_identical.json (tools/make_golden.py: the pure-Python reference,
    cross-checked with the binding when written) for [8, 16, 3], [64, 128, 10], [784, 256, 10]
    and a 4-layer network. A failure means identical-mode bits moved: that needs a new
    arithmetic profile, not new goldens."""
    import json
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "tools"))
    import make_golden

    with open(make_golden.MLP_GOLDEN) as f:
        golden = json.load(f)
    assert len(golden["cases"]) == 4
    for case in golden["cases"]:
        steps = tuple(int(s) for s in case["state_hash_after_steps"])
        got = make_golden.binding_mlp_hashes(case["layer_sizes"], case["batch"], steps)
        assert got == case["state_hash_after_steps"], case["layer_sizes"]


@pytest.mark.parametrize("sizes", [[5, 2], [9, 17, 4], [12, 8, 8, 8, 3]])
def test_fused_equals_per_operation_bit_for_bit(seed, sizes, monkeypatch):
    """the resident step (one binding call) and the per-operation calls (MOJOLEARN_MLP_FUSED=0)
    run the same kernel functions in the same order: the same bits, in this process's mode."""
    rng = random.Random(seed)
    data = [batch(rng, rng.randrange(1, 20), sizes[0], sizes[-1]) for _ in range(3)]
    hashes, outs = [], []
    for fused in ("1", "0"):
        monkeypatch.setenv("MOJOLEARN_MLP_FUSED", fused)
        t = trainer(sizes, 8)
        results = [t.train_step(*arrays(X, y), return_input_grad=True) for X, y in data]
        loss, grads = t.loss_and_grads(*arrays(*data[0]))
        outs.append(
            (
                [r["loss"] for r in results],
                [r["input_grad"].tobytes() for r in results],
                loss,
                [g.tobytes() for g in grads],
                t.predict_logits(arrays(*data[1])[0]).tobytes(),
            )
        )
        hashes.append(t.state_hash())
    assert hashes[0] == hashes[1] and outs[0] == outs[1], f"seed {seed}"


_PASS = """
import json, random, sys
import mojolearn as ml
sizes, seed = json.loads(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
t = ml.MLPTrainer(sizes, seed=seed % 1000, data_schedule={"a": 1})
X = ml.Array.from_list([[rng.uniform(-2, 2) for _ in range(sizes[0])] for _ in range(32)], "<f4")
y = ml.Array.from_list([rng.randrange(sizes[-1]) for _ in range(32)], "<i4")
loss, grads = t.loss_and_grads(X, y)
print(json.dumps({"loss": loss, "grads": [v for g in grads for v in g._mv.tolist()],
                  "logits": t.predict_logits(X)._mv.tolist()}))
"""


@pytest.mark.parametrize("sizes", [[64, 128, 10], [16, 32, 32, 32, 4]])
def test_fast_mode_is_within_the_stated_bound_of_identical(seed, sizes):
    """docs/ARITHMETIC.md "Any layer sizes": one pass from the same state and batch, fast vs
    identical: |loss|, each logit within 1e-5·(1 + |identical|), each gradient within
    1e-5·max|identical gradient| (measured: under 3e-7)."""
    import json

    got = {}
    for mode in ("identical", "fast"):
        proc = subprocess.run(
            [sys.executable, "-c", _PASS, json.dumps(sizes), str(seed % 10**6)],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, PYTHONPATH=PKG_PARENT, MOJOLEARN_NUMERIC_MODE=mode),
        )
        assert proc.returncode == 0, proc.stderr
        got[mode] = json.loads(proc.stdout)
    a, b = got["identical"], got["fast"]
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * (1 + abs(a["loss"])), f"seed {seed}"
    assert all(abs(x - y) <= 1e-5 * (1 + abs(x)) for x, y in zip(a["logits"], b["logits"]))
    scale = max(abs(g) for g in a["grads"])
    assert all(abs(x - y) <= 1e-5 * scale for x, y in zip(a["grads"], b["grads"])), f"seed {seed}"


@pytest.mark.parametrize(
    "make",
    [
        lambda lr: ml.MLPTrainer([8, 6, 3], seed=4, data_schedule={"a": 1}, lr=lr),
        lambda lr: ml.SmallMLPTrainer(*ml.init_small_mlp(4), data_schedule={"a": 1}, lr=lr),
    ],
)
def test_a_step_that_overflows_the_parameters_is_refused_naming_them(make):
    # The gradients and logits are finite; AdamW's own pass finds the new params infinite
    # (the step is lr-sized), and the step is refused, naming them, with nothing changed.
    t = make(3.0e38)
    before = t.state_hash()
    X = ml.Array.from_list([0.5] * 16, "<f4").reshape((2, 8))
    y = ml.Array.from_list([0, 2], "<i4")
    with pytest.raises(RuntimeError, match=r"output 'params' is not finite at index \d+"):
        t.train_step(X, y)
    # Two steps: the first's infinite params make the second's logits the first bad output.
    with pytest.raises(RuntimeError, match=r"output 'logits' is not finite"):
        t.train_steps(
            ml.Array.from_list([0.5] * 32, "<f4").reshape((4, 8)),
            ml.Array.from_list([0, 2] * 2, "<i4"),
            2,
        )
    assert t.state_hash() == before and t.step_ == 0


def test_data_schedule_is_optional_and_records_a_default():
    # None (the default) records that no schedule was given; every trainer builds without one.
    mlp = ml.MLPTrainer([2, 3], seed=1)
    small = ml.SmallMLPTrainer(*ml.init_small_mlp(1))
    model = ml.Trainer(ml.nn.Sequential(ml.nn.Linear(2, 3)), input_shape=(2,))
    assert mlp.data_schedule == small.data_schedule == {"source": "unspecified"}
    assert model.data_schedule == {}  # as before: its state hashes are pinned
    assert mlp.state_hash() == ml.MLPTrainer([2, 3], seed=1, data_schedule=None).state_hash()
    assert mlp.state_hash() == (
        ml.MLPTrainer([2, 3], seed=1, data_schedule={"source": "unspecified"}).state_hash()
    )
