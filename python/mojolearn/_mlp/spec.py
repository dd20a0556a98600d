"""The layer-sizes spec of an MLP: the one place its tensor names, shapes, offsets and bounds
come from, and its seeded initialization; and `ResultLayout`, where a step's results lie in
its result buffer.

`[inputs, hidden..., classes]`: layer l (1-based) is Linear(sizes[l-1], sizes[l]), ReLU between
layers, none after the last. The flat parameter buffer (and the gradients and AdamW moments)
holds weight1 (out, in) row-major, bias1, weight2, bias2, ... in that order, the order torch's
`nn.Sequential(Linear, ReLU, ..., Linear).parameters()` yields.

Bounds, refused before anything is allocated: at most MAX_LAYERS layers, every width in
[1, MAX_WIDTH], classes >= 2, at most MAX_PARAMS parameters; a batch's working memory
(`batch_bytes`: X, every layer's activations and their gradients, the results) at most
MAX_BATCH_BYTES, which admits 4096 rows of [784, 256, 10] (about 26 MB) and ~40,000.
"""

from __future__ import annotations

import array as _pyarray
import math
import operator
from collections import namedtuple

from .._runtime.portable import round_f32
from .rng import SplitMix64, _check_seed

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import SupportsIndex

    from .._buffers.array import Array

MAX_LAYERS = 16
MAX_WIDTH = 65536
MAX_PARAMS = 1 << 26
MAX_BATCH_BYTES = 256 << 20


