"""mojolearn.fit: the history is a hand-written loop over the same public calls, bit for bit;
patience stops where the rule says and PATH.best holds the best epoch's state; a run cut and
continued from its checkpoint ends in the uninterrupted run's state; every refusal names its
argument and changes nothing. Arrays only (no NumPy)."""

import json
import math
import os
import random

import mojolearn as ml
import pytest
from mojolearn import Array, Batches

from .helpers import run_python

TRAINERS = ("small", "mlp")


def _trainer(kind, seed, lr=1e-2):
    if kind == "small":
        return ml.SmallMLPTrainer(*ml.init_small_mlp(seed), data_schedule={"seed": 0}, lr=lr)
    return ml.MLPTrainer([8, 12, 3], seed=seed, data_schedule={"seed": 0}, lr=lr)


def _data(rng, n):
    X = Array.from_list([[rng.uniform(-2, 2) for _ in range(8)] for _ in range(n)])
    return X, Array.from_list([rng.randrange(3) for _ in range(n)], "<i4")


def _hand_loop(trainer, X, y, epochs, batch_size, seed, val):
    """What `fit` is documented to do, written out with the public calls (no patience)."""
    batches = Batches(X, y, batch_size, seed=seed)
    history, best = [], None
    for epoch in range(1, epochs + 1):
        weighted = []
        for Xb, yb in batches:
            weighted.append(float(trainer.train_step(Xb, yb)["loss"]) * Xb.shape[0])
        entry = {"epoch": epoch, "step": trainer.step_, "loss": math.fsum(weighted) / len(y)}
        scores = trainer.evaluate(*val)
        improved = best is None or scores["loss"] < best
        best = scores["loss"] if improved else best
        entry.update(val_loss=scores["loss"], val_accuracy=scores["accuracy"], improved=improved)
        history.append(entry)
    return history


def _state_bits(trainer):
    state = trainer.state_dict()
    tensors = list(state["weights"].values()) + [state["optimizer"]["m"], state["optimizer"]["v"]]
    return [t.tobytes() for t in tensors], state["optimizer"]["step"]


@pytest.mark.parametrize("kind", TRAINERS)
def test_history_is_the_hand_written_loop(kind, tmp_path):
    rng = random.Random()
    n, seed, batch_size = rng.randrange(20, 70), rng.randrange(1 << 64), rng.randrange(1, 17)
    X, y = _data(rng, n)
    val = _data(rng, rng.randrange(5, 30))
    init = rng.randrange(1000)
    want = _hand_loop(_trainer(kind, init), X, y, 3, batch_size, seed, val)
    hand = _trainer(kind, init)
    _hand_loop(hand, X, y, 3, batch_size, seed, val)
    fitted = _trainer(kind, init)
    got = ml.fit(fitted, X, y, epochs=3, batch_size=batch_size, val=val, seed=seed)
    assert got == want
    assert _state_bits(fitted) == _state_bits(hand)
    # The record goes under "fit"; the user's own keys stay (issue 36: fit used to replace them).
    assert fitted.data_schedule["fit"]["schema"] == "mojolearn.fit.v1"
    assert fitted.data_schedule["seed"] == 0 and set(fitted.data_schedule) == {"seed", "fit"}
    # A checkpoint adds files, never changes the run: the same history and state hash.
    kept = _trainer(kind, init)
    path = tmp_path / "run.ckpt"
    assert ml.fit(kept, X, y, epochs=3, batch_size=batch_size, val=val, seed=seed,
                  checkpoint=path) == want  # fmt: skip
    assert kept.state_hash() == fitted.state_hash()
    assert type(kept).from_checkpoint(path).state_hash() == kept.state_hash()
    with open(f"{path}.fit-history.json") as f:
        assert json.load(f) == want


def test_history_without_val_has_train_keys_only():
    rng = random.Random()
    X, y = _data(rng, 33)
    history = ml.training.fit(_trainer("small", 1), X, y, epochs=2, batch_size=8, seed=3)
    assert [sorted(e) for e in history] == [["epoch", "loss", "step"]] * 2
    assert [e["step"] for e in history] == [5, 10]


def _overfitting_run(rng, kind):
    """Training rows whose validation twins carry other labels: the validation loss soon
    rises as the training loss falls, so patience has something to stop."""
    X, y = _data(rng, 48)
    yv = Array.from_list([(label + 1) % 3 for label in y.tolist()], "<i4")
    return X, y, (X, yv)


