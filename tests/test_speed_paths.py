"""The trainer's cheap input and result paths: every way of passing X and targets (Array,
NumPy, memoryview, array.array labels of every width, strided and read-only buffers) gives the
same bits and the same refusals, and the result Arrays (views of one fresh buffer) are
independent of the trainer and of each other's lifetimes."""

import array
import gc
import math

import mojolearn as ml
import pytest
from mojolearn._buffers.array import Array
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec


def make(seed):
    return ml.SmallMLPTrainer(
        *_spec.init_small_mlp(seed % (1 << 64)), data_schedule={"s": 1}, lr=1e-2
    )


def label_forms(y):
    values = y.tolist()
    forms = [
        y,
        Array.from_list(values, "<i8"),
        array.array("q", values),
        array.array("i", values),
        array.array("b", values),
        array.array("B", values),
        array.array("H", values),
        memoryview(array.array("l", values)),
    ]
    return forms


def outputs(r):
    return [
        r["loss"],
        r["logits"].tobytes(),
        r["input_grad"].tobytes(),
        *(g.tobytes() for g in r["gradients"].values()),
    ]


def test_label_dtypes_give_the_same_bits(seed):
    ((X, y),) = _rng.batches(seed % (1 << 64), 6, 1)
    results, hashes = [], []
    for form in label_forms(y):
        t = make(seed)
        results.append(outputs(t.train_step(X, form, return_input_grad=True)))
        hashes.append(t.state_hash())
    assert all(r == results[0] for r in results), f"seed {seed}"
    assert len(set(hashes)) == 1


def test_numpy_and_buffer_inputs_give_the_same_bits(seed):
    np = pytest.importorskip("numpy")
    ((X, y),) = _rng.batches(seed % (1 << 64), 5, 1)
    xn = np.asarray(X).copy()
    wide = np.zeros((5, 16), np.float32)
    wide[:, ::2] = xn  # strided view: copied into C order by the slow path
    ro = xn.copy()
    ro.flags.writeable = False
    forms = [
        (X, y),
        (xn, np.asarray(y, np.int64)),
        (xn, np.asarray(y, np.int32)),
        (wide[:, ::2], np.asarray(y, np.uint8)),
        (ro, y),
        (memoryview(xn), array.array("q", y.tolist())),
        (np.asarray(X).astype(">f4").astype(np.float32), np.asarray(y, ">i8").astype(np.int64)),
    ]
    results = []
    for Xf, yf in forms:
        t = make(seed)
        results.append(
            outputs(t.train_step(Xf, yf, return_input_grad=True))
            + [t.predict_logits(Xf).tobytes(), t.loss_and_grads(Xf, yf)[0]]
        )
    assert all(r == results[0] for r in results), f"seed {seed}"


