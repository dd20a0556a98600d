"""Batches into the trainers: X as a float32 C-contiguous (rows, inputs) buffer and targets as
int32 / int64 class indices, refused by name otherwise. A step first hands the objects to the
binding (`steps._quick`); a `BatchReader` takes what it declined (through `_buffers.intake`:
borrowed, copied or refused); `batch` / `owned_batch` / `targets` make Arrays (the
per-operation path, and the refusals' messages)."""

from .._buffers.array import Array
from .._buffers.formats import dtype_name, is_integer, is_native_f32
from .._buffers.intake import (
    as_f32_c,
    as_i32_c,
    c_f32,
    c_i32,
    input_labels,
    labels,
    probe,
    rounded_f32,
)
from .._runtime import backend as _backend

# Why the binding's step entries declined a call (mojo/bindings/entries/mlp.mojo): X was not
# read there, the labels were not, or the batch has more rows than the session's scratch.
DECLINED_X, DECLINED_TARGETS, DECLINED_CAPACITY = -1, -2, -3

# The trainer whose reference takes float32 and integer buffers only: its batches are never
# rounded from float64 nor read from lists (the others' are, once: `intake.rounded_f32`).
EXACT_ONLY = "SmallMLPTrainer"


class BatchReader:
    """One trainer's way in for batches, bound once to its name (for messages), inputs,
    classes and row limit. What the binding declines comes here with the reason, and each
    operand is read once: in place, or copied or converted in the binding (one `intake.c_f32`
    / `c_i32`), else described and refused by name (`batch`, `targets`)."""

    __slots__ = ("api", "inputs", "classes", "max_rows")

    def __init__(self, api, inputs, classes, max_rows):
        self.api, self.inputs, self.classes, self.max_rows = api, inputs, classes, max_rows

    def x(self, X, name="X", stacked=False, declined=False):
        """(keep, address, rows) of X as float32 C-order (rows, inputs); `declined`: the
        binding declined to read it in place, so it is copied. Finiteness is the binding's to
        check."""
        if type(X) is Array:
            if (
                X._dtype == "<f4"
                and len(shape := X._shape) == 2
                and shape[1] == self.inputs
                and 0 < shape[0]
                and (shape[0] <= self.max_rows or stacked)
            ):
                return X, X._addr, shape[0]
        else:
            r = c_f32(X, 2, declined)
            if r is not None:
                keep, addr, (rows, cols) = r
                if cols == self.inputs and (rows <= self.max_rows or stacked):
                    return keep, addr, rows
        keep = batch(X, self.api, self.inputs, self.max_rows, name, stacked)  # the refusal
        return keep, keep._addr, keep._shape[0]

    def y(self, values, rows, declined=False):
        """(keep, address, itemsize) of `rows` labels: signed int32 / int64 read in place (the
        binding checks the class range), any other integers converted to int32 in the binding
        (`declined`: the binding declined them, so straight to the conversion)."""
        if type(values) is Array and values._dtype == "<i4" and values._shape == (rows,):
            return values, values._addr, 4  # the commonest labels, before a call
        if not declined:
            r = labels(values, rows, "targets")
            if r is not None:
                return r
        if type(values) is not Array:
            r = c_i32(values, 1)
            if r is not None and r[2] == (rows,):
                return r[0], r[1], 4
        y = targets(values, rows, self.classes, self.api, check_range=False)  # the refusal
        return y, y._addr, 4

    def declined(self, X, targets_, reason, stacked=False):
        """(x keep, x address, rows, y keep, y address, itemsize) of a call the binding
        declined for `reason` (a DECLINED_* code): the operand it declined copied or
        converted, the other read in place; forward mode (`targets_` None) reads X only."""
        x, xa, rows = self.x(X, stacked=stacked, declined=reason == DECLINED_X)
        if targets_ is None:
            return x, xa, rows, x, xa, 4
        y, ya, itemsize = self.y(targets_, rows, declined=reason == DECLINED_TARGETS)
        return x, xa, rows, y, ya, itemsize


