"""`train --model SPEC`: a one-line layer list, parsed into `mojolearn.nn` descriptions.

    SPEC   := layer ("," layer)*
    layer  := "linear:" N [":nobias"] | "relu" | "gelu" [":tanh"] | "tanh" | "sigmoid"
            | "layernorm" | "dropout:" P | "flatten" | "residual(" SPEC ")"
            | "conv:" OUT ":" K [":" S [":" P]] | "maxpool:" K [":" S] | "avgpool:" K [":" S]

N, OUT and K are integers in [1, 2**20], S too (default 1 for conv, K for a pool), the conv's
padding P an integer in [0, 2**20] (default 0), dropout's P a decimal in [0, 1); spaces around
a layer are ignored. `build` follows one example's shape from the input's (the data's feature
count, or an image (C, H, W) for a SPEC with a conv or pool layer: `input_shape`): `linear:N`
and `layernorm` act on the last axis (torch's), `flatten` joins the axes, conv and pool layers
take (C, H, W); `residual(...)` adds its input to its layers' output, so its layers must keep
the shape, and the model must end with one vector per example. The last `linear:N` outside a
residual gives the outputs: the classes (cross-entropy) or 1 (`--loss mse`). `parse` checks
the text alone (the option's value); `build` makes the `nn.Sequential` once the input shape is
known. Every refusal names the layer's character position and text, and what was expected.
"""

from __future__ import annotations

import re

from .._model.layers import MAX_DEPTH, MAX_FEATURES

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, NoReturn

    # (character position, kind, argument, inner layers, canonical text)
    Parsed = tuple[int, str, Any, tuple["Parsed", ...], str]

GRAMMAR = (
    "linear:N (linear:N:nobias), relu, gelu (gelu:tanh), tanh, sigmoid, layernorm, dropout:P, "
    "flatten, residual(LAYERS), conv:OUT:K[:S[:P]], maxpool:K[:S], avgpool:K[:S]"
)
IMAGE_LAYERS = ("conv", "maxpool", "avgpool")
_P = re.compile(r"(?:0|0?\.[0-9]+|0\.)(?:[eE][+-]?[0-9]+)?", re.ASCII)


class SpecError(ValueError):
    """A SPEC refused: one line naming the position, the text and what was expected."""


def _fail(at: int, text: str, expected: str) -> NoReturn:
    raise SpecError(f"at character {at + 1} ({text[:40]!r}): expected {expected}")


def _layers(text: str, at: int, end: int, nesting: int = 0) -> tuple[Parsed, ...]:
    """The layers of text[at:end] as (position, kind, argument, inner layers, canonical text)."""
    if nesting > MAX_DEPTH:
        _fail(at, text[at:end], f"at most {MAX_DEPTH} residual(...) inside one another")
    out: list[Parsed] = []
    start, depth = at, 0
    for i in range(at, end + 1):
        c = text[i] if i < end else ","
        depth += (c == "(") - (c == ")")
        if depth < 0:
            _fail(i, text[i:end], "',' or the end (this ')' closes no 'residual(')")
        if c == "," and depth == 0:
            out.append(_layer(text, start, i, nesting))
            start = i + 1
    if depth:
        _fail(start, text[start:end], "a ')' closing 'residual('")
    return tuple(out)


def _layer(text: str, at: int, end: int, nesting: int) -> Parsed:
    while at < end and text[at] == " ":
        at += 1
    token = text[at:end].rstrip(" ")
    word, _, arg = token.partition(":")
    if token.startswith("residual(") and token.endswith(")"):
        inner = _layers(text, at + 9, at + len(token) - 1, nesting + 1)
        return at, "residual", None, inner, f"residual({canonical(inner)})"
    if word == "linear":
        n, _, bias = arg.partition(":")
        good = n.isascii() and n.isdigit() and len(n) < 9 and 1 <= int(n) <= MAX_FEATURES
        if not good or bias not in ("", "nobias"):
            _fail(at, token, f"linear:N or linear:N:nobias, N an integer in [1, {MAX_FEATURES}]")
        return at, word, (int(n), not bias), (), f"linear:{int(n)}" + ":nobias" * bool(bias)
    if word in IMAGE_LAYERS:
        return _image_layer(at, token, word, arg)
    if word == "dropout":
        if not _P.fullmatch(arg) or not float(arg) < 1:
            _fail(at, token, "dropout:P, P a decimal in [0, 1) such as 0.1")
        return at, word, float(arg), (), f"dropout:{float(arg)!r}"
    if token in ("gelu", "gelu:tanh"):
        return at, word, arg or "none", (), token
    if token not in ("relu", "tanh", "sigmoid", "layernorm", "flatten"):
        _fail(at, token or "", f"a layer: {GRAMMAR}")
    return at, token, None, (), token