def test_refusals_are_the_same_on_every_path(seed):
    ((X, y),) = _rng.batches(seed % (1 << 64), 4, 1)
    t = make(seed)
    t.train_step(X, y)
    before = t.state_hash(), t.step_
    nan_x = Array.from_list(X.tolist(), "<f4")
    nan_x[1, 3] = math.inf
    bad = [0, 1, 5, 2]
    cases = [
        (ValueError, "X must be finite", nan_x, y),
        (
            ValueError,
            "X must be finite",
            memoryview(array.array("f", nan_x.tobytes())).cast("B").cast("f", (4, 8)),
            y,
        ),
    ]
    for form in (
        Array.from_list(bad, "<i4"),
        Array.from_list(bad, "<i8"),
        array.array("q", bad),
        array.array("b", bad),
        memoryview(array.array("i", bad)),
    ):
        cases.append((ValueError, r"targets must be classes 0..2; targets\[2\] = 5", X, form))
    cases += [
        (ValueError, r"targets\[0\] = -1", X, array.array("q", [-1, 0, 0, 0])),
        (ValueError, "classes 0..2", X, array.array("Q", [1 << 63, 0, 0, 0])),
        (ValueError, r"targets must have shape \(4,\)", X, array.array("q", [0, 0, 0])),
        (ValueError, r"targets must have shape \(4,\)", X, Array.from_list([0, 0, 0, 0, 0], "<i8")),
        (TypeError, "targets must hold integers", X, array.array("d", [0, 0, 0, 0])),
        (
            ValueError,
            r"X must have shape \(batch, 8\)",
            Array.from_list([0.0] * 28, "<f4").reshape((4, 7)),
            y,
        ),
        (
            TypeError,
            "X must be float32, got float64",
            Array.from_list([0.0] * 32, "<f8").reshape((4, 8)),
            y,
        ),
        (
            ValueError,
            "1 to 256 rows",
            Array.from_list([0.0] * 257 * 8, "<f4").reshape((257, 8)),
            Array.from_list([0] * 257, "<i4"),
        ),
    ]
    np = None
    try:
        import numpy as np
    except ImportError:
        pass
    if np is not None:
        xn = np.asarray(X).copy()
        xn[2, 2] = math.nan
        cases += [
            (ValueError, "X must be finite", xn, y),
            (ValueError, r"targets\[3\] = 7", X, np.array([0, 0, 0, 7], np.int64)),
            (TypeError, "X must be float32, got float64", np.zeros((4, 8)), y),
            (
                ValueError,
                "1 to 256 rows",
                np.zeros((0, 8), np.float32),
                y[:0] if False else np.zeros((0,), np.int64),
            ),
        ]
    for exc, match, Xf, yf in cases:
        for call in (lambda: t.train_step(Xf, yf), lambda: t.loss_and_grads(Xf, yf)):
            with pytest.raises(exc, match=match):
                call()
            assert (t.state_hash(), t.step_) == before, match
    with pytest.raises(ValueError, match="X must be finite"):
        t.predict_logits(nan_x)
    with pytest.raises(ValueError, match=r"targets\[6\] = 3"):
        t.train_steps(
            Array.from_list(X.tolist() * 2, "<f4"), array.array("q", y.tolist() + [0, 0, 3, 0]), 2
        )
    assert (t.state_hash(), t.step_) == before


def test_result_views_are_independent(seed):
    ((X, y),) = _rng.batches(seed % (1 << 64), 3, 1)
    t = make(seed)
    r = t.train_step(X, y, return_input_grad=True)
    grads = r["gradients"]
    copies = {n: g.tobytes() for n, g in grads.items()}
    logits = r["logits"].tobytes()
    r["logits"][0, 0] = 7.0
    r["input_grad"][0, 0] = 7.0
    assert {n: g.tobytes() for n, g in grads.items()} == copies  # disjoint views
    w2 = grads["weight2"]
    del r, grads
    gc.collect()
    assert w2.tobytes() == copies["weight2"]  # a view keeps the shared buffer alive
    w2[0, 0] = 1.5
    r2 = t.train_step(X, y)
    assert r2["logits"].tobytes() != logits and w2[0, 0] == 1.5  # fresh buffers each step
    assert type(r2["loss"]) is float and r2["logits"].shape == (3, 3)
    assert [g.shape for g in r2["gradients"].values()] == [(16, 8), (16,), (3, 16), (3,)]
    assert all(g.dtype == "<f4" and not g.readonly for g in r2["gradients"].values())


def test_fused_switch_is_read_per_call(seed, monkeypatch):
    """MOJOLEARN_MLP_FUSED is read on every call (cheaply), so flipping it between steps
    switches the path: the per-operation step gives the same bits."""
    ((X, y),) = _rng.batches(seed % (1 << 64), 5, 1)
    a, b = make(seed), make(seed)
    for i in range(4):
        monkeypatch.setenv("MOJOLEARN_MLP_FUSED", "0" if i % 2 else "1")
        ra = outputs(a.train_step(X, y, return_input_grad=True))
        monkeypatch.delenv("MOJOLEARN_MLP_FUSED")
        rb = outputs(b.train_step(X, y, return_input_grad=True))
        assert ra == rb, f"seed {seed}, step {i}"
    assert a.state_hash() == b.state_hash()
