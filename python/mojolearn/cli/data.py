"""Datasets for the command line: CSV loading and validation, the bundled wine data, the
deterministic train/test split, standardization and the seeded per-epoch batch order.

Everything here is a fixed recipe (integer and SHA-256 arithmetic, plus the float64 `+ - * /`
and `math.sqrt` that ARITHMETIC.md allows on the host), so the same file, seed and batch size
give the same batches on every machine. Changing any of it changes every CLI state hash:

- Dataset identity: SHA-256 of the CSV file's bytes (plus the label column, recorded apart).
- Labels: integers 0..2 as given, or up to 3 distinct strings numbered in sorted order. A label
  column of numbers that looks like a numeric target (any non-integer value, or more than 20
  distinct values that are also more than 5 % of the rows: `numeric_target`) is refused for
  cross-entropy unless `train --classification` says its values are classes. With
  `--loss mse` the label column holds numeric targets instead: all rows are one class for the
  split and validation below, and the targets are standardized as a feature is (`target_mean`,
  `target_sd`; `predict` reports `z * sd + mean`, float64).
- Split (independent of the training seed, so every seed is scored on the same rows): for each
  class in ascending order, its row indices in file order are shuffled by Fisher–Yates with ONE
  `SplitMix64(SPLIT_SEED)` shared by all classes in turn; the first `n_class // 5` go to the test
  set (with `train --test-fraction F`, the first floor(F * n_class): F = 0.2 gives the same
  rows, F = 0 none). Both sets are then sorted back into file order.
- Validation (`train --val-fraction F` only): for each class in ascending order, its training
  rows in file order are shuffled by Fisher–Yates with ONE `SplitMix64(val_seed(seed))` shared
  by all classes in turn (`val_seed`: the first 8 bytes, little-endian, of
  SHA-256(f"mojolearn.val-split.v1:{seed}"), `seed` the run's --seed); the first
  floor(F * n_class) become validation rows and leave the training rows. Both sets are sorted
  back into file order.
- Standardization: per feature (an image's: per pixel and channel), mean and standard deviation over the TRAINING rows (those left
  after validation; Python float64, sequential sums in ascending row order, `math.sqrt`), then
  `(x - mean) / sd` for every row, rounded once to float32. A feature constant on the training
  rows becomes 0. `predict` applies the same means and standard deviations (the checkpoint
  records them, float64) with the same operations.
- Batch order: epoch `e` (0-based) visits the training rows in the order
  `SplitMix64(epoch_seed(seed, e)).shuffle(list(range(n_train)))`, where `epoch_seed` is the
  first 8 bytes (little-endian) of SHA-256(f"mojolearn.data-order.v1:{seed}:{e}"). Batches are
  consecutive slices of `batch_size` rows; the last batch of an epoch is smaller when
  `batch_size` does not divide `n_train` (it is used, not dropped).
"""

import array as _pyarray
import csv
import gzip
import hashlib
import io
import math
import os
import re
import stat as _stat

from .._mlp.rng import SplitMix64, epoch_order, epoch_seed  # noqa: F401 (the run's order)
from .._model.preprocessing import standardize_rows  # noqa: F401 (train's and predict's recipe)
from .._runtime.files import kind, read_at_most, shown

FEATURES = 8
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)  # an integer label (not "+-1", not "²")
# A plain decimal literal: not "1_000", not "٣" or "①", not "0x1p3", not "nan"/"inf".
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.ASCII | re.IGNORECASE)
MAX_CSV_BYTES = 256 << 20  # read into Python lists: far beyond this, memory runs out first
CLASSES = 3
SPLIT_SEED = 20240611
TEST_FRACTION_DIVISOR = 5  # n_class // 5 rows of each class are held out

