"""Round 4 (issue 34), the fit and Batches rows: a NaN/inf in `fit`'s X or val refused up front
naming the argument, row and column, with nothing changed (R18_d1); Batches showing writes made
between epochs for every input kind (R18_d8); a custom-schedule resume whose message says what
works, followed to an exact resume (R18_d9); a junk history side file refused by name
(R18_x_history). Each test failed at e874c97."""

import array
import json
import math
import os
import random

import mojolearn as ml
import pytest
from mojolearn import Array, Batches
from mojolearn._mlp import batches as _mlp_batches

from ._util import record

BAD_VALUES = (math.nan, math.inf, -math.inf)


def _trainer(kind, seed=1):
    if kind == "small":
        return ml.SmallMLPTrainer(*ml.init_small_mlp(seed), data_schedule={"seed": 0}, lr=1e-2)
    return ml.MLPTrainer([8, 12, 3], seed=seed, data_schedule={"seed": 0}, lr=1e-2)


def _rows(rng, n, width=8):
    return [[rng.uniform(-2, 2) for _ in range(width)] for _ in range(n)]


def _labels(rng, n):
    return Array.from_list([rng.randrange(3) for _ in range(n)], "<i4")


def _input_kinds():
    """The kinds of X to try: Array always, NumPy and torch where installed (the NumPy-free
    pass runs the rest)."""
    kinds = {"array": Array.from_list}
    try:
        import numpy as np

        kinds["numpy"] = lambda rows: np.array(rows, dtype=np.float32)
        import torch

        kinds["torch"] = lambda rows: torch.tensor(rows, dtype=torch.float32)
    except ImportError:
        pass
    return kinds


def _snapshot(trainer, folder):
    files = {p: p.read_bytes() for p in folder.iterdir()}
    return trainer.state_hash(), trainer.step_, json.dumps(trainer.data_schedule), files


# -- R18_d1: a NaN / inf in X or val, refused before the first step ----------------------------


def test_a_non_finite_x_or_val_is_refused_up_front_naming_argument_row_and_column(tmp_path):
    rng = random.Random()
    n, m = 40, 12
    cases = held = 0
    for kind, as_kind in _input_kinds().items():
        for value in BAD_VALUES:
            for where in ("X", "val"):
                for row in ("first", "last"):
                    X, Xv = _rows(rng, n), _rows(rng, m)
                    target = X if where == "X" else Xv
                    r = 0 if row == "first" else len(target) - 1
                    c = rng.randrange(8)
                    target[r][c] = value
                    folder = tmp_path / f"{kind}-{value}-{where}-{row}"
                    folder.mkdir()
                    trainer = _trainer(rng.choice(("small", "mlp")))
                    before = _snapshot(trainer, folder)
                    cases += 1
                    with pytest.raises(ValueError) as info:
                        ml.fit(
                            trainer,
                            as_kind(X),
                            _labels(rng, n),
                            val=(as_kind(Xv), _labels(rng, m)),
                            epochs=3,
                            batch_size=4,
                            seed=rng.randrange(1 << 64),
                            checkpoint=folder / "run.ckpt",
                        )
                    text = str(info.value)
                    want = f"fit: {where} must hold finite values"
                    assert text.startswith(want), text
                    assert f"row {r}, column {c} is {value!r}" in text, text
                    assert _snapshot(trainer, folder) == before
                    held += 1
    # A checkpoint to resume: the refusal comes before it is loaded (trainer and file kept).
    X, Xv = _rows(rng, n), _rows(rng, m)
    y, yv = _labels(rng, n), _labels(rng, m)
    folder = tmp_path / "resume"
    folder.mkdir()
    path = folder / "run.ckpt"
    ml.fit(_trainer("mlp"), Array.from_list(X), y, epochs=1, batch_size=4, seed=3,
           val=(Array.from_list(Xv), yv), checkpoint=path)  # fmt: skip
    for value in BAD_VALUES:
        for where in ("X", "val"):
            bad_X, bad_Xv = [r[:] for r in X], [r[:] for r in Xv]
            (bad_X if where == "X" else bad_Xv)[-1][7] = value
            trainer = _trainer("mlp", 2)
            before = _snapshot(trainer, folder)
            cases += 1
            with pytest.raises(ValueError, match=f"fit: {where} must hold finite values"):
                ml.fit(trainer, Array.from_list(bad_X), y, epochs=2, batch_size=4, seed=3,
                       val=(Array.from_list(bad_Xv), yv), checkpoint=path)  # fmt: skip
            assert _snapshot(trainer, folder) == before
            held += 1
    record("R18_d1", cls="state half-applied",
           what="fit refuses a NaN/inf in X or val before any step, naming argument, row, column",
           cases=cases, held=held)  # fmt: skip
    assert held == cases


def test_the_finite_check_is_one_scan_per_array_not_per_epoch(monkeypatch):
    rng = random.Random()
    calls = []
    real = _mlp_batches.all_finite
    monkeypatch.setattr(
        _mlp_batches, "all_finite", lambda a, name: calls.append(name) or real(a, name)
    )
    X, y = Array.from_list(_rows(rng, 20)), _labels(rng, 20)
    ml.fit(_trainer("mlp"), X, y, epochs=5, batch_size=4, seed=0, val=(X, y))
    assert calls == ["X", "val[0]"]


