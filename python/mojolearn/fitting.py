"""`mojolearn.fit`: a small training loop over the public API, with early stopping and resume.

The loop is the command line's `--val-fraction` / `--patience` loop (cli/run.py) in Python:
epochs of seeded `Batches`, `train_step` on each batch, the validation rows scored at each
epoch's end, "improved" meaning a validation loss strictly below the best so far, and a run that
stops once `patience` epochs in a row have not improved. With a checkpoint path the state is
saved at every epoch's end: the data position and the loop's state (a few values, never the
history) go into the trainer's `data_schedule` under the key "fit" (the user's own keys kept), the history into a side file, the best state into
`PATH.best`; calling `fit` again on the same path continues the run exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

from ._buffers.array import Array
from ._buffers.intake import input_f32, input_labels
from ._mlp import batches as _mlp_batches
from ._mlp import lr_schedule as _lrs
from ._mlp.core import MLPCore
from ._model.trainer import Trainer
from ._runtime import files as _files
from .batches import Batches

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from ._buffers.types import BufferLike

SCHEMA = "mojolearn.fit.v1"
BEST_SUFFIX = ".best"  # the best state of a run with `val`: PATH.best (the command line's name)
HISTORY_SUFFIX = ".fit-history.json"  # the history of a run with a checkpoint: beside PATH
_API = "fit"
# The record's fields that must match for a checkpoint to continue this call's run (the
# rest is the position: epoch, step, best, bad_epochs, and the Batches' epoch and batch).
_SETUP = ("data_sha256", "val", "patience")
FIT_KEY = "fit"  # where the record lies in the trainer's data_schedule
_BATCHES_SETUP = ("n", "features", "batch_size", "seed", "shuffle", "drop_last")


def fit(
    trainer: MLPCore | Trainer,
    X: BufferLike,
    y: BufferLike,
    *,
    epochs: int,
    batch_size: int,
    val: tuple[BufferLike, BufferLike] | None = None,
    patience: int | None = None,
    seed: int,
    checkpoint: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """Train `trainer` on (X, y) for `epochs` epochs of shuffled mini-batches; the history.

    Each epoch iterates a `Batches(X, y, batch_size, seed=seed)` and calls `train_step` on
    every batch; `trainer.evaluate(*val)` then scores the validation rows, and an epoch
    improves when its validation loss is strictly below the best so far. With `patience` the
    run stops after that many epochs in a row without improvement. Every epoch's end puts the
    run's record (schema "mojolearn.fit.v1": the batches' position, data hashes, epochs done,
    best epoch, epochs without improvement) into the trainer's `data_schedule` under the key
    `"fit"`, keeping the schedule's other keys (the user's own record of the data); a
    checkpoint written before this layout, with the record as the whole schedule, continues.

    With `checkpoint=PATH` every epoch ends with a save to PATH (the history beside it in
    `PATH.fit-history.json`; with `val`, the best state in `PATH.best`). When PATH exists it
    must hold this same run (data, `batch_size`, `seed`, `val`, `patience`): the run continues
    from it, bit for bit as if never interrupted (`epochs` may grow), and the whole run's
    history is returned. A custom `lr_schedule` is recorded by class only: set
    `trainer.lr_schedule` to the same schedule before calling `fit` again.

    Args:
        trainer: a `SmallMLPTrainer`, `MLPTrainer` or `Trainer`.
        X: float32 examples, n >= 1, every value finite (any buffer `Batches` takes; float64
            or a list is rounded once to float32; read once, when `fit` is called): (n, inputs) for an
            MLP trainer, (n, *input_shape) (or (n, prod(input_shape))) for a `Trainer`.
        y: the n targets `train_step` takes: integer labels in [0, classes), (n,) (or
            (n, T) for a `Trainer` whose outputs are (T, classes)); for a `"mse"` Trainer
            finite float32 or float64 (n, *output_shape) (or (n,) for one output).
        epochs: the epochs to run in all (a resumed run's included), an int >= 1.
        batch_size: rows per batch, an int in [1, trainer.max_rows].
        val: the validation rows `(Xv, yv)`, each as X and y, or None (a `Trainer` scores
            them in one `evaluate`: at most `max_rows` examples).
        patience: stop after this many epochs in a row without improvement, an int >= 1
            (needs `val`), or None (run all epochs).
        seed: the shuffle's seed, an int in [0, 2**64).
        checkpoint: a file path (str or os.PathLike) to save to and resume from, or None.

    Returns:
        One dict per epoch done, in order: "epoch" (1-based), "step" (the trainer's step at
        the epoch's end), "loss" (the epoch's mean training loss per row) and, with `val`,
        "val_loss", "val_accuracy" (`trainer.evaluate`'s; an `"mse"` Trainer's entries have
        "val_r2", its R², instead) and "improved".

    Raises:
        TypeError: an argument of the wrong type (the message names it).
        ValueError: an argument out of range; shapes or labels that do not fit the trainer; a
            NaN or infinity in X, float targets or val (naming the argument, the example
            and the element); a `Trainer`'s val over its `max_rows`; `patience`
            without `val`; a PATH or history file that is not this run's; a run with a custom
            `lr_schedule` the trainer lacks. Every refusal comes before anything changes.
        RuntimeError: a step the trainer refuses mid-run (a non-finite result): the trainer
            keeps its last completed step, the checkpoint its last epoch's end.
        OSError: a checkpoint file that cannot be read or written.

    Example:
        >>> X = mojolearn.Array.from_list([[0.1 * (i % 7)] * 8 for i in range(64)])
        >>> y = mojolearn.Array.from_list([i % 3 for i in range(64)], "<i4")
        >>> trainer = mojolearn.MLPTrainer([8, 16, 3], seed=0, data_schedule={"seed": 0})
        >>> history = mojolearn.fit(
        ...     trainer, X, y, epochs=5, batch_size=16, val=(X, y), patience=2, seed=0
        ... )
        >>> history[-1]["step"], sorted(history[0])
        (20, ['epoch', 'improved', 'loss', 'step', 'val_accuracy', 'val_loss'])
    """
    run = _Run(trainer, X, y, epochs, batch_size, val, patience, seed, checkpoint)
    while run.epoch < epochs and not run.patience_spent():
        _epoch(run)
    return run.history


class _Run:
    """The checked arguments and the loop's state; a checkpoint's run restored into them."""

    def __init__(
        self,
        trainer: Any,
        X: Any,
        y: Any,
        epochs: Any,
        batch_size: Any,
        val: Any,
        patience: Any,
        seed: Any,
        checkpoint: Any,
    ) -> None:
        if not isinstance(trainer, (MLPCore, Trainer)):
            raise TypeError(
                f"{_API}: trainer must be a SmallMLPTrainer, MLPTrainer or Trainer, "
                f"got {type(trainer).__name__}"
            )
        self.trainer = trainer
        self.user = _user_schedule(trainer.data_schedule)
        self.metric = _metric(trainer)
        _positive("epochs", epochs)
        _positive("batch_size", batch_size)
        if batch_size > trainer.max_rows:
            raise ValueError(
                f"{_API}: batch_size must be at most the trainer's max_rows "
                f"{trainer.max_rows}, got {batch_size}"
            )
        self.X, self.y = _data(trainer, X, y, "X", "y", None)
        self.val = _val(trainer, val)
        if patience is not None:
            _positive("patience", patience)
            if val is None:
                raise ValueError(f"{_API}: patience needs val (the rows it watches), got None")
        self.patience: int | None = patience
        self.batches = _batches(self.X, self.y, batch_size, seed)
        self.paths = None if checkpoint is None else _paths(checkpoint)
        self.setup = self._setup_record()
        self.epoch, self.bad_epochs = 0, 0
        self.best: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        if self.paths is not None and os.path.exists(self.paths[0]):
            self._resume()
        elif self.paths is not None:
            _remove_earlier_best(self.paths[1])

    def patience_spent(self) -> bool:
        return self.patience is not None and self.bad_epochs >= self.patience

    def _setup_record(self) -> dict[str, Any]:
        """What identifies the run: its data (hashed), validation rows and patience."""
        val = None
        if self.val is not None:
            val = {"n": self.val[0]._shape[0], "sha256": _sha256(*self.val)}
        return {"data_sha256": _sha256(self.X, self.y), "val": val, "patience": self.patience}

    def record(self) -> dict[str, Any]:
        """The trainer's `data_schedule` at an epoch's end: setup, position, stopping state."""
        return {
            "schema": SCHEMA,
            **self.setup,
            "batches": self.batches.state(),
            "epoch": self.epoch,
            "step": self.trainer.step_,
            "best": self.best,
            "bad_epochs": self.bad_epochs,
        }

    def schedule(self) -> dict[str, Any]:
        """The trainer's `data_schedule` at an epoch's end: the user's keys and the record."""
        return {**self.user, FIT_KEY: self.record()}

    def _resume(self) -> None:
        """Continue the run PATH holds: checked whole (its record, its history) before the
        trainer takes its state, so a refusal changes nothing."""
        assert self.paths is not None
        path, _, history_path = self.paths
        shown = _files.shown(path)
        state, step = _saved(self.trainer, path, shown)
        rec = _fit_record(state["data_schedule"])
        self._check_record(rec, shown)
        history = _read_history(history_path, rec, self.metric)
        if step != rec["step"]:
            raise ValueError(
                f"{_API}: checkpoint {shown}: its record is at step {rec['step']}, "
                f"its state at step {step}"
            )
        batches = Batches.from_state(self.X, self.y, rec["batches"])
        _check_schedule(self.trainer, state, shown)
        try:
            self.trainer.load_state_dict(state)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{_API}: checkpoint {shown}: {exc}") from None
        self.batches, self.history = batches, history
        self.user = _user_schedule(state["data_schedule"])
        self.epoch, self.best, self.bad_epochs = rec["epoch"], rec["best"], rec["bad_epochs"]

    def _check_record(self, rec: Any, shown: str) -> None:
        """Refuse, naming the field, a record that is not this run's (or not a fit's)."""
        if type(rec) is not dict or rec.get("schema") != SCHEMA:
            raise ValueError(
                f"{_API}: checkpoint {shown} exists and holds no fit record (its "
                f"data_schedule is not {SCHEMA!r}); pass another path or remove it"
            )
        here = {**self.setup, **{k: self.batches.state()[k] for k in _BATCHES_SETUP}}
        there = {k: rec.get(k) for k in _SETUP}
        batches = rec.get("batches")
        there.update({k: batches.get(k) for k in _BATCHES_SETUP} if type(batches) is dict else {})
        for key, value in here.items():
            if there.get(key) != value:
                raise ValueError(
                    f"{_API}: checkpoint {shown} holds another run: its {key} is "
                    f"{there.get(key)!r}, this call's {value!r}"
                )
        if rec["batches"]["epoch"] != rec.get("epoch") or rec["batches"]["batch"] != 0:
            raise ValueError(f"{_API}: checkpoint {shown}: its record is not at an epoch's end")


def _fit_record(schedule: Any) -> Any:
    """The fit record a checkpoint's `data_schedule` holds: under "fit", or (a checkpoint
    written before the record moved there) the whole schedule."""
    if type(schedule) is dict and type(schedule.get(FIT_KEY)) is dict:
        return schedule[FIT_KEY]
    return schedule


def _user_schedule(schedule: Any) -> dict[str, Any]:
    """The schedule's keys that are not a fit record (none, for an older whole-schedule one)."""
    if type(schedule) is not dict or schedule.get("schema") == SCHEMA:
        return {}
    return {k: v for k, v in schedule.items() if k != FIT_KEY}


def _saved(trainer: MLPCore | Trainer, path: str, shown: str) -> tuple[dict[str, Any], int]:
    """The checked state of checkpoint `path` as the trainer's class reads its files (no
    trainer built, nothing changed), and that state's step (where each kind keeps it)."""
    try:
        state = type(trainer)._load(path, False, None)
    except ValueError as exc:
        raise ValueError(f"{_API}: checkpoint {shown}: {exc}") from None
    step = state["optimizer"]["step"] if isinstance(trainer, MLPCore) else state["step"]
    return state, step


def _check_schedule(trainer: MLPCore | Trainer, state: dict[str, Any], shown: str) -> None:
    """A custom lr_schedule is recorded by class only: the trainer must already run one of
    that class. Refused here, because the load's own message advises `lr_schedule=`, which
    `fit` does not take."""
    rec = state.get("lr_schedule")
    if rec is None or rec["kind"] != "custom":
        return
    current = trainer.lr_schedule
    if current is not None and _lrs.record(current) == rec:
        return
    got = "none" if current is None else f"one of class {type(current).__qualname__}"
    raise ValueError(
        f"{_API}: checkpoint {shown}: its lr_schedule is a custom schedule of class "
        f"{rec['class']}, which a checkpoint cannot hold, and the trainer has {got}: set "
        f"trainer.lr_schedule = <the same {rec['class']} schedule> before calling fit"[:400]
    )


def _epoch(run: _Run) -> None:
    """One epoch: its steps, its validation score and stopping state, its history entry, the
    record in the trainer, and with a checkpoint the saves (history, best, checkpoint)."""
    trainer = run.trainer
    losses: list[float] = []
    rows = 0
    for Xb, yb in run.batches:
        n = Xb._shape[0]
        losses.append(float(trainer.train_step(Xb, yb)["loss"]) * n)
        rows += n
    run.epoch += 1
    entry: dict[str, Any] = {"epoch": run.epoch, "step": trainer.step_}
    entry["loss"] = math.fsum(losses) / rows
    improved = False
    if run.val is not None:
        scores: dict[str, Any] = dict(trainer.evaluate(*run.val))
        loss = scores["loss"]
        improved = run.best is None or loss < run.best["val_loss"]
        if improved:
            run.best = {"epoch": run.epoch, "step": trainer.step_, "val_loss": loss}
            run.bad_epochs = 0
        else:
            run.bad_epochs += 1
        entry.update({"val_loss": loss, f"val_{run.metric}": scores[run.metric]})
        entry["improved"] = improved
    run.history.append(entry)
    trainer.data_schedule = run.schedule()
    if run.paths is not None:
        path, best, history = run.paths
        _files.write_atomic(history, _history_bytes(run.history), f"{_API}: history")
        if improved:
            trainer.save_checkpoint(best)
        trainer.save_checkpoint(path)


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or type(value) is not int:
        raise TypeError(f"{_API}: {name} must be an int >= 1, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{_API}: {name} must be an int >= 1, got {value}")


def _metric(trainer: MLPCore | Trainer) -> str:
    """The `evaluate` score the history records besides the loss (as "val_" + it): R² for a
    regressor (accuracy means nothing there), accuracy for every classifier."""
    mse = isinstance(trainer, Trainer) and trainer.loss == "mse"
    return "r2" if mse else "accuracy"


def _expects(trainer: MLPCore | Trainer) -> tuple[tuple[int, ...], tuple[int, ...], int | None]:
    """One example's input shape, its target's shape, and the classes (None: float32 targets,
    an MSE model's)."""
    if isinstance(trainer, MLPCore):
        sizes = trainer.layer_sizes
        return (sizes[0],), (), sizes[-1]
    out = trainer.output_shape
    if trainer.loss == "mse":
        return trainer.input_shape, out, None
    return trainer.input_shape, out[:-1], out[-1]


def _data(
    trainer: MLPCore | Trainer, X: Any, y: Any, xname: str, yname: str, arg: str | None
) -> tuple[Array, Array]:
    """(X, y) as the trainer's steps take them (float32 finite examples; int32 labels in
    [0, classes), or finite float32 targets), n >= 1, checked against the trainer up front (a
    batch refused mid-epoch would leave half an epoch done). `arg`: the argument the messages
    name (val for val's pair; None: each its own)."""
    inputs, targets, classes = _expects(trainer)
    mlp = isinstance(trainer, MLPCore)  # its intake names the rank it wants
    try:
        x_arr = input_f32(X, 2 if mlp else None, xname)
        if classes is None:
            y_arr = input_f32(y, None, yname)
        else:
            y_arr = input_labels(y, 1 if mlp else None, yname)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{_API}: {exc}") from None
    n = x_arr._shape[0] if x_arr._shape else 0
    if n == 0:
        raise ValueError(f"{_API}: {xname} must have at least one row, got shape {x_arr._shape}")
    x_arr = _examples(x_arr, inputs, xname)
    want = (n, *targets)
    # One output's float targets may come as (n,) too, as `Trainer.train_step` takes them.
    one = classes is None and targets == (1,)
    if y_arr._shape != want and not (one and y_arr._shape == (n,)):
        also = f" (or {(n,)})" if one else ""
        raise ValueError(
            f"{_API}: {yname} must have shape {want}{also} to match {xname}, got {y_arr._shape}"
        )
    words = ("row", "column") if mlp else ("example", "element")
    if classes is not None:
        labels = y_arr._mv
        lo, hi = min(labels), max(labels)
        if lo < 0 or hi >= classes:
            raise ValueError(
                f"{_API}: {yname} must hold labels in [0, {classes}) (the trainer's classes), "
                f"got {lo if lo < 0 else hi}"
            )
    else:
        _finite(y_arr, yname, arg or yname, words)
    _finite(x_arr, xname, arg or xname, words)
    return x_arr, y_arr


def _examples(x_arr: Array, inputs: tuple[int, ...], xname: str) -> Array:
    """X of shape (n, *inputs), a flat (n, prod(inputs)) taken as it (as `Trainer` does)."""
    shape = x_arr._shape
    width = math.prod(inputs)
    if shape[1:] == inputs:
        return x_arr
    if len(inputs) > 1 and shape[1:] == (width,):
        return x_arr.reshape((shape[0], *inputs))
    if len(inputs) == 1 and len(shape) == 2:
        raise ValueError(
            f"{_API}: {xname} must have {width} columns (the trainer's inputs), got {shape[1]}"
        )
    also = f" or (n, {width})" if len(inputs) > 1 else ""
    raise ValueError(
        f"{_API}: {xname} must have shape (n, {', '.join(map(str, inputs))}){also} (the "
        f"trainer's input_shape), got {shape}"
    )


def _finite(arr: Array, name: str, arg: str, words: tuple[str, str]) -> None:
    """Refuse a NaN or infinity before the first step (the trainer would refuse it only at
    its batch, epochs in, at a row of the shuffled batch). One scan in the binding; only a
    refusal looks for where, as the example (row) and element (column) of the caller's data."""
    if _mlp_batches.all_finite(arr, name):
        return
    per = arr._size // arr._shape[0]
    flat = arr._mv
    at = next(i for i in range(len(flat)) if not math.isfinite(flat[i]))
    raise ValueError(
        f"{_API}: {arg} must hold finite values: {name} {words[0]} {at // per}, {words[1]} "
        f"{at % per} is {flat[at]!r}"
    )


def _val(trainer: MLPCore | Trainer, val: Any) -> tuple[Array, Array] | None:
    if val is None:
        return None
    if type(val) not in (tuple, list) or len(val) != 2:
        raise TypeError(
            f"{_API}: val must be a pair (Xv, yv) or None, got {type(val).__name__}"
            + (f" of length {len(val)}" if type(val) in (tuple, list) else "")
        )
    pair = _data(trainer, val[0], val[1], "val[0]", "val[1]", "val")
    if isinstance(trainer, Trainer) and pair[0]._shape[0] > trainer.max_rows:
        raise ValueError(
            f"{_API}: val has {pair[0]._shape[0]} examples, more than the trainer's max_rows "
            f"{trainer.max_rows} (Trainer.evaluate scores them as one batch)"
        )
    return pair


def _batches(X: Array, y: Array, batch_size: int, seed: Any) -> Batches:
    try:
        return Batches(X, y, batch_size, seed=seed)
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc).replace("Batches: ", f"{_API}: ", 1)) from None


