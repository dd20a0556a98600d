"""Pure-Python mirror of the model engine's layers in identical mode, profile v2
(docs/ARITHMETIC.md "Models"): one forward/backward pair per layer, every binary32 operation
one double operation rounded by `f32`, every dot product the GEMM's fma chain.

Tensors are flat lists of float32 values (Python floats), row-major, with `rows` = the batch
times every axis but the last where a layer acts on the last axis (Linear, LayerNorm), so the
same function serves (B, F), (B, T, D) and any rank. A backward returns the input's gradient
and the parameters' gradients; gradients are written, not accumulated, since a Sequential uses
each parameter once (the kernels accumulate into a zeroed buffer, which gives these bits: an
fma chain or sum from the +0.0 of the zeroing is a chain from +0.0).
"""

import math

from .f32 import f32, fma32
from .portable_math import erf32, exp32, sigmoid32, tanh32

# -- Linear: y = x·Wᵀ + b on the last axis --------------------------------------------------


def _dot(a, b, acc=0.0):
    for x, y in zip(a, b):
        acc = fma32(x, y, acc)
    return acc


def linear_forward(x, rows, w, b, n_in, n_out):
    """`y[r, o] = f32(chain_k x[r, k]·w[o, k] + b[o])`: the GEMM NT chain, then one add."""
    out = []
    for r in range(rows):
        xr = x[r * n_in : (r + 1) * n_in]
        for o in range(n_out):
            acc = _dot(xr, w[o * n_in : (o + 1) * n_in])
            out.append(f32(acc + b[o]) if b is not None else acc)
    return out


def linear_backward(g, x, rows, w, n_in, n_out, has_bias):
    """(dx, dw, db): dw = gᵀ·x (chains over rows ascending), db = row sums of g (rows
    ascending from +0.0), dx = g·w (chains over outputs ascending)."""
    dw = []
    for o in range(n_out):
        go = [g[r * n_out + o] for r in range(rows)]
        for k in range(n_in):
            dw.append(_dot(go, [x[r * n_in + k] for r in range(rows)]))
    db = None
    if has_bias:
        db = [0.0] * n_out
        for r in range(rows):
            db = [f32(s + g[r * n_out + o]) for o, s in enumerate(db)]
    dx = []
    for r in range(rows):
        gr = g[r * n_out : (r + 1) * n_out]
        for k in range(n_in):
            dx.append(_dot(gr, [w[o * n_in + k] for o in range(n_out)]))
    return dx, dw, db


# -- ReLU -----------------------------------------------------------------------------------


def relu_forward(x):
    return [v if v > 0 else 0.0 for v in x]


def relu_backward(g, y):
    """The mask is the output: `y > 0 ? g : +0.0` (the MLP step's)."""
    return [gv if yv > 0 else 0.0 for gv, yv in zip(g, y)]


# -- GELU, Tanh, Sigmoid: elementwise, on the portable float32 functions ---------------------

# Each rounded once to float32 (mojo/training/layers/activations.mojo has the same table).
SQRT1_2 = f32(0.70710678118654752440)  # 1/√2
INV_SQRT_2PI = f32(0.39894228040143267794)  # 1/√(2π)
BETA = f32(0.79788456080286535588)  # √(2/π)
KAPPA = f32(0.044715)
KAPPA3 = f32(0.134145)  # 3·0.044715


def _gelu_tanh_t(x):
    """`tanh32(BETA·(x + KAPPA·((x·x)·x)))`."""
    x3 = f32(f32(x * x) * x)
    return tanh32(f32(BETA * f32(x + f32(KAPPA * x3))))


def gelu_forward(x, approximate="none"):
    """`y = (x·0.5)·(1 + erf32(x·SQRT1_2))`, or `(x·0.5)·(1 + t)` with `t =
    tanh32(BETA·(x + KAPPA·((x·x)·x)))` for the tanh form (torch's formulas and order)."""
    if approximate == "tanh":
        return [f32(f32(v * 0.5) * f32(1.0 + _gelu_tanh_t(v))) for v in x]
    return [f32(f32(v * 0.5) * f32(1.0 + erf32(f32(v * SQRT1_2)))) for v in x]


def gelu_backward(g, x, approximate="none"):
    """`dx = g·d` from the input x, torch's GeluBackward. Erf form: `d = ((1 + erf32(x·SQRT1_2))
    ·0.5) + x·(exp32((x·x)·(−0.5))·INV_SQRT_2PI)`. Tanh form: `d = ((1 + t)·0.5) + ((x·0.5)·(1 −
    t·t))·(BETA·(1 + KAPPA3·(x·x)))`."""
    out = []
    for gv, v in zip(g, x):
        if approximate == "tanh":
            t = _gelu_tanh_t(v)
            left_d = f32(f32(1.0 + t) * 0.5)
            right_d = f32(1.0 - f32(t * t))
            inner_d = f32(BETA * f32(1.0 + f32(KAPPA3 * f32(v * v))))
            d = f32(left_d + f32(f32(f32(v * 0.5) * right_d) * inner_d))
        else:
            cdf = f32(f32(1.0 + erf32(f32(v * SQRT1_2))) * 0.5)
            pdf = f32(exp32(f32(f32(v * v) * -0.5)) * INV_SQRT_2PI)
            d = f32(cdf + f32(v * pdf))
        out.append(f32(gv * d))
    return out


def tanh_forward(x):
    return [tanh32(v) for v in x]


def tanh_backward(g, y):
    """From the output: `dx = g·(1 − y·y)`."""
    return [f32(gv * f32(1.0 - f32(yv * yv))) for gv, yv in zip(g, y)]


def sigmoid_forward(x):
    return [sigmoid32(v) for v in x]


