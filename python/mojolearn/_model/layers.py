"""Layer descriptions: small immutable values that say what a layer computes, never hold its
parameters (the trainer owns every parameter in one flat buffer), compare and hash by value,
print as code (`Linear(64, 10)`), and record as JSON (`to_json` / `from_json`).

Each description knows three things about itself, given the shape of one example (the batch
axis left out, so a rank-1 shape `(F,)`, a rank-2 `(T, D)` or a rank-3 `(C, H, W)`):
- `_output_shape(shape, where)`: the shape it gives, or ValueError naming `where` (the layer's
  index in the model, e.g. `layer 3.1`), the layer and the shapes;
- `_parameters(shape)`: its tensors as (name, shape) in torch's `state_dict` order;
- `_initial(name, shape, rng)`: torch's default initialization of one tensor, drawn
  from the model's one seeded generator in parameter order (docs/ARITHMETIC.md "Models").

`Sequential` and `Residual` hold other descriptions; their children's torch names are their
indices (`3.1.weight` is the weight of layer 1 inside the container at index 3).
"""

from __future__ import annotations

import math
import operator

from .._runtime.portable import cospi, log

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Iterator

    from .._mlp.rng import SplitMix64

Shape = tuple[int, ...]  # one example's shape, batch axis excluded

MAX_FEATURES = 1 << 20  # any one axis a layer names (features, widths)
MAX_LAYERS = 1024  # descriptions in a model, containers included
MAX_DEPTH = 8  # containers inside containers


