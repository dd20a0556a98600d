"""Pure-Python mirror of `mojo/training/loss.mojo` (cross-entropy), op by op in float32.

The formulas and their order are the kernel header's; every binary32 operation is one binary64
operation rounded once with `f32`, exp/log are the mirrors of the project's own exp32/log32.
"""

from .f32 import f32
from .portable_math import exp32, log32

REDUCTIONS = ("none", "sum", "mean")


def _shifted_exps(z):
    """(mx, [e_j], s) of one row: mx = max_j z_j (first wins), e_j = exp32(z_j - mx),
    s = their sum, j ascending from +0.0."""
    mx = z[0]
    for v in z[1:]:
        if v > mx:
            mx = v
    e = []
    s = 0.0
    for v in z:
        e.append(exp32(f32(v - mx)))
        s = f32(s + e[-1])
    return mx, e, s


def cross_entropy_row(z, y, smoothing=0.0):
    """(loss, gradient p - q) of one row `z` (float32 values) with target `y`."""
    classes = len(z)
    mx, e, s = _shifted_exps(z)
    ls = log32(s)
    loss = f32(ls - f32(z[y] - mx))
    keep, spread = 1.0, 0.0
    eps = f32(smoothing)
    if eps > 0.0:
        keep = f32(1.0 - eps)
        spread = f32(eps / f32(classes))
        smooth = 0.0
        for v in z:
            smooth = f32(smooth + f32(ls - f32(v - mx)))
        loss = f32(f32(keep * loss) + f32(spread * smooth))
    on = f32(keep + spread)
    grad = [f32(f32(e[j] / s) - (on if j == y else spread)) for j in range(classes)]
    return loss, grad


def cross_entropy(logits, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """(reduced, per-row losses, dlogits) as the kernel computes them. `logits` is a list of
    rows of float32 values; `reduced` is the mean for 'mean', else the sum; dlogits is the
    gradient of the mean for 'mean', of the summed per-row losses otherwise."""
    kept = sum(1 for t in targets if t != ignore_index)
    if kept == 0:
        raise ValueError("every row is ignored")
    divisor = f32(kept)
    total = 0.0
    losses, dlogits = [], []
    for z, t in zip(logits, targets):
        if t == ignore_index:
            losses.append(0.0)
            dlogits.append([0.0] * len(z))
            continue
        loss, grad = cross_entropy_row(z, t, label_smoothing)
        if reduction == "mean":
            grad = [f32(g / divisor) for g in grad]
        losses.append(loss)
        dlogits.append(grad)
        total = f32(total + loss)
    reduced = f32(total / divisor) if reduction == "mean" else total
    return reduced, losses, dlogits


def softmax_row(z):
    """The kernel's softmax of one row `z` (float32 values): p_j = e_j / s with the e_j and s of
    `cross_entropy_row`."""
    _, e, s = _shifted_exps(z)
    return [f32(v / s) for v in e]
