"""Pure-Python mirror of a whole identical-mode MLP step, profile v2, any layer sizes
(`mojo/training/mlp.mojo`, `mojolearn/_mlp/ops.py`, docs/ARITHMETIC.md "The MLP step").

Layers l = 1..L, sizes [n0, n1, ..., nL]: forward A0 = X, Z_l = A_{l-1}·W_lᵀ + b_l, A_l = relu(Z_l)
for l < L, logits = Z_L; mean cross-entropy (tests/reference/loss.py) gives G_L = dlogits;
backward from the last layer: dW_l = G_lᵀ·A_{l-1}, db_l = row sums of G_l, and for l > 1
G_{l-1} = (G_l·W_l) masked by A_{l-1} > 0; dX = G_1·W_1; AdamW (tests/reference/optim.py)
with t = step + 1. Profile v2: every inner product (forward, dW, G·W and dX) is the GEMM's
chain `acc = fma32(x, y, acc)` over k ascending from +0.0 (tests/reference/gemm.py), one
correctly rounded fused multiply-add a step; the bias is then added as one binary32 add. Every
row sum runs rows ascending from +0.0, and every other binary32 operation is one double
operation rounded by `f32`. Parameters, gradients and moments are flat lists in the order W1,
b1, ..., WL, bL (each W (n_l × n_{l-1}) row-major), as the trainers keep them. `Dims()` is
SmallMLPTrainer's [8, 16, 3]; it takes the same path as every other size.
"""

from .f32 import f32, fma32
from .loss import cross_entropy
from .optim import adam_step


class Dims:
    """Layer sizes and the flat offsets of each layer's weight and bias."""

    def __init__(self, inputs=8, hidden=16, classes=3, sizes=None):
        self.sizes = list(sizes) if sizes is not None else [inputs, hidden, classes]
        self.w, self.b = [], []
        off = 0
        for n_in, n_out in zip(self.sizes, self.sizes[1:]):
            self.w.append(off)
            off += n_out * n_in
            self.b.append(off)
            off += n_out
        self.total = off


def _dot(a, b):
    """One GEMM output, profile v2: the fma chain over the index ascending from +0.0."""
    acc = 0.0
    for x, y in zip(a, b):
        acc = fma32(x, y, acc)
    return acc


def _rows(flat, n_rows, n_cols, offset=0):
    return [flat[offset + r * n_cols : offset + (r + 1) * n_cols] for r in range(n_rows)]


def _cols(rows):
    return [list(c) for c in zip(*rows)]


def _row_sums(rows, n_cols):
    out = [0.0] * n_cols
    for row in rows:
        out = [f32(o + x) for o, x in zip(out, row)]
    return out


def _layer(p, d, l):
    n_in, n_out = d.sizes[l], d.sizes[l + 1]
    return _rows(p, n_out, n_in, d.w[l]), p[d.b[l] : d.b[l] + n_out]


def forward_all(p, X, d=None):
    """[A0 = X, A1, ..., A_{L-1}, logits] as lists of rows."""
    d = d or Dims()
    acts = [X]
    layers = len(d.sizes) - 1
    for l in range(layers):
        W, b = _layer(p, d, l)
        Z = [[f32(_dot(a, w) + bb) for w, bb in zip(W, b)] for a in acts[-1]]
        acts.append(Z if l == layers - 1 else [[z if z > 0 else 0.0 for z in r] for r in Z])
    return acts


def forward(p, X, d=None):
    """(last hidden activations, logits) as lists of rows for X (a list of rows)."""
    acts = forward_all(p, X, d)
    return acts[-2], acts[-1]


def gradients(p, X, y, d=None):
    """(loss, logits, flat grads, dX) of one batch."""
    d = d or Dims()
    acts = forward_all(p, X, d)
    logits = acts[-1]
    loss, _, G = cross_entropy(logits, y, ignore_index=-(1 << 40), reduction="mean")
    grads = [None] * (2 * (len(d.sizes) - 1))
    dX = None
    for l in range(len(d.sizes) - 2, -1, -1):
        W, _ = _layer(p, d, l)
        below = acts[l]
        grads[2 * l] = [v for gc in _cols(G) for v in [_dot(gc, ac) for ac in _cols(below)]]
        grads[2 * l + 1] = _row_sums(G, d.sizes[l + 1])
        Wc = _cols(W)
        up = [[_dot(g, wc) for wc in Wc] for g in G]
        if l:
            G = [[u if a > 0 else 0.0 for u, a in zip(ur, ar)] for ur, ar in zip(up, below)]
        else:
            dX = up
    return loss, logits, [v for part in grads for v in part], dX


def train_step(p, m, v, step, X, y, lr, beta1, beta2, eps, weight_decay, d=None):
    """One AdamW training step; returns dict(loss, logits, grads, dX, params, m, v, step)."""
    loss, logits, grads, dX = gradients(p, X, y, d)
    t = step + 1
    (np_,), _, (nm,), (nv,), _, _ = adam_step(
        [p],
        [grads],
        [m],
        [v],
        t,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled=True,
        maximize=False,
    )
    return {
        "loss": loss,
        "logits": logits,
        "grads": grads,
        "dX": dX,
        "params": np_,
        "m": nm,
        "v": nv,
        "step": t,
    }