def _int_arg(layer: str, name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(
            f"{layer}: {name} must be an int, got {type(value).__name__} {value!r}"[:200]
        )
    n = operator.index(value)  # type: ignore[arg-type]
    if not low <= n <= MAX_FEATURES:
        raise ValueError(f"{layer}: {name} must be an int in [{low}, {MAX_FEATURES}], got {n}")
    return n


def _pair_arg(layer: str, name: str, value: object, low: int = 1) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each in [low, 2**20], as a pair."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f"{layer}: {name} must be an int or a pair, got {value!r}"[:200])
        return (
            _int_arg(layer, f"{name}[0]", value[0], low),
            _int_arg(layer, f"{name}[1]", value[1], low),
        )
    n = _int_arg(layer, name, value, low)
    return (n, n)


def _bool_arg(layer: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{layer}: {name} must be a bool, got {type(value).__name__} {value!r}"[:200]
        )
    return value


def _float_arg(layer: str, name: str, value: object, low: float, high: float, closed: str) -> float:
    """A finite float in [low, high) ('[)') or (low, high) ('()')."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{layer}: {name} must be a float, got {type(value).__name__} {value!r}"[:200]
        )
    x = float(value)
    inside = (low <= x if closed[0] == "[" else low < x) and x < high
    if not (math.isfinite(x) and inside):
        raise ValueError(f"{layer}: {name} must be in {closed[0]}{low:g}, {high:g}), got {value!r}")
    return x


class Layer:
    """The base of every layer description: immutable, equal and hashable by value."""

    __slots__ = ()
    # The constructor's arguments in order, and how many of them print positionally.
    _args: tuple[str, ...] = ()
    _positional = 0
    _defaults: dict[str, object] = {}

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"{type(self).__name__} is an immutable layer description: make a new one "
            f"instead of setting {name}"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is an immutable layer description")

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, a) for a in self._args)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Layer) and type(other) is type(self) and other._key() == self._key()
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        parts = []
        for i, a in enumerate(self._args):
            v = getattr(self, a)
            if i < self._positional:
                parts.append(repr(v))
            elif a not in self._defaults or self._defaults[a] != v:
                parts.append(f"{a}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._key())

    def to_json(self) -> dict[str, Any]:
        """The description as a JSON record.

        Returns:
            `{"layer": its class name, argument: value, ...}` (containers: `"layers"`, a list
            of their layers' records), which `mojolearn.nn.from_json` reads back.
        """
        values = {a: getattr(self, a) for a in self._args}
        # pairs (a kernel's height and width) as JSON writes them back: lists
        values = {a: list(v) if isinstance(v, tuple) else v for a, v in values.items()}
        return {"layer": type(self).__name__, **values}

    # Shapes and parameters; containers and layers with parameters override these.
    def _output_shape(self, shape: Shape, where: str) -> Shape:
        """The output shape for one example of `shape` (elementwise layers keep it)."""
        return shape

    def _parameters(self, shape: Shape) -> list[tuple[str, Shape]]:
        """Its tensors (name, shape) in torch's order, for an input of `shape`."""
        return []

    def _initial(self, name: str, shape: Shape, rng: SplitMix64) -> list[float]:
        """torch's default initial values of tensor `name` (row-major, binary64)."""
        raise NotImplementedError(name)


class Linear(Layer):
    """`y = x·Wᵀ + b` on the last axis (torch's `nn.Linear`): `(..., in_features)` to
    `(..., out_features)`; tensors `weight` (out_features, in_features) and `bias`.

    Args:
        in_features: the input's last axis, an int in [1, 2**20].
        out_features: the output's last axis, an int in [1, 2**20].
        bias: whether it has a `bias` tensor.
    """

    __slots__ = ("in_features", "out_features", "bias")
    in_features: int
    out_features: int
    bias: bool
    _args = ("in_features", "out_features", "bias")
    _positional = 2
    _defaults = {"bias": True}

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        self._set(
            in_features=_int_arg("Linear", "in_features", in_features),
            out_features=_int_arg("Linear", "out_features", out_features),
            bias=_bool_arg("Linear", "bias", bias),
        )

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        if not shape or shape[-1] != self.in_features:
            got = f"{shape[-1]}" if shape else "a scalar"
            raise ValueError(
                f"{where} {self!r} expects {self.in_features} input features, gets {got} "
                f"(input shape {shape})"
            )
        return shape[:-1] + (self.out_features,)

    def _parameters(self, shape: Shape) -> list[tuple[str, Shape]]:
        w: list[tuple[str, Shape]] = [("weight", (self.out_features, self.in_features))]
        return w + [("bias", (self.out_features,))] if self.bias else w

    def _initial(self, name: str, shape: Shape, rng: SplitMix64) -> list[float]:
        return _fan_in_uniform(self.in_features, shape, rng)


def _fan_in_uniform(fan_in: int, shape: Shape, rng: SplitMix64) -> list[float]:
    # torch: kaiming_uniform_(a=sqrt(5)) for the weight and U(-b, b) for the bias both
    # come to b = 1 / sqrt(fan_in).
    bound = 1.0 / math.sqrt(fan_in)
    return [(2.0 * rng.uniform() - 1.0) * bound for _ in range(math.prod(shape))]


def _image(where: str, layer: Layer, shape: Shape) -> Shape:
    """`shape` when it is one image (C, H, W), else ValueError naming the layer."""
    if len(shape) != 3:
        raise ValueError(
            f"{where} {layer!r} takes images (channels, height, width), gets input shape {shape}"
        )
    return shape


def _windows(where: str, layer: Conv2d | _Pool2d, shape: Shape, padding: tuple[int, int]) -> Shape:
    """(output height, output width) of its kernel sliding over the padded image (floor)."""
    kernel, stride = layer.kernel_size, layer.stride
    _, h, w = shape
    hp, wp = h + 2 * padding[0], w + 2 * padding[1]
    if kernel[0] > hp or kernel[1] > wp:
        raise ValueError(
            f"{where} {layer!r}: kernel {kernel[0]}x{kernel[1]} is larger than its "
            f"{'padded ' if any(padding) else ''}input {hp}x{wp} (input shape {shape})"
        )
    return ((hp - kernel[0]) // stride[0] + 1, (wp - kernel[1]) // stride[1] + 1)


class Conv2d(Layer):
    """A 2-D convolution (torch's `nn.Conv2d`, zero padding, no dilation or groups):
    `(in_channels, H, W)` to `(out_channels, OH, OW)`, `OH = (H + 2·padding - kh) // stride
    + 1`; tensors `weight` (out_channels, in_channels, kh, kw) and `bias` (out_channels).

    Args:
        in_channels: the input's channels, an int in [1, 2**20].
        out_channels: the output's channels, an int in [1, 2**20].
        kernel_size: an int or a pair (kh, kw), each in [1, 2**20].
        stride: an int or a pair, each in [1, 2**20].
        padding: zeros added on each side, an int or a pair, each in [0, 2**20].
        bias: whether it has a `bias` tensor.
    """

    __slots__ = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "bias")
    in_channels: int
    out_channels: int
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    bias: bool
    _args = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "bias")
    _positional = 3
    _defaults = {"stride": (1, 1), "padding": (0, 0), "bias": True}

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        bias: bool = True,
    ) -> None:
        self._set(
            in_channels=_int_arg("Conv2d", "in_channels", in_channels),
            out_channels=_int_arg("Conv2d", "out_channels", out_channels),
            kernel_size=_pair_arg("Conv2d", "kernel_size", kernel_size),
            stride=_pair_arg("Conv2d", "stride", stride),
            padding=_pair_arg("Conv2d", "padding", padding, low=0),
            bias=_bool_arg("Conv2d", "bias", bias),
        )

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        c = _image(where, self, shape)[0]
        if c != self.in_channels:
            raise ValueError(
                f"{where} {self!r} expects {self.in_channels} input channels, gets {c} "
                f"(input shape {shape})"
            )
        return (self.out_channels, *_windows(where, self, shape, self.padding))

    def _parameters(self, shape: Shape) -> list[tuple[str, Shape]]:
        w: list[tuple[str, Shape]] = [
            ("weight", (self.out_channels, self.in_channels, *self.kernel_size))
        ]
        return w + [("bias", (self.out_channels,))] if self.bias else w

    def _initial(self, name: str, shape: Shape, rng: SplitMix64) -> list[float]:
        return _fan_in_uniform(self.in_channels * math.prod(self.kernel_size), shape, rng)