def _image_layer(at: int, token: str, word: str, arg: str) -> Parsed:
    """conv:OUT:K[:S[:P]] as (OUT, K, S, P), a pool's K[:S] as (K, S); the canonical text
    leaves out trailing defaults (conv's stride 1 and padding 0, a pool's stride K)."""
    conv = word == "conv"
    parts, need = arg.split(":"), 2 if conv else 1
    low = (1, 1, 1, 0) if conv else (1, 1)
    if not need <= len(parts) <= len(low) or not all(
        p.isascii() and p.isdigit() and len(p) < 9 and low[i] <= int(p) <= MAX_FEATURES
        for i, p in enumerate(parts)
    ):
        form = (
            "conv:OUT:K[:S[:P]] (out channels, kernel, stride, padding)"
            if conv
            else (f"{word}:K[:S] (kernel, stride)")
        )
        _fail(at, token, f"{form}, integers in [1, {MAX_FEATURES}]" + " (P from 0)" * conv)
    values = [int(p) for p in parts]
    defaults = (1, 0) if conv else (values[0],)  # after the required values
    full = values + list(defaults[len(values) - need :])
    shown = list(full)
    while len(shown) > need and shown[-1] == defaults[len(shown) - 1 - need]:
        shown.pop()
    return at, word, tuple(full), (), ":".join([word, *map(str, shown)])


def canonical(layers: tuple[Parsed, ...]) -> str:
    """The SPEC text of parsed layers, spelled one way (what a checkpoint records)."""
    return ",".join(layer[4] for layer in layers)


def parse(text: str) -> tuple[Parsed, ...]:
    """The layers of SPEC `text` (SpecError when the text is not one); the last top-level
    `linear:N` must be there (it gives the outputs)."""
    layers = _layers(text, 0, len(text))
    if outputs(layers) is None:
        _fail(0, text, "a linear:N outside residual(...) (the last one gives the outputs)")
    return layers


def outputs(layers: tuple[Parsed, ...]) -> int | None:
    """The output width of parsed layers: the last top-level linear's N (None without one)."""
    widths = [arg[0] for _, kind, arg, *_ in layers if kind == "linear"]
    return widths[-1] if widths else None


def has_images(layers: tuple[Parsed, ...]) -> bool:
    """Whether parsed layers hold a conv or pool layer (at any depth)."""
    return any(kind in IMAGE_LAYERS or has_images(inner) for _, kind, _, inner, _ in layers)


def input_shape(text: str, features: int, image: tuple[int, ...] | None) -> tuple[int, ...]:
    """The model's input shape on data of `features` values per example: the data's image
    shape (C, H, W) when they have one and SPEC `text` a conv or pool layer, else the vector
    (features,) (a SPEC of feature layers reads an image's C·H·W values as one vector)."""
    return tuple(image) if image is not None and has_images(parse(text)) else (features,)


def build(text: str, shape: tuple[int, ...]) -> Any:
    """The `nn.Sequential` of SPEC `text` on examples of `shape` (SpecError naming the layer
    whose input does not fit it, a residual whose layers change the shape, or a model that
    does not end with one vector per example)."""
    from .. import nn

    layers = parse(text)
    out, last = _build(nn, layers, tuple(shape))
    if len(last) != 1:
        at, *_, token = layers[-1]
        _fail(at, token, f"one vector per example at the end, got shape {last} (add flatten)")
    return nn.Sequential(*out)


def _shown(shape: tuple[int, ...]) -> str:
    return f"width {shape[0]}" if len(shape) == 1 else f"shape {shape}"


def _build(nn: Any, layers: tuple[Parsed, ...], shape: tuple[int, ...]) -> tuple[list[Any], Any]:
    out: list[Any] = []
    for at, kind, arg, inner, token in layers:
        if kind == "residual":
            body, after = _build(nn, inner, shape)
            if after != shape:
                _fail(
                    at, token, f"layers that keep the {_shown(shape)} (they give {_shown(after)})"
                )
            out.append(nn.Residual(*body))
            continue
        if kind in IMAGE_LAYERS and len(shape) != 3:
            _fail(
                at,
                token,
                f"an image input (C, H, W), got shape {shape} (images: --dataset digits or "
                f"--image-shape C,H,W with a CSV, until flatten)",
            )
        try:
            layer = _make(nn, kind, arg, shape)
            shape = layer._output_shape(shape, "the layer")
        except (TypeError, ValueError) as exc:
            _fail(at, token, f"a layer its input fits: {exc}")
        out.append(layer)
    return out, shape


def _make(nn: Any, kind: str, arg: Any, shape: tuple[int, ...]) -> Any:
    """The description of one parsed layer (not a residual) on an input of `shape`."""
    if kind == "linear":
        return nn.Linear(shape[-1], arg[0], bias=arg[1])
    if kind == "conv":
        return nn.Conv2d(shape[0], *arg)
    if kind in ("maxpool", "avgpool"):
        return (nn.MaxPool2d if kind == "maxpool" else nn.AvgPool2d)(*arg)
    if kind == "layernorm":
        return nn.LayerNorm(shape[-1])
    make = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "flatten": nn.Flatten}
    make.update(dropout=nn.Dropout, gelu=nn.GELU)
    return make[kind](*(() if arg is None else (arg,)))
