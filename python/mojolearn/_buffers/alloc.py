"""Owned host buffers: new Arrays (`zeros`, `empty`), their bytes, a finiteness scan. Reading
callers' buffers is `_intake`'s."""

from __future__ import annotations

import array as _pyarray

from .array import Array

# One float32 +0.0: repeated (`ZERO_F32 * n`), the fastest zeroed float32 allocation; the
# binding's step and matmul entries make their result buffers from it the same way.
ZERO_F32 = _pyarray.array("f", (0.0,))

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .types import BufferLike, DType


def empty(shape: int | Sequence[int], dtype: DType = "<f4") -> Array:
    """A new owned Array whose values the caller will overwrite.

    Its contents are zeros too (array.array has no uninitialised allocation), so `empty` and
    `zeros` differ only in intent.

    Args:
        shape: an int (one axis) or a sequence of non-negative ints.
        dtype: '<f4' (float32), '<i4', '<f8' or '<i8'.

    Returns:
        The new Array.

    Raises:
        TypeError: an unsupported dtype, or a shape that is not ints.
        ValueError: a negative length.
    """
    return zeros(shape, dtype)


def zeros(shape: int | Sequence[int], dtype: DType = "<f4") -> Array:
    """A new owned Array of zeros (+0.0: all bytes zero).

    Args:
        shape: an int (one axis) or a sequence of non-negative ints.
        dtype: '<f4' (float32), '<i4', '<f8' or '<i8'.

    Returns:
        The new Array.

    Raises:
        TypeError: an unsupported dtype, or a shape that is not ints.
        ValueError: a negative length.

    `zeros(shape, dtype)` is `Array(shape, dtype)`.

    Example:
        >>> mojolearn.zeros((2, 3)).tolist()
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    return Array(shape, dtype)


def le_bytes(obj: BufferLike, kind: object = None) -> bytes:
    """The little-endian bytes of a C-contiguous buffer, C order (hosts are little-endian)."""
    if type(obj) is Array:
        return obj._mv.tobytes()
    with memoryview(obj) as mv:  # type: ignore[arg-type]  # DLPack-only: a TypeError
        if not mv.c_contiguous:
            raise ValueError("le_bytes needs a C-contiguous buffer")
        return mv.tobytes()
