"""`mojolearn.TextData`: a character-level text as seeded, resumable `(B, T)` windows.

nanoGPT's `shakespeare_char` preparation and `get_batch` without NumPy or torch: the vocabulary
is the text's sorted unique characters, the first 90 % of the ids train and the rest validate,
and each batch is `B` windows of `T` ids at random starts with the next ids as targets. The
starts come from the project's SplitMix64 (docs/ARITHMETIC.md, "Text windows"), counter-based:
batch `k` of a split draws from its own generator, so the whole position is two counters
(`state()`), small enough for a trainer's `data_schedule`, and drawing validation batches never
moves the training ones.
"""

from __future__ import annotations

import array as _pyarray
import hashlib
import math
import os

from ._buffers.array import _CODES, Array
from ._mlp import rng as _rng
from .batches import _check_state_fields

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

SCHEMA = "mojolearn.textdata.v1"
_SPLITS = ("train", "val")
_FIELDS = tuple(
    "schema chars sha256 block_size batch_size seed val_fraction train_batches val_batches".split()
)
_SETTINGS = _FIELDS[3:7]  # block_size, batch_size, seed, val_fraction: the constructor's
_MAX_COUNT = (1 << 63) - 1  # a data_schedule integer fits in 64 bits
# The shipped text (data/README.md: CPython 3.11.7's pydoc topics, PSF licence), gzipped.
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "pydoc_topics.txt.gz")


