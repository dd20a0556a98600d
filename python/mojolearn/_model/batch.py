"""How `Trainer` (and the DataParallel port) read a batch: examples of one input shape, and
targets as its loss takes them, each checked by name (shape, dtype, finite values) and read in
place when C-contiguous; and views of a batch's examples."""

from __future__ import annotations

import math

from .._buffers.intake import input_f32, input_labels
from .._runtime import backend as _backend

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .._buffers.array import Array
    from .spec import ModelSpec

_API = "Trainer"


def rows_of(a: Array, start: int, n: int) -> Array:
    """Examples start..start+n-1 of a C-contiguous batch, as a view (shares the memory)."""
    return view(a, start * math.prod(a._shape[1:]), (n, *a._shape[1:]))


def as_rows(z: Array, classes: int) -> Array:
    return z.reshape((z._size // classes, classes))


def inputs(X: Any, spec: ModelSpec, most: int | None) -> Array:
    if spec.vocabulary:
        return token_ids(X, spec, most)
    arr = input_f32(X, None, "X", _API)
    shape = arr._shape
    want = spec.input_shape
    flat = len(want) > 1 and len(shape) == 2 and shape[1] == math.prod(want)
    if len(shape) < 1 or (tuple(shape[1:]) != want and not flat) or shape[0] < 1:
        raise ValueError(
            f"{_API}: X must have shape (n, {', '.join(map(str, want))}) with n >= 1"
            f"{' or (n, ' + str(math.prod(want)) + ')' if len(want) > 1 else ''}, got {tuple(shape)}"
        )
    if most is not None and shape[0] > most:
        raise ValueError(f"{_API}: X has {shape[0]} examples, more than max_rows ({most})")
    finite(arr, "X", math.prod(want))
    return arr.reshape((shape[0], *want)) if flat else arr


def token_ids(X: Any, spec: ModelSpec, most: int | None) -> Array:
    """A batch of token ids `(n, T)` for a model whose first layer is an Embedding: int32 in
    C order (int64 and the other integer types converted, floats refused), every id in
    [0, vocabulary). The runner reads them in the input's place through an int32 pointer
    (mojo/training/layers/embedding.mojo), so they never meet a float check."""
    arr = input_labels(X, None, "X", _API)
    want, vocab = spec.input_shape, spec.vocabulary
    if arr._shape[1:] != want or arr._shape[0] < 1:
        raise ValueError(
            f"{_API}: X must be token ids of shape (n, {want[0]}) with n >= 1, got {arr._shape}"
        )
    if most is not None and arr._shape[0] > most:
        raise ValueError(f"{_API}: X has {arr._shape[0]} examples, more than max_rows ({most})")
    if arr._size and not (0 <= min(arr._mv) and max(arr._mv) < vocab):
        bad = next(i for i, v in enumerate(arr._mv) if not 0 <= v < vocab)
        raise ValueError(
            f"{_API}: X holds token ids in [0, {vocab}) (the Embedding's num_embeddings): "
            f"example {bad // want[0]}, position {bad % want[0]} is {arr._mv[bad]}"
        )
    return arr


def targets(values: Any, spec: ModelSpec, n: int) -> Array:
    out = spec.output_shape
    if spec.loss == "mse":
        arr = input_f32(values, None, "targets", _API)
        shape = arr._shape
        ok = tuple(shape) == (n, *out) or (out == (1,) and tuple(shape) == (n,))
        if not ok:
            raise ValueError(
                f"{_API}: targets must have shape {(n, *out)} (float32), got {tuple(shape)}"
            )
        finite(arr, "targets", math.prod(out))
        return arr
    labels = input_labels(values, None, "targets", _API)
    want = (n,) if len(out) == 1 else (n, *out[:-1])
    if labels._shape != want:
        raise ValueError(f"{_API}: targets must have shape {want} (class ids), got {labels._shape}")
    return labels


def finite(a: Array, name: str, per: int) -> None:
    if a._size and _backend.binding().all_finite([a._addr], [a._size]) != 1:
        bad = next(i for i, v in enumerate(a._mv) if not math.isfinite(v))
        raise ValueError(
            f"{_API}: {name} must be finite: example {bad // per}, element {bad % per} is "
            f"{a._mv[bad]!r}"
        )


def view(a: Array, at: int, shape: tuple[int, ...]) -> Array:
    """The values at [at, at + prod(shape)) of a flat float32 or int32 Array, as a view of
    `shape` (shares the memory)."""
    size = math.prod(shape)
    return a._view(a._mv[at : at + size], shape, a._addr + 4 * at)


def tensors(flat: Array, spec: ModelSpec) -> dict[str, Array]:
    """A flat buffer (gradients) as views by torch name, each of its tensor's shape."""
    return {n: view(flat, at, sh) for n, sh, at in zip(spec.names, spec.shapes, spec.offsets)}
