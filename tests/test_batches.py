"""mojolearn.Batches: the documented epoch order (checked against a pure-Python rendering of
docs/ARITHMETIC.md's recipe, written here from the text, not imported), exact resume mid-epoch
through JSON, drop_last, shuffle=False, every accepted input kind, and the refusals."""

import array
import hashlib
import json
import random

import mojolearn as ml
import pytest
from mojolearn import Array, Batches
from mojolearn._mlp.state import check_schedule

MASK = (1 << 64) - 1


def _reference_order(seed, epoch, n):
    """ARITHMETIC.md "Batches": SplitMix64 seeded with the first 8 bytes (little-endian) of
    SHA-256("mojolearn.data-order.v1:{seed}:{epoch}"), Fisher–Yates from the end with
    rejection-sampled draws."""
    digest = hashlib.sha256(f"mojolearn.data-order.v1:{seed}:{epoch}".encode("ascii")).digest()
    state = int.from_bytes(digest[:8], "little")
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        limit = (1 << 64) // bound * bound
        while True:
            state = (state + 0x9E3779B97F4A7C15) & MASK
            z = state
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            z ^= z >> 31
            if z < limit:
                break
        j = z % bound
        order[i], order[j] = order[j], order[i]
    return order


def _data(rng, n, features):
    """X with each row's values distinct to that row; y = the row numbers (so yb names rows)."""
    X = Array.from_list([[rng.uniform(-1, 1) for _ in range(features)] for _ in range(n)])
    return X, Array.from_list(list(range(n)), "<i4")


def _rows(X, picks):
    return b"".join(X[r].tobytes() for r in picks)


def test_epoch_order_is_the_documented_recipe():
    rng = random.Random()
    for _ in range(8):
        n, size = rng.randrange(1, 60), rng.randrange(1, 9)
        seed = rng.choice([0, rng.randrange(1 << 64), (1 << 64) - 1])
        X, y = _data(rng, n, 3)
        batches = Batches(X, y, size, seed=seed)
        for epoch in range(3):
            assert batches.epoch == epoch
            got = [(Xb.tobytes(), yb.tolist()) for Xb, yb in batches]
            want = _reference_order(seed, epoch, n)
            assert [r for _, yb in got for r in yb] == want
            assert [len(yb) for _, yb in got] == [min(size, n - k) for k in range(0, n, size)]
            assert b"".join(x for x, _ in got) == _rows(X, want)


def test_batches_are_owned_float32_and_int32():
    rng = random.Random()
    X, _ = _data(rng, 10, 4)
    y = Array.from_list([rng.randrange(3) for _ in range(10)], "<i8")
    for Xb, yb in Batches(X, y, 4, seed=1):
        assert Xb.dtype == "<f4" and Xb.shape[1:] == (4,) and yb.dtype == "<i4"
        assert not isinstance(Xb._owner, Array) and not isinstance(yb._owner, Array)
    assert len(Batches(X, y, 4, seed=1)) == 3 and len(Batches(X, y, 5, seed=1)) == 2


def test_resume_mid_epoch_gives_the_same_batches_bit_for_bit():
    rng = random.Random()
    for _ in range(6):
        n, size = rng.randrange(2, 50), rng.randrange(1, 8)
        seed, drop_last = rng.randrange(1 << 64), rng.random() < 0.5 and size <= n
        shuffle = rng.random() < 0.8
        X, y = _data(rng, n, 5)
        whole = Batches(X, y, size, seed=seed, shuffle=shuffle, drop_last=drop_last)
        want = [(a.tobytes(), b.tobytes()) for _ in range(3) for a, b in whole]
        cut = rng.randrange(1, len(want))
        first = Batches(X, y, size, seed=seed, shuffle=shuffle, drop_last=drop_last)
        got = []
        while len(got) < cut:
            for a, b in first:
                got.append((a.tobytes(), b.tobytes()))
                if len(got) == cut:
                    break
        saved = json.loads(json.dumps(first.state()))
        # A fresh copy of the data, as a resumed process would load it.
        X2, y2 = Array.from_list(X.tolist()), Array.from_list(y.tolist(), "<i4")
        resumed = Batches.from_state(X2, y2, saved)
        assert resumed.state() == saved
        while len(got) < len(want):
            got += [(a.tobytes(), b.tobytes()) for a, b in resumed]
        assert got == want


def test_drop_last():
    rng = random.Random()
    X, y = _data(rng, 23, 2)
    batches = Batches(X, y, 5, seed=9, drop_last=True)
    assert len(batches) == 4
    for epoch in range(2):
        got = [yb.tolist() for _, yb in batches]
        assert [len(b) for b in got] == [5] * 4
        assert [r for b in got for r in b] == _reference_order(9, epoch, 23)[:20]
    assert len(Batches(X, y, 23, seed=0, drop_last=True)) == 1


