"""Batches into the trainers: X as a float32 C-contiguous (rows, inputs) Array and targets as
int32 class indices, refused by name otherwise. SmallMLPTrainer's fast paths for Arrays and
NumPy arrays fall back to these; MLPTrainer uses them directly."""
from ._buffer import _dlpack_in, all_finite, as_f32_c, as_i32_c
from ._bufcheck import dtype_name, is_integer, is_native_f32, probe


def _named(obj, what):
    try:
        return _dlpack_in(obj)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


def batch(X, api, inputs, max_rows, name="X", stacked=False):
    """X as a float32 C-contiguous (rows, inputs) Array (borrowed when it already is one, else
    a C-order copy) with 1 to `max_rows` rows (`stacked`: the caller checks the row count of
    k stacked batches)."""
    X = _named(X, f"{api}: {name}")  # a torch tensor: one DLPack exchange, not one per check
    try:
        pb = probe(X)
    except TypeError:
        raise TypeError(f"{api}: {name} must be a float32 buffer of shape (batch, {inputs}) "
                        f"(NumPy array, array.array, memoryview or mojolearn.Array), got "
                        f"{type(X).__name__}") from None
    if not is_native_f32(pb.format, pb.itemsize):
        raise TypeError(f"{api}: {name} must be float32, got {dtype_name(pb.format, pb.itemsize)}")
    if pb.ndim != 2 or pb.shape[1] != inputs:
        raise ValueError(f"{api}: {name} must have shape (batch, {inputs}), got {pb.shape}")
    rows = pb.shape[0]
    if not stacked and not 1 <= rows <= max_rows:
        raise ValueError(f"{api}: {name} must have 1 to {max_rows} rows, got {rows}")
    return as_f32_c(X, name=name)[0]


def owned_batch(X, api, inputs, max_rows, name="X", stacked=False):
    """`batch` as an owned copy checked finite (the per-operation path)."""
    arr = batch(X, api, inputs, max_rows, name, stacked).copy()
    if arr._size and not all_finite(arr, name):
        raise ValueError(f"{api}: {name} must be finite")
    return arr


def targets(values, rows, classes, api, check_range=True):
    """targets as an int32 (rows,) Array (any integer dtype accepted); with `check_range` also
    checked to be classes 0..classes-1 here rather than in the binding."""
    values = _named(values, f"{api}: targets")
    try:
        pb = probe(values)
    except TypeError:
        raise TypeError(f"{api}: targets must be an integer buffer of shape ({rows},), got "
                        f"{type(values).__name__}") from None
    if not is_integer(pb.format):
        raise TypeError(f"{api}: targets must hold integers, got "
                        f"{dtype_name(pb.format, pb.itemsize)}")
    if tuple(pb.shape) != (rows,):
        raise ValueError(f"{api}: targets must have shape ({rows},) to match X, got "
                         f"{tuple(pb.shape)}")
    try:
        y, copied = as_i32_c(values, name="targets")
    except ValueError:
        raise ValueError(f"{api}: targets must be classes 0..{classes - 1}") from None
    if not check_range:
        return y
    if not copied:
        y = y.copy()
    values = y._mv.tolist()
    bad = next((i for i, c in enumerate(values) if not 0 <= c < classes), None)
    if bad is not None:
        raise ValueError(f"{api}: targets must be classes 0..{classes - 1}; "
                         f"targets[{bad}] = {values[bad]}")
    return y