BUNDLED_NAME = "wine"
BUNDLED_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "wine_data.csv"
)
DIGITS_NAME = "digits"
DIGITS_FILE = os.path.join(os.path.dirname(BUNDLED_FILE), "digits.csv.gz")
DIGITS_SHAPE = (1, 8, 8)  # each row an 8x8 image, one channel, row-major
# The 13 wine attributes in file order; the 8 we keep (see `BUNDLED_COLUMNS`).
WINE_ATTRIBUTES = (
    "alcohol",
    "malic_acid",
    "ash",
    "alcalinity_of_ash",
    "magnesium",
    "total_phenols",
    "flavanoids",
    "nonflavanoid_phenols",
    "proanthocyanins",
    "color_intensity",
    "hue",
    "od280_od315",
    "proline",
)
# The eight attributes with the largest one-way ANOVA F statistic between the three cultivars
# on the training split (computed once; dropped: ash, magnesium, nonflavanoid_phenols,
# proanthocyanins, malic_acid, whose classes overlap most). Fixed here so the data never moves.
BUNDLED_COLUMNS = (
    "alcohol",
    "alcalinity_of_ash",
    "total_phenols",
    "flavanoids",
    "color_intensity",
    "hue",
    "od280_od315",
    "proline",
)

F32_MAX = 3.4028234663852886e38  # the largest finite float32


class DataError(ValueError):
    """A dataset problem the user must fix; the message is one line naming row and column."""


class Dataset:
    """A loaded dataset: float32 features (standardized), int labels, train/test row lists
    (and validation rows once `hold_out` took them from the training rows).

    `means` and `sds` are the standardization's float64 statistics over the training rows;
    `header` says whether the columns were named by a header row, and `label_index` is the
    label's place among the file's feature and label columns (what `predict` checks). A
    regression dataset (`targets`, raw float64 values) has no class names and all labels 0.
    `image_shape` is (C, H, W) when each row is an image's C·H·W values, row-major (the
    digits; a CSV with `train --image-shape`), else None."""

    def __init__(
        self, name, sha256, label_column, columns, raw_rows, labels, class_names, **layout
    ):
        self.name = name
        self.sha256 = sha256
        self.label_column = label_column
        self.columns = tuple(columns)
        self.class_names = tuple(class_names)
        self.header = layout.get("header", True)
        self.label_index = layout.get("label_index", len(self.columns))
        self.lines = layout.get("lines") or range(1, len(raw_rows) + 1)  # each row's CSV line
        self.targets = layout.get("targets")
        self.image_shape = layout.get("image_shape")
        self.train_rows, self.test_rows = split_rows(labels, self.n_classes or 1)
        self.val_rows = []
        self.labels = labels
        self._raw = raw_rows
        self._fit()

    def _fit(self):
        self.means, self.sds = statistics(self._raw, self.train_rows)
        self.features = standardize_rows(self._raw, self.means, self.sds)
        check_standardized(self.features, self._raw, self.lines, self.columns, self.sds)
        if self.targets is not None:  # a regression's targets, standardized as a feature is
            raw = [(t,) for t in self.targets]
            (self.target_mean,), (self.target_sd,) = statistics(raw, self.train_rows)
            y = standardize_rows(raw, [self.target_mean], [self.target_sd])
            check_standardized(y, raw, self.lines, (self.label_column,), [self.target_sd])
            self.y = [row[0] for row in y]

    def split(self, fraction):
        """Hold out `fraction` of each class as the test rows instead of n_class // 5 (see
        `split_rows`) and standardize again with the new training rows' statistics."""
        self.train_rows, self.test_rows = split_rows(self.labels, self.n_classes or 1, fraction)
        if len(self.train_rows) < 2:
            raise DataError(
                f"--test-fraction {fraction} leaves {len(self.train_rows)} training rows of "
                f"{len(self.labels)}; need at least 2"
            )
        self._fit()

    def hold_out(self, fraction, seed):
        """Move a stratified `fraction` of the training rows to `val_rows` (see
        `validation_rows`) and standardize again with the remaining training rows' statistics,
        so nothing of the validation rows reaches the training data."""
        self.train_rows, self.val_rows = validation_rows(
            self.train_rows, self.labels, fraction, seed, self.n_classes or 1
        )
        self._fit()

    def gather(self, rows):
        """(flat float32 features as array('f'), labels as array('i') or a regression's
        standardized targets as array('f')) for the given rows."""
        x = _pyarray.array("f")
        for r in rows:
            x.extend(self.features[r])
        if self.targets is not None:
            return x, _pyarray.array("f", (self.y[r] for r in rows))
        y = _pyarray.array("i", (self.labels[r] for r in rows))
        return x, y

    def scoring(self, trainer, rows):
        """(X, targets) of `rows` as the trainer's scoring entries (`predict`, `evaluate`)
        take them: the raw rows (float64, exact) when it holds this run's standardization
        (it standardizes them with this arithmetic: the bits `gather` gives), else the
        standardized rows of `gather` as Arrays."""
        from .._buffers.array import Array

        if trainer.preprocessing is not None:
            x = [list(self._raw[r]) for r in rows]
            if self.targets is not None:
                return x, [self.targets[r] for r in rows]
            return x, Array._wrap(
                _pyarray.array("i", (self.labels[r] for r in rows)), (len(rows),), "<i4"
            )
        x, y = self.gather(rows)
        X = Array._wrap(x, (len(rows), self.n_features), "<f4")
        return X, Array._wrap(y, (len(rows),), y.typecode == "f" and "<f4" or "<i4")

    @property
    def n_features(self):
        return len(self.columns)

    @property
    def n_classes(self):
        return len(self.class_names)

    @property
    def n_train(self):
        return len(self.train_rows)

    @property
    def n_test(self):
        return len(self.test_rows)

    @property
    def n_val(self):
        return len(self.val_rows)


