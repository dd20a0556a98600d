"""mojolearn.fit on `mojolearn.Trainer` (issue 35): the history is the hand-written loop over
the same public calls, bit for bit, for a GELU/LayerNorm/Dropout classifier, an MSE regressor
(whose entries hold `val_r2` instead of `val_accuracy`) and (n, T, D) sequences with (n, T)
targets; patience stops where the rule says; a run cut after 3 epochs and continued in a new
process ends in the uninterrupted run's state and history; every refusal comes before anything
changes. Arrays only (no NumPy)."""

import json
import math
import os
import random

import mojolearn as ml
import pytest
from mojolearn import Array, Batches, nn

from .helpers import run_python

# The data and trainers of a run, as source: the resume test runs it here and in a new process.
SETUP = """
import random
import mojolearn as ml
from mojolearn import Array, nn


def classifier(init, lr=1e-2):
    model = nn.Sequential(
        nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Dropout(0.2), nn.Linear(16, 3)
    )
    return ml.Trainer(model, input_shape=(6,), seed=init, lr=lr)


def regressor(init, lr=1e-2):
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
    return ml.Trainer(model, input_shape=(6,), loss="mse", seed=init, lr=lr)


def features(rng, n):
    return Array.from_list([[rng.gauss(0, 1) for _ in range(6)] for _ in range(n)])


def data(kind, data_seed, n):
    '''(X, y, val): labels of a linear rule for the classifier, a smooth target for the
    regressor; the validation rows are the training rows with other targets, so the
    validation loss soon rises as the training loss falls (patience has something to stop).'''
    rng = random.Random(data_seed)
    X = features(rng, n)
    rows = X.tolist()
    if kind == "classifier":
        labels = [int(r[0] + r[1] > 0) + int(r[2] > 1) for r in rows]
        y = Array.from_list(labels, "<i4")
        yv = Array.from_list([(v + 1) % 3 for v in labels], "<i4")
    else:
        values = [0.5 * r[0] - r[1] * r[2] for r in rows]
        y = Array.from_list(values)
        yv = Array.from_list([-v for v in values])
    return X, y, (X, yv)
"""
_NS: dict = {}
exec(SETUP, _NS)  # noqa: S102 - the module's own source, run here as in the child
classifier, regressor, data, features = (
    _NS[k] for k in ("classifier", "regressor", "data", "features")
)
MAKERS = {"classifier": classifier, "regressor": regressor}
METRIC = {"classifier": "accuracy", "regressor": "r2"}


def _hand_loop(trainer, X, y, epochs, batch_size, seed, val, metric):
    """What `fit` is documented to do, written out with the public calls (no patience)."""
    batches = Batches(X, y, batch_size, seed=seed)
    history, best = [], None
    for epoch in range(1, epochs + 1):
        weighted, rows = [], 0
        for Xb, yb in batches:
            weighted.append(float(trainer.train_step(Xb, yb)["loss"]) * Xb.shape[0])
            rows += Xb.shape[0]
        entry = {"epoch": epoch, "step": trainer.step_, "loss": math.fsum(weighted) / rows}
        scores = trainer.evaluate(*val)
        improved = best is None or scores["loss"] < best
        best = scores["loss"] if improved else best
        entry.update(
            {"val_loss": scores["loss"], f"val_{metric}": scores[metric], "improved": improved}
        )
        history.append(entry)
    return history


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_history_is_the_hand_written_loop(kind, tmp_path):
    rng = random.Random()
    n, seed, batch_size = rng.randrange(20, 60), rng.randrange(1 << 64), rng.randrange(3, 17)
    init = rng.randrange(1 << 64)
    X, y, _ = data(kind, rng.randrange(1 << 30), n)
    val = data(kind, rng.randrange(1 << 30), rng.randrange(5, 30))[:2]
    make = MAKERS[kind]
    hand = make(init)
    want = _hand_loop(hand, X, y, 3, batch_size, seed, val, METRIC[kind])
    fitted = make(init)
    got = ml.fit(fitted, X, y, epochs=3, batch_size=batch_size, val=val, seed=seed)
    assert got == want
    assert sorted(got[0]) == sorted(["epoch", "step", "loss", "val_loss", "improved",
                                     f"val_{METRIC[kind]}"])  # fmt: skip
    assert fitted.state_hash() != make(init).state_hash()  # it trained
    hand.data_schedule = fitted.data_schedule  # the only difference: fit's record
    assert fitted.state_hash() == hand.state_hash()
    # A checkpoint adds files, never changes the run.
    kept = make(init)
    path = tmp_path / "run.ckpt"
    assert ml.fit(kept, X, y, epochs=3, batch_size=batch_size, val=val, seed=seed,
                  checkpoint=path) == want  # fmt: skip
    assert ml.Trainer.from_checkpoint(path).state_hash() == kept.state_hash() == hand.state_hash()
    with open(f"{path}.fit-history.json") as f:
        assert json.load(f) == want