def sigmoid_backward(g, y):
    """From the output: `dx = g·(y·(1 − y))`."""
    return [f32(gv * f32(yv * f32(1.0 - yv))) for gv, yv in zip(g, y)]


# -- LayerNorm over the last axis ------------------------------------------------------------


def layernorm_forward(x, rows, d, w, b, eps):
    """(y, mean, rstd) per row: `mean = (Σ x) / f32(d)` (ascending from +0.0); `var = (fma
    chain of (x − mean)² ascending from +0.0) / f32(d)` (two passes, biased as torch's);
    `rstd = 1 / sqrt(var + eps)` (add, correctly rounded sqrt, one division); `xhat = (x −
    mean)·rstd`; `y = fma(xhat, w, b)`, or `xhat` without the affine tensors."""
    eps32, n = f32(eps), f32(d)
    y, means, rstds = [], [], []
    for r in range(rows):
        xr = x[r * d : (r + 1) * d]
        s = 0.0
        for v in xr:
            s = f32(s + v)
        mean = f32(s / n)
        q = 0.0
        for v in xr:
            c = f32(v - mean)
            q = fma32(c, c, q)
        var = f32(q / n)
        rstd = f32(1.0 / f32(math.sqrt(f32(var + eps32))))
        for j, v in enumerate(xr):
            xhat = f32(f32(v - mean) * rstd)
            y.append(fma32(xhat, w[j], b[j]) if w is not None else xhat)
        means.append(mean)
        rstds.append(rstd)
    return y, means, rstds


def layernorm_backward(g, x, rows, d, w, means, rstds):
    """(dx, dw, db), llm.c's form: per row `gn_j = g_j·w_j` (g without the affine tensors);
    `a = (Σ gn) / f32(d)` (ascending); `c = (fma chain of gn·xhat ascending) / f32(d)`;
    `dx_j = ((gn_j − a) − xhat_j·c)·rstd`; `dw_j` = fma chain over rows ascending of
    `g·xhat`, `db_j` = sum over rows ascending of `g` (from +0.0). `xhat` is recomputed as
    the forward computes it."""
    n = f32(d)
    dx = []
    dw = [0.0] * d if w is not None else None
    db = [0.0] * d if w is not None else None
    for r in range(rows):
        xr, gr = x[r * d : (r + 1) * d], g[r * d : (r + 1) * d]
        mean, rstd = means[r], rstds[r]
        xhat = [f32(f32(v - mean) * rstd) for v in xr]
        gn = [f32(gv * w[j]) for j, gv in enumerate(gr)] if w is not None else list(gr)
        s = 0.0
        for v in gn:
            s = f32(s + v)
        a = f32(s / n)
        c = f32(_dot(gn, xhat) / n)
        dx.extend(f32(f32(f32(gv - a) - f32(xh * c)) * rstd) for gv, xh in zip(gn, xhat))
        if w is not None:
            dw = [fma32(gv, xh, acc) for gv, xh, acc in zip(gr, xhat, dw)]
            db = [f32(acc + gv) for gv, acc in zip(gr, db)]
    return dx, dw, db


# -- Dropout: a counter-based mask -----------------------------------------------------------

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def mix64(z):
    """SplitMix64's output function of a 64-bit integer."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def dropout_key(seed, t, layer):
    """The key of one Dropout layer in step `t` (one-based): three SplitMix64 mixes of the
    trainer's seed, the step and the layer's index in the model's layer order."""
    k = mix64((seed + _GAMMA) & _MASK64)
    k = mix64(((k ^ t) + _GAMMA) & _MASK64)
    return mix64(((k ^ layer) + _GAMMA) & _MASK64)


def dropout_threshold(p):
    """Elements whose 24-bit draw is below this are dropped: floor(p·2^24) (exact in binary64)."""
    return math.floor(p * (1 << 24))


def dropout_keep(key, index, threshold):
    """Whether element `index` (its index in the whole batch, row-major) is kept: the
    `index`-th draw of a SplitMix64 at state `key`, its top 24 bits against the threshold."""
    u = mix64((key + _GAMMA * (index + 1)) & _MASK64)
    return (u >> 40) >= threshold


def dropout_forward(x, p, key, first):
    """(y, kept): `y = kept ? x·scale : +0.0`, `scale = f32(1 / (1 − p))` formed in binary64;
    `first` is the global index of x[0] (a microbatch's offset in its batch)."""
    scale, threshold = f32(1.0 / (1.0 - p)), dropout_threshold(p)
    kept = [dropout_keep(key, first + i, threshold) for i in range(len(x))]
    return [f32(v * scale) if k else 0.0 for v, k in zip(x, kept)], kept


def dropout_backward(g, p, kept):
    scale = f32(1.0 / (1.0 - p))
    return [f32(v * scale) if k else 0.0 for v, k in zip(g, kept)]


# -- Residual and the MSE loss ---------------------------------------------------------------


def residual_forward(x, fx):
    """`y = x + f(x)`, one add per element (IEEE addition is commutative: either order)."""
    return [f32(a + b) for a, b in zip(x, fx)]


def residual_backward(g, g_through_f):
    """The input's gradient: the gradient that came through f plus the one that skipped it,
    one add per element (either order gives the same bits)."""
    return [f32(a + b) for a, b in zip(g_through_f, g)]


def mse(y, t):
    """(loss, dy): `d = y − t`; `loss = (fma chain of d·d over every element ascending from
    +0.0) / f32(n)`; `dy = (d + d) / f32(n)` (exact doubling, one division), as
    `F.mse_loss(reduction='mean')`."""
    n = f32(len(y))
    d = [f32(a - b) for a, b in zip(y, t)]
    q = 0.0
    for v in d:
        q = fma32(v, v, q)
    return f32(q / n), [f32(f32(v + v) / n) for v in d]