@pytest.mark.parametrize("kind", TRAINERS)
def test_patience_stops_at_the_rule_and_best_holds_the_best_state(kind, tmp_path):
    rng = random.Random()
    X, y, val = _overfitting_run(rng, kind)
    seed, patience, init = rng.randrange(1 << 64), rng.randrange(1, 4), rng.randrange(1000)
    path = tmp_path / "run.ckpt"
    trainer = _trainer(kind, init, lr=0.05)
    history = ml.fit(trainer, X, y, epochs=40, batch_size=16, val=val, patience=patience,
                     seed=seed, checkpoint=str(path))  # fmt: skip
    losses = [e["val_loss"] for e in history]
    for i, entry in enumerate(history):
        assert entry["improved"] == (i == 0 or losses[i] < min(losses[:i]))
    assert len(history) < 40, "the validation loss never stopped improving"
    assert [e["improved"] for e in history[-patience:]] == [False] * patience
    assert not any(
        all(not e["improved"] for e in history[i : i + patience])
        for i in range(len(history) - patience)
    ), "it ran past the end of its patience"
    best_epoch = min(range(len(losses)), key=losses.__getitem__) + 1
    best = type(trainer).from_checkpoint(f"{path}.best")
    assert best.data_schedule["fit"]["best"]["epoch"] == best_epoch
    again = _trainer(kind, init, lr=0.05)  # the same run, stopped at the best epoch
    ml.fit(again, X, y, epochs=best_epoch, batch_size=16, val=val, patience=patience, seed=seed)
    assert best.state_hash() == again.state_hash()
    assert type(trainer).from_checkpoint(path).state_hash() == trainer.state_hash()
    # Called again on its checkpoint, a run whose patience is spent trains nothing more.
    other = _trainer(kind, init + 1)
    assert ml.fit(other, X, y, epochs=40, batch_size=16, val=val, patience=patience,
                  seed=seed, checkpoint=path) == history  # fmt: skip
    assert other.state_hash() == trainer.state_hash()


@pytest.mark.parametrize("kind", TRAINERS)
def test_resume_ends_in_the_uninterrupted_state(kind, tmp_path):
    rng = random.Random()
    X, y, val = _overfitting_run(rng, kind)
    seed, init, bs = rng.randrange(1 << 64), rng.randrange(1000), rng.randrange(5, 17)
    args = dict(batch_size=bs, val=val, patience=3, seed=seed)
    whole = _trainer(kind, init)
    want = ml.fit(whole, X, y, epochs=6, checkpoint=tmp_path / "whole.ckpt", **args)
    cut = tmp_path / "cut.ckpt"
    first = _trainer(kind, init)
    assert ml.fit(first, X, y, epochs=2, checkpoint=cut, **args) == want[:2]
    # A save cut between the history and the checkpoint: the history has one epoch more.
    with open(f"{cut}.fit-history.json", "w") as f:
        json.dump(want[:3], f)
    resumed = _trainer(kind, init + 7)  # its own weights: the checkpoint's replace them
    assert ml.fit(resumed, X, y, epochs=6, checkpoint=cut, **args) == want
    assert resumed.state_hash() == whole.state_hash()
    assert type(whole).from_checkpoint(cut).state_hash() == whole.state_hash()
    best = [type(whole).from_checkpoint(f"{p}.best") for p in (tmp_path / "whole.ckpt", cut)]
    assert best[0].state_hash() == best[1].state_hash()


def _refusals(kind, tmp_path):
    """(keyword changes, error type, text the message holds) for `fit`."""
    rng = random.Random()
    X, y = _data(rng, 20)
    wide = Array.from_list([[1.0] * 9] * 20)
    bad_labels = Array.from_list([3] * 20, "<i4")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    rows = [
        (dict(trainer=object()), TypeError, "trainer must be a SmallMLPTrainer"),
        (dict(epochs=0), ValueError, "epochs must be an int >= 1, got 0"),
        (dict(epochs=2.0), TypeError, "epochs must be an int >= 1, got float"),
        (dict(epochs=True), TypeError, "epochs must be an int >= 1, got bool"),
        (dict(batch_size=0), ValueError, "batch_size must be an int >= 1"),
        (dict(batch_size="4"), TypeError, "batch_size must be an int >= 1, got str"),
        (dict(X=wide), ValueError, "X must have 8 columns"),
        (dict(X=[[1.0] * 7 + ["a"]]), TypeError, "fit: X must hold numbers"),
        (dict(y=bad_labels), ValueError, "y must hold labels in [0, 3)"),
        (dict(y=Array.from_list([0] * 19, "<i4")), ValueError, "y must have shape (20,)"),
        (dict(val=(X,)), TypeError, "val must be a pair (Xv, yv) or None, got tuple of length 1"),
        (dict(val=X), TypeError, "val must be a pair"),
        (dict(val=(wide, y)), ValueError, "val[0] must have 8 columns"),
        (dict(val=(X, bad_labels)), ValueError, "val[1] must hold labels in [0, 3)"),
        (dict(patience=2), ValueError, "patience needs val"),
        (dict(val=(X, y), patience=0), ValueError, "patience must be an int >= 1"),
        (dict(seed=-1), ValueError, "fit: seed"),
        (dict(seed="0"), TypeError, "fit: seed"),
        (dict(checkpoint=7), TypeError, "checkpoint must be a str or os.PathLike"),
        (dict(checkpoint=b"x.ckpt"), TypeError, "checkpoint must be a str or os.PathLike"),
        (dict(checkpoint=str(folder)), ValueError, "not a regular file"),
        (dict(checkpoint=str(tmp_path / "no" / "x.ckpt")), ValueError, "does not exist"),
    ]
    if kind == "small":
        rows.append((dict(batch_size=257), ValueError, "at most the trainer's max_rows 256"))
    return X, y, rows