class _Pool2d(Layer):
    """A window reduction over each channel of an image: no padding, floor output sizes."""

    __slots__ = ("kernel_size", "stride")
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    _args = ("kernel_size", "stride")
    _positional = 1

    def __init__(
        self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None
    ) -> None:
        name = type(self).__name__
        kernel = _pair_arg(name, "kernel_size", kernel_size)
        self._set(
            kernel_size=kernel,
            stride=kernel if stride is None else _pair_arg(name, "stride", stride),
        )

    def __repr__(self) -> str:
        k, s = self.kernel_size, self.stride
        tail = "" if s == k else f", stride={s!r}"
        return f"{type(self).__name__}({k[0] if k[0] == k[1] else k!r}{tail})"

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        return (_image(where, self, shape)[0], *_windows(where, self, shape, (0, 0)))


class MaxPool2d(_Pool2d):
    """The largest value of each window (torch's `nn.MaxPool2d` without padding or dilation);
    ties go to the window's first element in row-major order.

    Args:
        kernel_size: the window, an int or a pair (kh, kw), each in [1, 2**20].
        stride: an int or a pair, each in [1, 2**20]; None: the kernel size.
    """

    __slots__ = ()


class AvgPool2d(_Pool2d):
    """The mean of each window (torch's `nn.AvgPool2d` without padding): the window's sum,
    then one division by kh·kw.

    Args:
        kernel_size: the window, an int or a pair (kh, kw), each in [1, 2**20].
        stride: an int or a pair, each in [1, 2**20]; None: the kernel size.
    """

    __slots__ = ()


class ReLU(Layer):
    """`max(x, 0)` elementwise (`+0.0` for every x ≤ 0)."""

    __slots__ = ()


class Tanh(Layer):
    """`tanh(x)` elementwise."""

    __slots__ = ()


class Sigmoid(Layer):
    """The logistic function `1 / (1 + exp(-x))` elementwise."""

    __slots__ = ()


class GELU(Layer):
    """`x·Φ(x)` elementwise (torch's `nn.GELU`).

    Args:
        approximate: `"none"` (the erf form) or `"tanh"` (the tanh approximation).
    """

    __slots__ = ("approximate",)
    approximate: str
    _args = ("approximate",)
    _defaults = {"approximate": "none"}

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in ("none", "tanh"):
            raise ValueError(
                f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}"[:200]
            )
        self._set(approximate=approximate)


