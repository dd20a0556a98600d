"""The project's seeded generator: SplitMix64 in Python integer arithmetic.

Never `random`, never NumPy: the same seed gives the same numbers on every Python version,
platform and vendor, which is what golden hashes and the command line's data order rely on.
This recipe is a stable contract (docs/ARITHMETIC.md, "Randomness"); changing any draw changes
goldens.

Recipe
------
- state: an unsigned 64-bit integer, initially `seed` (an int in [0, 2**64)).
- `next_u64()`: state = (state + 0x9E3779B97F4A7C15) mod 2**64; z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 mod 2**64; z = (z ^ (z >> 27)) * 0x94D049BB133111EB
  mod 2**64; return z ^ (z >> 31)   (Steele, Lea, Flood 2014; Vigna's splitmix64.c).
- `uniform()`: (next_u64() >> 40) / 2**24, the top 24 bits; exact in binary32 and in [0, 1).
- `randbelow(n)`: draws u = next_u64() until u < n * floor(2**64 / n), returns u mod n
  (unbiased rejection).
- `shuffle(items)`: Fisher–Yates from the end: for i = len-1 down to 1: j = randbelow(i + 1),
  swap items[i], items[j].
- `init_small_mlp(seed)`: one generator seeded with `seed`; tensors drawn in the order weight1
  (16, 8), bias1 (16,), weight2 (3, 16), bias2 (3,), each row-major; torch's `nn.Linear`
  default U(-b, b) for weights and biases alike, b = 1 / math.sqrt(fan_in) in double
  (fan_in 8 for layer 1, 16 for layer 2); value = (2 * uniform() - 1) * b in double, rounded
  once to float32.
- `batches(seed, rows, count)`: one generator seeded with `seed`; for each batch in turn, X
  (rows, 8) row-major as 2 * uniform() - 1 (exact in binary32), then the targets as
  randbelow(3), row by row.
"""

from __future__ import annotations

import array as _pyarray
import hashlib
import operator

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, SupportsIndex

    from .._buffers.array import Array

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _check_seed(seed: SupportsIndex, name: str = "seed") -> int:
    if isinstance(seed, bool):
        raise TypeError(f"{name} must be an int in [0, 2**64), got a bool")
    try:
        seed = operator.index(seed)
    except TypeError:
        raise TypeError(f"{name} must be an int in [0, 2**64), got {type(seed).__name__}") from None
    if not 0 <= seed <= _MASK:
        raise ValueError(f"{name} must be an int in [0, 2**64), got {seed}")
    return seed


class SplitMix64:
    """A SplitMix64 generator (see the module docstring for the exact recipe)."""

    __slots__ = ("state",)

    def __init__(self, seed: SupportsIndex) -> None:
        self.state = _check_seed(seed)

    def next_u64(self) -> int:
        self.state = (self.state + _GAMMA) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def uniform(self) -> float:
        """A float in [0, 1) with 24 random bits (k / 2**24, exact)."""
        return (self.next_u64() >> 40) / 16777216.0

    def randbelow(self, n: int) -> int:
        """An int uniform in [0, n), unbiased (rejection of the incomplete last block)."""
        if isinstance(n, bool) or type(n) is not int or not 1 <= n <= _MASK:
            raise ValueError(f"randbelow: n must be an int in [1, 2**64), got {n!r}")
        limit = ((1 << 64) // n) * n
        while True:
            u = self.next_u64()
            if u < limit:
                return u % n

    def shuffle(self, items: list[Any]) -> None:
        """Shuffle a list in place, Fisher–Yates from the end."""
        for i in range(len(items) - 1, 0, -1):
            j = self.randbelow(i + 1)
            items[i], items[j] = items[j], items[i]


def batches(
    seed: SupportsIndex, rows: int, count: int = 1, features: int = 8, classes: int = 3
) -> list[tuple[Array, Array]]:
    """`count` batches [(X (rows, features) float32 Array, targets (rows,) int32 Array), ...]
    with X uniform in [-1, 1) and targets uniform in [0, classes)."""
    from .._buffers.array import _CODES, Array

    for name, value, lo in (
        ("rows", rows, 1),
        ("count", count, 1),
        ("features", features, 1),
        ("classes", classes, 1),
    ):
        if isinstance(value, bool) or type(value) is not int or value < lo:
            raise ValueError(f"batches: {name} must be an int >= {lo}, got {value!r}")
    rng = SplitMix64(seed)
    out = []
    for _ in range(count):
        x = [2.0 * rng.uniform() - 1.0 for _ in range(rows * features)]
        y = [rng.randbelow(classes) for _ in range(rows)]
        out.append(
            (
                Array._wrap(_pyarray.array("f", x), (rows, features), "<f4"),
                Array._wrap(_pyarray.array(_CODES["<i4"], y), (rows,), "<i4"),
            )
        )
    return out


def epoch_seed(seed: int, epoch: int) -> int:
    """The SplitMix64 seed of epoch `epoch` of a data order seeded with `seed` (docs/ARITHMETIC.md,
    "Randomness": the command line's and `mojolearn.Batches`' order)."""
    digest = hashlib.sha256(f"mojolearn.data-order.v1:{seed}:{epoch}".encode("ascii")).digest()
    return int.from_bytes(digest[:8], "little")


def epoch_order(seed: int, epoch: int, n_train: int) -> list[int]:
    """The positions (0..n_train-1 into the training rows) visited in epoch `epoch`."""
    order = list(range(n_train))
    SplitMix64(epoch_seed(seed, epoch)).shuffle(order)
    return order
