"""`mojolearn.TextData` (issue 38): the character vocabulary, nanoGPT's split, windows drawn
by the recipe of docs/ARITHMETIC.md "Text windows" (written out again here), exact resume
through `state()`, refusals that change nothing, and a tiny `nn.gpt` trained on its batches."""

import hashlib
import json
import pathlib
import random

import mojolearn as ml
import pytest
from mojolearn import nn
from mojolearn._mlp.rng import SplitMix64

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 3


def _starts(seed, split, k, count, length, t):
    """The pinned draw: batch k of a split, its own SplitMix64 seeded from SHA-256 of the tag,
    `count` starts as randbelow(length - t) (offsets into the split)."""
    tag = f"mojolearn.text-windows.v1:{seed}:{split}:{k}".encode("ascii")
    draw = SplitMix64(int.from_bytes(hashlib.sha256(tag).digest()[:8], "little"))
    return [draw.randbelow(length - t) for _ in range(count)]


def _data(text=TEXT, **kw):
    kw = {"block_size": 8, "batch_size": 5, "seed": 3, **kw}
    return ml.TextData.from_string(text, **kw)


def test_the_vocabulary_is_the_texts_characters_sorted():
    text = "zebra Ωmega\tcafé\n" + TEXT
    data = _data(text)
    assert data.vocab == "".join(sorted(set(text))) and data.vocab_size == len(set(text))
    assert list(data.vocab) == sorted(data.vocab)
    ids = data.encode(text)
    assert [data.vocab[i] for i in ids] == list(text)
    assert data.decode(ids) == text
    assert data.decode(ml.Array.from_list(ids[:7], "<i8")) == text[:7]


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5])
def test_windows_are_the_pinned_draw_in_nanogpts_split(fraction):
    """The first int(n * (1 - f)) ids train, the rest validate; batch k's rows are the windows
    at the recipe's starts, Y the next characters, each split's counter its own."""
    seed, t, b = random.randrange(1 << 64), 8, 5
    data = _data(seed=seed, val_fraction=fraction)
    n = len(TEXT)
    n_train = int(n * (1.0 - fraction))
    assert (data.n_train, data.n_val) == (n_train, n - n_train)
    ids = data.encode(TEXT)
    for split, lo, hi in (("train", 0, n_train), ("val", n_train, n)):
        for k in range(3):
            X, Y = data.batch(split)
            assert X.shape == Y.shape == (b, t) and X.dtype == Y.dtype == "<i4"
            starts = [lo + s for s in _starts(seed, split, k, b, hi - lo, t)]
            assert X.tolist() == [ids[s : s + t] for s in starts]
            assert Y.tolist() == [ids[s + 1 : s + t + 1] for s in starts]
            assert all(lo <= s and s + t + 1 <= hi for s in starts)
    assert data.state()["train_batches"] == data.state()["val_batches"] == 3


def test_a_split_of_exactly_one_window_gives_that_window_and_starts_cover_the_range():
    text = "abcdefghij" * 10  # 100 characters: 90 train, 10 validate
    data = _data(text, block_size=9, batch_size=4)
    for _ in range(3):
        X, Y = data.batch("val")
        assert data.decode(X.tolist()[0]) == text[90:99] and data.decode(Y.tolist()[3]) == text[91:]
    wide = _data(text, block_size=2, batch_size=64)
    seen = {tuple(row) for _ in range(4) for row in wide.batch()[0].tolist()}
    assert len(seen) == 10  # every start in [0, 87] is one of 10 windows of the cycle


def test_the_same_seed_gives_the_same_batches_and_val_draws_leave_train_alone():
    a, b, c = _data(seed=7), _data(seed=7), _data(seed=8)
    first = [x.tolist() for x in a.batch()]
    assert [x.tolist() for x in b.batch()] == first
    assert [x.tolist() for x in c.batch()] != first
    a.batch("val")
    a.batch("val")
    assert [x.tolist() for x in a.batch()] == [x.tolist() for x in b.batch()]


