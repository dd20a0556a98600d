"""Pure-Python mirror of a whole identical-mode MLP step (`mojo/training/mlp.mojo`).

The order is the kernel header's: H = relu(X·W1ᵀ + b1); logits = H·W2ᵀ + b2; mean
cross-entropy (tests/reference/loss.py); dW2 = dlogitsᵀ·H; db2 = row sums of dlogits;
dH = (dlogits·W2) masked by H > 0; dW1 = dHᵀ·X; db1 = row sums of dH; dX = dH·W1; AdamW
(tests/reference/optim.py) with t = step + 1. Every inner product runs k ascending from +0.0,
every row sum rows ascending from +0.0; each binary32 operation is one double operation
rounded by `f32`. Parameters, gradients and moments are flat lists in the order W1 (H×I),
b1, W2 (O×H), b2, as the trainer keeps them.
"""
from .f32 import f32
from .loss import cross_entropy
from .optim import adam_step


class Dims:
    def __init__(self, inputs=8, hidden=16, classes=3):
        self.i, self.h, self.o = inputs, hidden, classes
        self.w1 = 0
        self.b1 = hidden * inputs
        self.w2 = self.b1 + hidden
        self.b2 = self.w2 + classes * hidden
        self.total = self.b2 + classes


def _dot(a, b):
    acc = 0.0
    for x, y in zip(a, b):
        acc = f32(acc + f32(x * y))
    return acc


def _rows(flat, n_rows, n_cols, offset=0):
    return [flat[offset + r * n_cols: offset + (r + 1) * n_cols] for r in range(n_rows)]


def _cols(rows):
    return [list(c) for c in zip(*rows)]


def _row_sums(rows, n_cols):
    out = [0.0] * n_cols
    for row in rows:
        out = [f32(o + x) for o, x in zip(out, row)]
    return out


def forward(p, X, d=None):
    """(H, logits) as lists of rows for X (a list of rows)."""
    d = d or Dims()
    W1 = _rows(p, d.h, d.i, d.w1)
    b1 = p[d.b1:d.b1 + d.h]
    W2 = _rows(p, d.o, d.h, d.w2)
    b2 = p[d.b2:d.b2 + d.o]
    H = []
    for x in X:
        z = [f32(_dot(x, w) + b) for w, b in zip(W1, b1)]
        H.append([v if v > 0 else 0.0 for v in z])
    logits = [[f32(_dot(h, w) + b) for w, b in zip(W2, b2)] for h in H]
    return H, logits


def gradients(p, X, y, d=None):
    """(loss, logits, flat grads, dX) of one batch."""
    d = d or Dims()
    H, logits = forward(p, X, d)
    loss, _, dl = cross_entropy(logits, y, ignore_index=-(1 << 40), reduction="mean")
    W1 = _rows(p, d.h, d.i, d.w1)
    W2 = _rows(p, d.o, d.h, d.w2)
    dW2 = [[_dot(dc, hc) for hc in _cols(H)] for dc in _cols(dl)]
    db2 = _row_sums(dl, d.o)
    W2c = _cols(W2)
    dH = [[_dot(g, wc) if h > 0 else 0.0 for wc, h in zip(W2c, hr)] for g, hr in zip(dl, H)]
    dW1 = [[_dot(gc, xc) for xc in _cols(X)] for gc in _cols(dH)]
    db1 = _row_sums(dH, d.h)
    W1c = _cols(W1)
    dX = [[_dot(g, wc) for wc in W1c] for g in dH]
    grads = [v for r in dW1 for v in r] + db1 + [v for r in dW2 for v in r] + db2
    return loss, logits, grads, dX


def train_step(p, m, v, step, X, y, lr, beta1, beta2, eps, weight_decay, d=None):
    """One AdamW training step; returns dict(loss, logits, grads, dX, params, m, v, step)."""
    loss, logits, grads, dX = gradients(p, X, y, d)
    t = step + 1
    (np_,), _, (nm,), (nv,), _, _ = adam_step([p], [grads], [m], [v], t, lr, beta1, beta2, eps,
                                              weight_decay, decoupled=True, maximize=False)
    return {"loss": loss, "logits": logits, "grads": grads, "dX": dX, "params": np_, "m": nm,
            "v": nv, "step": t}
