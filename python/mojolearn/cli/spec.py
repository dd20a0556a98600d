"""`train --model SPEC`: a one-line layer list, parsed into `mojolearn.nn` descriptions.

    SPEC   := layer ("," layer)*
    layer  := "linear:" N [":nobias"] | "relu" | "gelu" [":tanh"] | "tanh" | "sigmoid"
            | "layernorm" | "dropout:" P | "flatten" | "residual(" SPEC ")"

N is an integer in [1, 2**20], P a decimal in [0, 1); spaces around a layer are ignored. The
input width is the data's feature count; `layernorm` normalizes the width of the layer before
it; `residual(...)` adds its input to its layers' output, so its layers must keep the width.
The last `linear:N` outside a residual gives the outputs: the classes (cross-entropy) or 1
(`--loss mse`). `parse` checks the text alone (the option's value); `build` makes the
`nn.Sequential` once the input width is known. Every refusal names the layer's character
position and text, and what was expected there.
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
    "flatten, residual(LAYERS)"
)
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
    if word == "dropout":
        if not _P.fullmatch(arg) or not float(arg) < 1:
            _fail(at, token, "dropout:P, P a decimal in [0, 1) such as 0.1")
        return at, word, float(arg), (), f"dropout:{float(arg)!r}"
    if token in ("gelu", "gelu:tanh"):
        return at, word, arg or "none", (), token
    if token not in ("relu", "tanh", "sigmoid", "layernorm", "flatten"):
        _fail(at, token or "", f"a layer: {GRAMMAR}")
    return at, token, None, (), token


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


def build(text: str, width: int) -> Any:
    """The `nn.Sequential` of SPEC `text` on `width` input features (SpecError naming the
    layer when a residual's layers change the width)."""
    from .. import nn

    return nn.Sequential(*_build(nn, text, parse(text), width)[0])


def _build(nn: Any, text: str, layers: tuple[Parsed, ...], width: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    for at, kind, arg, inner, token in layers:
        if kind == "linear":
            out.append(nn.Linear(width, arg[0], bias=arg[1]))
            width = arg[0]
        elif kind == "residual":
            body, after = _build(nn, text, inner, width)
            if after != width:
                _fail(at, token, f"layers that keep the width {width} (they give {after})")
            out.append(nn.Residual(*body))
        else:
            make = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "flatten": nn.Flatten}
            make.update(dropout=nn.Dropout, gelu=nn.GELU, layernorm=nn.LayerNorm)
            args = (width,) if kind == "layernorm" else () if arg is None else (arg,)
            out.append(make[kind](*args))
    return out, width