# -- R18_d8: writes between epochs show in the next epoch, for every input kind ----------------


def _kinds():
    """(name, X, y, write_x, relabel, shows_within_epoch): X (4, 2) float32 rows 0..7, y
    labels 0..3, in each accepted kind, with a way to write X[2, 1] and y[2] in place."""
    rows = [[float(2 * i), float(2 * i + 1)] for i in range(4)]
    out = []

    def setter(obj):
        def write(i, j, v):
            obj[i, j] = v

        return write

    def set_label(obj):
        def write(i, v):
            obj[i] = v

        return write

    a = Array.from_list(rows)
    ya = Array.from_list([0, 1, 2, 3], "<i4")
    out.append(("Array", a, ya, setter(a), set_label(ya), True))
    raw = array.array("f", [v for r in rows for v in r])
    mv = memoryview(raw).cast("B").cast("f", (4, 2))
    labels = array.array("i", [0, 1, 2, 3])
    out.append(("memoryview+array.array", mv, labels, lambda i, j, v: mv.__setitem__((i, j), v),
                set_label(labels), True))  # fmt: skip
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        xn = np.array(rows, dtype=np.float32)
        yn = np.arange(4, dtype=np.int32)
        out.append(("numpy", xn, yn, setter(xn), set_label(yn), True))
        xs = np.asfortranarray(np.array(rows, dtype=np.float32))  # strided: copied per iter()
        ys = np.arange(4, dtype=np.int64)
        out.append(("numpy strided, int64", xs, ys, setter(xs), set_label(ys), False))

        class Producer:  # a __dlpack__ producer that is no buffer
            def __init__(self, arr):
                self.arr = arr

            def __dlpack__(self, **kwargs):
                return self.arr.__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return self.arr.__dlpack_device__()

        xd, yd = np.array(rows, dtype=np.float32), np.arange(4, dtype=np.int32)
        out.append(("__dlpack__", Producer(xd), Producer(yd), setter(xd), set_label(yd), True))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        for dtype in (torch.int64, torch.int32):
            xt = torch.tensor(rows, dtype=torch.float32)
            yt = torch.arange(4, dtype=dtype)
            out.append((f"torch, {dtype}", xt, yt, setter(xt), set_label(yt), False))
    return out


def _epoch(batches):
    return [(xb.tolist(), yb.tolist()) for xb, yb in batches]


def test_writes_between_epochs_show_in_the_next_epoch_for_every_input_kind():
    cases = held = 0
    for name, X, y, write_x, relabel, _ in _kinds():
        for shuffle in (False, True):
            batches = Batches(X, y, 4, seed=5, shuffle=shuffle)
            first = _epoch(batches)
            write_x(2, 1, 100.0)
            relabel(2, 0)
            second = _epoch(batches)
            cases += 1
            rows = {tuple(r): lab for xb, yb in second for r, lab in zip(xb, yb)}
            ok = rows.get((4.0, 100.0)) == 0 and (4.0, 5.0) not in rows
            # Nothing else moved: the other rows and labels as before.
            before = {tuple(r): lab for xb, yb in first for r, lab in zip(xb, yb)}
            ok = ok and {k: v for k, v in rows.items() if k[0] != 4.0} == {
                k: v for k, v in before.items() if k[0] != 4.0
            }
            held += ok
            assert ok, (name, shuffle, first, second)
    # Within an epoch: the kinds read in place show a write at once, the copied ones at the
    # next iter() (as documented).
    for name, X, y, write_x, _, within in _kinds():
        batches = Batches(X, y, 1, seed=0, shuffle=False)
        it = iter(batches)
        next(it)
        write_x(3, 0, -7.0)
        cases += 1
        seen = [xb.tolist() for xb, _ in it][-1][0][0]
        ok = seen == (-7.0 if within else 6.0)
        held += ok
        assert ok, (name, seen)
    record("R18_d8", cls="doc untrue",
           what="Batches shows writes between epochs for every input kind, as documented",
           cases=cases, held=held)  # fmt: skip
    assert held == cases


def test_a_torch_source_resized_between_epochs_is_refused_at_the_next_iter():
    torch = pytest.importorskip("torch")
    X = torch.zeros(6, 2)
    batches = Batches(X, torch.arange(6), 3, seed=0)
    _epoch(batches)
    X.resize_(8, 2)
    with pytest.raises(ValueError, match=r"X changed shape since the Batches was made"):
        _epoch(batches)
    assert batches.state()["epoch"] == 1 and batches.state()["batch"] == 0


# -- R18_d9: a custom schedule's resume message says what works --------------------------------


class Decay:
    def lr_at(self, t):
        return 0.02 * 0.95**t


class Other:
    def lr_at(self, t):
        return 0.01