class LayerNorm(Layer):
    """Normalization over the last axis, then (by default) a learned scale `weight` and shift
    `bias` (torch's `nn.LayerNorm` with an int `normalized_shape`).

    Args:
        normalized_shape: the last axis's size, an int in [1, 2**20].
        eps: added to the variance, a float in (0, 1).
        elementwise_affine: whether it has `weight` (ones) and `bias` (zeros) tensors.
    """

    __slots__ = ("normalized_shape", "eps", "elementwise_affine")
    normalized_shape: int
    eps: float
    elementwise_affine: bool
    _args = ("normalized_shape", "eps", "elementwise_affine")
    _positional = 1
    _defaults = {"eps": 1e-5, "elementwise_affine": True}

    def __init__(
        self, normalized_shape: int, eps: float = 1e-5, elementwise_affine: bool = True
    ) -> None:
        self._set(
            normalized_shape=_int_arg("LayerNorm", "normalized_shape", normalized_shape),
            eps=_float_arg("LayerNorm", "eps", eps, 0.0, 1.0, "()"),
            elementwise_affine=_bool_arg("LayerNorm", "elementwise_affine", elementwise_affine),
        )

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        if not shape or shape[-1] != self.normalized_shape:
            raise ValueError(
                f"{where} {self!r} normalizes a last axis of {self.normalized_shape}, gets "
                f"input shape {shape}"
            )
        return shape

    def _parameters(self, shape: Shape) -> list[tuple[str, Shape]]:
        n = (self.normalized_shape,)
        return [("weight", n), ("bias", n)] if self.elementwise_affine else []

    def _initial(self, name: str, shape: Shape, rng: SplitMix64) -> list[float]:
        return [1.0 if name == "weight" else 0.0] * math.prod(shape)  # no draws


class Dropout(Layer):
    """Zeroes each element with probability p in training steps and scales the rest by
    1/(1-p); the identity in inference. Its mask is a function of (seed, step, layer, element),
    so threads, microbatches and processes cannot change it.

    Args:
        p: the probability of zeroing an element, a float in [0, 1).
    """

    __slots__ = ("p",)
    p: float
    _args = ("p",)
    _defaults = {"p": 0.5}

    def __init__(self, p: float = 0.5) -> None:
        self._set(p=_float_arg("Dropout", "p", p, 0.0, 1.0, "[)"))


class Flatten(Layer):
    """Every axis after the batch axis into one, row-major (torch's `nn.Flatten()`)."""

    __slots__ = ()

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        return (math.prod(shape),)


def normal(rng: SplitMix64, std: float) -> float:
    """One N(0, std²) draw in binary64, the same on every machine: Box–Muller's cosine branch
    from two 53-bit uniforms of `rng` (u1 in (0, 1], u2 in [0, 1)), `sqrt(−2·ln u1)·cos(2π·u2)`
    on the portable `log` and `cospi` (never libm), times `std`."""
    u1 = 1.0 - (rng.next_u64() >> 11) / 9007199254740992.0
    u2 = (rng.next_u64() >> 11) / 9007199254740992.0
    return float(math.sqrt(-2.0 * log(u1)) * cospi(2.0 * u2) * std)


class Embedding(Layer):
    """A table lookup (torch's `nn.Embedding`): integer token ids `(T,)` per example (int32 or
    int64, each in [0, num_embeddings)) to `(T, embedding_dim)`; tensor `weight`
    (num_embeddings, embedding_dim), initialized N(0, 1) as torch's. Only the model's first
    layer may be one (its input is the ids).

    Args:
        num_embeddings: the vocabulary's size, an int in [1, 2**20].
        embedding_dim: the vectors' width, an int in [1, 2**20].
    """

    __slots__ = ("num_embeddings", "embedding_dim")
    num_embeddings: int
    embedding_dim: int
    _args = ("num_embeddings", "embedding_dim")
    _positional = 2

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        self._set(
            num_embeddings=_int_arg("Embedding", "num_embeddings", num_embeddings),
            embedding_dim=_int_arg("Embedding", "embedding_dim", embedding_dim),
        )

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        if len(shape) != 1:
            raise ValueError(
                f"{where} {self!r} takes (positions,) token ids per example, gets input shape "
                f"{shape}"
            )
        return shape + (self.embedding_dim,)

    def _parameters(self, shape: Shape) -> list[tuple[str, Shape]]:
        return [("weight", (self.num_embeddings, self.embedding_dim))]

    def _initial(self, name: str, shape: Shape, rng: SplitMix64) -> list[float]:
        return [normal(rng, 1.0) for _ in range(math.prod(shape))]