def _probe(obj, api, name, expected):
    try:
        return probe(obj)
    except TypeError as exc:
        if hasattr(type(obj), "__dlpack__"):  # the DLPack refusal says what is wrong
            raise TypeError(f"{api}: {name}: {exc}") from None
        raise TypeError(f"{api}: {name} must be {expected}, got {type(obj).__name__}") from None
    except ValueError as exc:
        raise ValueError(f"{api}: {name}: {exc}") from None


def batch(X, api, inputs, max_rows, name="X", stacked=False):
    """X as a float32 C-contiguous (rows, inputs) Array (borrowed when it already is one, else
    a C-order copy) with 1 to `max_rows` rows (`stacked`: the caller checks the row count of
    k stacked batches). float64 and lists of numbers are rounded once to float32
    (`intake.rounded_f32`), except for `EXACT_ONLY`."""
    rounded = None if api == EXACT_ONLY else rounded_f32(X, name, api)
    X = X if rounded is None else rounded
    pb = _probe(
        X,
        api,
        name,
        f"a float32 buffer of shape (batch, {inputs}) (NumPy array, "
        f"array.array, memoryview or mojolearn.Array)",
    )
    if not is_native_f32(pb.format, pb.itemsize):
        raise TypeError(f"{api}: {name} must be float32, got {dtype_name(pb.format, pb.itemsize)}")
    if pb.ndim != 2 or pb.shape[1] != inputs:
        raise ValueError(f"{api}: {name} must have shape (batch, {inputs}), got {pb.shape}")
    rows = pb.shape[0]
    if not stacked and not 1 <= rows <= max_rows:
        raise ValueError(f"{api}: {name} must have 1 to {max_rows} rows, got {rows}")
    try:
        return as_f32_c(X, name=name)[0]
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{api}: {exc}") from None


def owned_batch(X, api, inputs, max_rows, name="X", stacked=False):
    """`batch` as an owned copy checked finite (the per-operation path)."""
    arr = batch(X, api, inputs, max_rows, name, stacked).copy()
    if arr._size and not all_finite(arr, name):
        raise ValueError(f"{api}: {name} must be finite")
    return arr


def targets(values, rows, classes, api, check_range=True, name="targets"):
    """targets as an int32 (rows,) Array (any integer dtype accepted); with `check_range` also
    checked to be classes 0..classes-1 here rather than in the binding. `name` is the argument
    the messages name (`evaluate` calls it y). A list of ints is taken, except for
    `EXACT_ONLY`."""
    if api != EXACT_ONLY and isinstance(values, (list, tuple)):
        values = input_labels(values, 1, name, api)
    pb = _probe(values, api, name, f"an integer buffer of shape ({rows},)")
    if not is_integer(pb.format):
        raise TypeError(
            f"{api}: {name} must hold integers, got {dtype_name(pb.format, pb.itemsize)}"
        )
    if tuple(pb.shape) != (rows,):
        raise ValueError(
            f"{api}: {name} must have shape ({rows},) to match X, got {tuple(pb.shape)}"
        )
    try:
        y, copied = as_i32_c(values, name=name)
    except ValueError:
        raise ValueError(f"{api}: {name} must be classes 0..{classes - 1}") from None
    if not check_range:
        return y
    if not copied:
        y = y.copy()
    values = y._mv.tolist()
    bad = next((i for i, c in enumerate(values) if not 0 <= c < classes), None)
    if bad is not None:
        raise ValueError(
            f"{api}: {name} must be classes 0..{classes - 1}; {name}[{bad}] = {values[bad]}"
        )
    return y


def all_finite(obj, name="array"):
    """True when every value of a float32 buffer is finite (scanned in the binding)."""
    arr, _ = as_f32_c(obj, name=name)
    if arr._size == 0:
        return True
    return _backend.binding().all_finite([arr._addr], [arr._size]) == 1