def test_shuffle_off_visits_rows_in_order_every_epoch():
    rng = random.Random()
    X, y = _data(rng, 11, 3)
    batches = Batches(X, y, 4, seed=5, shuffle=False)
    for epoch in range(3):
        assert batches.epoch == epoch
        got = [(Xb.tobytes(), yb.tolist()) for Xb, yb in batches]
        assert [yb for _, yb in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
        assert b"".join(x for x, _ in got) == X.tobytes()
    assert batches.state()["epoch"] == 3


def test_iter_after_break_continues_the_epoch():
    rng = random.Random()
    X, y = _data(rng, 10, 2)
    batches = Batches(X, y, 3, seed=2)
    seen = []
    for _, yb in batches:
        seen.append(yb.tolist())
        break
    assert batches.state()["batch"] == 1 and batches.epoch == 0
    seen += [yb.tolist() for _, yb in batches]
    assert [r for b in seen for r in b] == _reference_order(2, 0, 10)
    assert len(seen) == 4 and batches.epoch == 1 and batches.state()["batch"] == 0


def test_every_input_kind_gives_the_same_batches():
    rng = random.Random()
    X, y = _data(rng, 9, 3)
    want = [(a.tobytes(), b.tobytes()) for a, b in Batches(X, y, 4, seed=7)]
    raw = array.array("f", X.tobytes())
    kinds = [
        (memoryview(raw).cast("B").cast("f", (9, 3)), array.array("q", range(9))),
        (Array.from_buffer(raw).reshape(9, 3), memoryview(array.array("i", range(9)))),
    ]
    try:
        import numpy as np

        kinds.append((np.asarray(X), np.arange(9, dtype=np.int64)))
        kinds.append((np.asfortranarray(np.asarray(X)), np.arange(9, dtype=np.uint8)))
    except ImportError:
        pass
    try:
        import torch

        kinds.append((torch.from_dlpack(X), torch.arange(9)))
    except ImportError:
        pass
    for Xk, yk in kinds:
        got = [(a.tobytes(), b.tobytes()) for a, b in Batches(Xk, yk, 4, seed=7)]
        assert got == want, type(Xk).__name__


def test_state_is_small_json_that_fits_a_data_schedule():
    X, y = _data(random.Random(), 7, 2)
    state = Batches(X, y, 3, seed=(1 << 64) - 1).state()
    encoded = json.dumps(state, sort_keys=True, separators=(",", ":"))
    assert len(encoded) < 1024 and json.loads(encoded) == state
    assert check_schedule(state) == state
    t = ml.MLPTrainer([2, 4, 3], seed=0, data_schedule=state)
    assert t.data_schedule == state


def test_a_training_run_resumes_from_its_checkpoint_exactly(tmp_path):
    """The user's day: batches and trainer checkpointed together mid-epoch, then resumed."""
    rng = random.Random()
    n, sizes = 29, [5, 8, 3]
    X = Array.from_list([[rng.uniform(-1, 1) for _ in range(5)] for _ in range(n)])
    y = Array.from_list([rng.randrange(3) for _ in range(n)], "<i4")

    def run(trainer, batches, steps, save_at=None):
        done = 0
        while done < steps:
            for Xb, yb in batches:
                trainer.train_step(Xb, yb)
                trainer.data_schedule = batches.state()
                done += 1
                if done == save_at:
                    trainer.save_checkpoint(tmp_path / "ckpt")
                if done == steps:
                    break
        return trainer.state_hash()

    make = lambda: ml.MLPTrainer(sizes, seed=4, data_schedule={"start": 1})
    want = run(make(), Batches(X, y, 4, seed=11), 20)
    run(make(), Batches(X, y, 4, seed=11), 9, save_at=9)  # 9 steps: mid-epoch (8 per epoch)
    resumed = ml.MLPTrainer.from_checkpoint(tmp_path / "ckpt")
    batches = Batches.from_state(X, y, resumed.data_schedule)
    assert batches.state()["epoch"] == 1 and batches.state()["batch"] == 1
    assert run(resumed, batches, 11) == want


@pytest.mark.parametrize(
    "make, error, pattern",
    [
        (lambda X, y: Batches(X, y, 0, seed=0), ValueError, r"batch_size must be an int >= 1"),
        (lambda X, y: Batches(X, y, 2.0, seed=0), TypeError, r"batch_size must be .* got float"),
        (lambda X, y: Batches(X, y, True, seed=0), TypeError, r"batch_size must be .* got bool"),
        (lambda X, y: Batches(X, y, 2, seed=-1), ValueError, r"Batches: seed must be an int"),
        (lambda X, y: Batches(X, y, 2, seed=1 << 64), ValueError, r"seed must be an int"),
        (lambda X, y: Batches(X, y, 2, seed="0"), TypeError, r"seed must be an int"),
        (lambda X, y: Batches(X, y, 2, seed=0, shuffle=1), TypeError, r"shuffle must be a bool"),
        (lambda X, y: Batches(X, y, 2, seed=0, drop_last=None), TypeError, r"drop_last must be"),
        (lambda X, y: Batches(X, y, 7, seed=0, drop_last=True), ValueError, r"leaves no batch"),
        (lambda X, y: Batches(X, y, 2), TypeError, r"seed"),
        (
            lambda X, y: Batches([[1.0, "a"]] * 6, y, 2, seed=0),
            TypeError,
            r"Batches: X must hold numbers, got str 'a'",
        ),
        (
            lambda X, y: Batches(Array.from_list([1e39] * 6, "<f8").reshape(6, 1), y, 2, seed=0),
            ValueError,
            r"Batches: X must fit in float32: example 0, element 0 is 1e\+39",
        ),
        (
            lambda X, y: Batches(X.reshape(12), y, 2, seed=0),
            ValueError,
            r"Batches: X must have shape \(n, ...\) with n >= 1 rows, got shape \(12,\)",
        ),
        (
            lambda X, y: Batches(Array((0, 2)), Array(0, "<i4"), 2, seed=0),
            ValueError,
            r"X must have shape \(n, ...\) with n >= 1 rows, got shape \(0, 2\)",
        ),
        (
            lambda X, y: Batches(X, memoryview(bytes(6)).cast("c"), 2, seed=0),
            TypeError,
            r"Batches: y must hold integers",
        ),
        (
            lambda X, y: Batches(X, Array(5, "<i4"), 2, seed=0),
            ValueError,
            r"y must have 6 rows to match X, got shape \(5,\)",
        ),
    ],
)
def test_refusals(make, error, pattern):
    X, y = _data(random.Random(), 6, 2)
    with pytest.raises(error, match=pattern):
        make(X, y)


def _state_variants():
    """(edit of a good state, pattern of the refusal): each names the field."""
    return [
        (lambda s: s.pop("epoch"), r"state\['epoch'\] is missing"),
        (lambda s: s.update(extra=1), r"state\['extra'\] is not a Batches field"),
        (lambda s: s.update(schema="other.v1"), r"state\['schema'\] must be"),
        (lambda s: s.update(n=11), r"state\['n'\] = 11 does not match X of shape \(10, 3\)"),
        (lambda s: s.update(features=4), r"state\['features'\] = 4 does not match X"),
        (lambda s: s.update(batch=3), r"state\['batch'\] must be in \[0, 3\)"),
        (lambda s: s.update(batch=-1), r"state\['batch'\] must be an int in \[0, "),
        (lambda s: s.update(epoch=True), r"state\['epoch'\] must be an int"),
        (lambda s: s.update(epoch=1.0), r"state\['epoch'\] must be an int"),
        (lambda s: s.update(batch_size=0), r"state\['batch_size'\] must be an int in \[1, "),
        (lambda s: s.update(seed=1 << 64), r"state\['seed'\] must be an int in \[0, "),
        (lambda s: s.update(shuffle="yes"), r"state\['shuffle'\] must be a bool"),
        (lambda s: s.update(drop_last=0), r"state\['drop_last'\] must be a bool"),
        (lambda s: s.update(batch_size=11, drop_last=True), r"leaves no batch"),
    ]


def test_from_state_refusals_name_the_field():
    X, y = _data(random.Random(), 10, 3)
    good = Batches(X, y, 4, seed=3)
    next(iter(good))
    for edit, pattern in _state_variants():
        state = good.state()
        edit(state)
        with pytest.raises(ValueError, match=pattern):
            Batches.from_state(X, y, state)
    with pytest.raises(ValueError, match="state must be a dict"):
        Batches.from_state(X, y, [good.state()])
    with pytest.raises(ValueError, match=r"y must have 10 rows"):
        Batches.from_state(X, Array(9, "<i4"), good.state())
    assert good.state()["batch"] == 1  # the source of the states never changed


def test_examples_of_any_rank_and_float_targets_batch_as_rows(seed):
    # (n, T, D) sequences with (n, T) labels, and (n, C, H, W) images with float32 (n, 1)
    # targets: each batch is the rows of the order, every axis kept (issue 35).
    rng = random.Random(seed)
    X = Array.from_list([[[rng.random() for _ in range(2)] for _ in range(3)] for _ in range(7)])
    y = Array.from_list([[rng.randrange(4) for _ in range(3)] for _ in range(7)], "<i4")
    seen = []
    for Xb, yb in Batches(X, y, 3, seed=seed % (1 << 64)):
        assert Xb.shape[1:] == (3, 2) and yb.shape == (Xb.shape[0], 3) and yb.dtype == "<i4"
        for xr, yr in zip(Xb.tolist(), yb.tolist()):
            i = X.tolist().index(xr)
            assert y.tolist()[i] == yr
            seen.append(i)
    assert sorted(seen) == list(range(7))
    images = Array.from_list([[[[float(i)] * 2] * 2] for i in range(5)])  # (5, 1, 2, 2)
    t = Array.from_list([[float(i) * 10] for i in range(5)])
    b = Batches(images, t, 2, seed=1)
    assert b.state()["features"] == 4
    for Xb, yb in b:
        assert yb.dtype == "<f4"
        assert [r[0][0][0] * 10 for r in Xb.tolist()] == [v[0] for v in yb.tolist()]
    again = Batches.from_state(images, t, b.state())
    assert [yb.tolist() for _, yb in again] == [
        yb.tolist() for _, yb in Batches.from_state(images, t, b.state())
    ]
