"""The command line's data layer: bundled wine data, CSV validation, split, standardization,
per-epoch order and resume position, the loss-history side file, progress output.

Pure Python (no binding): each test builds fresh random inputs from the `seed` fixture.
"""

import hashlib
import io
import json
import math
import random
import struct

import pytest
from mojolearn._mlp.rng import SplitMix64
from mojolearn.cli import data as _data
from mojolearn.cli import history as _history
from mojolearn.cli.progress import Progress


def _is_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0] == x


def _write_csv(tmp_path, text, name="d.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _random_csv(rng, rows, header=True, labels=("0", "1", "2"), label_at=8):
    lines = []
    names = [f"f{j}" for j in range(8)]
    names.insert(label_at, "label")
    if header:
        lines.append(",".join(names))
    for _ in range(rows):
        cells = [repr(rng.uniform(-100, 100)) for _ in range(8)]
        cells.insert(label_at, rng.choice(labels))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


# -- bundled data --------------------------------------------------------------------------


def test_bundled_wine_shape_split_and_hash():
    ds = _data.load()
    with open(_data.BUNDLED_FILE, "rb") as f:
        assert ds.sha256 == hashlib.sha256(f.read()).hexdigest()
    assert len(ds.features) == 178 and all(len(r) == 8 for r in ds.features)
    assert [ds.labels.count(c) for c in range(3)] == [59, 71, 48]
    test_counts = [sum(ds.labels[r] == c for r in ds.test_rows) for c in range(3)]
    assert test_counts == [59 // 5, 71 // 5, 48 // 5]
    assert (ds.n_train, ds.n_test) == (144, 34)
    assert not set(ds.train_rows) & set(ds.test_rows)
    assert sorted(ds.train_rows + ds.test_rows) == list(range(178))
    assert ds.train_rows == sorted(ds.train_rows) and ds.test_rows == sorted(ds.test_rows)


def test_bundled_features_standardized_on_train_rows_only():
    ds = _data.load()
    for j in range(8):
        col = [ds.features[r][j] for r in ds.train_rows]
        assert all(_is_f32(x) for x in col)
        mean = math.fsum(col) / len(col)
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in col) / len(col))
        assert abs(mean) < 1e-6 and abs(sd - 1) < 1e-6, (j, mean, sd)
    # The test rows were not used for the statistics: their mean is not forced to 0.
    test_means = [math.fsum(ds.features[r][j] for r in ds.test_rows) / ds.n_test for j in range(8)]
    assert max(abs(m) for m in test_means) > 1e-3


def test_bundled_columns_are_the_eight_most_separating():
    """The documented choice: the 8 attributes with the largest one-way ANOVA F on train."""
    with open(_data.BUNDLED_FILE) as f:
        lines = f.read().splitlines()[1:]
    raw = [[float(c) for c in line.split(",")[:13]] for line in lines]
    labels = [int(line.split(",")[13]) for line in lines]
    train, _ = _data.split_rows(labels)
    scores = {}
    for j, name in enumerate(_data.WINE_ATTRIBUTES):
        xs = [raw[r][j] for r in train]
        m = math.fsum(xs) / len(xs)
        groups = [[raw[r][j] for r in train if labels[r] == c] for c in range(3)]
        gm = [math.fsum(g) / len(g) for g in groups]
        ssb = math.fsum(len(g) * (mg - m) ** 2 for g, mg in zip(groups, gm))
        ssw = math.fsum((x - mg) ** 2 for g, mg in zip(groups, gm) for x in g)
        scores[name] = (ssb / 2) / (ssw / (len(xs) - 3))
    top = sorted(scores, key=scores.get, reverse=True)[:8]
    assert set(top) == set(_data.BUNDLED_COLUMNS)