def test_from_state_resumes_bit_for_bit_mid_run(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(TEXT.encode("utf-8"))
    data = ml.TextData(path, block_size=6, batch_size=3, seed=11)
    for split in ("train", "val", "train", "train", "val"):
        data.batch(split)
    state = json.loads(json.dumps(data.state()))
    assert len(json.dumps(state)) < 1024
    assert state["train_batches"] == 3 and state["val_batches"] == 2
    resumed = [
        ml.TextData.from_state(str(path), state),
        ml.TextData.from_state(None, state, text=TEXT),
    ]
    for split in ("val", "train", "train", "val"):
        want = [x.tolist() for x in data.batch(split)]
        for other in resumed:
            assert [x.tolist() for x in other.batch(split)] == want
    assert resumed[0].state() == resumed[1].state() == data.state()


def test_from_state_refuses_another_text_or_a_bad_state_by_field():
    data = _data()
    data.batch()
    state = data.state()
    for bad, match in [
        ({**state, "sha256": "0" * 64}, r"state\['sha256'\].*not the text"),
        ({k: v for k, v in state.items() if k != "seed"}, r"state\['seed'\] is missing"),
        ({**state, "epoch": 0}, r"state\['epoch'\] is not a TextData field"),
        ({**state, "train_batches": -1}, r"state\['train_batches'\]"),
        ({**state, "block_size": 0}, r"state: block_size must be an int >= 1"),
        ({**state, "val_fraction": 1}, "state: val_fraction must be a float"),
        ({**state, "schema": "mojolearn.batches.v1"}, r"state\['schema'\]"),
        ([], "must be a dict"),
    ]:
        with pytest.raises(ValueError, match=match):
            ml.TextData.from_state(None, bad, text=TEXT)
    with pytest.raises(ValueError, match=r"state\['chars'\]"):
        ml.TextData.from_state(None, state, text=TEXT + "a")
    with pytest.raises(TypeError, match="path=None and text="):
        ml.TextData.from_state(None, state)


def test_a_file_is_read_as_utf8_bytes_and_other_bytes_are_refused_by_offset(tmp_path):
    path = tmp_path / "crlf.txt"
    path.write_bytes(("é\r\n" * 40).encode("utf-8"))
    data = ml.TextData(pathlib.Path(path), block_size=3, batch_size=2)
    assert data.vocab == "\n\ré" and data.n_train + data.n_val == 120
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"abcdefgh" * 10 + b"caf\xe9" + b"abcdefgh" * 10)
    with pytest.raises(ValueError, match=r"is not UTF-8: byte offset 83 \(0xe9\)"):
        ml.TextData(bad, block_size=3, batch_size=2)
    with pytest.raises(TypeError, match="from_string"):
        ml.TextData(b"abc", block_size=3, batch_size=2)


@pytest.mark.parametrize(
    "kw, error, match",
    [
        ({"block_size": 0}, ValueError, "block_size must be an int >= 1, got 0"),
        ({"block_size": 2.0}, TypeError, "block_size must be an int"),
        ({"batch_size": True}, TypeError, "batch_size must be an int"),
        ({"batch_size": -3}, ValueError, "batch_size must be an int >= 1, got -3"),
        ({"seed": -1}, ValueError, "seed must be an int in"),
        ({"seed": 1 << 64}, ValueError, "seed must be an int in"),
        ({"seed": "0"}, TypeError, "seed must be an int in"),
        ({"val_fraction": 0.0}, ValueError, "val_fraction must be a float in"),
        ({"val_fraction": 1.0}, ValueError, "val_fraction must be a float in"),
        ({"val_fraction": float("nan")}, ValueError, "val_fraction"),
        ({"val_fraction": "0.1"}, TypeError, "val_fraction must be a float"),
        (
            {"block_size": 24},
            ValueError,
            r"the val split has 24 characters .* block_size \+ 1 = 25",
        ),
        ({"val_fraction": 0.99}, ValueError, "the train split has 2 characters"),
    ],
)
def test_bad_arguments_are_refused_by_name(kw, error, match):
    text = "abcdefghij" * 24  # 240 characters: 216 train, 24 validate
    with pytest.raises(error, match=match):
        _data(text, **kw)


def test_encode_decode_and_batch_refuse_by_position_and_change_nothing():
    data = _data()
    data.batch()
    before = data.state()
    with pytest.raises(ValueError, match=r"text\[3\] = 'Z' is not in the vocabulary"):
        data.encode("FirZt")
    with pytest.raises(TypeError, match="text must be a str"):
        data.encode(b"First")
    with pytest.raises(ValueError, match=rf"ids\[1\] = {data.vocab_size} is not a token id"):
        data.decode([0, data.vocab_size])
    with pytest.raises(TypeError, match=r"ids\[0\] must be an int"):
        data.decode([1.0])
    with pytest.raises(ValueError, match="split must be 'train' or 'val'"):
        data.batch("test")
    with pytest.raises(ValueError, match=r"text\[2\] = '\\ud800' is a lone surrogate"):
        _data("ab\ud800" + TEXT)
    assert data.state() == before


def test_a_tiny_gpt_learns_textdatas_batches_and_samples_its_vocabulary():
    data = _data("the cat sat on the mat. " * 20, block_size=12, batch_size=8, seed=0)
    model = nn.gpt(data.vocab_size, data.block_size, 2, 2, 16)
    trainer = ml.Trainer(model, input_shape=(12,), loss="cross_entropy", seed=5, lr=1e-2)
    trainer.data_schedule = data.state()
    losses = [trainer.train_step(*data.batch())["loss"] for _ in range(60)]
    trainer.data_schedule = data.state()
    assert trainer.data_schedule["train_batches"] == 60
    assert losses[-1] < 0.2 * losses[0], losses[::10]
    val = trainer.evaluate(*data.batch("val"))
    assert val["loss"] < 0.2 * losses[0], val
    out = data.decode(trainer.generate(data.encode("the c"), 30, seed=1))
    assert len(out) == 35 and set(out) <= set(data.vocab)
    greedy = data.decode(trainer.generate(data.encode("the c"), 18, top_k=1))
    assert greedy.startswith("the cat sat on the")
