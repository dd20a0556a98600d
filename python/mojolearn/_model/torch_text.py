"""The text layers in torch (`Trainer.to_torch` / `Trainer.from_torch`, `_model/export.py`).

`nn.Embedding` is `torch.nn.Embedding` (no padding index, max_norm, gradient scaling or sparse
gradients: those change what it computes). torch has no module for the other two, so this module
makes them on first use (torch is optional), picklable as `mojolearn._model.torch_text.<Name>`:
- `PositionEmbedding(max_len, dim)`: a `weight` parameter (max_len, dim); forward
  `x + weight[:T]` on (B, T, dim).
- `CausalSelfAttention(dim, num_heads, bias)`: nanoGPT's module (dropout 0): children `c_attn`
  (a Linear(dim, 3·dim)) and `c_proj` (a Linear(dim, dim)), so the state_dict names are ours;
  forward `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` per head.
`from_torch` reads exactly these classes (and torch's Embedding), nothing that merely shares a
name.
"""

from __future__ import annotations

from . import layers as L

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

_classes: dict[str, Any] = {}


def torch_classes() -> dict[str, Any]:
    """The torch classes of PositionEmbedding and CausalSelfAttention (made once; imports
    torch)."""
    if _classes:
        return _classes
    import torch

    class PositionEmbedding(torch.nn.Module):
        """`x + weight[:T]` on (B, T, dim): a learned vector per position (nanoGPT's wpe)."""

        def __init__(self, max_len: int, dim: int) -> None:
            super().__init__()
            self.max_len, self.dim = max_len, dim
            self.weight = torch.nn.Parameter(torch.empty(max_len, dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.weight[: x.shape[-2]]

    class CausalSelfAttention(torch.nn.Module):
        """nanoGPT's causal self-attention (dropout 0): c_attn, SDPA per head, c_proj."""

        def __init__(self, dim: int, num_heads: int, bias: bool = True) -> None:
            super().__init__()
            self.dim, self.num_heads = dim, num_heads
            self.c_attn = torch.nn.Linear(dim, 3 * dim, bias=bias)
            self.c_proj = torch.nn.Linear(dim, dim, bias=bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            h = self.num_heads
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out: torch.Tensor = self.c_proj(y.transpose(1, 2).reshape(b, t, d))
            return out

    for cls in (PositionEmbedding, CausalSelfAttention):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
        _classes[cls.__name__] = cls
    return _classes


def __getattr__(name: str) -> Any:
    # Unpickling a saved `to_torch()` model finds the classes here.
    if name in ("PositionEmbedding", "CausalSelfAttention"):
        return torch_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_torch(torch: ModuleType, layer: L.Layer) -> Any:
    """The torch module of a text layer, or None for any other layer."""
    if isinstance(layer, L.Embedding):
        return torch.nn.Embedding(layer.num_embeddings, layer.embedding_dim)
    if isinstance(layer, L.PositionEmbedding):
        return torch_classes()["PositionEmbedding"](layer.max_len, layer.dim)
    if isinstance(layer, L.CausalSelfAttention):
        cls = torch_classes()["CausalSelfAttention"]
        return cls(layer.dim, layer.num_heads, layer.bias)
    return None


def from_torch(torch: ModuleType, module: Any, where: str) -> tuple[L.Layer, list[str]] | None:
    """(the description, its tensors' names) of a text layer's torch module, None for any
    other module; ValueError naming `where` for settings mojolearn.nn cannot hold."""
    cls = type(module)
    made = torch_classes()
    if cls is torch.nn.Embedding:
        odd = [
            a
            for a, plain in (
                ("padding_idx", None),
                ("max_norm", None),
                ("scale_grad_by_freq", False),
                ("sparse", False),
            )
            if getattr(module, a) != plain
        ]
        if odd:
            raise ValueError(
                f"{where} is torch.nn.Embedding with {', '.join(odd)} set; mojolearn.nn's "
                f"Embedding is the plain lookup"
            )
        return L.Embedding(module.num_embeddings, module.embedding_dim), ["weight"]
    if cls is made["PositionEmbedding"]:
        return L.PositionEmbedding(module.max_len, module.dim), ["weight"]
    if cls is made["CausalSelfAttention"]:
        bias = module.c_attn.bias is not None
        if (module.c_proj.bias is not None) != bias:
            raise ValueError(f"{where}: c_attn and c_proj must both have biases or neither")
        names = ["c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"]
        return L.CausalSelfAttention(module.dim, module.num_heads, bias), [
            n for n in names if bias or n.endswith("weight")
        ]
    return None