def test_standardize_matches_numpy_within_rounding(seed):
    np = pytest.importorskip("numpy")
    rng = random.Random(seed)
    raw = [
        tuple(rng.uniform(-1e3, 1e3) * rng.choice((1e-3, 1, 1e3)) for _ in range(8))
        for _ in range(rng.randint(3, 60))
    ]
    train = sorted(rng.sample(range(len(raw)), rng.randint(2, len(raw))))
    got = np.array(_data.standardize(raw, train), dtype=np.float32)
    a = np.array(raw, dtype=np.float64)
    want = ((a - a[train].mean(0)) / a[train].std(0)).astype(np.float32)
    # Different summation orders in float64 may move the float32 result by one ulp at most.
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1, f"seed {seed}: max ulp distance {ulps.max()}"


def test_constant_training_feature_becomes_zero():
    raw = [(1.0,) * 7 + (float(i),) for i in range(10)]
    out = _data.standardize(raw, list(range(10)))
    assert all(row[:7] == (0.0,) * 7 for row in out)
    assert len({row[7] for row in out}) == 10


# -- split, order, position ----------------------------------------------------------------


def test_split_is_stratified_and_deterministic(seed):
    rng = random.Random(seed)
    labels = [rng.randrange(3) for _ in range(rng.randint(5, 400))]
    train, test = _data.split_rows(labels)
    assert _data.split_rows(list(labels)) == (train, test)
    for c in range(3):
        assert sum(labels[r] == c for r in test) == labels.count(c) // 5, f"seed {seed}"
    assert sorted(train + test) == list(range(len(labels)))


def test_epoch_order_follows_the_documented_recipe(seed):
    n = 1 + seed % 300
    for epoch in (0, 1, 7):
        digest = hashlib.sha256(f"mojolearn.data-order.v1:{seed}:{epoch}".encode()).digest()
        gen = SplitMix64(int.from_bytes(digest[:8], "little"))
        want = list(range(n))
        for i in range(n - 1, 0, -1):  # Fisher–Yates from the end
            j = gen.randbelow(i + 1)
            want[i], want[j] = want[j], want[i]
        assert _data.epoch_order(seed, epoch, n) == want, f"seed {seed} epoch {epoch}"
    if n > 3:
        assert _data.epoch_order(seed, 0, n) != _data.epoch_order(seed, 1, n)


def _random_dataset(rng, most_rows):
    """A Dataset of 10 to `most_rows` random rows (features in [-5, 5], classes 0..2)."""
    labels = [rng.randrange(3) for _ in range(rng.randint(10, most_rows))]
    raw = [tuple(rng.uniform(-5, 5) for _ in range(8)) for _ in labels]
    return _data.Dataset("t", "0" * 64, "label", [f"f{j}" for j in range(8)], raw, labels, "abc")


def test_batch_stream_visits_each_row_once_per_epoch(seed):
    rng = random.Random(seed)
    ds = _random_dataset(rng, 80)
    bs = rng.randint(1, 20)
    stream = _data.BatchStream(ds, seed, bs)
    per = _data.steps_per_epoch(ds.n_train, bs)
    for epoch in range(2):
        seen = []
        for k in range(per):
            x, y, rows = stream.next_batch()
            assert rows == (bs if k < per - 1 else ds.n_train - bs * (per - 1))
            assert len(x) == 8 * rows and len(y) == rows
            seen.extend(tuple(x[i * 8 : (i + 1) * 8]) for i in range(rows))
        assert sorted(seen) == sorted(ds.features[r] for r in ds.train_rows), f"seed {seed}"
        assert (stream.epoch, stream.cursor) == (epoch + 1, 0)


def test_stream_restarted_at_position_gives_the_same_batches(seed):
    rng = random.Random(seed)
    ds = _random_dataset(rng, 60)
    bs = rng.randint(1, 16)
    done = rng.randint(0, 40)
    whole = _data.BatchStream(ds, seed, bs)
    batches = [whole.next_batch() for _ in range(done + 10)]
    epoch, cursor = _data.position(done, ds.n_train, bs)
    resumed = _data.BatchStream(ds, seed, bs, epoch, cursor)
    for k in range(10):
        assert resumed.next_batch() == batches[done + k], f"seed {seed} step {done + k}"


# -- CSV loading and refusals --------------------------------------------------------------


