"""Owned host buffers: new Arrays (`zeros`, `empty`), their bytes, a finiteness scan. Reading
callers' buffers is `_intake`'s."""

from __future__ import annotations

import array as _pyarray
import sys

from .array import Array

# One float32 +0.0: repeated (`ZERO_F32 * n`), the fastest zeroed float32 allocation; the
# binding's step and matmul entries make their result buffers from it the same way.
ZERO_F32 = _pyarray.array("f", (0.0,))

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .types import BufferLike, DType, PyArray


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


def _count(held: list[PyArray], i: int) -> int:
    return sys.getrefcount(held[i])


# What `_count` reads for a buffer that only the holder's list refers to (measured, not
# assumed: the interpreter's own temporaries differ between versions).
_UNREFERENCED = _count([ZERO_F32 * 1], 0)
_KEEP = 2  # a loop holding the last step's result while it runs the next needs two
_REUSE_LIMIT = 1 << 26  # bytes: a larger buffer is not held between steps


class ResultBuffers:
    """A trainer's float32 result buffers for its training steps, each reused once nothing
    refers to it.

    A step's results (logits, gradients) are views of one buffer; a training loop usually drops
    them before the next step but one, and making a fresh buffer costs a step of
    [784, 256, 10] at batch 256 ~30 µs of zeroing in the caller's thread. A held buffer is
    handed out again only while its reference count says that no view, NumPy array, DLPack
    capsule or memoryview of it is alive, and then every value it returns is overwritten by
    the step (the entries write all of [losses | logits | grads | input_grad]). At most the
    last _KEEP buffers are held, none over _REUSE_LIMIT bytes.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: list[PyArray] = []

    def take(self, size: int) -> PyArray:
        """A buffer of `size` floats: a held one nothing refers to, else a new zeroed one."""
        held = self._held
        for i in range(len(held)):
            if len(held[i]) == size and _count(held, i) == _UNREFERENCED:
                return held[i]
        buf = ZERO_F32 * size
        if 4 * size <= _REUSE_LIMIT:
            held.insert(0, buf)
            del held[_KEEP:]
        return buf
