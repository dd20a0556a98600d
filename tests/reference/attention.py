"""Pure-Python mirror of the text layers in identical mode (docs/ARITHMETIC.md "Models:
Embedding, PositionEmbedding, CausalSelfAttention"): every binary32 operation one double
operation rounded by `f32`, every dot product an fma chain from +0.0 in the order the kernels
(mojo/training/layers/embedding.mojo, attention.mojo) pin. Tensors are flat row-major lists.
"""

import math

from .f32 import f32, fma32
from .portable_math import exp32


def embedding_forward(ids, w, d):
    return [w[i * d + j] for i in ids for j in range(d)]


def embedding_backward(ids, g, d, vocab):
    """The table's gradient: +0.0, then each (example, position)'s row added in order."""
    dw = [0.0] * (vocab * d)
    for n, i in enumerate(ids):
        for j in range(d):
            dw[i * d + j] = f32(dw[i * d + j] + g[n * d + j])
    return dw


def position_forward(x, w, rows, n):
    return [f32(x[b * n + e] + w[e]) for b in range(rows) for e in range(n)]


def position_backward(g, rows, n, table):
    dw = [0.0] * table
    for b in range(rows):
        for e in range(n):
            dw[e] = f32(dw[e] + g[b * n + e])
    return dw


def scale_of(hd):
    """1/sqrt(hd) in binary64, rounded once to float32."""
    return f32(1.0 / math.sqrt(hd))


def _chain(pairs):
    acc = 0.0
    for a, b in pairs:
        acc = fma32(a, b, acc)
    return acc


def attention_forward(qkv, rows, t, d, heads):
    """(y (rows × t × d), att (rows × heads × t × t), +0.0 above the diagonal)."""
    hd, scale = d // heads, scale_of(d // heads)
    y, att = [0.0] * (rows * t * d), [0.0] * (rows * heads * t * t)

    def at(b, i, part, h):  # the start of q (0), k (1) or v (2) of head h at position i
        return (b * t + i) * 3 * d + part * d + h * hd

    for b in range(rows):
        for h in range(heads):
            for i in range(t):
                q = at(b, i, 0, h)
                s = []
                for j in range(i + 1):
                    k = at(b, j, 1, h)
                    s.append(f32(_chain((qkv[q + e], qkv[k + e]) for e in range(hd)) * scale))
                mx = s[0]
                for v in s:
                    mx = v if v > mx else mx
                ex = [exp32(f32(v - mx)) for v in s]
                total = 0.0
                for v in ex:
                    total = f32(total + v)
                row = (b * heads + h) * t * t + i * t
                for j, v in enumerate(ex):
                    att[row + j] = f32(v / total)
                for e in range(hd):
                    pairs = ((att[row + j], qkv[at(b, j, 2, h) + e]) for j in range(i + 1))
                    y[(b * t + i) * d + h * hd + e] = _chain(pairs)
    return y, att


def attention_backward(qkv, att, dy, rows, t, d, heads):
    """dqkv (rows × t × 3d)."""
    hd, scale = d // heads, scale_of(d // heads)
    dqkv = [0.0] * (rows * t * 3 * d)

    def at(b, i, part, h):
        return (b * t + i) * 3 * d + part * d + h * hd

    for b in range(rows):
        for h in range(heads):
            a = (b * heads + h) * t * t
            ds = [[0.0] * t for _ in range(t)]
            for i in range(t):
                g = (b * t + i) * d + h * hd
                datt = [
                    _chain((dy[g + e], qkv[at(b, j, 2, h) + e]) for e in range(hd))
                    for j in range(i + 1)
                ]
                dot = _chain((att[a + i * t + j], datt[j]) for j in range(i + 1))
                for j in range(i + 1):
                    p = att[a + i * t + j]
                    ds[i][j] = f32(f32(p * f32(datt[j] - dot)) * scale)
            for i in range(t):
                for e in range(hd):
                    pairs = ((ds[i][j], qkv[at(b, j, 1, h) + e]) for j in range(i + 1))
                    dqkv[at(b, i, 0, h) + e] = _chain(pairs)
            for j in range(t):
                for e in range(hd):
                    dqkv[at(b, j, 1, h) + e] = _chain(
                        (ds[i][j], qkv[at(b, i, 0, h) + e]) for i in range(j, t)
                    )
                    dqkv[at(b, j, 2, h) + e] = _chain(
                        (att[a + i * t + j], dy[(b * t + i) * d + h * hd + e]) for i in range(j, t)
                    )
    return dqkv


# -- sampling (Trainer.generate) -------------------------------------------------------------


def sample_uniform(seed, position):
    """The (position+1)-th SplitMix64 draw of `seed`, as 24 bits in [0, 1)."""
    from .layers import mix64

    state = (seed + 0x9E3779B97F4A7C15 * (position + 1)) % (1 << 64)
    return (mix64(state) >> 40) / 2.0**24


def sample_pick(z, temperature, top_k, u):
    """The id drawn from logits z: division by f32(temperature), the top k by value (ties to
    the lower id), their softmax in id order, the inverse CDF summed ascending in float32."""
    from .loss import softmax_row

    t = f32(temperature)
    if t != 1.0:
        z = [f32(v / t) for v in z]
    order = sorted(range(len(z)), key=lambda i: (-z[i], i))
    kept = sorted(order[: top_k or len(z)])
    probs = softmax_row([z[i] for i in kept]) if len(kept) > 1 else [1.0]
    c = 0.0
    for i, p in zip(kept, probs):
        c = f32(c + p)
        if u < c:
            return i
    return kept[-1]