class TextData:
    """A UTF-8 text as character ids, split nanoGPT's way, drawn as seeded `(B, T)` windows.

    The vocabulary (`vocab`) is the text's distinct characters (Unicode code points) sorted by
    code point; id `i` is `vocab[i]`. The text's `n` ids split at `n_train = int(n * (1.0 -
    val_fraction))` (binary64, as nanoGPT's `int(n * 0.9)`): ids `[0, n_train)` train and the
    rest validate. `batch(split)` returns the split's next batch: `X` `(B, T)` int32, `B`
    windows of `T` ids whose starts are drawn uniformly from `[0, len(split) - T - 1]`, and `Y`
    `(B, T)` int32, the ids one character later (each window and its targets inside the split).

    Batch `k` (0-based, counted per split) draws its `B` starts in row order as
    `randbelow(len(split) - T)` from a SplitMix64 of its own, seeded from `(seed, split, k)`
    (docs/ARITHMETIC.md, "Text windows"): the same seed gives the same batches on every
    machine, and validation draws do not change the training batches. `state()` is the
    position (batches drawn per split) with the settings and a fingerprint of the text;
    `TextData.from_state` continues from it bit for bit.

    The file is read as bytes and decoded strictly (no newline translation: `\\r\\n` stays two
    characters); build one from a `str` with `TextData.from_string`.

    Args:
        path: the UTF-8 text file (a str or os.PathLike path).
        block_size: `T`, the window's length in characters, an int >= 1.
        batch_size: `B`, windows per batch, an int >= 1.
        seed: the window draws' seed, an int in [0, 2**64).
        val_fraction: the share of the text, at its end, that validates: a float in (0, 1).

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a file that is not UTF-8 (naming the byte offset), a split shorter than
            one window (`T + 1` characters), or an argument out of range.
        OSError: the file cannot be read.

    Example:
        >>> data = mojolearn.TextData.from_string("hello world! " * 10, block_size=8,
        ...                                       batch_size=4, seed=0)
        >>> X, Y = data.batch()
        >>> X.shape, data.decode(data.encode("hello"))
        ((4, 8), 'hello')
    """

    __slots__ = (
        "_sha256",
        "_vocab",
        "_index",
        "_ids",
        "_n_train",
        "_block_size",
        "_batch_size",
        "_seed",
        "_val_fraction",
        "_drawn",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        block_size: int,
        batch_size: int,
        seed: int = 0,
        val_fraction: float = 0.1,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"TextData: path must be a str or os.PathLike (a text: TextData.from_string), "
                f"got {type(path).__name__}"
            )
        settings = _settings(block_size, batch_size, seed, val_fraction, api="TextData")
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"TextData: {os.fspath(path)!r} is not UTF-8: byte offset {exc.start} "
                f"(0x{raw[exc.start]:02x}) {exc.reason}"
            ) from None
        self._load(text, raw, settings, "TextData")

    @classmethod
    def from_string(
        cls,
        text: str,
        *,
        block_size: int,
        batch_size: int,
        seed: int = 0,
        val_fraction: float = 0.1,
    ) -> TextData:
        """A TextData of a text held in a `str` (the constructor reads a file).

        Args:
            text: the text.
            block_size: `T`, the window's length in characters, an int >= 1.
            batch_size: `B`, windows per batch, an int >= 1.
            seed: the window draws' seed, an int in [0, 2**64).
            val_fraction: the share of the text, at its end, that validates: a float in (0, 1).

        Returns:
            A new TextData at its start (no batch drawn).

        Raises:
            TypeError: `text` not a str, or an argument of the wrong type.
            ValueError: a text with a lone surrogate (not encodable as UTF-8: its position
                named), a split shorter than one window, or an argument out of range.
        """
        api = "TextData.from_string"
        if not isinstance(text, str):
            raise TypeError(f"{api}: text must be a str, got {type(text).__name__}")
        settings = _settings(block_size, batch_size, seed, val_fraction, api=api)
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{api}: text[{exc.start}] = {text[exc.start]!r} is a lone surrogate, not "
                "encodable as UTF-8"
            ) from None
        data = cls.__new__(cls)
        data._load(text, raw, settings, api)
        return data

    @classmethod
    def shipped(
        cls, *, block_size: int, batch_size: int, seed: int = 0, val_fraction: float = 0.1
    ) -> TextData:
        """A TextData of the text that ships with the package (`shipped_text()`).

        Args:
            block_size: `T`, the window's length in characters, an int >= 1.
            batch_size: `B`, windows per batch, an int >= 1.
            seed: the window draws' seed, an int in [0, 2**64).
            val_fraction: the share of the text, at its end, that validates: a float in (0, 1).

        Returns:
            A new TextData at its start; `from_state(None, state, text=shipped_text())`
            continues one.

        Raises:
            TypeError: an argument of the wrong type.
            ValueError: an argument out of range.
        """
        settings = dict(block_size=block_size, batch_size=batch_size, seed=seed)
        return cls.from_string(shipped_text(), val_fraction=val_fraction, **settings)

    def _load(self, text: str, raw: bytes, settings: tuple[int, int, int, float], api: str) -> None:
        block, batch, seed, fraction = settings
        n = len(text)
        n_train = int(n * (1.0 - fraction))
        for split, size in (("train", n_train), ("val", n - n_train)):
            if size < block + 1:
                raise ValueError(
                    f"{api}: the {split} split has {size} characters (of {n}, val_fraction "
                    f"{fraction}), fewer than one window: block_size + 1 = {block + 1}"
                )
        self._vocab = "".join(sorted(set(text)))
        self._index = {c: i for i, c in enumerate(self._vocab)}
        self._ids = _pyarray.array(_CODES["<i4"], map(self._index.__getitem__, text))
        self._sha256 = hashlib.sha256(raw).hexdigest()
        self._n_train = n_train
        self._block_size, self._batch_size, self._seed, self._val_fraction = settings
        self._drawn = {"train": 0, "val": 0}

    @property
    def vocab(self) -> str:
        """The vocabulary: the text's distinct characters sorted by code point (id i is
        `vocab[i]`)."""
        return self._vocab

    @property
    def vocab_size(self) -> int:
        """How many distinct characters the text holds (the model's `vocab_size`)."""
        return len(self._vocab)

    @property
    def block_size(self) -> int:
        """`T`: ids per window."""
        return self._block_size

    @property
    def batch_size(self) -> int:
        """`B`: windows per batch."""
        return self._batch_size

    @property
    def n_train(self) -> int:
        """Characters in the training split (the text's first ones)."""
        return self._n_train

    @property
    def n_val(self) -> int:
        """Characters in the validation split (the text's last ones)."""
        return len(self._ids) - self._n_train

    def encode(self, text: str) -> list[int]:
        """The ids of a text's characters.

        Args:
            text: characters of the vocabulary.

        Returns:
            A new list of ints, one per character.

        Raises:
            TypeError: `text` not a str.
            ValueError: a character outside the vocabulary (naming it and its position).
        """
        if not isinstance(text, str):
            raise TypeError(f"TextData.encode: text must be a str, got {type(text).__name__}")
        index = self._index
        try:
            return [index[c] for c in text]
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in index)
            raise ValueError(
                f"TextData.encode: text[{pos}] = {text[pos]!r} is not in the vocabulary"
            ) from None

    def decode(self, ids: Any) -> str:
        """The text of a sequence of ids (`generate`'s output, a row of a batch).

        Args:
            ids: a list or tuple of ints, or a 1-D integer mojolearn.Array, each in
                [0, vocab_size).

        Returns:
            The characters, as a str.

        Raises:
            TypeError: an id that is not an int, or `ids` neither a sequence nor a 1-D Array.
            ValueError: an id out of range (naming its position).
        """
        api = "TextData.decode"
        if isinstance(ids, Array):
            if len(ids.shape) != 1 or ids.dtype not in ("<i4", "<i8"):
                raise TypeError(
                    f"{api}: ids must be a 1-D integer Array, got {ids.dtype} {ids.shape}"
                )
            ids = ids.tolist()
        if not isinstance(ids, (list, tuple)):
            raise TypeError(f"{api}: ids must be a list of ints, got {type(ids).__name__}")
        vocab, size = self._vocab, len(self._vocab)
        for pos, i in enumerate(ids):
            if isinstance(i, bool) or type(i) is not int:
                raise TypeError(f"{api}: ids[{pos}] must be an int, got {type(i).__name__}")
            if not 0 <= i < size:
                raise ValueError(f"{api}: ids[{pos}] = {i} is not a token id in [0, {size})")
        return "".join(vocab[i] for i in ids)

    def batch(self, split: str = "train") -> tuple[Array, Array]:
        """The split's next batch of windows and their next-character targets.

        Args:
            split: "train" (the first ids) or "val" (the last); each has its own count.

        Returns:
            `(X, Y)`: new int32 Arrays of shape `(batch_size, block_size)`; row `r` of X is
            the window at the `r`-th start drawn, row `r` of Y the same window one id later.

        Raises:
            ValueError: `split` neither "train" nor "val" (nothing is drawn).
        """
        if split not in _SPLITS:
            raise ValueError(f"TextData.batch: split must be 'train' or 'val', got {split!r}")
        k = self._drawn[split]
        lo, hi = (0, self._n_train) if split == "train" else (self._n_train, len(self._ids))
        t, ids = self._block_size, self._ids
        draw = _rng.SplitMix64(window_seed(self._seed, split, k))
        x = _pyarray.array(ids.typecode)
        y = _pyarray.array(ids.typecode)
        for _ in range(self._batch_size):
            start = lo + draw.randbelow(hi - lo - t)
            x.extend(ids[start : start + t])
            y.extend(ids[start + 1 : start + t + 1])
        self._drawn[split] = k + 1
        shape = (self._batch_size, t)
        return Array._wrap(x, shape, "<i4"), Array._wrap(y, shape, "<i4")

    def state(self) -> dict[str, Any]:
        """The position and the settings, as a small JSON object.

        Returns:
            A new dict of JSON values (under 1 KB as JSON) that fits a trainer's
            `data_schedule`: the schema name, the text's length in characters (`chars`) and
            the SHA-256 of its UTF-8 bytes (`sha256`, hex), `block_size`, `batch_size`,
            `seed`, `val_fraction`, and the position: `train_batches` and `val_batches`,
            the batches drawn from each split.
        """
        return {
            "schema": SCHEMA,
            "chars": len(self._ids),
            "sha256": self._sha256,
            "block_size": self._block_size,
            "batch_size": self._batch_size,
            "seed": self._seed,
            "val_fraction": self._val_fraction,
            "train_batches": self._drawn["train"],
            "val_batches": self._drawn["val"],
        }

    @classmethod
    def from_state(
        cls, path: str | os.PathLike[str] | None, state: dict[str, Any], *, text: str | None = None
    ) -> TextData:
        """Continue from a `state()`: the same batches, bit for bit, as the run it came from.

        Args:
            path: the same text file, or None with `text`.
            state: a dict returned by `state()` (possibly through JSON).
            text: the same text as a str (for a TextData made by `from_string`), with
                `path` None.

        Returns:
            A new TextData whose next batch of each split is the one the saved run would
            have drawn next.

        Raises:
            ValueError: a state that is not one `state()` returns (a field missing, unknown,
                of the wrong type or out of range: the message names it), or a text other
                than the recorded one (its length or SHA-256 differs).
            TypeError: neither or both of `path` and `text`, or either refused as the
                constructor and `from_string` refuse them.
        """
        api = "TextData.from_state"
        _check_fields(state, api)
        try:
            _settings(*(state[k] for k in _SETTINGS), api=f"{api}: state")
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        settings: dict[str, Any] = {key: state[key] for key in _SETTINGS}
        if path is not None and text is None:
            data = cls(path, **settings)
        elif path is None and text is not None:
            data = cls.from_string(text, **settings)
        else:
            raise TypeError(f"{api}: pass the text file as path, or path=None and text=")
        for field, have in (("chars", len(data._ids)), ("sha256", data._sha256)):
            if state[field] != have:
                raise ValueError(
                    f"{api}: state['{field}'] = {state[field]!r} does not match this text "
                    f"({have!r}): not the text the state was saved with"
                )
        data._drawn = {"train": state["train_batches"], "val": state["val_batches"]}
        return data


