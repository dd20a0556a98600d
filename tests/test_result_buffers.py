"""A training step's result buffer is reused once nothing refers to it (`ResultBuffers`), and
never while anything does: results a caller keeps (the dict, an Array, a NumPy view, a
memoryview) keep their values through later steps, and a trainer whose results are dropped
trains to the same bits as one whose results are all kept."""

import gc
import random

import mojolearn as ml
import pytest
from mojolearn import nn
from mojolearn._buffers import alloc


def _batch(rng, rows, features, classes):
    x = ml.Array.from_list([[rng.uniform(-1, 1) for _ in range(features)] for _ in range(rows)])
    y = ml.Array.from_list([rng.randrange(classes) for _ in range(rows)], "<i4")
    return x, y


def _mlp():
    return ml.MLPTrainer([12, 20, 5], seed=3, lr=1e-2)


def _model():
    net = nn.Sequential(nn.Linear(12, 20), nn.GELU(), nn.LayerNorm(20), nn.Linear(20, 5))
    return ml.Trainer(net, input_shape=(12,), seed=3, lr=1e-2)


def _grads(result):
    return result["grads"] if "grads" in result else result["gradients"]


TRAINERS = [pytest.param(_mlp, id="MLPTrainer"), pytest.param(_model, id="Trainer")]


def test_a_held_buffer_is_handed_out_again_only_when_unreferenced():
    held = alloc.ResultBuffers()
    first = held.take(1000)
    assert len(first) == 1000 and not any(first)
    second = held.take(1000)
    assert second is not first  # `first` is still referenced here
    first[0] = 7.0
    del first
    again = held.take(1000)
    assert again[0] == 7.0  # the same buffer, not a new one: its values are left as they were
    other = held.take(999)  # another size never gets a buffer of this one
    assert len(other) == 999


def test_only_the_last_two_buffers_are_held_and_none_past_the_limit(monkeypatch):
    held = alloc.ResultBuffers()
    keep = [held.take(10) for _ in range(3)]
    assert len(held._held) == 2 and held._held[0] is keep[2] and held._held[1] is keep[1]
    monkeypatch.setattr(alloc, "_REUSE_LIMIT", 4 * 50)
    big = held.take(51)
    assert all(b is not big for b in held._held)


@pytest.mark.parametrize("make", TRAINERS)
def test_results_a_caller_keeps_survive_later_steps(make):
    try:
        import numpy as np
    except ImportError:  # the NumPy view is checked where NumPy is installed
        np = None
    rng = random.Random(5)
    trainer = make()
    x, y = _batch(rng, 16, 12, 5)
    kept = trainer.train_step(x, y)
    grads = _grads(kept)
    name = next(iter(grads))
    saved = {n: g.tobytes() for n, g in grads.items()}
    logits, saved_logits = kept["logits"], kept["logits"].tobytes()
    view = memoryview(grads[name].tobytes())  # a copy, compared below
    only_array = grads[name]
    as_numpy = np.asarray(grads[name]) if np is not None else None
    mv = only_array._mv
    del kept, grads
    gc.collect()
    for _ in range(4):
        x, y = _batch(rng, 16, 12, 5)
        trainer.train_step(x, y)  # its results dropped at once
    assert only_array.tobytes() == saved[name] == view.tobytes() == mv.tobytes()
    assert logits.tobytes() == saved_logits
    if as_numpy is not None:
        assert as_numpy.tobytes() == saved[name]


@pytest.mark.parametrize("make", TRAINERS)
def test_kept_results_and_a_kept_dict_keep_every_value(make):
    rng = random.Random(6)
    trainer = make()
    history = []
    for _ in range(5):
        x, y = _batch(rng, 16, 12, 5)
        r = trainer.train_step(x, y)
        history.append((r, r["logits"].tobytes(), {n: g.tobytes() for n, g in _grads(r).items()}))
    for r, logits, grads in history:
        assert r["logits"].tobytes() == logits
        assert {n: g.tobytes() for n, g in _grads(r).items()} == grads


@pytest.mark.parametrize("make", TRAINERS)
def test_dropped_results_reuse_the_buffers_with_the_same_bits(make):
    rng = random.Random(7)
    batches = [_batch(rng, 16, 12, 5) for _ in range(6)]
    dropping, keeping = make(), make()
    kept = []
    for x, y in batches:
        loss = dropping.train_step(x, y)["loss"]
        kept.append(keeping.train_step(x, y))
        assert loss == kept[-1]["loss"]
    held = [id(b) for b in dropping._results._held]  # ids: a reference would pin them
    assert len(held) == 1  # each step's results were dropped before the next: one serves
    for x, y in batches:
        dropping.train_step(x, y)
        kept.append(keeping.train_step(x, y))
    assert [id(b) for b in dropping._results._held] == held  # the same buffers, reused
    assert dropping.state_hash() == keeping.state_hash()