def test_csv_with_header_string_labels_and_label_column(tmp_path, seed):
    rng = random.Random(seed)
    label_at = rng.randrange(9)
    text = _random_csv(rng, 40, labels=("pear", "apple", "fig"), label_at=label_at)
    ds = _data.load(_write_csv(tmp_path, text), "label")
    assert ds.class_names == ("apple", "fig", "pear")  # numbered in sorted order
    rows = [line.split(",") for line in text.splitlines()[1:]]
    assert [ds.class_names[y] for y in ds.labels] == [r[label_at] for r in rows]
    assert ds.label_column == "label" and len(ds.columns) == 8 and "label" not in ds.columns
    assert ds.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_csv_headerless_numeric_labels_last_column(tmp_path, seed):
    rng = random.Random(seed)
    text = _random_csv(rng, 25, header=False)
    ds = _data.load(_write_csv(tmp_path, text))
    assert ds.labels == [int(line.split(",")[8]) for line in text.splitlines()]
    ds2 = _data.load(_write_csv(tmp_path, text, "e.csv"), "9")
    assert ds2.labels == ds.labels and ds2.features == ds.features


BAD_CSVS = [
    # (description, text, expected substrings of the one-line message)
    (
        "wrong column count in a row",
        "a,b,c,d,e,f,g,h,label\n1,2,3,4,5,6,7,8,0\n1,2,3,4,5,6,7,0\n",
        ["row 3", "8 columns, expected 9"],
    ),
    (
        "wrong column count in the header",
        "a,b,c,d,e,f,g,label\n1,2,3,4,5,6,7,0\n",
        ["row 1", "8 columns, expected 9"],
    ),
    (
        "non-numeric cell",
        "a,b,c,d,e,f,g,h,label\n1,2,3,4,5,6,7,8,0\n1,2,x3,4,5,6,7,8,1\n",
        ["row 3", "column 3 ('c')", "'x3' is not a number"],
    ),
    (
        "NaN cell",
        "a,b,c,d,e,f,g,h,label\n1,2,3,4,5,6,7,8,0\n1,2,3,4,5,nan,7,8,1\n",
        ["row 3", "column 6 ('f')", "not a finite"],
    ),
    (
        "infinite cell",
        "a,b,c,d,e,f,g,h,label\n1,2,3,4,5,6,7,1e39,0\n1,2,3,4,5,6,7,8,1\n",
        ["row 2", "column 8 ('h')", "not a finite"],
    ),
    (
        "empty cell",
        "a,b,c,d,e,f,g,h,label\n1,2,3,4,5,6,7,8,0\n1,,3,4,5,6,7,8,1\n",
        ["row 3", "column 2 ('b')", "empty cell"],
    ),
    (
        "more than 3 classes",
        "a,b,c,d,e,f,g,h,label\n"
        + "".join(f"1,2,3,4,5,6,7,8,{c}\n" for c in ("x", "y", "z", "x", "w")),
        ["row 6", "column 9 ('label')", "4th class"],
    ),
    (
        "integer label out of range",
        "a,b,c,d,e,f,g,h,label\n1,2,3,4,5,6,7,8,0\n1,2,3,4,5,6,7,8,3\n",
        ["row 3", "column 9 ('label')", "label 3 is not in 0..2"],
    ),
    ("empty file", "", ["empty"]),
    ("header only", "a,b,c,d,e,f,g,h,label\n", ["no data rows"]),
]