def _paths(checkpoint: Any) -> tuple[str, str, str]:
    """(PATH, PATH.best, PATH's history), each the real path, checked before anything is
    written: not an existing non-regular file, in a writable folder that exists."""
    what = f"{_API}: checkpoint"
    try:
        if isinstance(checkpoint, bytes) or not isinstance(checkpoint, (str, os.PathLike)):
            raise TypeError(
                f"{what} must be a str or os.PathLike path, got {type(checkpoint).__name__}"
            )
        real = _files.resolve(checkpoint, what)[0]
        side = [_files.resolve(real + s, what)[0] for s in (BEST_SUFFIX, HISTORY_SUFFIX)]
    except OSError as exc:
        raise ValueError(f"{what} {_files.shown(checkpoint)}: {exc.strerror or exc}") from None
    folder = os.path.dirname(real)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ValueError(
            f"{what} {_files.shown(checkpoint)}: the folder {_files.shown(folder)} "
            f"{'is not writable' if os.path.isdir(folder) else 'does not exist'}"
        )
    return real, side[0], side[1]


def _remove_earlier_best(best: str) -> None:
    """A fresh run owns PATH.best: an earlier run's goes, so it never holds another run's
    state (the command line does the same)."""
    if os.path.isfile(best):
        os.remove(best)