@pytest.mark.parametrize("kind", TRAINERS)
def test_refusals_name_the_argument_and_change_nothing(kind, tmp_path):
    X, y, rows = _refusals(kind, tmp_path)
    for change, error, text in rows:
        trainer = _trainer(kind, 5)
        before = trainer.state_hash()
        kwargs = dict(trainer=trainer, X=X, y=y, epochs=2, batch_size=4, seed=0)
        kwargs.update(change)
        listing = sorted(os.listdir(tmp_path))
        with pytest.raises(error) as info:
            ml.fit(kwargs.pop("trainer"), kwargs.pop("X"), kwargs.pop("y"), **kwargs)
        assert text in str(info.value), (change, str(info.value))
        assert str(info.value).startswith("fit: ")
        assert trainer.state_hash() == before
        assert sorted(os.listdir(tmp_path)) == listing


@pytest.mark.parametrize("kind", TRAINERS)
def test_an_existing_checkpoint_of_another_run_is_refused(kind, tmp_path):
    rng = random.Random()
    X, y = _data(rng, 30)
    plain = tmp_path / "plain.ckpt"
    _trainer(kind, 1).save_checkpoint(plain)
    ran = tmp_path / "ran.ckpt"
    ml.fit(_trainer(kind, 1), X, y, epochs=1, batch_size=4, seed=9, checkpoint=ran)
    other_X, _ = _data(rng, 30)
    cases = [
        (plain, {}, "holds no fit record"),
        (ran, dict(batch_size=5), "its batch_size is 4, this call's 5"),
        (ran, dict(seed=10), "its seed is 9, this call's 10"),
        (ran, dict(X=other_X), "its data_sha256 is"),
        (ran, dict(val=(X, y)), "its val is None"),
    ]
    for path, change, text in cases:
        files = {p: p.read_bytes() for p in tmp_path.iterdir()}
        trainer = _trainer(kind, 2)
        before = trainer.state_hash()
        kwargs = dict(X=X, y=y, epochs=2, batch_size=4, seed=9, checkpoint=path)
        kwargs.update(change)
        with pytest.raises(ValueError, match="fit: ") as info:
            ml.fit(trainer, kwargs.pop("X"), kwargs.pop("y"), **kwargs)
        assert text in str(info.value)
        assert trainer.state_hash() == before
        assert {p: p.read_bytes() for p in tmp_path.iterdir()} == files
    os.remove(f"{ran}.fit-history.json")
    with pytest.raises(ValueError, match="history .* cannot be read"):
        ml.fit(_trainer(kind, 2), X, y, epochs=2, batch_size=4, seed=9, checkpoint=ran)


def test_fit_runs_without_numpy():
    out = run_python(
        "import mojolearn as ml, random\n"
        "r = random.Random(1)\n"
        "X = ml.Array.from_list([[r.random() for _ in range(8)] for _ in range(30)])\n"
        "y = ml.Array.from_list([r.randrange(3) for _ in range(30)], '<i4')\n"
        "t = ml.MLPTrainer([8, 4, 3], seed=0, data_schedule={'s': 0})\n"
        "h = ml.fit(t, X, y, epochs=2, batch_size=7, val=(X, y), patience=1, seed=0)\n"
        "import sys; print(len(h), 'numpy' in sys.modules)\n",
        block_numpy=True,
    )
    assert out.split() == ["2", "False"]


@pytest.mark.parametrize("kind", TRAINERS)
def test_a_checkpoint_with_the_record_as_its_whole_schedule_continues(kind, tmp_path):
    # Checkpoints written before the record moved under "fit" held it as the whole schedule.
    rng = random.Random()
    X, y = _data(rng, 30)
    straight = _trainer(kind, 4)
    ml.fit(straight, X, y, epochs=2, batch_size=4, seed=5)
    path = tmp_path / "old.ckpt"
    ml.fit(_trainer(kind, 4), X, y, epochs=1, batch_size=4, seed=5, checkpoint=path)
    old = type(straight).from_checkpoint(path)
    old.data_schedule = old.data_schedule["fit"]  # the layout before issue 36
    old.save_checkpoint(path)
    cont = _trainer(kind, 4)
    history = ml.fit(cont, X, y, epochs=2, batch_size=4, seed=5, checkpoint=path)
    assert [h["epoch"] for h in history] == [1, 2]
    assert _state_bits(cont) == _state_bits(straight)
    assert cont.data_schedule == {"fit": straight.data_schedule["fit"]}
