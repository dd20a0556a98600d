"""Pure-Python reference of the optimizer arithmetic, profile v2 (docs/ARITHMETIC.md,
"Optimizers").

Per-step scalars (profile v2) are formed in binary64 from the hyperparameters as given (Python
floats, not rounded to float32 first) and each is rounded once to float32 by `f32`:
`1 - beta`, the bias corrections `1 - beta**t` (`pow_by_squaring`: binary64 multiplies only, no
`**` or libm `pow`), `lr / bc1`, `sqrt(bc2)` (correctly rounded binary64 sqrt), `1 - lr*wd`
(AdamW) and `1 - dampening` (SGD); `beta`, `eps`, `wd`, `lr` and `momentum` where they enter an
element's arithmetic are `f32` of the given value. Per element every value is a Python float
holding a float32, and each binary32 operation is one double operation rounded by `f32`, which
is the correctly rounded float32 result, in the same order as profile v1. The gradient norm,
the clip coefficient and the tree sum are profile v1's, unchanged; the other p-norms of
`clip_grad_norm_` (`global_p_norm`) use the portable exp32/log32 of `portable_math`. Tensors
are lists of floats, a step works on lists of tensors. Refusals mirror the binding: a non-finite gradient or
norm raises ValueError, a non-finite result RuntimeError, and nothing is returned.
"""

import math

from tests.reference.f32 import f32
from tests.reference.portable_math import exp32, log32

CLIP_EPS = f32(1e-6)


def pow_by_squaring(beta, t):
    """`beta**t` in binary64 (profile v2), by squaring from the least significant bit of `t`:
    `r = 1; b = beta; while n: (if n & 1: r = r*b); b = b*b; n >>= 1`, each product one
    binary64 multiply (no `**`, no libm `pow`, so the same bits on every machine)."""
    r, b = 1.0, float(beta)
    while t:
        if t & 1:
            r = r * b
        b = b * b
        t >>= 1
    return r


pow64 = pow_by_squaring


def bias_correction(beta, t):
    """`1 - beta**t` in binary64, not rounded (profile v2): the kernel gets `f32(lr / bc1)` and
    `f32(sqrt(bc2))`, each formed from it in binary64 and rounded once."""
    return 1.0 - pow_by_squaring(beta, t)


def sum_squares(g):
    acc = 0.0
    for x in g:
        acc = f32(acc + f32(x * x))
    return acc


def global_norm(grads):
    total = 0.0
    for g in grads:
        total = f32(total + sum_squares(g))
    return f32(math.sqrt(total)) if total != math.inf else math.inf


def global_p_norm(grads, p):
    """The global p-norm of `clip_grad_norm_` (p a float32 value >= 1, or inf): p = inf the max
    |g| over everything (a NaN anywhere gives NaN); otherwise per tensor `s = +0; s = s +
    term(g)`, ascending, the sums added in tensor order from +0, then the root. term: |g|
    (p = 1), g*g (p = 2), exp32(p * log32(|g|)) (other p); root: none, sqrt,
    exp32(log32(total) / p). p = 2 is `global_norm`, bit for bit."""
    if p == math.inf:
        flat = [abs(x) for g in grads for x in g]
        return math.nan if any(map(math.isnan, flat)) else max(flat, default=0.0)
    total = 0.0
    for g in grads:
        s = 0.0
        for x in g:
            if p == 1.0:
                t = abs(x)
            elif p == 2.0:
                t = f32(x * x)
            else:
                t = exp32(f32(p * log32(abs(x))))
            s = f32(s + t)
        total = f32(total + s)
    if p == 1.0:
        return total
    if p == 2.0:
        return f32(math.sqrt(total)) if total != math.inf else math.inf
    return exp32(f32(log32(total) / p))


def clip_coefficient(max_norm, norm):
    """Profile v1's, unchanged: `f32(max_norm) / (norm + 1e-6)` in binary32, capped at 1."""
    c = f32(f32(max_norm) / f32(norm + CLIP_EPS))
    return 1.0 if c > 1.0 else c


def tree_sum(sources):
    """Balanced binary tree, level by level, ascending index; len(sources) a power of two."""
    level = [list(s) for s in sources]
    while len(level) > 1:
        level = [
            [f32(a + b) for a, b in zip(level[k], level[k + 1])] for k in range(0, len(level), 2)
        ]
    return level[0]