def _sha256(X: Array, y: Array) -> str:
    digest = hashlib.sha256(X._mv.cast("B"))
    digest.update(y._mv.cast("B"))
    return digest.hexdigest()


def _history_bytes(history: list[dict[str, Any]]) -> bytes:
    return (json.dumps(history, allow_nan=False) + "\n").encode()


def _read_history(path: str, rec: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    """The first `rec["epoch"]` entries of a run's history file, each checked to be what
    `_epoch` writes for this record's run (it may hold one more: a save cut between the
    history and the checkpoint); `metric` is the trainer's score (`_metric`). Junk is refused,
    naming the file and what is wrong, so it never comes back as the run's history."""
    shown = _files.shown(path)
    epochs = rec["epoch"]
    try:
        with open(path, "rb") as f:
            history = json.loads(f.read(1 << 26), parse_constant=_no_constant)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{_API}: the checkpoint's history {shown} cannot be read ({exc}); "
            f"the run cannot continue with its history"
        ) from None
    if type(history) is not list or not epochs <= len(history) <= epochs + 1:
        got = f"{len(history)} entries" if type(history) is list else type(history).__name__
        raise ValueError(
            f"{_API}: the checkpoint's history {shown} does not hold the {epochs} epochs "
            f"the checkpoint has done (or one more), got {got}"
        )
    keys = _HISTORY_KEYS + (
        ("val_loss", f"val_{metric}", "improved") if rec["val"] is not None else ()
    )
    for i, entry in enumerate(history):
        why = _entry_fault(entry, i + 1, keys)
        if why is None and i + 1 == epochs and entry["step"] != rec["step"]:
            why = f"its step is {entry['step']}, the checkpoint's {rec['step']}"
        if why is None and rec["best"] is not None and i + 1 == rec["best"]["epoch"]:
            if entry["val_loss"] != rec["best"]["val_loss"] or entry["improved"] is not True:
                why = f"it is not the checkpoint's best epoch {rec['best']!r}"
        if why is None and i and entry["step"] < history[i - 1]["step"]:
            why = f"its step {entry['step']} is below the epoch before's"
        if why is not None:
            raise ValueError(
                f"{_API}: the checkpoint's history {shown} is not this run's: entry {i} "
                f"(epoch {i + 1}): {why}"[:400]
            )
    return list(history[:epochs])


_HISTORY_KEYS = ("epoch", "step", "loss")


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON (the history is written with allow_nan=False)")


def _entry_fault(entry: Any, epoch: int, keys: tuple[str, ...]) -> str | None:
    """What is wrong with one history entry for `epoch`, or None: the keys `_epoch` writes,
    each of the type it writes."""
    if type(entry) is not dict:
        return f"a {type(entry).__name__}, not a dict"
    if sorted(entry) != sorted(keys):
        return f"its keys are {sorted(entry)}, expected {sorted(keys)}"
    for key in keys:
        value = entry[key]
        if key == "improved":
            ok = type(value) is bool
        elif key in ("epoch", "step"):
            ok = type(value) is int and value >= 0
        else:
            ok = type(value) is float
        if not ok:
            return f"its {key} is {value!r}"[:200]
    if entry["epoch"] != epoch:
        return f"its epoch is {entry['epoch']}, expected {epoch}"
    return None