# -- split and standardization -------------------------------------------------------------


def split_rows(labels, classes=CLASSES, fraction=None):
    """(train rows, test rows), both in file order (see the module docstring): `fraction`
    (`train --test-fraction`) holds out floor(fraction x n_class) rows of each class; None,
    the default, n_class // 5 (the same rows as fraction 0.2)."""
    rng = SplitMix64(SPLIT_SEED)
    test = []
    for c in range(classes):  # an absent class draws nothing: more classes, same split
        members = [i for i, y in enumerate(labels) if y == c]
        rng.shuffle(members)
        n = len(members)
        held = n // TEST_FRACTION_DIVISOR if fraction is None else math.floor(fraction * n)
        test.extend(members[:held])
    held = set(test)
    return [i for i in range(len(labels)) if i not in held], sorted(test)


def validation_rows(train_rows, labels, fraction, seed, classes=CLASSES):
    """(training rows, validation rows), both in file order: for each class in ascending
    order, its training rows are shuffled by Fisher-Yates with ONE SplitMix64 (seeded by
    `val_seed(seed)`) shared by all classes in turn, and the first floor(fraction * n_class)
    are held out for validation."""
    rng = SplitMix64(val_seed(seed))
    held = []
    for c in range(classes):
        members = [r for r in train_rows if labels[r] == c]
        rng.shuffle(members)
        held.extend(members[: math.floor(fraction * len(members))])
    chosen = set(held)
    return [r for r in train_rows if r not in chosen], sorted(held)


def val_seed(seed):
    """The validation split's seed: the first 8 bytes (little-endian) of
    SHA-256(f"mojolearn.val-split.v1:{seed}")."""
    digest = hashlib.sha256(f"mojolearn.val-split.v1:{seed}".encode("ascii")).digest()
    return int.from_bytes(digest[:8], "little")


def statistics(raw_rows, train_rows):
    """(means, standard deviations) per feature over the training rows: Python float64,
    sequential sums in ascending row order, `math.sqrt`."""
    n = len(train_rows)
    width = len(raw_rows[0])
    means, sds = [], []
    for j in range(width):
        acc = 0.0
        for r in train_rows:
            acc = acc + raw_rows[r][j]
        mean = acc / n
        acc = 0.0
        for r in train_rows:
            d = raw_rows[r][j] - mean
            acc = acc + d * d
        means.append(mean)
        sds.append(math.sqrt(acc / n))
    return means, sds