class PositionEmbedding(Layer):
    """Adds a learned vector per position (nanoGPT's `wpe`): `(T, dim)` to `(T, dim)`, `y[t] =
    x[t] + weight[t]`, for T <= max_len; tensor `weight` (max_len, dim), initialized N(0, 1)
    as torch's `nn.Embedding` (the module nanoGPT's `wpe` is).

    Args:
        max_len: the most positions, an int in [1, 2**20].
        dim: the vectors' width, an int in [1, 2**20].
    """

    __slots__ = ("max_len", "dim")
    max_len: int
    dim: int
    _args = ("max_len", "dim")
    _positional = 2

    def __init__(self, max_len: int, dim: int) -> None:
        self._set(
            max_len=_int_arg("PositionEmbedding", "max_len", max_len),
            dim=_int_arg("PositionEmbedding", "dim", dim),
        )

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        if len(shape) != 2 or shape[1] != self.dim or shape[0] > self.max_len:
            raise ValueError(
                f"{where} {self!r} takes (positions <= {self.max_len}, {self.dim}) per "
                f"example, gets input shape {shape}"
            )
        return shape

    def _parameters(self, shape: Shape) -> list[tuple[str, Shape]]:
        return [("weight", (self.max_len, self.dim))]

    def _initial(self, name: str, shape: Shape, rng: SplitMix64) -> list[float]:
        return [normal(rng, 1.0) for _ in range(math.prod(shape))]


class CausalSelfAttention(Layer):
    """Multi-head scaled dot-product self-attention with a causal mask (nanoGPT's
    `CausalSelfAttention`, dropout 0): `(T, dim)` to `(T, dim)`. `c_attn` (a Linear(dim,
    3·dim): q, k, v side by side) then, per head of `dim / num_heads`, `softmax(q·kᵀ / sqrt(hd))`
    over the positions up to each query's own, times v; the heads side by side through `c_proj`
    (a Linear(dim, dim)). Tensors `c_attn.weight` (3·dim, dim), `c_attn.bias`, `c_proj.weight`
    (dim, dim), `c_proj.bias`, initialized as torch's Linear.

    Args:
        dim: the width, an int in [1, 2**20] divisible by `num_heads`.
        num_heads: the number of heads, an int in [1, dim].
        bias: whether `c_attn` and `c_proj` have biases.
    """

    __slots__ = ("dim", "num_heads", "bias")
    dim: int
    num_heads: int
    bias: bool
    _args = ("dim", "num_heads", "bias")
    _positional = 2
    _defaults = {"bias": True}

    def __init__(self, dim: int, num_heads: int, bias: bool = True) -> None:
        d = _int_arg("CausalSelfAttention", "dim", dim)
        h = _int_arg("CausalSelfAttention", "num_heads", num_heads)
        if d % h:
            raise ValueError(f"CausalSelfAttention: dim ({d}) must be divisible by num_heads ({h})")
        self._set(dim=d, num_heads=h, bias=_bool_arg("CausalSelfAttention", "bias", bias))

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        if len(shape) != 2 or shape[1] != self.dim:
            raise ValueError(
                f"{where} {self!r} takes (positions, {self.dim}) per example, gets input "
                f"shape {shape}"
            )
        return shape

    def _parameters(self, shape: Shape) -> list[tuple[str, Shape]]:
        d = self.dim
        out: list[tuple[str, Shape]] = []
        for name, rows in (("c_attn", 3 * d), ("c_proj", d)):
            out.append((f"{name}.weight", (rows, d)))
            if self.bias:
                out.append((f"{name}.bias", (rows,)))
        return out

    def _initial(self, name: str, shape: Shape, rng: SplitMix64) -> list[float]:
        bound = 1.0 / math.sqrt(self.dim)  # both Linears' fan_in
        return [(2.0 * rng.uniform() - 1.0) * bound for _ in range(math.prod(shape))]


