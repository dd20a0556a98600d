"""Batches into the trainers: X as a float32 C-contiguous (rows, inputs) buffer and targets as
int32 / int64 class indices, refused by name otherwise. Both trainers use these: `quick` for a
step's first try (the binding reads the objects itself), `x_input` / `y_input` for the
addresses of what it declined (through `_intake`: borrowed, copied or refused), `batch` /
`owned_batch` / `targets` for Arrays (the per-operation path)."""

from .._buffers.alloc import all_finite
from .._buffers.array import Array
from .._buffers.formats import dtype_name, is_integer, is_native_f32
from .._buffers.intake import as_f32_c, as_i32_c, borrowed_f32, labels, probe


def quick(X, targets, inputs, max_rows, k=1):
    """(x, y, target_itemsize, rows) as the binding's step entries take them, reading no
    buffer here: an Array X that fits as its address and rows (checked here); any other X as
    itself with rows 0 (the binding reads it, takes its rows and makes the result buffer, and
    declines with None what it cannot take zero-copy). Targets likewise: int32 labels of an
    Array X as their address, else the object (an Array as its memoryview), itemsize 0: its
    own. None when an Array X is not k batches of 1 to `max_rows` (the caller's slow path,
    `x_input`, then refuses by name)."""
    if type(X) is not Array:
        return X, (targets._mv if type(targets) is Array else targets), 0, 0
    if not (X._dtype == "<f4" and len(shape := X._shape) == 2 and shape[1] == inputs):
        return None
    total = shape[0]
    rows = total // k
    if not 0 < rows <= max_rows or rows * k != total:
        return None
    if type(targets) is Array and targets._dtype == "<i4" and targets._shape == (total,):
        return X._addr, targets._addr, 4, rows
    return X._addr, (targets._mv if type(targets) is Array else targets), 0, rows


def x_input(X, api, inputs, max_rows, name="X", stacked=False):
    """(keep, address, rows) of X; finiteness is the binding's to check."""
    if type(X) is Array:  # `borrowed_f32` inlined for the commonest input: ~0.1 µs a step
        if (
            X._dtype == "<f4"
            and len(shape := X._shape) == 2
            and shape[1] == inputs
            and 0 < shape[0]
            and (shape[0] <= max_rows or stacked)
        ):
            return X, X._addr, shape[0]
    else:
        r = borrowed_f32(X, 2, pin=True)  # a torch X: copied (nothing pins its storage)
        if r is not None:
            keep, addr, (rows, cols) = r
            if cols == inputs and (rows <= max_rows or stacked):
                return keep, addr, rows
    keep = batch(X, api, inputs, max_rows, name, stacked)  # a copy, or the precise refusal
    return keep, keep._addr, keep._shape[0]


def y_input(values, rows, classes, api):
    """(keep, address, itemsize) of `rows` labels: signed int32 / int64 go to the binding as
    they are (it checks the class range); other integer dtypes are converted to int32."""
    if type(values) is Array and values._dtype == "<i4" and values._shape == (rows,):
        return values, values._addr, 4  # the commonest labels, before a call
    r = labels(values, rows, "targets")
    if r is None:
        y = targets(values, rows, classes, api, check_range=False)
        return y, y._addr, 4
    return r


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
    k stacked batches)."""
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
    the messages name (`evaluate` calls it y)."""
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
