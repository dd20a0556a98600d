"""Layer descriptions for models beyond the MLP: `mojolearn.nn.Sequential(nn.Linear(10, 64),
nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 1))`.

A description holds no parameters (the trainer owns them all, in one flat buffer under torch's
`state_dict` names); it is immutable, compares and hashes by value, prints as the code that makes
it and records as JSON (`layer.to_json()`, `nn.from_json(record)`). Shapes are one example's,
without the batch axis: `Linear` acts on the last axis of any rank, as torch's does.

Layers: `Linear(in_features, out_features, bias=True)`, `ReLU()`, `GELU(approximate="none")`
(`"tanh"` for the tanh form), `Tanh()`, `Sigmoid()`, `LayerNorm(normalized_shape, eps=1e-5,
elementwise_affine=True)` over the last axis, `Dropout(p=0.5)`, `Flatten()`, on images
(C, H, W) `Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True)`,
`MaxPool2d(kernel_size, stride=None)` and `AvgPool2d(kernel_size, stride=None)` (sizes an int
or a pair), and the containers `Sequential(*layers)` and `Residual(*layers)` (`y = x + f(x)`,
f keeping its input's shape). For text: `Embedding(num_embeddings, embedding_dim)` (integer
token ids in, the model's first layer), `PositionEmbedding(max_len, dim)`,
`CausalSelfAttention(dim, num_heads, bias=True)`, and `gpt(vocab_size, block_size, n_layer,
n_head, n_embd)`, nanoGPT's model as a Sequential.

Constructor arguments are checked at once (TypeError or ValueError naming the layer and the
argument); shapes are checked when a model meets its input shape, with the layer's index in the
message (`layer 3 Linear(64, 10) expects 64 input features, gets 128`).

Example:
    >>> from mojolearn import nn
    >>> model = nn.Sequential(nn.Linear(10, 64), nn.GELU(), nn.Residual(nn.LayerNorm(64), nn.Linear(64, 64)))
    >>> model[2]
    Residual(LayerNorm(64), Linear(64, 64))
    >>> nn.from_json(model.to_json()) == model
    True
"""

from __future__ import annotations

from ._model.layers import (
    GELU,
    AvgPool2d,
    CausalSelfAttention,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Layer,
    LayerNorm,
    Linear,
    MaxPool2d,
    PositionEmbedding,
    ReLU,
    Residual,
    Sequential,
    Sigmoid,
    Tanh,
    gpt,
)
from ._model.layers import from_json as _from_json

__all__ = [
    "GELU",
    "AvgPool2d",
    "Conv2d",
    "CausalSelfAttention",
    "Dropout",
    "Embedding",
    "Flatten",
    "Layer",
    "LayerNorm",
    "Linear",
    "MaxPool2d",
    "PositionEmbedding",
    "ReLU",
    "Residual",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "from_json",
    "gpt",
]


def from_json(record: object) -> Layer:
    """The layer description a `to_json()` record holds, every field checked.

    Args:
        record: a JSON object as `Layer.to_json()` writes it (`{"layer": "Linear",
            "in_features": 64, ...}`; containers hold a `layers` list).

    Returns:
        The description, equal to the one that wrote the record.

    Raises:
        ValueError: the record is malformed (unknown layer, missing or extra fields, bad
            argument values, nesting deeper than 8 or more than 1024 layers), naming where.
    """
    return _from_json(record)