def _check_grads(grads):
    for j, g in enumerate(grads):
        for i, x in enumerate(g):
            if not math.isfinite(x):
                raise ValueError(f"gradient {j} is not finite at index {i}")


def _clip(grads, max_norm):
    """(grads to use, norm, coef); grads scaled only when max_norm is not None."""
    if max_norm is None:
        return [list(g) for g in grads], None, None
    norm = global_norm(grads)
    if not math.isfinite(norm):
        raise ValueError("the global gradient norm is not finite")
    coef = clip_coefficient(max_norm, norm)
    return [[f32(x * coef) for x in g] for g in grads], norm, coef


def _check_out(name, tensors):
    for j, xs in enumerate(tensors):
        for i, x in enumerate(xs):
            if not math.isfinite(x):
                raise RuntimeError(f"output {name} of tensor {j} is not finite at index {i}")


def adam_step(
    params, grads, m, v, t, lr, beta1, beta2, eps, weight_decay, decoupled, maximize, max_norm=None
):
    """One Adam (decoupled=False) or AdamW step. Returns (params, grads as the caller sees
    them afterwards, m, v, norm, coef) as new lists; norm/coef None without clipping."""
    _check_grads(grads)
    used, norm, coef = _clip(grads, max_norm)
    bc1, bc2 = bias_correction(beta1, t), bias_correction(beta2, t)
    step_size = f32(lr / bc1)
    sqrt_bc2 = f32(math.sqrt(bc2))
    one_b1, one_b2 = f32(1.0 - beta1), f32(1.0 - beta2)
    decay = f32(1.0 - lr * weight_decay)
    b1, b2, eps32, wd32 = f32(beta1), f32(beta2), f32(eps), f32(weight_decay)
    new_p, new_m, new_v = [], [], []
    for pj, gj, mj, vj in zip(params, used, m, v):
        op, om, ov = [], [], []
        for p, g, mm, vv in zip(pj, gj, mj, vj):
            if maximize:
                g = -g
            if weight_decay != 0.0:
                if decoupled:
                    p = f32(p * decay)
                else:
                    g = f32(g + f32(wd32 * p))
            mm = f32(f32(b1 * mm) + f32(one_b1 * g))
            vv = f32(f32(b2 * vv) + f32(one_b2 * f32(g * g)))
            denom = f32(f32(f32(math.sqrt(vv)) / sqrt_bc2) + eps32)
            p = f32(p - f32(step_size * f32(mm / denom)))
            op.append(p)
            om.append(mm)
            ov.append(vv)
        new_p.append(op)
        new_m.append(om)
        new_v.append(ov)
    _check_out("param", new_p)
    _check_out("moment", new_m)
    _check_out("moment", new_v)
    return new_p, used, new_m, new_v, norm, coef


def sgd_step(
    params,
    grads,
    buf,
    flags,
    lr,
    momentum,
    dampening,
    weight_decay,
    nesterov,
    maximize,
    max_norm=None,
):
    """One SGD step. Returns (params, grads afterwards, buf, flags, norm, coef)."""
    _check_grads(grads)
    used, norm, coef = _clip(grads, max_norm)
    one_damp = f32(1.0 - dampening)
    lr32, mu32, wd32 = f32(lr), f32(momentum), f32(weight_decay)
    new_p, new_b = [], []
    for pj, gj, bj, init in zip(params, used, buf, flags):
        op, ob = [], []
        for p, g, b in zip(pj, gj, bj):
            if maximize:
                g = -g
            if weight_decay != 0.0:
                g = f32(g + f32(wd32 * p))
            if momentum != 0.0:
                b = f32(f32(mu32 * b) + f32(one_damp * g)) if init else g
                g = f32(g + f32(mu32 * b)) if nesterov else b
            op.append(f32(p - f32(lr32 * g)))
            ob.append(b)
        new_p.append(op)
        new_b.append(ob)
    _check_out("param", new_p)
    if momentum != 0.0:
        _check_out("moment", new_b)
    new_flags = [1] * len(flags) if momentum != 0.0 else list(flags)
    return new_p, used, new_b, new_flags, norm, coef