def shipped_text() -> str:
    """The text that ships with the package: the English documentation topics of CPython
    3.11.7's `pydoc_data/topics.py` in sorted key order, 464,970 characters, 103 distinct
    (PSF licence; provenance and SHA-256 in mojolearn/data/README.md).

    Returns:
        The text, a new str.
    """
    import gzip

    with gzip.open(SHIPPED, "rb") as f:
        return f.read().decode("utf-8")


def window_seed(seed: int, split: str, k: int) -> int:
    """The SplitMix64 seed of batch `k` of `split` ("train" or "val") of a TextData seeded
    with `seed` (docs/ARITHMETIC.md, "Text windows")."""
    tag = f"mojolearn.text-windows.v1:{seed}:{split}:{k}"
    return int.from_bytes(hashlib.sha256(tag.encode("ascii")).digest()[:8], "little")


def _settings(*values: Any, api: str) -> tuple[int, int, int, float]:
    """The constructor's settings checked, in `_SETTINGS` order (the message names each)."""
    block_size, batch_size, seed, val_fraction = values
    for name, value in (("block_size", block_size), ("batch_size", batch_size)):
        if isinstance(value, bool) or type(value) is not int:
            raise TypeError(f"{api}: {name} must be an int >= 1, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{api}: {name} must be an int >= 1, got {value}")
    try:
        seed = _rng._check_seed(seed)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{api}: {exc}") from None
    if not isinstance(val_fraction, float):
        raise TypeError(
            f"{api}: val_fraction must be a float in (0, 1), got {type(val_fraction).__name__}"
        )
    if not (math.isfinite(val_fraction) and 0 < val_fraction < 1):
        raise ValueError(f"{api}: val_fraction must be a float in (0, 1), got {val_fraction}")
    return block_size, batch_size, seed, float(val_fraction)


def _check_fields(state: Any, api: str) -> None:
    """Refuse, naming the field, a state that `TextData.state()` could not have returned."""
    _check_state_fields(state, api, "TextData", _FIELDS, SCHEMA)
    for key in ("chars", "train_batches", "val_batches"):
        v = state[key]
        if isinstance(v, bool) or type(v) is not int or not 0 <= v <= _MAX_COUNT:
            raise ValueError(
                f"{api}: state['{key}'] must be an int in [0, {_MAX_COUNT}], got {v!r}"
            )
    sha = state["sha256"]
    if type(sha) is not str or len(sha) != 64 or sha.strip("0123456789abcdef"):
        raise ValueError(f"{api}: state['sha256'] must be 64 lowercase hex digits, got {sha!r}")