class _Stack(Layer):
    """A container: its layers in order, named by index."""

    __slots__ = ("layers",)
    layers: tuple[Layer, ...]
    _args = ("layers",)

    def __init__(self, *layers: Layer) -> None:
        name = type(self).__name__
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        if not layers:
            raise ValueError(f"{name}: needs at least one layer")
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise TypeError(
                    f"{name}: layer {i} must be a mojolearn.nn layer, got "
                    f"{type(layer).__name__} {layer!r}"[:200]
                )
        self._set(layers=tuple(layers))
        count, depth = _size(self)
        if count > MAX_LAYERS or depth > MAX_DEPTH:
            raise ValueError(
                f"{name}: at most {MAX_LAYERS} layers nested at most {MAX_DEPTH} deep, got "
                f"{count} layers {depth} deep"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(l) for l in self.layers)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __getitem__(self, i: int) -> Layer:
        return self.layers[i]

    def to_json(self) -> dict[str, Any]:
        """The container as a JSON record.

        Returns:
            `{"layer": "Sequential" or "Residual", "layers": [each layer's record]}`.
        """
        return {"layer": type(self).__name__, "layers": [l.to_json() for l in self.layers]}

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        for i, layer in enumerate(self.layers):
            shape = layer._output_shape(shape, _child(where, i))
        return shape


class Sequential(_Stack):
    """Its layers applied in order (torch's `nn.Sequential`); children are named by index.

    Args:
        *layers: layer descriptions (or one list of them), 1 to 1024 in all, nested at most
            8 deep.
    """

    __slots__ = ()


class Residual(_Stack):
    """`y = x + f(x)`, `f` the stack of its layers, which must keep its input's shape (checked
    here where the layers pin the widths, and always against the model's input shape).

    Args:
        *layers: the layers of `f` (or one list of them); torch names them by index.
    """

    __slots__ = ()

    def __init__(self, *layers: Layer) -> None:
        super().__init__(*layers)
        width = _last_axis_map(self.layers)
        if width is not None and width[0] != width[1]:
            raise ValueError(
                f"Residual: its layers map a last axis of {width[0]} to {width[1]}; "
                f"y = x + f(x) needs f to keep its input's shape"
            )

    def _output_shape(self, shape: Shape, where: str) -> Shape:
        out = super()._output_shape(shape, where)
        if out != shape:
            raise ValueError(
                f"{where} {self!r} must keep its input's shape (y = x + f(x)): "
                f"input {shape}, f gives {out}"
            )
        return shape


def _child(where: str, i: int) -> str:
    return f"{where}.{i}" if where != "model" else f"layer {i}"


def _size(layer: Layer, depth: int = 0) -> tuple[int, int]:
    """(descriptions, deepest nesting) of a layer and everything inside it."""
    if not isinstance(layer, _Stack):
        return 1, depth
    count, deepest = 1, depth + 1
    for child in layer.layers:
        c, d = _size(child, depth + 1)
        count, deepest = count + c, max(deepest, d)
    return count, deepest


def _last_axis_map(layers: tuple[Layer, ...]) -> tuple[int, int] | None:
    """(input width, output width) of a stack that only acts on the last axis, when its
    layers pin both; None when any layer reshapes (checked with the model's input shape).
    Widths that do not chain inside the stack are refused here, by the layer's index."""
    first = width = None
    for i, layer in enumerate(layers):
        if isinstance(layer, Linear):
            need, out = layer.in_features, layer.out_features
        elif isinstance(layer, LayerNorm):
            need = out = layer.normalized_shape
        elif isinstance(layer, CausalSelfAttention):
            need = out = layer.dim
        elif type(layer) in _ELEMENTWISE:
            continue
        else:
            return None
        if width is not None and width != need:
            raise ValueError(
                f"Residual: its layer {i} {layer!r} expects a last axis of {need}, gets {width}"
            )
        first = need if first is None else first
        width = out
    return None if first is None or width is None else (first, width)