def check_standardized(features, raw_rows, lines, columns, sds):
    """Refuse (DataError naming row and column) a finite cell whose standardized value is
    past float32's range (a cell far from the training rows' mean in units of a tiny standard
    deviation): the network cannot take it, and a step or prediction would fail on it later."""
    for r, row in enumerate(features):
        if all(map(math.isfinite, row)):
            continue
        j = next(j for j, v in enumerate(row) if not math.isfinite(v))
        raise DataError(
            f"row {lines[r]}, column {columns[j]}: {raw_rows[r][j]!r} standardizes to a value "
            f"past float32's range ((x - mean) / sd with the training rows' sd {sds[j]!r}); "
            f"rescale that column or drop the row"
        )


def standardize(raw_rows, train_rows):
    """Per-feature (x - mean) / sd with training-row statistics, each value rounded once to
    float32; a tuple of float32-valued row tuples."""
    return standardize_rows(raw_rows, *statistics(raw_rows, train_rows))


# -- batch order ---------------------------------------------------------------------------


def steps_per_epoch(n_train, batch_size):
    return -(-n_train // batch_size)


def position(step, n_train, batch_size):
    """(epoch, cursor) of the batch that step `step + 1` trains on, `step` steps done."""
    per = steps_per_epoch(n_train, batch_size)
    return step // per, (step % per) * batch_size


class BatchStream:
    """Yields the batches of a run from a (epoch, cursor) position, in the documented order."""

    def __init__(self, dataset, seed, batch_size, epoch=0, cursor=0):
        self.dataset = dataset
        self.seed = seed
        self.batch_size = batch_size
        self.epoch = epoch
        self.cursor = cursor
        self._order_epoch = None
        self._order = None

    def next_batch(self):
        """(X (rows, 8) flat array('f'), targets array('i'), rows) of the next batch; advances."""
        n = self.dataset.n_train
        if self._order_epoch != self.epoch:
            self._order = epoch_order(self.seed, self.epoch, n)
            self._order_epoch = self.epoch
        picks = self._order[self.cursor : self.cursor + self.batch_size]
        rows = [self.dataset.train_rows[p] for p in picks]
        self.cursor += len(picks)
        if self.cursor >= n:
            self.epoch, self.cursor = self.epoch + 1, 0
        x, y = self.dataset.gather(rows)
        return x, y, len(rows)


# -- loading -------------------------------------------------------------------------------


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _number(cell, row, column):
    text = cell.strip(" \t")
    if not text:
        raise DataError(f"row {row}, column {column}: empty cell (expected a number)")
    if not _DECIMAL.fullmatch(text):
        what = "a finite float32 number" if _NON_FINITE.fullmatch(text) else "a number"
        raise DataError(
            f"row {row}, column {column}: {text[:40]!r} is not {what} (plain "
            f"decimal literals only, e.g. -1.5e3)"
        )
    value = float(text)
    if not math.isfinite(value) or abs(value) > F32_MAX:
        raise DataError(f"row {row}, column {column}: {text[:40]!r} is not a finite float32 number")
    return value


def load_bundled(features=FEATURES):
    """The bundled UCI wine data, classes 0..2: 8 of its 13 attributes (`BUNDLED_COLUMNS`,
    for SmallMLPTrainer's 8 inputs) or, with `features=13`, all of them in file order."""
    if features not in (FEATURES, len(WINE_ATTRIBUTES)):
        raise DataError(
            f"the wine data has {len(WINE_ATTRIBUTES)} attributes (or the "
            f"{FEATURES} selected ones); the network takes {features} inputs"
        )
    with open(BUNDLED_FILE, "rb") as f:
        blob = f.read()
    lines = blob.decode("ascii").splitlines()
    # scikit-learn's layout: a "178,13,class_0,class_1,class_2" line, then 13 values + label.
    columns = BUNDLED_COLUMNS if features == FEATURES else WINE_ATTRIBUTES
    keep = [WINE_ATTRIBUTES.index(name) for name in columns]
    raw, labels = [], []
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split(",")
        raw.append(tuple(_number(cells[j], number, WINE_ATTRIBUTES[j]) for j in keep))
        labels.append(int(cells[13]))
    return Dataset(
        BUNDLED_NAME,
        hashlib.sha256(blob).hexdigest(),
        "class",
        columns,
        raw,
        labels,
        ("class_0", "class_1", "class_2"),
        header=True,
        label_index=len(columns),
    )


def load_digits():
    """The bundled optical recognition of handwritten digits (scikit-learn's `digits.csv.gz`,
    1797 8×8 images): 64 pixel counts 0..16 per row, then the digit 0..9."""
    with open(DIGITS_FILE, "rb") as f:
        blob = f.read()
    lines = gzip.decompress(blob).decode("ascii").splitlines()
    columns = tuple(f"pixel_{r}_{c}" for r in range(8) for c in range(8))
    raw, labels = [], []
    for number, line in enumerate(lines, start=1):
        cells = line.split(",")
        raw.append(tuple(_number(cells[j], number, columns[j]) for j in range(64)))
        labels.append(int(cells[64]))
    return Dataset(
        DIGITS_NAME,
        hashlib.sha256(blob).hexdigest(),
        "digit",
        columns,
        raw,
        labels,
        tuple(str(d) for d in range(10)),
        header=False,
        label_index=64,
        image_shape=DIGITS_SHAPE,
    )


def _column_name(header, j):
    return f"{j + 1} ({header[j]!r})" if header else str(j + 1)


def load_csv(path, label_column=None, features=FEATURES, classes=CLASSES, classification=False):
    """Load a user CSV: a header row of column names (optional when every cell of the first
    row is numeric), `features` numeric feature columns (None: all but the label) and one label
    column (`label_column`, else a column named "label", else the last) holding at most
    `classes` classes (None: numeric regression targets); a numeric label column that looks
    like a target is refused unless `classification` (`numeric_target`). Raises DataError
    naming row and
    column."""
    blob, rows = _table(path)
    first_number, first = rows[0]
    width = max(2, len(first)) if features is None else features + 1
    if len(first) != width:  # first: the cheap check that bounds the header's work
        raise DataError(
            f"row {first_number}: {len(first)} columns, expected {width} "
            f"({features or 'at least 1'} numeric features and 1 label; --layers sets the "
            f"network's inputs){_text_columns(rows, label_column)}"
        )
    header, rows = _header(rows)
    lines = [number for number, _ in rows]
    label_j = _label_index(header, label_column, width)
    if not rows:
        raise DataError(f"{path}: no data rows after the header")
    feature_js = [j for j in range(width) if j != label_j]
    raw, label_cells = _cells(rows, width, header, feature_js, label_j, label_column is None)
    if classes and not classification:
        numeric_target(label_cells, _column_name(header, label_j))
    targets = None if classes else _targets(label_cells, _column_name(header, label_j))
    labels, class_names = (
        _labels(label_cells, _column_name(header, label_j), classes)
        if classes
        else ([0] * len(raw), ())
    )
    names = [header[j] if header else f"column {j + 1}" for j in feature_js]
    label_name = header[label_j] if header else str(label_j + 1)
    if len(raw) < 2:
        raise DataError(f"{path}: only {len(raw)} data row; need at least 2 to train")
    return Dataset(
        shown(os.path.basename(path)),
        hashlib.sha256(blob).hexdigest(),
        label_name,
        names,
        raw,
        labels,
        class_names,
        header=header is not None,
        label_index=label_j,
        lines=lines,
        targets=targets,
    )


def _table(path):
    """(the file's bytes, its non-empty rows as (line number, cells)) of the CSV at `path`."""
    blob = _read_csv_file(path)
    try:
        text = blob.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    rows = [(number, cells) for number, cells in _rows(text) if any(c.strip() for c in cells)]
    if not rows:
        raise DataError(f"{path}: the file is empty (expected a header and data rows)")
    return blob, rows


def _header(rows):
    """(the header's column names or None, the data rows): the first row is a header unless
    every cell of it is a number; its names must be unique."""
    if all(_is_number(c) for c in rows[0][1]):
        return None, rows
    return _named_header(rows)


def _named_header(rows):
    """(the first row's column names, the data rows after it); the names must be unique."""
    first_number, first = rows[0]
    header = [c.strip() for c in first]
    column_of = {}  # name -> its first column (0-based): one pass, not header.index per name
    for j, name in enumerate(header):
        i = column_of.setdefault(name, j)
        if i != j:
            raise DataError(
                f"row {first_number}: the header names column {name!r} twice "
                f"(columns {i + 1} and {j + 1}); column "
                f"names must be unique"
            )
    return header, rows[1:]


def _cells(rows, width, header, feature_js, label_j, label_chosen=False):
    """(the rows' feature values in `feature_js` order, their (line number, label cell)s):
    every row `width` cells, every feature a plain decimal literal of a finite float32 (a
    text cell is refused with the fixes: `_not_numeric`; `label_chosen`: the label column
    was chosen by default, so this text column may be the label)."""
    raw, label_cells = [], []
    for number, cells in rows:
        if len(cells) != width:
            raise DataError(f"row {number}: {len(cells)} columns, expected {width}")
        try:
            values = tuple(_number(cells[j], number, _column_name(header, j)) for j in feature_js)
        except DataError as exc:
            raise _not_numeric(exc, cells, header, feature_js, label_chosen) from None
        raw.append(values)
        if label_j is not None:
            label_cells.append((number, cells[label_j].strip()))
    return raw, label_cells


def _not_numeric(exc, cells, header, feature_js, label_chosen):
    """A feature cell that is not a number: when it is text (not a malformed number), say
    that only numeric features are read and, when the label column was chosen by default,
    how to name this one as the label."""
    j = next((j for j in feature_js if not _is_number(cells[j])), None)
    text = "" if j is None else cells[j].strip(" \t")
    if j is None or not text or _NON_FINITE.fullmatch(text) or text[0] in "+-.0123456789":
        return exc
    name = header[j] if header else str(j + 1)
    hint = (
        f"; if {name!r} is the label column, pass --label-column {name} (by default the label "
        f"is the column named 'label', else the last)"
        if label_chosen
        else ""
    )
    return DataError(
        f"{exc}: column {_column_name(header, j)} holds text, and only numeric feature "
        f"columns are read (encode a categorical column as numbers, or drop it){hint}"
    )


def _text_columns(rows, label_column):
    """The hint of a column-count refusal: the columns of the first data row that hold text
    (a categorical column counts as no feature), '' when none does."""
    if len(rows) < 2:
        return ""
    header = [c.strip() for c in rows[0][1]] if not all(_is_number(c) for c in rows[0][1]) else None
    cells = rows[1][1] if header else rows[0][1]
    label = len(cells) - 1  # the label's column: as `_label_index` finds it, else the last
    if header is not None:
        label = next((header.index(n) for n in (label_column, "label") if n in header), label)
    text = [
        _column_name(header, j) for j, c in enumerate(cells) if j != label and not _is_number(c)
    ]
    if not text:
        return ""
    return (
        f"; column{'s' if len(text) > 1 else ''} {', '.join(text)} hold"
        f"{'' if len(text) > 1 else 's'} text, and only numeric feature columns are read "
        f"(encode a categorical column as numbers, or drop it)"
    )


# A numeric label column with more distinct values than this (and than this share of the
# rows), or any non-integer value, looks like a regression target, not classes.
TARGET_DISTINCT, TARGET_SHARE = 20, 0.05


def numeric_target(cells, column):
    """Refuse (DataError with the fixes) a label column of numbers that looks like a numeric
    target: any value not an integer (e.g. 151.0 or 2.5), or more than TARGET_DISTINCT
    distinct values that are also more than TARGET_SHARE of the rows."""
    if not cells or not all(_is_number(text) for _, text in cells):
        return
    distinct = {text for _, text in cells}
    integers = all(_INTEGER.fullmatch(text) for text in distinct)
    many = len(distinct) > TARGET_DISTINCT and len(distinct) > TARGET_SHARE * len(cells)
    if integers and not many:
        return
    why = "non-integer values" if not integers else f"{len(distinct)} distinct values"
    raise DataError(
        f"label column {column} holds numbers with {why} ({len(cells)} rows): it looks like "
        f"a numeric target, not classes. For regression pass --loss mse with --model SPEC "
        f"ending in linear:1 (e.g. --model linear:64,relu,linear:1 --loss mse); if each value "
        f"is a class, pass --classification"
    )


# -- rows to predict -------------------------------------------------------------------------


def load_for_predict(path, columns, label_column, label_index, had_header, classes):
    """The rows of a CSV to predict on, read with `train`'s checks and held against what the
    checkpoint records of its data: (the raw feature values in the recorded column order,
    the label of each row as a class index or None without a label column, each row's CSV
    line number).

    When the checkpoint's data had a header, a first row naming every recorded feature column
    is the header, whatever its names look like (years or sensor ids are numbers too); its
    columns are matched by name, in any order, plus the label column `label_column` or not,
    and a column missing, named twice or not the checkpoint's is refused by name. A first row
    that is not all numbers is a header too (and refused by the names it lacks). Otherwise a
    row is the features in the recorded order, with the label at `label_index` when there is
    one more column. A label is one of the class names `classes`, or a class number."""
    _, rows = _table(path)
    first_number, first = rows[0]
    n = len(columns)
    if had_header and (_names_all(first, columns) or not all(_is_number(c) for c in first)):
        header, rows = _named_header(rows)
        feature_js, label_j = _columns_by_name(header, first_number, columns, label_column)
    else:
        if len(first) not in (n, n + 1):
            raise DataError(
                f"row {first_number}: {len(first)} columns, expected {n} (the checkpoint's "
                f"features) or {n + 1} (and its label column)"
            )
        header, rows = _header(rows)
        if header is not None:
            raise DataError(
                f"row {first_number}: a header row, but the checkpoint's data had none: give "
                f"the rows alone ({n} feature columns, the label optional)"
            )
        label_j = label_index if len(first) == n + 1 else None
        feature_js = [j for j in range(len(first)) if j != label_j]
    if not rows:
        raise DataError(f"{path}: no data rows after the header")
    width = len(header) if header is not None else len(first)
    raw, label_cells = _cells(rows, width, header, feature_js, label_j)
    lines = [number for number, _ in rows]
    if label_j is None:
        return raw, None, lines
    column = _column_name(header, label_j)
    if not classes:  # a regression's targets
        return raw, _targets(label_cells, column), lines
    return raw, _known_labels(label_cells, column, classes), lines


def _names_all(cells, columns):
    """Whether the row `cells` names every one of `columns` (a header, in any order)."""
    names = {c.strip() for c in cells}
    return all(name in names for name in columns)


def _listed(names, most=8):
    shown_names = ", ".join(repr(name[:40]) for name in names[:most])
    return shown_names + (f", ... ({len(names)} in all)" if len(names) > most else "")


def _columns_by_name(header, number, columns, label_column):
    """(the header's column of each recorded feature column, the label's or None); columns
    that are not the checkpoint's, or missing ones, refused by name (all of them)."""
    where = {name: j for j, name in enumerate(header)}
    expected = f"expected the columns {_listed(columns)} and optionally {label_column!r}"
    known = set(columns)
    extra = [name for name in header if name not in known and name != label_column]
    if extra:
        raise DataError(
            f"row {number}: the columns differ from the checkpoint's: {_listed(extra)} "
            f"{'is' if len(extra) == 1 else 'are'} not one of them ({expected})"
        )
    missing = [name for name in columns if name not in where]
    if missing:
        raise DataError(
            f"row {number}: the columns differ from the checkpoint's: no column "
            f"{_listed(missing)} ({expected})"
        )
    return [where[name] for name in columns], where.get(label_column)


def _known_labels(cells, column, classes):
    """Each label cell's class index: its class name, else a class number."""
    index = {name: i for i, name in enumerate(classes)}
    out = []
    for number, text in cells:
        if text in index:
            out.append(index[text])
        elif _INTEGER.fullmatch(text) and 0 <= int(text) < len(classes):
            out.append(int(text))
        else:
            raise DataError(
                f"row {number}, column {column}: label {text[:40]!r} is not one of the "
                f"checkpoint's classes ({_listed(classes)})"
            )
    return out


def _read_csv_file(path):
    """The bytes of a regular file of at most MAX_CSV_BYTES (a FIFO, /dev/zero or a folder is
    refused before reading; the bound holds however the file grows meanwhile)."""
    name = shown(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise DataError(f"cannot read --data {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not _stat.S_ISREG(st.st_mode):
            raise DataError(f"--data {name} is {kind(st.st_mode)}, not a regular file")
        if st.st_size > MAX_CSV_BYTES:
            raise DataError(
                f"--data {name} has {st.st_size} bytes, more than the "
                f"{MAX_CSV_BYTES >> 20} MiB a CSV may have"
            )
        blob = read_at_most(fd, MAX_CSV_BYTES)
    except OSError as exc:
        raise DataError(f"cannot read --data {name}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(blob) > MAX_CSV_BYTES:
        raise DataError(f"--data {name} has more than the {MAX_CSV_BYTES >> 20} MiB a CSV may have")
    return blob


def _rows(text):
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for cells in reader:
            yield reader.line_num, cells
    except csv.Error as exc:
        raise DataError(f"row {reader.line_num}: malformed CSV ({exc})") from None


def _is_number(cell):
    return _DECIMAL.fullmatch(cell.strip(" \t")) is not None


def _label_index(header, label_column, width):
    if label_column is None:
        if header and "label" in header:
            return header.index("label")
        return width - 1
    if header and label_column in header:
        if header.count(label_column) > 1:
            raise DataError(f"--label-column {label_column!r}: the header names it more than once")
        return header.index(label_column)
    if not header and label_column.isdigit() and 1 <= int(label_column) <= width:
        return int(label_column) - 1
    names = ", ".join(header) if header else f"1..{width} (the file has no header row)"
    raise DataError(
        f"--label-column {label_column!r} is not a column of the file (columns: {names})"
    )


def _targets(cells, column):
    """A regression's targets (`--loss mse`): each label cell a finite float32 number."""
    try:
        return [_number(text, number, column) for number, text in cells]
    except DataError as exc:
        raise DataError(f"{exc}; --loss mse takes numeric targets in the label column") from None


def _ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _labels(cells, column, classes=CLASSES):
    """Labels as ints 0..classes-1 (the network's outputs): integer labels must lie in that
    range; otherwise up to `classes` distinct strings are numbered in sorted order."""
    if all(_INTEGER.fullmatch(text) for _, text in cells):
        out = []
        for number, text in cells:
            value = int(text)
            if not 0 <= value < classes:
                raise DataError(
                    f"row {number}, column {column}: label {value} is not in 0..{classes - 1}"
                )
            out.append(value)
        return out, tuple(str(c) for c in range(classes))
    seen, known = [], set()  # the classes in order of appearance; the set for the lookups
    for number, text in cells:
        if not text:
            raise DataError(f"row {number}, column {column}: empty label")
        if text not in known:
            seen.append(text)
            known.add(text)
            if len(seen) > classes:
                shown_names = ", ".join(seen[: min(classes, 3)]) + (", ..." if classes > 3 else "")
                raise DataError(
                    f"row {number}, column {column}: label {text[:40]!r} is a "
                    f"{_ordinal(classes + 1)} class (expected at most {classes}: "
                    f"{shown_names})"
                )
    names = sorted(seen)
    index = {name: i for i, name in enumerate(names)}
    return [index[text] for _, text in cells], tuple(names)


def load(
    path=None,
    label_column=None,
    features=FEATURES,
    classes=CLASSES,
    dataset=None,
    classification=False,
):
    """The user's CSV at `path`, else the bundled `dataset` ("wine", the default, or
    "digits"), for a network of `features` inputs (None: the data's) and `classes` outputs
    (None: numeric targets, for `--loss mse`)."""
    if path is None:
        if label_column is not None:
            raise DataError("--label-column applies only with --data")
        if not classes:
            raise DataError(
                "--loss mse needs --data CSV with numeric targets (the bundled data are classes)"
            )
        if dataset == DIGITS_NAME:
            if (features or 64, classes) != (64, 10):
                raise DataError(
                    f"the digits data has 64 features and 10 classes; the network "
                    f"takes {features or 64} inputs and {classes} classes"
                )
            return load_digits()
        if classes != CLASSES:
            raise DataError(f"the wine data has 3 classes; the network has {classes} outputs")
        return load_bundled(features or FEATURES)
    return load_csv(path, label_column, features, classes, classification)
