"""`mojolearn.Batches`: shuffled mini-batches of (X, y) without NumPy, resumable mid-epoch.

The epoch order is the command line's (docs/ARITHMETIC.md, "Batches"): epoch `e` visits the rows
in the order `_mlp.rng.epoch_order(seed, e, n)`, a Fisher–Yates shuffle drawn from SplitMix64, so
the same seed gives the same batches on every machine and Python version. The whole position
is a few integers (`state()`), small enough for a trainer's `data_schedule`.
"""

from __future__ import annotations

import array as _pyarray

from ._buffers.array import Array, _flatten, dtype_of
from ._buffers.intake import input_f32, input_labels, probe
from ._mlp import rng as _rng
from ._mlp.rng import epoch_order

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from ._buffers.types import BufferLike, PyArray

SCHEMA = "mojolearn.batches.v1"
_FIELDS = (
    "schema",
    "n",
    "features",
    "batch_size",
    "seed",
    "shuffle",
    "drop_last",
    "epoch",
    "batch",
)
_MAX_EPOCH = (1 << 63) - 1  # a data_schedule integer fits in 64 bits


class Batches:
    """Mini-batches `(Xb, yb)` of a dataset, one epoch per `iter()`, resumable mid-epoch.

    Epoch `e` (0-based) visits the rows in a seeded Fisher–Yates order drawn from the project's
    SplitMix64 (docs/ARITHMETIC.md, "Batches"; the command line's order), or in file order
    with `shuffle=False`, and cuts it into consecutive batches of `batch_size` rows: the last
    one is shorter when `batch_size` does not divide the rows, or dropped with `drop_last`.
    Each batch is gathered with `Array.take` into new owned Arrays: Xb float32 (rows, ...),
    yb int32 (rows, ...) (or float32: a regressor's targets), each of its source's rank.

    The object is its position: iterating advances it batch by batch (a batch counts as
    consumed once it is yielded), `iter()` after an epoch's last batch starts the next epoch,
    and `iter()` after a `break` continues the epoch where it stopped. `state()` is that
    position as a small JSON object; `Batches.from_state(X, y, state)` continues from it,
    bit for bit.

    X and y are read through the package's intake when an iteration starts (the first batch
    of each `iter()`: every epoch, and an epoch continued after a `break`), so writes to them
    between epochs (in-place augmentation, relabelling) show in the next epoch's batches, for
    every input kind. What differs is whether a write within an epoch shows too:

    - read where they lie, so a write shows in every later batch, even within the epoch: a
      mojolearn.Array, a NumPy array, an `array.array` or `memoryview` (its export is held:
      an `array.array` then refuses to resize), or another `__dlpack__` producer (through
      its capsule), when C-contiguous float32 (X) or native int32 (y);
    - copied when the iteration starts, so a write shows from the next `iter()` on: a CPU
      torch tensor (nothing pins a torch tensor's memory against `resize_`, so it is never
      read in place across calls; the copy is made with the GIL held), any strided buffer,
      and labels of another integer dtype (converted to int32: torch's default int64
      labels among them).

    A source whose shape changed since construction is refused when the iteration starts
    (ValueError; the position is unchanged).

    Args:
        X: float32 examples of shape (n, ...), n >= 1, any rank from 2 (features, (T, D)
            sequences, (C, H, W) images): any buffer the package accepts (a mojolearn.Array,
            NumPy array, torch tensor, array.array, memoryview); float64 or a list of numbers
            is rounded once to float32 (as the trainers round it), each time it is read.
        y: n targets, shape (n, ...): integer labels (any integer dtype, or a list of ints;
            converted to int32 when it is not int32 already) or float values (a regressor's:
            float32 kept as they are, float64 or a list holding a float rounded once).
        batch_size: rows per batch, an int >= 1.
        seed: the shuffle's seed, an int in [0, 2**64) (recorded even when `shuffle` is off).
        shuffle: a new seeded order every epoch (True), or rows in order (False).
        drop_last: drop each epoch's short last batch.

    Raises:
        TypeError: X not float32 or float64, y neither integers nor floats, or an argument of
            the wrong type.
        ValueError: shapes that disagree, no rows, a batch_size < 1, a seed outside
            [0, 2**64), or `drop_last` with fewer rows than `batch_size` (no batch at all).

    Example:
        >>> X = mojolearn.Array((10, 4))
        >>> y = mojolearn.Array(10, "<i4")
        >>> batches = mojolearn.Batches(X, y, 4, seed=0)
        >>> [Xb.shape for Xb, yb in batches]
        [(4, 4), (4, 4), (2, 4)]
        >>> batches.state()["epoch"]
        1
    """

    __slots__ = (
        "_source",
        "_X",
        "_y",
        "_n",
        "_batch_size",
        "_seed",
        "_shuffle",
        "_drop_last",
        "_epoch",
        "_batch",
        "_order",
        "_order_epoch",
    )

    def __init__(
        self,
        X: BufferLike,
        y: BufferLike,
        batch_size: int,
        *,
        seed: int,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        self._source = (X, y)
        self._X, self._y = _dataset(X, y, "Batches")
        self._n = n = self._X._shape[0]
        if isinstance(batch_size, bool) or type(batch_size) is not int or batch_size < 1:
            raise _bad("Batches", "batch_size", "an int >= 1", batch_size)
        for name, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
            if type(flag) is not bool:
                raise TypeError(f"Batches: {name} must be a bool, got {type(flag).__name__}")
        try:
            self._seed = _rng._check_seed(seed)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"Batches: {exc}") from None
        if drop_last and batch_size > n:
            raise ValueError(
                f"Batches: drop_last with batch_size {batch_size} > {n} rows leaves no batch"
            )
        self._batch_size, self._shuffle, self._drop_last = batch_size, shuffle, drop_last
        self._epoch, self._batch = 0, 0
        self._order: PyArray | None = None
        self._order_epoch = -1

    def __len__(self) -> int:
        """Batches per epoch."""
        n, size = self._n, self._batch_size
        return n // size if self._drop_last else -(-n // size)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to (0-based)."""
        return self._epoch

    def __iter__(self) -> Iterator[tuple[Array, Array]]:
        """The rest of the current epoch, batch by batch, advancing the position."""
        self._reread()
        epoch = self._epoch
        per_epoch = len(self)
        order = self._epoch_order(epoch)
        size = self._batch_size
        while self._epoch == epoch:  # another iterator may have finished this epoch
            b = self._batch
            rows = order[b * size : (b + 1) * size]
            picks = Array._wrap(rows, (len(rows),), "<i8")
            Xb, yb = self._X.take(picks), self._y.take(picks)
            if b + 1 == per_epoch:
                self._epoch, self._batch = epoch + 1, 0
            else:
                self._batch = b + 1
            yield Xb, yb

    def _reread(self) -> None:
        """X and y as they are now (a copied kind's writes since the last read show), of the
        shape they had at construction."""
        self._X, self._y = _dataset(*self._source, "Batches", self._X._shape)

    def _epoch_order(self, epoch: int) -> PyArray:
        """The row order of `epoch` as int64 (cached: an epoch is drawn once)."""
        if self._order_epoch != epoch or self._order is None:
            n = self._n
            rows = epoch_order(self._seed, epoch, n) if self._shuffle else range(n)
            self._order, self._order_epoch = _pyarray.array("q", rows), epoch
        return self._order

    def state(self) -> dict[str, Any]:
        """The position and the settings, as a small JSON object.

        Returns:
            A new dict of JSON values (under 1 KB as JSON) that fits a trainer's
            `data_schedule`: the schema name, `n` and `features` (X's rows and the values
            of one row), `batch_size`,
            `seed`, `shuffle`, `drop_last`, and the position: `epoch` and `batch` (the index,
            in that epoch, of the next batch to yield).
        """
        return {
            "schema": SCHEMA,
            "n": self._n,
            "features": self._X._size // self._n,
            "batch_size": self._batch_size,
            "seed": self._seed,
            "shuffle": self._shuffle,
            "drop_last": self._drop_last,
            "epoch": self._epoch,
            "batch": self._batch,
        }

    @classmethod
    def from_state(cls, X: BufferLike, y: BufferLike, state: dict[str, Any]) -> Batches:
        """Continue from a `state()`: the same batches, bit for bit, as the run it came from.

        Args:
            X: the same examples (n rows of `features` values, as recorded in the state).
            y: the same n targets.
            state: a dict returned by `state()` (possibly through JSON).

        Returns:
            A new Batches whose next batch is the one the saved run would have yielded next.

        Raises:
            ValueError: a state that is not one `state()` returns (a field missing, unknown,
                of the wrong type or out of range: the message names it), or one whose `n`
                or `features` do not match X.
            TypeError: X or y as `Batches` refuses them.
        """
        api = "Batches.from_state"
        _check_fields(state, api)
        x_arr, y_arr = _dataset(X, y, api)
        shape = x_arr._shape
        for field, have in (("n", shape[0]), ("features", x_arr._size // shape[0])):
            if state[field] != have:
                raise ValueError(
                    f"{api}: state['{field}'] = {state[field]} does not match X of shape {shape}"
                )
        batches = cls(
            x_arr,
            y_arr,
            state["batch_size"],
            seed=state["seed"],
            shuffle=state["shuffle"],
            drop_last=state["drop_last"],
        )
        if not state["batch"] < len(batches):
            raise ValueError(
                f"{api}: state['batch'] must be in [0, {len(batches)}) (batches per epoch), "
                f"got {state['batch']}"
            )
        batches._epoch, batches._batch = state["epoch"], state["batch"]
        batches._source = (X, y)  # later iterations read the caller's objects, not the copies
        return batches


def _dataset(X: Any, y: Any, api: str, shape: tuple[int, ...] | None = None) -> tuple[Array, Array]:
    """X as a float32 (n, ...) Array with n >= 1 and y as n targets (integers as int32, or
    float32 kept: a regressor's), each of any rank, through the package's intake (borrowed when
    already so, else copied); `shape`: the one X had when the Batches was made (a later read)."""
    try:
        x_arr = input_f32(X, None, "X")
        if shape is not None and x_arr._shape != shape:
            raise ValueError(
                f"X changed shape since the Batches was made: {shape}, now {x_arr._shape}"
            )
        y_arr = input_f32(y, None, "y") if _is_float(y) else input_labels(y, None, "y")
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{api}: {exc}") from None
    if len(x_arr._shape) < 2 or x_arr._shape[0] == 0:
        raise ValueError(
            f"{api}: X must have shape (n, ...) with n >= 1 rows, got shape {x_arr._shape}"
        )
    n = x_arr._shape[0]
    if not y_arr._shape or y_arr._shape[0] != n:
        raise ValueError(f"{api}: y must have {n} rows to match X, got shape {y_arr._shape}")
    return x_arr, y_arr


def _is_float(obj: Any) -> bool:
    """Whether `obj` holds float32 or float64 values, or is a list holding a float (targets of
    a regressor; labels are integers)."""
    if isinstance(obj, (list, tuple)):
        try:
            return any(isinstance(v, float) for v in _flatten(obj)[0])
        except ValueError:
            return False  # the integer path refuses it by name
    try:
        layout = probe(obj)
    except (TypeError, ValueError):
        return False  # the integer path refuses it by name
    return dtype_of(layout.format, layout.itemsize) in ("<f4", "<f8")


def _bad(api: str, name: str, expected: str, got: object) -> Exception:
    if isinstance(got, bool) or type(got) is not int:
        return TypeError(f"{api}: {name} must be {expected}, got {type(got).__name__}")
    return ValueError(f"{api}: {name} must be {expected}, got {got}")


def _check_state_fields(
    state: Any, api: str, owner: str, fields: tuple[str, ...], schema: str
) -> None:
    """Refuse, naming the field, a position that `{owner}.state()` could not have returned:
    not a dict, a field missing or foreign, another schema (`Batches`, `TextData`)."""
    if type(state) is not dict:
        raise ValueError(
            f"{api}: state must be a dict from {owner}.state(), got {type(state).__name__}"
        )
    for key in fields:
        if key not in state:
            raise ValueError(f"{api}: state['{key}'] is missing")
    extra = sorted(str(k) for k in state if k not in fields)
    if extra:
        raise ValueError(f"{api}: state['{extra[0]}'] is not a {owner} field")
    if state["schema"] != schema:
        raise ValueError(f"{api}: state['schema'] must be {schema!r}, got {state['schema']!r}")


def _check_fields(state: Any, api: str) -> None:
    """Refuse, naming the field, a state that `Batches.state()` could not have returned."""
    _check_state_fields(state, api, "Batches", _FIELDS, SCHEMA)
    limits = {"n": 1, "features": 0, "batch_size": 1, "seed": 0, "epoch": 0, "batch": 0}
    for key, lo in limits.items():
        v = state[key]
        hi = (1 << 64) - 1 if key == "seed" else _MAX_EPOCH
        if isinstance(v, bool) or type(v) is not int or not lo <= v <= hi:
            raise ValueError(f"{api}: state['{key}'] must be an int in [{lo}, {hi}], got {v!r}")
    for key in ("shuffle", "drop_last"):
        if type(state[key]) is not bool:
            raise ValueError(f"{api}: state['{key}'] must be a bool, got {state[key]!r}")
