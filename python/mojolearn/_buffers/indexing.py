"""What `Array` adds to integer indexing: slices (`a[:3]`, `a[1:4, 2]`, negative indices and
steps) and `.numpy()`. A mixin, so that the Array class stays one readable unit; it imports no
`array` (which imports it): the Array is `self`.

A slice copies: the result is a fresh owned C-contiguous Array (an Array is always
C-contiguous, and most slices are not), gathered axis by axis with `Array.take` (one binding
call per sliced axis). An index of integers alone is a view, as before.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .array import Array


def has_slice(key: object) -> bool:
    """Whether an index holds a slice (then `Indexing._sliced` reads it)."""
    return type(key) is slice or (type(key) is tuple and any(type(k) is slice for k in key))


class Indexing:
    """Slicing and `.numpy()` for `Array` (the class docstring there describes both)."""

    __slots__ = ()

    def _sliced(self: Any, key: Any) -> Array:
        keys = key if type(key) is tuple else (key,)
        shape = self._shape
        if len(keys) > len(shape):
            raise IndexError(f"too many indices for an Array of shape {shape}")
        out, kept = self, []
        for axis, (k, d) in enumerate(zip(keys, shape)):
            if type(k) is slice:
                picks = range(*k.indices(d))
                kept.append(len(picks))
            elif isinstance(k, bool) or not hasattr(k, "__index__"):
                raise TypeError(f"Array indices must be ints or slices, got {type(k).__name__}")
            else:
                i = k.__index__()
                if not -d <= i < d:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {d}")
                picks = range(i % d, i % d + 1)
            if len(picks) != d or picks.step != 1:  # a whole axis in order needs no gather
                out = out.take(picks, axis)
        if out is self:
            out = self.copy()
        return out.reshape((*kept, *shape[len(keys) :]))  # type: ignore[no-any-return]

    def numpy(self: Any) -> Any:
        """A NumPy array sharing this Array's memory (writes go through both ways).

        Returns:
            `numpy.asarray(self)`: the same shape and dtype, no copy.

        Raises:
            ImportError: NumPy is not installed (an optional dependency: `pip install numpy`).
        """
        try:
            import numpy
        except ImportError:
            raise ImportError(
                "Array.numpy() needs NumPy, an optional dependency: pip install numpy "
                "(mojolearn itself runs without it; Array.tolist() gives lists)"
            ) from None
        return numpy.asarray(self)