def test_one_output_targets_as_n_or_n_by_1_are_the_same_run():
    rng = random.Random()
    X, y, val = data("regressor", rng.randrange(1 << 30), 24)
    column = Array.from_list([[v] for v in y.tolist()])
    runs = []
    for targets in (y, column):
        trainer = regressor(3)
        history = ml.fit(trainer, X, targets, epochs=2, batch_size=5, val=val, seed=1)
        runs.append((history, trainer.state_hash()))
    assert runs[0] == runs[1]
    assert all(math.isfinite(e["val_r2"]) for e in runs[0][0])


def test_sequences_take_n_t_targets_and_flat_inputs_are_the_same_run(tmp_path):
    rng = random.Random()
    T, D, C, n = 4, 5, 3, rng.randrange(12, 30)
    model = nn.Sequential(nn.Linear(D, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, C))
    rows = [[[rng.gauss(0, 1) for _ in range(D)] for _ in range(T)] for _ in range(n)]
    X = Array.from_list(rows)
    flat = Array.from_list([[v for step in r for v in step] for r in rows])
    y = Array.from_list([[rng.randrange(C) for _ in range(T)] for _ in range(n)], "<i4")
    val = (X, y)
    init, seed = rng.randrange(1 << 64), rng.randrange(1 << 64)

    def make():
        return ml.Trainer(model, input_shape=(T, D), seed=init, lr=1e-2)

    want = _hand_loop(make(), X, y, 3, 7, seed, val, "accuracy")
    got = []
    for inputs in (X, flat):
        trainer = make()
        history = ml.fit(trainer, inputs, y, epochs=3, batch_size=7, val=(inputs, y), seed=seed,
                         checkpoint=tmp_path / f"run{len(got)}.ckpt")  # fmt: skip
        got.append((history, trainer.state_hash()))
    assert got[0][0] == want
    assert got[0] == got[1]
    # Per-position labels are checked as the classes of every position.
    bad = Array.from_list([[0] * (T - 1) + [C]] * n, "<i4")
    with pytest.raises(ValueError, match=rf"fit: y must hold labels in \[0, {C}\)"):
        ml.fit(make(), X, bad, epochs=1, batch_size=4, seed=0)
    with pytest.raises(ValueError, match=rf"fit: y must have shape \({n}, {T}\)"):
        ml.fit(make(), X, Array.from_list([0] * n, "<i4"), epochs=1, batch_size=4, seed=0)


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_patience_stops_at_the_rule_and_best_holds_the_best_state(kind, tmp_path):
    rng = random.Random()
    X, y, val = data(kind, rng.randrange(1 << 30), 40)
    seed, patience, init = rng.randrange(1 << 64), rng.randrange(1, 4), rng.randrange(1 << 64)
    path = tmp_path / "run.ckpt"
    make = MAKERS[kind]
    trainer = make(init, lr=0.05)
    history = ml.fit(trainer, X, y, epochs=60, batch_size=8, val=val, patience=patience,
                     seed=seed, checkpoint=str(path))  # fmt: skip
    losses = [e["val_loss"] for e in history]
    for i, entry in enumerate(history):
        assert entry["improved"] == (i == 0 or losses[i] < min(losses[:i]))
    assert len(history) < 60, "the validation loss never stopped improving"
    assert [e["improved"] for e in history[-patience:]] == [False] * patience
    best_epoch = min(range(len(losses)), key=losses.__getitem__) + 1
    best = ml.Trainer.from_checkpoint(f"{path}.best")
    assert best.data_schedule["fit"]["best"]["epoch"] == best_epoch
    again = make(init, lr=0.05)  # the same run, stopped at the best epoch
    ml.fit(again, X, y, epochs=best_epoch, batch_size=8, val=val, patience=patience, seed=seed)
    assert best.state_hash() == again.state_hash()


CHILD = """
import json, sys
{setup}
kind, data_seed, init, seed, path = json.loads(sys.argv[1] if len(sys.argv) > 1 else {args!r})
X, y, val = data(kind, data_seed, 30)
trainer = (classifier if kind == "classifier" else regressor)(init + 1)  # replaced by the file's
history = ml.fit(trainer, X, y, epochs=6, batch_size=7, val=val, patience=10, seed=seed,
                 checkpoint=path)
print(json.dumps({{"hash": trainer.state_hash(), "history": history}}))
"""


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_run_cut_after_3_epochs_ends_in_a_new_process_as_the_uninterrupted_run(kind, tmp_path):
    rng = random.Random()
    data_seed, init, seed = rng.randrange(1 << 30), rng.randrange(1 << 63), rng.randrange(1 << 64)
    X, y, val = data(kind, data_seed, 30)
    args = dict(batch_size=7, val=val, patience=10, seed=seed)
    whole = MAKERS[kind](init)
    want = ml.fit(whole, X, y, epochs=6, checkpoint=tmp_path / "whole.ckpt", **args)
    cut = tmp_path / "cut.ckpt"
    first = MAKERS[kind](init)
    assert ml.fit(first, X, y, epochs=3, checkpoint=cut, **args) == want[:3]
    code = CHILD.format(setup=SETUP, args=json.dumps([kind, data_seed, init, seed, str(cut)]))
    out = json.loads(run_python(code, timeout=240))
    assert out["history"] == want
    assert out["hash"] == whole.state_hash()
    assert ml.Trainer.from_checkpoint(cut).state_hash() == whole.state_hash()
    best = [ml.Trainer.from_checkpoint(f"{p}.best") for p in (tmp_path / "whole.ckpt", cut)]
    assert best[0].state_hash() == best[1].state_hash()