class LayerSizes:
    """A checked `[inputs, hidden..., classes]` with its flat tensor layout."""

    __slots__ = (
        "sizes",
        "names",
        "shapes",
        "offsets",
        "total",
        "layers",
        "inputs",
        "classes",
        "views",
        "layouts",
        "_sizes_q",
    )

    def __init__(self, layer_sizes, api="MLPTrainer"):
        if isinstance(layer_sizes, (str, bytes)) or not isinstance(layer_sizes, (list, tuple)):
            raise TypeError(
                f"{api}: layer_sizes must be a list or tuple of ints [inputs, "
                f"hidden..., classes], got {type(layer_sizes).__name__}"
            )
        sizes = []
        for i, w in enumerate(layer_sizes):
            if isinstance(w, bool) or not hasattr(type(w), "__index__"):
                raise TypeError(
                    f"{api}: layer_sizes[{i}] must be an int, got {type(w).__name__} {w!r}"[:200]
                )
            sizes.append(operator.index(w))
        if len(sizes) < 2:
            raise ValueError(
                f"{api}: layer_sizes needs at least 2 entries [inputs, classes], got {sizes}"
            )
        if len(sizes) - 1 > MAX_LAYERS:
            raise ValueError(
                f"{api}: layer_sizes describes {len(sizes) - 1} layers, at most "
                f"{MAX_LAYERS} are allowed"
            )
        for i, w in enumerate(sizes):
            if not 1 <= w <= MAX_WIDTH:
                raise ValueError(f"{api}: layer_sizes[{i}] must be in [1, {MAX_WIDTH}], got {w}")
        if sizes[-1] < 2:
            raise ValueError(f"{api}: layer_sizes[-1] (classes) must be >= 2, got {sizes[-1]}")
        total = sum(o * i + o for i, o in zip(sizes, sizes[1:]))
        if total > MAX_PARAMS:
            raise ValueError(
                f"{api}: layer_sizes {sizes} has {total:,} parameters, at most "
                f"{MAX_PARAMS:,} (2**26) are allowed"
            )
        self.sizes = tuple(sizes)
        names, shapes, offsets, off = [], [], [], 0
        for l, (i, o) in enumerate(zip(sizes, sizes[1:]), start=1):
            for name, shape in ((f"weight{l}", (o, i)), (f"bias{l}", (o,))):
                names.append(name)
                shapes.append(shape)
                offsets.append(off)
                off += math.prod(shape)
        self.names, self.shapes, self.offsets, self.total = (
            tuple(names),
            tuple(shapes),
            tuple(offsets),
            off,
        )
        self._sizes_q = _pyarray.array(
            "q", sizes
        )  # what `mlp_train_step` and `mlp_resident_open` read
        # Plain attributes, not properties: the trainers read them on every step.
        self.layers, self.inputs, self.classes = len(sizes) - 1, sizes[0], sizes[-1]
        # (name, shape, byte offset, size) of each tensor: the result views' table.
        self.views = tuple(
            (n, sh, 4 * o, math.prod(sh)) for n, sh, o in zip(self.names, self.shapes, self.offsets)
        )
        self.layouts = _Layouts(self)

    @property
    def sizes_addr(self):
        """Address of the widths as int64 (valid while this spec lives)."""
        return self._sizes_q.buffer_info()[0]

    def weight(self, l):
        """Offset (in floats) of layer l's weight, l 0-based."""
        return self.offsets[2 * l]

    def bias(self, l):
        return self.offsets[2 * l + 1]

    def batch_bytes(self, rows):
        """Working memory of one step on `rows` rows: X and the input gradient, each hidden
        layer's activations, its incoming and masked gradients, logits and their gradient,
        the per-row losses, the flat gradients."""
        hidden = sum(self.sizes[1:-1])
        floats = rows * (2 * self.inputs + 3 * hidden + 2 * self.classes + 1) + self.total
        return 4 * floats

    def max_rows(self):
        """The most rows a batch may have (MAX_BATCH_BYTES)."""
        per_row = self.batch_bytes(1) - self.batch_bytes(0)
        return max(0, (MAX_BATCH_BYTES - self.batch_bytes(0)) // per_row)

    def init(self, seed):
        """The initial tensors as float32 Arrays, in parameter order: one SplitMix64 seeded
        with `seed`; layer by layer, weight then bias, each row-major, drawn from torch's
        `nn.Linear` default U(-b, b), b = 1 / math.sqrt(fan_in) in double; value =
        (2 * uniform() - 1) * b in double, rounded once to float32 (docs/ARITHMETIC.md)."""
        from .._buffers.array import Array

        rng = SplitMix64(_check_seed(seed))
        out = []
        for l, shape in enumerate(self.shapes):
            bound = 1.0 / math.sqrt(self.sizes[l // 2])
            values = [
                round_f32((2.0 * rng.uniform() - 1.0) * bound) for _ in range(math.prod(shape))
            ]
            out.append(Array._wrap(_pyarray.array("f", values), shape, "<f4"))
        return out

    def __eq__(self, other):
        return isinstance(other, LayerSizes) and other.sizes == self.sizes

    def __hash__(self):
        return hash(self.sizes)

    def __repr__(self):
        return f"LayerSizes({list(self.sizes)})"


class ResultLayout(namedtuple("ResultLayout", "k rows losses logits grads input_grad size")):
    """Where a step's results lie in its one float32 result buffer, in floats from its start:
    [losses (k) | logits (rows x classes) | grads (spec.total) | input_grad (rows x inputs),
    only when asked], the order the binding's step entries write them. A frozen record
    (collections' namedtuple, typed below: `typing` is never imported at run time).

    Attributes:
        k, rows: the steps and the rows of each step's batch.
        losses: 0, the k losses in step order.
        logits: the last step's logits, row-major.
        grads: the last step's flat gradients, in parameter order (`LayerSizes.views`).
        input_grad: d(loss)/dX, row-major; None when not asked.
        size: the buffer's length.
    """

    __slots__ = ()
    k: int
    rows: int
    losses: int
    logits: int
    grads: int
    input_grad: int | None
    size: int

    def __new__(cls, k: int, rows: int, spec: LayerSizes, want_dx: bool) -> ResultLayout:
        grads = k + rows * spec.classes
        end = grads + spec.total
        dx, size = (end, end + rows * spec.inputs) if want_dx else (None, end)
        return tuple.__new__(cls, (k, rows, 0, k, grads, dx, size))


class _Layouts(dict):
    """A spec's result layouts, made on first use, as pairs (without input_grad, with it)
    indexed by want_dx: `layouts[rows][want_dx]` for one step, `layouts[k, rows][want_dx]`
    for k. A step looks its layout up instead of making one (~1 µs, a third of a batch-1
    step); one step's key is `rows` alone, no tuple to build and hash (~35 ns). At most
    _MAX_LAYOUTS keys are kept; past that a pair is made and not kept."""

    __slots__ = ("_spec",)

    def __init__(self, spec):
        super().__init__()
        self._spec = spec

    def __missing__(self, key):
        k, rows = (1, key) if type(key) is int else key
        pair = (ResultLayout(k, rows, self._spec, False), ResultLayout(k, rows, self._spec, True))
        if len(self) < _MAX_LAYOUTS:
            self[key] = pair
        return pair


_MAX_LAYOUTS = 1024

SMALL = LayerSizes([8, 16, 3], "SmallMLPTrainer")


def init_small_mlp(seed: SupportsIndex) -> tuple[Array, Array, Array, Array]:
    """The initial weights of the 8→16→3 network, the same bits everywhere.

    The [8, 16, 3] case of `MLPTrainer`'s initialisation: SplitMix64 from `seed`, torch's
    default `nn.Linear` bounds, layer by layer, weight then bias.

    Args:
        seed: an int in [0, 2**64).

    Returns:
        (weight1 (16, 8), bias1 (16,), weight2 (3, 16), bias2 (3,)), float32 Arrays: the
        arguments of `SmallMLPTrainer`.

    Raises:
        TypeError: `seed` is not an int.
        ValueError: `seed` is outside [0, 2**64).

    Example:
        >>> trainer = mojolearn.SmallMLPTrainer(
        ...     *mojolearn.init_small_mlp(0), data_schedule={"seed": 0}
        ... )
    """
    return tuple(SMALL.init(seed))