_ELEMENTWISE = (ReLU, Tanh, Sigmoid, GELU, Dropout)
LAYERS: dict[str, type[Layer]] = {
    c.__name__: c
    for c in (
        Linear,
        ReLU,
        Tanh,
        Sigmoid,
        GELU,
        LayerNorm,
        Dropout,
        Flatten,
        Conv2d,
        MaxPool2d,
        AvgPool2d,
        Sequential,
        Residual,
        Sequential,
        Residual,
        Embedding,
        PositionEmbedding,
        CausalSelfAttention,
    )
}


def from_json(value: object, where: str = "model", depth: int = 0) -> Layer:
    """A description from its JSON record, every field checked (ValueError naming `where`)."""
    if not isinstance(value, dict) or not isinstance(value.get("layer"), str):
        raise ValueError(
            f"{where}: a layer record is an object with a 'layer' name, got {value!r}"[:300]
        )
    cls = LAYERS.get(value["layer"])
    if cls is None:
        raise ValueError(
            f"{where}: unknown layer {value['layer']!r}; known: {', '.join(sorted(LAYERS))}"[:300]
        )
    fields = set(value) - {"layer"}
    if fields != set(cls._args):
        raise ValueError(
            f"{where}: a {cls.__name__} record holds exactly {sorted(cls._args)}, got "
            f"{sorted(fields)}"[:300]
        )
    try:
        if issubclass(cls, _Stack):
            if depth >= MAX_DEPTH or not isinstance(value["layers"], list):
                raise ValueError(f"layers must be a list, nested at most {MAX_DEPTH} deep")
            if len(value["layers"]) > MAX_LAYERS:
                raise ValueError(f"at most {MAX_LAYERS} layers")
            return cls(
                *(from_json(v, _child(where, i), depth + 1) for i, v in enumerate(value["layers"]))
            )
        return cls(**{a: value[a] for a in cls._args})
    except (TypeError, ValueError) as e:
        if str(e).startswith(where) or str(e).startswith("layer "):
            raise ValueError(str(e)) from None
        raise ValueError(f"{where}: {e}") from None


def gpt(vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int) -> Sequential:
    """nanoGPT's model (dropout 0) as a Sequential: `Embedding(vocab_size, n_embd)`,
    `PositionEmbedding(block_size, n_embd)`, `n_layer` blocks of `Residual(LayerNorm(n_embd),
    CausalSelfAttention(n_embd, n_head))` and `Residual(LayerNorm(n_embd), Linear(n_embd,
    4·n_embd), GELU(), Linear(4·n_embd, n_embd))`, then `LayerNorm(n_embd)` and
    `Linear(n_embd, vocab_size)`. Train it with `input_shape=(T,)`, T <= block_size, and
    `loss="cross_entropy"` on `(B, T)` next-token targets.

    Args:
        vocab_size: the number of token ids, an int in [1, 2**20].
        block_size: the most positions (the PositionEmbedding's `max_len`).
        n_layer: the number of blocks, an int >= 1.
        n_head: attention heads per block; `n_embd` must be divisible by it.
        n_embd: the width of every block.

    Returns:
        The `nn.Sequential`, its tensors named as `Sequential.state_dict()` names them
        (`0.weight`, `2.1.c_attn.weight`, ...).

    Raises:
        TypeError: an argument that is not an int.
        ValueError: an argument out of range, or `n_embd % n_head != 0`.
    """
    for name, v in (("vocab_size", vocab_size), ("block_size", block_size), ("n_layer", n_layer)):
        _int_arg("gpt", name, v)
    d = n_embd
    blocks: list[Layer] = []
    for _ in range(n_layer):
        blocks.append(Residual(LayerNorm(d), CausalSelfAttention(d, n_head)))
        blocks.append(Residual(LayerNorm(d), Linear(d, 4 * d), GELU(), Linear(4 * d, d)))
    return Sequential(
        Embedding(vocab_size, d),
        PositionEmbedding(block_size, d),
        *blocks,
        LayerNorm(d),
        Linear(d, vocab_size),
    )