def test_a_history_with_another_kinds_score_is_refused(tmp_path):
    rng = random.Random()
    X, y, val = data("regressor", rng.randrange(1 << 30), 20)
    path = tmp_path / "run.ckpt"
    ml.fit(regressor(1), X, y, epochs=2, batch_size=6, val=val, seed=2, checkpoint=path)
    side = f"{path}.fit-history.json"
    with open(side) as f:
        history = json.load(f)
    for entry in history:
        entry["val_accuracy"] = entry.pop("val_r2")
    with open(side, "w") as f:
        json.dump(history, f)
    trainer = regressor(1)
    before = trainer.state_hash()
    with pytest.raises(ValueError, match=r"fit: the checkpoint's history .* its keys are"):
        ml.fit(trainer, X, y, epochs=3, batch_size=6, val=val, seed=2, checkpoint=path)
    assert trainer.state_hash() == before


def _with(arr, at, value):
    """A copy of a float32 Array with flat element `at` set to `value`."""
    out = Array.from_list(arr.tolist())
    out._mv[at] = value
    return out


def _refusals(rng):
    """(trainer kind, keyword changes, error type, text the message holds) for `fit`."""
    X, y, _ = data("classifier", rng.randrange(1 << 30), 20)
    Xr, yr, _ = data("regressor", rng.randrange(1 << 30), 20)
    i, j = rng.randrange(20), rng.randrange(6)
    k = rng.randrange(20)
    nan_x = _with(X, 6 * i + j, float("nan"))
    inf_y = _with(yr, k, float("inf"))
    labels = y.tolist()
    labels[k] = 3
    return [
        ("classifier", dict(X=nan_x), ValueError,
         f"fit: X must hold finite values: X example {i}, element {j} is nan"),
        ("classifier", dict(val=(nan_x, y)), ValueError,
         f"fit: val must hold finite values: val[0] example {i}, element {j} is nan"),
        ("regressor", dict(X=Xr, y=inf_y), ValueError,
         f"fit: y must hold finite values: y example {k}, element 0 is inf"),
        ("regressor", dict(X=Xr, y=yr, val=(Xr, inf_y)), ValueError,
         f"fit: val must hold finite values: val[1] example {k}, element 0 is inf"),
        ("classifier", dict(y=Array.from_list(labels, "<i4")), ValueError,
         "fit: y must hold labels in [0, 3) (the trainer's classes), got 3"),
        ("classifier", dict(y=Array.from_list([[0, 1]] * 20, "<i4")), ValueError,
         "fit: y must have shape (20,) to match X, got (20, 2)"),
        ("classifier", dict(y=yr), TypeError, "fit: y must hold integers"),
        ("regressor", dict(X=Xr, y=Array.from_list([[0.0, 1.0]] * 20)), ValueError,
         "fit: y must have shape (20, 1) (or (20,)) to match X, got (20, 2)"),
        ("regressor", dict(X=Xr, y=y), TypeError, "fit: y"),
        ("classifier", dict(X=Array.from_list([[1.0] * 5] * 20)), ValueError,
         "fit: X must have 6 columns (the trainer's inputs), got 5"),
        ("classifier", dict(X=Array.from_list([[[1.0] * 6]] * 20)), ValueError,
         "fit: X must have shape (n, 6) (the trainer's input_shape), got (20, 1, 6)"),
        ("classifier", dict(batch_size=9), ValueError, "at most the trainer's max_rows 8"),
        ("classifier", dict(val=(X, y)), ValueError,
         "fit: val has 20 examples, more than the trainer's max_rows 8"),
    ]  # fmt: skip


def test_refusals_name_the_argument_and_change_nothing(tmp_path):
    rng = random.Random()
    model = {
        "classifier": nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Dropout(0.1), nn.Linear(8, 3)),
        "regressor": nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1)),
    }
    X, y, _ = data("classifier", rng.randrange(1 << 30), 20)
    for kind, change, error, text in _refusals(rng):
        loss = "mse" if kind == "regressor" else "cross_entropy"
        trainer = ml.Trainer(model[kind], input_shape=(6,), loss=loss, seed=5, max_rows=8)
        trainer.train_step(*data(kind, 1, 4)[:2])  # a state with moments and a step
        before, step = trainer.state_hash(), trainer.step_
        kwargs = dict(X=X, y=y, epochs=2, batch_size=4, seed=0, checkpoint=tmp_path / "x.ckpt")
        kwargs.update(change)
        with pytest.raises(error) as info:
            ml.fit(trainer, kwargs.pop("X"), kwargs.pop("y"), **kwargs)
        assert text in str(info.value), (change, str(info.value))
        assert trainer.state_hash() == before and trainer.step_ == step
        assert os.listdir(tmp_path) == []