def test_a_custom_schedule_resume_says_set_trainer_lr_schedule_and_that_resumes_exactly(tmp_path):
    rng = random.Random()
    X, y = Array.from_list(_rows(rng, 30)), _labels(rng, 30)
    val = (Array.from_list(_rows(rng, 9)), _labels(rng, 9))
    cases = held = 0
    for kind in ("small", "mlp"):
        for have in (None, Other()):
            whole = _trainer(kind)
            whole.lr_schedule = Decay()
            want = ml.fit(whole, X, y, epochs=4, batch_size=7, seed=11, val=val)
            path = tmp_path / f"{kind}-{type(have).__name__}.ckpt"
            cut = _trainer(kind)
            cut.lr_schedule = Decay()
            ml.fit(cut, X, y, epochs=2, batch_size=7, seed=11, val=val, checkpoint=path)
            trainer = _trainer(kind, 7)
            if have is not None:
                trainer.lr_schedule = have
            before = _snapshot(trainer, tmp_path)
            cases += 1
            with pytest.raises(ValueError) as info:
                ml.fit(trainer, X, y, epochs=4, batch_size=7, seed=11, val=val, checkpoint=path)
            text = str(info.value)
            assert "set trainer.lr_schedule = <the same" in text, text
            assert "before calling fit" in text and "pass lr_schedule=" not in text, text
            assert _snapshot(trainer, tmp_path) == before
            trainer.lr_schedule = Decay()  # what the message says
            got = ml.fit(trainer, X, y, epochs=4, batch_size=7, seed=11, val=val,
                         checkpoint=path)  # fmt: skip
            ok = got == want and trainer.state_hash() == whole.state_hash()
            held += ok
            assert ok, kind
    record("R18_d9", cls="misleading message",
           what="fit's custom-schedule resume message says what works; following it resumes",
           cases=cases, held=held)  # fmt: skip
    assert held == cases


# -- R18_x_history: a junk history side file is refused ----------------------------------------


def _junk(history):
    """(name, bytes) of history files that fit did not write for this run (2 epochs, val)."""
    good = json.dumps(history)

    def edit(i, key, value):
        h = json.loads(good)
        h[i][key] = value
        return json.dumps(h).encode()

    def without(i, key):
        h = json.loads(good)
        del h[i][key]
        return json.dumps(h).encode()

    return [
        ("not JSON", b"epoch,step,loss\n1,4,0.5\n"),
        ("truncated", good.encode()[: len(good) // 2]),
        ("empty", b""),
        ("a dict", json.dumps({"history": history}).encode()),
        ("an empty list", b"[]"),
        ("a list of numbers", b"[1, 2]"),
        ("too many entries", json.dumps(history + history[-1:] * 2).encode()),
        ("epochs swapped", json.dumps(history[::-1]).encode()),
        ("epoch numbers off", edit(1, "epoch", 3)),
        ("epoch a string", edit(0, "epoch", "1")),
        ("step a float", edit(0, "step", 4.0)),
        ("step of another run", edit(1, "step", history[1]["step"] + 1)),
        ("loss a string", edit(0, "loss", "0.5")),
        ("loss NaN", edit(0, "loss", math.nan)),
        ("loss null", edit(1, "loss", None)),
        ("improved an int", edit(0, "improved", 1)),
        (
            "val_loss changed at the best epoch",
            edit(history[-1]["improved"] and 1 or 0, "val_loss", 123.5),
        ),  # fmt: skip
        ("a key missing", without(1, "val_accuracy")),
        ("an extra key", edit(0, "note", "hi")),
        ("entries of lists", json.dumps([list(e.values()) for e in history]).encode()),
    ]


def test_a_junk_history_side_file_is_refused_naming_it(tmp_path):
    rng = random.Random()
    X, y = Array.from_list(_rows(rng, 24)), _labels(rng, 24)
    val = (Array.from_list(_rows(rng, 6)), _labels(rng, 6))
    path = tmp_path / "run.ckpt"
    history = ml.fit(_trainer("mlp"), X, y, epochs=2, batch_size=5, seed=4, val=val,
                     checkpoint=path)  # fmt: skip
    side = f"{path}.fit-history.json"
    cases = held = 0
    for what, junk in _junk(history):
        with open(side, "wb") as f:
            f.write(junk)
        trainer = _trainer("mlp", 3)
        before = _snapshot(trainer, tmp_path)
        cases += 1
        with pytest.raises(ValueError) as info:
            ml.fit(trainer, X, y, epochs=3, batch_size=5, seed=4, val=val, checkpoint=path)
        text = str(info.value)
        ok = text.startswith("fit: the checkpoint's history") and os.path.basename(side) in text
        ok = ok and _snapshot(trainer, tmp_path) == before
        held += ok
        assert ok, (what, text)
    # The real history still resumes (so the refusals above were about the junk).
    with open(side, "w") as f:
        json.dump(history, f)
    assert ml.fit(_trainer("mlp", 3), X, y, epochs=2, batch_size=5, seed=4, val=val,
                  checkpoint=path) == history  # fmt: skip
    record("R18_x_history", cls="silent wrong result",
           what="fit refuses a junk history side file by name, nothing changed",
           cases=cases, held=held)  # fmt: skip
    assert held == cases