@pytest.mark.parametrize("what,text,expected", BAD_CSVS, ids=[c[0] for c in BAD_CSVS])
def test_bad_csv_is_refused_naming_row_and_column(tmp_path, what, text, expected):
    with pytest.raises(_data.DataError) as info:
        _data.load(_write_csv(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{what}: {message!r} lacks {part!r}"


def test_unknown_label_column_and_non_utf8_are_refused(tmp_path, seed):
    path = _write_csv(tmp_path, _random_csv(random.Random(seed), 10))
    with pytest.raises(_data.DataError, match="--label-column 'target' is not a column"):
        _data.load(path, "target")
    bad = tmp_path / "b.csv"
    bad.write_bytes(b"a,b\n\xff\xfe,1\n")
    with pytest.raises(_data.DataError, match="not UTF-8"):
        _data.load(str(bad))
    with pytest.raises(_data.DataError, match="cannot read --data"):
        _data.load(str(tmp_path / "missing.csv"))
    with pytest.raises(_data.DataError, match="only with --data"):
        _data.load(None, "label")


# -- history side file ---------------------------------------------------------------------


def test_history_appends_on_flush_and_cuts_back_on_resume(tmp_path, seed):
    rng = random.Random(seed)
    ckpt = str(tmp_path / "run.ckpt")
    h = _history.History(ckpt)
    h.start_fresh()
    records = [{"step": s, "loss": rng.random(), "accuracy": rng.random()} for s in range(1, 31)]
    for r in records[:10]:
        h.add(r)
    assert _history.read(h.path) == []  # nothing on disk before the checkpoint save
    h.flush()
    for r in records[10:25]:
        h.add(r)
    h.flush()
    assert _history.read(h.path) == records[:25]
    cut = rng.randint(0, 24)
    kept = _history.History(ckpt).resume_at(cut)
    assert kept == records[:cut] and _history.read(h.path) == records[:cut]


def test_history_drops_a_torn_last_line(tmp_path):
    path = _history.path_for(str(tmp_path / "c"))
    with open(path, "wb") as f:
        f.write(b'{"accuracy":1.0,"loss":0.5,"step":1}\n{"accuracy":0.5,"lo')
    assert _history.read(path) == [{"accuracy": 1.0, "loss": 0.5, "step": 1}]
    h = _history.History(str(tmp_path / "c"))
    assert h.resume_at(5) == [{"accuracy": 1.0, "loss": 0.5, "step": 1}]
    h.add({"step": 2, "loss": 0.25, "accuracy": 1.0})
    h.flush()
    assert [r["step"] for r in _history.read(path)] == [1, 2]


# -- progress output -----------------------------------------------------------------------


def test_progress_plain_lines_and_json_lines():
    out = io.StringIO()
    p = Progress(0, 10, 5, stream=out, bar=False)
    for step in range(1, 11):
        p.update(step, 0.5 / step, correct=step % 3, rows=4)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("step      5/10  loss 0.1000  acc ")
    # accuracy over the steps since the last report: steps 6..10 -> (0+1+2+0+1)/20
    assert " acc 0.200 " in lines[1]
    out = io.StringIO()
    p = Progress(3, 9, 3, json_lines=True, stream=out)
    for step in range(4, 10):
        p.update(step, 1.0, correct=1, rows=2)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["step"] for r in records] == [6, 9]
    assert all(
        r["event"] == "progress" and r["accuracy"] == 0.5 and r["end_step"] == 9 for r in records
    )


def test_progress_bar_with_tqdm_and_fallback_without(monkeypatch):
    out = io.StringIO()
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)  # tqdm not installed
    p = Progress(0, 4, 2, stream=out, bar=True)
    for step in range(1, 5):
        p.update(step, 0.25, correct=1, rows=1)
    p.close()
    assert out.getvalue().splitlines()[-1].startswith("step      4/4  loss 0.2500  acc 1.000")
    monkeypatch.undo()
    pytest.importorskip("tqdm")
    out = io.StringIO()
    p = Progress(2, 6, 2, stream=out, bar=True)
    for step in range(3, 7):
        p.update(step, 0.125, correct=0, rows=2)
    p.message("a message line")
    p.close()
    text = out.getvalue()
    assert "6/6" in text and "loss=0.1250" in text and "a message line" in text


def test_labels_that_only_look_like_integers_are_strings(tmp_path):
    # "+-1" and "²" pass str.isdigit-style checks but are not integers: they are treated as
    # string labels (here: more than 3 distinct values, refused by row and column) rather
    # than crashing the command line with a traceback.
    rows = ["1,2,3,4,5,6,7,8,label"] + [
        f"{i},1,1,1,1,1,1,1,{lab}" for i, lab in enumerate(["+-1", "²", "0", "1"])
    ]
    path = tmp_path / "odd.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(_data.DataError, match=r"row 5, column 9 .*4th class"):
        _data.load(str(path), None)
