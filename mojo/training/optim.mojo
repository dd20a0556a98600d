"""Optimizer math: Adam / AdamW / SGD elementwise updates, bias corrections, the global
gradient p-norm (L2 in a step; 1, any finite p and infinity in `clip_grad_norm_`) and clip
coefficient, and the balanced-tree microbatch combination.

Specs: https://pytorch.org/docs/stable/generated/torch.optim.Adam.html, `AdamW`, `SGD`, and
`torch.nn.utils.clip_grad_norm_`. The operation order is ours, fixed by docs/ARITHMETIC.md
("Optimizers ..."); `tests/reference/optim.py` is its executable form.

Public signatures (the fused MLP step imports the first two; keep them stable):
    bias_correction(beta: Float64, t: Int) -> Float64            1 - beta^t (binary64), t one-based
    bias_corrections(beta1, beta2, t) -> SIMD[float64, 2]        both of them in one pass
    adam_scalars(lr, beta1, beta2, eps, weight_decay, decoupled, maximize, t)   step t's scalars
    adam_update(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, decoupled, maximize,
                t)                                                in place on p, m, v; reads g
    sgd_update(p, g, buf, n, lr, momentum, dampening, weight_decay, nesterov, maximize,
               buf_initialized)                                   in place on p, buf; reads g
    sum_squares(g, n) -> Float32                                 sequential, ascending, from +0
    sum_terms[kind](g, n, p) -> Float32                          Σ |g|, g·g or |g|^p, as sum_squares
    max_abs(g, n) -> Float32                                     max |g| (exact; NaN wins)
    GradNorm(p): add(g, n) per tensor in order, then value()     the global p-norm, p in [1, inf]
    clip_coefficient(max_norm, norm) -> Float32                  min(max_norm / (norm + 1e-6), 1)
    scale_inplace(g, n, c)                                       g = g * c
    tree_sum(srcs, count, dst, n)                                balanced tree over `count` sources

Hyperparameters arrive as given (binary64); the per-step scalars are formed in binary64 and
rounded once to float32 (`adam_scalars`, `sgd_scalars`; docs/ARITHMETIC.md profile v2).
Per element, in this order (identical mode: one IEEE binary32 operation each, no FMA):
    g = g * clip_coef          (only when the step clips; the caller's array gets the same bits)
    g = -g                     (maximize)
    Adam:  g = g + wd * p                      (coupled; skipped when wd == 0, as torch)
    AdamW: p = p * (1 - lr * wd)               (decoupled; scalar formed in binary64; skipped at 0)
    m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * (g * g)
    p = p - (lr / bc1) * (m / (sqrt(v) / sqrt(bc2) + eps))
           (fast mode: sqrt(v) * (1 / sqrt(bc2)), one division fewer)
    SGD:   g = g + wd * p (skipped at 0); with momentum != 0: buf = g on the first step of a
           tensor, else buf = mu * buf + (1 - dampening) * g; nesterov g = g + mu * buf, else
           g = buf; then p = p - lr * g
Every update is elementwise, so SIMD across elements gives the scalar loop's bits. Only the
sums of the norms (`sum_terms`) differ between modes: sequential in identical, SIMD lanes in
fast (`max_abs` is exact either way). |g|^p is `exp32(p · log32(|g|))`, the project's own
float32 exp and log (training/portable_math.mojo), never a libm `pow`.
The square roots go through `training.fp.sqrt_rn`: correctly rounded on the host and, when a
GPU kernel (the fused MLP step) calls this code, on the device too.
"""
from std.memory import bitcast
from std.sys import simd_width_of
from std.utils.numerics import inf

from training.checks import is_finite32
from training.config import F32P, I64P, IDENTICAL
from training.fp import sqrt64_rn, sqrt_rn
from training.portable_math import exp32, exp32_scalar, log32, log32_scalar

comptime W = 8  # lanes of the fast-mode reductions (their bits depend on it)
# Lanes of the elementwise updates (any width gives the scalar loop's bits): the target's
# full vector, as the divider-bound Adam update runs at a fixed number of instructions per
# cycle on the CPUs measured.
comptime EW = simd_width_of[DType.float32]()
comptime CLIP_EPS = Float32(1e-6)


# ------------------------------------------------------------------------------------------
# Scalars


def pow_by_squaring[w: Int = 1](beta: SIMD[DType.float64, w], t: Int) -> SIMD[DType.float64, w]:
    """`beta^t` in binary64, lane by lane, by squaring over the bits of `t` from the least
    significant (IEEE multiplies only, no libm `pow`: the same bits on every target)."""
    var r = SIMD[DType.float64, w](1.0)
    var b = beta
    var k = t
    var one = SIMD[DType.float64, w](1.0)
    while k > 0:
        # A select, not a branch: the bits of t are unpredictable, and a mispredicted branch per
        # bit cost more than the rest of a batch-1 AdamW step. r * 1.0 is exactly r. (A width-1
        # select becomes a branch on x86: call this with both betas at once, `bias_corrections`.)
        r = r * SIMD[DType.bool, w](fill=(k & 1) == 1).select(b, one)
        b = b * b
        k >>= 1
    return r


def bias_correction(beta: Float64, t: Int) -> Float64:
    """`1 - beta^t` in binary64 with `beta^t` from `pow_by_squaring`; `t` is one-based."""
    return Float64(1.0) - pow_by_squaring(beta, t)[0]


def bias_corrections(beta1: Float64, beta2: Float64, t: Int) -> SIMD[DType.float64, 2]:
    """(`bias_correction(beta1, t)`, `bias_correction(beta2, t)`), both in one pass: the same
    bits, lane by lane, at about a third of the cost of two scalar passes."""
    return Float64(1.0) - pow_by_squaring[2](SIMD[DType.float64, 2](beta1, beta2), t)


def clip_coefficient(max_norm: Float32, norm: Float32) -> Float32:
    """`max_norm / (norm + 1e-6)` clamped to at most 1 (a NaN stays NaN, as torch's clamp)."""
    var c = max_norm / (norm + CLIP_EPS)
    if c > Float32(1.0):
        c = Float32(1.0)
    return c


# ------------------------------------------------------------------------------------------
# Adam / AdamW


@fieldwise_init
struct AdamScalars(ImplicitlyCopyable):
    """The per-step float32 scalars of an Adam/AdamW update, formed once per call."""

    var beta1: Float32
    var beta2: Float32
    var one_minus_beta1: Float32
    var one_minus_beta2: Float32
    var eps: Float32
    var weight_decay: Float32
    var decay: Float32  # 1 - lr*wd (decoupled)
    var step_size: Float32  # lr / bc1
    var sqrt_bc2: Float32
    var inv_sqrt_bc2: Float32  # 1 / sqrt(bc2): fast mode multiplies by it instead of dividing
    var decoupled: Bool
    var maximize: Bool
    var clip: Bool
    var clip_coef: Float32


def adam_scalars(lr: Float64, beta1: Float64, beta2: Float64, eps: Float64,
                 weight_decay: Float64, decoupled: Bool, maximize: Bool, t: Int,
                 clip: Bool = False, clip_coef: Float32 = Float32(1.0)) -> AdamScalars:
    """The scalars of step t (one-based), as torch forms them (profile v2): `1 - beta`, the
    bias corrections, `lr / bc1`, `sqrt(bc2)` and `1 - lr * wd` in binary64 from the
    hyperparameters as given, each rounded once to float32; beta, eps and wd rounded once."""
    var bc = bias_corrections(beta1, beta2, t)
    var sqrt_bc2 = sqrt64_rn(bc[1])
    return AdamScalars(Float32(beta1), Float32(beta2), Float32(Float64(1.0) - beta1),
                       Float32(Float64(1.0) - beta2), Float32(eps), Float32(weight_decay),
                       Float32(Float64(1.0) - lr * weight_decay), Float32(lr / bc[0]),
                       Float32(sqrt_bc2), Float32(Float64(1.0) / sqrt_bc2), decoupled,
                       maximize, clip, clip_coef)


@always_inline
def _adam_lanes[w: Int](mut p: SIMD[DType.float32, w], g_in: SIMD[DType.float32, w],
                        mut m: SIMD[DType.float32, w], mut v: SIMD[DType.float32, w],
                        s: AdamScalars):
    var g = g_in
    if s.clip:
        g = g * s.clip_coef
    if s.maximize:
        g = -g
    if s.weight_decay != Float32(0.0):
        if s.decoupled:
            p = p * s.decay
        else:
            g = g + s.weight_decay * p
    m = s.beta1 * m + s.one_minus_beta1 * g
    v = s.beta2 * v + s.one_minus_beta2 * (g * g)
    var denom: SIMD[DType.float32, w]
    comptime if IDENTICAL:
        denom = sqrt_rn[w](v) / s.sqrt_bc2 + s.eps
    else:
        # The update is divider-bound (two divisions and a square root per element): one
        # division fewer is ~1/3 of its time, for at most an ulp of `denom`.
        denom = sqrt_rn[w](v) * s.inv_sqrt_bc2 + s.eps
    p = p - s.step_size * (m / denom)


def adam_update_into(p_in: F32P, g: F32P, m_in: F32P, v_in: F32P, p_out: F32P, m_out: F32P,
                     v_out: F32P, n: Int, s: AdamScalars) -> Bool:
    """One Adam/AdamW step for `n` elements, written to the `_out` buffers (which may be the
    `_in` buffers: each chunk is loaded before it is stored). Returns whether g and the new
    p, m, v are all finite, found in the same pass (the largest exponent field seen is all
    ones only for a NaN/Inf): a separate scan would read 4n floats again."""
    comptime EXP = UInt32(0x7F800000)
    var seen = SIMD[DType.uint32, EW](0)
    var i = 0
    while i + EW <= n:
        var p = p_in.unsafe_load[width=EW](i)
        var m = m_in.unsafe_load[width=EW](i)
        var v = v_in.unsafe_load[width=EW](i)
        var gi = g.unsafe_load[width=EW](i)
        _adam_lanes[EW](p, gi, m, v, s)
        p_out.unsafe_offset(i).unsafe_store(p)
        m_out.unsafe_offset(i).unsafe_store(m)
        v_out.unsafe_offset(i).unsafe_store(v)
        seen = max(seen, max(max(bitcast[DType.uint32, EW](p) & EXP,
                                 bitcast[DType.uint32, EW](m) & EXP),
                             max(bitcast[DType.uint32, EW](v) & EXP,
                                 bitcast[DType.uint32, EW](gi) & EXP)))
        i += EW
    var finite = not seen.eq(EXP).reduce_or()
    while i < n:
        var p = SIMD[DType.float32, 1](p_in[unsafe_offset=i])
        var m = SIMD[DType.float32, 1](m_in[unsafe_offset=i])
        var v = SIMD[DType.float32, 1](v_in[unsafe_offset=i])
        var gi = SIMD[DType.float32, 1](g[unsafe_offset=i])
        _adam_lanes[1](p, gi, m, v, s)
        p_out[unsafe_offset=i] = p[0]
        m_out[unsafe_offset=i] = m[0]
        v_out[unsafe_offset=i] = v[0]
        finite = finite and is_finite32(p[0]) and is_finite32(m[0]) and is_finite32(v[0]) and (
            is_finite32(gi[0]))
        i += 1
    return finite


def adam_update(p: F32P, g: F32P, m: F32P, v: F32P, n: Int, lr: Float64, beta1: Float64,
                beta2: Float64, eps: Float64, weight_decay: Float64, decoupled: Bool,
                maximize: Bool, t: Int):
    """One Adam (coupled L2) or AdamW (decoupled) step t in place on p, m, v; g is only read."""
    var s = adam_scalars(lr, beta1, beta2, eps, weight_decay, decoupled, maximize, t)
    _ = adam_update_into(p, g, m, v, p, m, v, n, s)


# ------------------------------------------------------------------------------------------
# SGD


@fieldwise_init
struct SgdScalars(ImplicitlyCopyable):
    """The per-step float32 scalars of an SGD update."""

    var lr: Float32
    var momentum: Float32
    var one_minus_dampening: Float32
    var weight_decay: Float32
    var nesterov: Bool
    var maximize: Bool
    var clip: Bool
    var clip_coef: Float32


def sgd_scalars(lr: Float64, momentum: Float64, dampening: Float64, weight_decay: Float64,
                nesterov: Bool, maximize: Bool, clip: Bool = False,
                clip_coef: Float32 = Float32(1.0)) -> SgdScalars:
    """The scalars of one SGD step from the hyperparameters as given, each rounded once to
    float32 (`1 - dampening` formed in binary64 first, profile v2)."""
    return SgdScalars(Float32(lr), Float32(momentum), Float32(Float64(1.0) - dampening),
                      Float32(weight_decay), nesterov, maximize, clip, clip_coef)


@always_inline
def _sgd_lanes[w: Int](mut p: SIMD[DType.float32, w], g_in: SIMD[DType.float32, w],
                       mut buf: SIMD[DType.float32, w], s: SgdScalars, initialized: Bool):
    var g = g_in
    if s.clip:
        g = g * s.clip_coef
    if s.maximize:
        g = -g
    if s.weight_decay != Float32(0.0):
        g = g + s.weight_decay * p
    if s.momentum != Float32(0.0):
        if initialized:
            buf = s.momentum * buf + s.one_minus_dampening * g
        else:
            buf = g
        if s.nesterov:
            g = g + s.momentum * buf
        else:
            g = buf
    p = p - s.lr * g


def sgd_update_into(p_in: F32P, g: F32P, buf_in: F32P, p_out: F32P, buf_out: F32P, n: Int,
                    s: SgdScalars, buf_initialized: Bool):
    """One SGD step for `n` elements into the `_out` buffers (may alias the `_in` ones).
    With momentum 0 the buffer is neither read nor written."""
    var i = 0
    while i + EW <= n:
        var p = p_in.unsafe_load[width=EW](i)
        var b = buf_in.unsafe_load[width=EW](i)
        _sgd_lanes[EW](p, g.unsafe_load[width=EW](i), b, s, buf_initialized)
        p_out.unsafe_offset(i).unsafe_store(p)
        if s.momentum != Float32(0.0):
            buf_out.unsafe_offset(i).unsafe_store(b)
        i += EW
    while i < n:
        var p = SIMD[DType.float32, 1](p_in[unsafe_offset=i])
        var b = SIMD[DType.float32, 1](buf_in[unsafe_offset=i])
        _sgd_lanes[1](p, SIMD[DType.float32, 1](g[unsafe_offset=i]), b, s, buf_initialized)
        p_out[unsafe_offset=i] = p[0]
        if s.momentum != Float32(0.0):
            buf_out[unsafe_offset=i] = b[0]
        i += 1


def sgd_update(p: F32P, g: F32P, buf: F32P, n: Int, lr: Float64, momentum: Float64,
               dampening: Float64, weight_decay: Float64, nesterov: Bool, maximize: Bool,
               buf_initialized: Bool):
    """One SGD step in place on p and buf (the caller flips its `buf_initialized` after)."""
    var s = sgd_scalars(lr, momentum, dampening, weight_decay, nesterov, maximize)
    sgd_update_into(p, g, buf, p, buf, n, s, buf_initialized)


# ------------------------------------------------------------------------------------------
# Gradient norm, clipping


# How an element enters a p-norm's sum (p = infinity takes `max_abs` instead).
comptime NORM_ABS = 1  # |g|                      p = 1
comptime NORM_SQUARE = 2  # g·g                   p = 2
comptime NORM_POWER = 3  # exp32(p·log32(|g|))    any other finite p > 1


@always_inline
def _norm_term[kind: Int, w: Int](x: SIMD[DType.float32, w], p: Float32) -> SIMD[DType.float32, w]:
    comptime if kind == NORM_ABS:
        return abs(x)
    elif kind == NORM_SQUARE:
        return x * x
    else:
        # |g|^p with the project's exp32/log32 (no libm pow): log32(+0) = -inf, p·(-inf) = -inf
        # and exp32(-inf) = +0, so a zero needs no branch; a NaN stays NaN.
        return exp32[w](p * log32[w](abs(x)))


def sum_terms[kind: Int](g: F32P, n: Int, p: Float32 = Float32(2.0)) -> Float32:
    """Σ term(g[i]) with term |g|, g·g or |g|^p (`kind`). Identical: `acc = +0; acc = acc +
    term(g[i])`, i ascending (the terms of W elements are formed together, each lane the scalar
    form's bits, then added one by one). Fast: W lanes, then their sum, then the tail."""
    comptime if IDENTICAL:
        var acc = Float32(0.0)
        var i = 0
        while i + W <= n:
            var t = _norm_term[kind, W](g.unsafe_load[width=W](i), p)
            comptime for k in range(W):
                acc = acc + t[k]
            i += W
        while i < n:
            acc = acc + _norm_term[kind, 1](SIMD[DType.float32, 1](g[unsafe_offset=i]), p)[0]
            i += 1
        return acc
    else:
        var lanes = SIMD[DType.float32, W](0.0)
        var i = 0
        while i + W <= n:
            lanes = lanes + _norm_term[kind, W](g.unsafe_load[width=W](i), p)
            i += W
        var acc = lanes.reduce_add()
        while i < n:
            acc = acc + _norm_term[kind, 1](SIMD[DType.float32, 1](g[unsafe_offset=i]), p)[0]
            i += 1
        return acc


def sum_squares(g: F32P, n: Int) -> Float32:
    """Σ g[i]·g[i]. Identical: `acc = +0; acc = acc + g*g`, i ascending. Fast: SIMD lanes."""
    return sum_terms[NORM_SQUARE](g, n)


comptime MAGNITUDE = UInt32(0x7FFFFFFF)


def max_abs(g: F32P, n: Int) -> Float32:
    """max |g[i]| from +0, taken on the bit patterns: |x|'s bits order as its value does and
    every NaN's lie above +inf's, so a NaN anywhere gives a NaN (as torch's max). Exact: every
    order, width and mode gives the same bits."""
    var lanes = SIMD[DType.uint32, W](0)
    var i = 0
    while i + W <= n:
        lanes = max(lanes, bitcast[DType.uint32, W](g.unsafe_load[width=W](i)) & MAGNITUDE)
        i += W
    var m = lanes.reduce_max()
    while i < n:
        m = max(m, bitcast[DType.uint32, 1](g[unsafe_offset=i]) & MAGNITUDE)
        i += 1
    return bitcast[DType.float32, 1](m)


struct GradNorm(ImplicitlyCopyable):
    """The global p-norm of tensors taken in order: `add(g, n)` for each, then `value()`.

    p = +inf: the max of the tensors' `max_abs`. Finite p: `total = +0; total = total + s_j`
    over tensors in order, s_j = `sum_terms` of tensor j; then the root: `total` (p = 1),
    `sqrt(total)` (p = 2), else `exp32(log32(total) / p)`. This is torch's p-norm of the
    per-tensor p-norms in exact arithmetic, with one root instead of one per tensor.
    """

    var p: Float32
    var total: Float32

    def __init__(out self, p: Float32):
        """Start an empty norm of order `p` (+inf, or a finite p >= 1)."""
        self.p = p
        self.total = Float32(0.0)

    def add(mut self, g: F32P, n: Int):
        """Take in the `n` values at `g`, the next tensor in order."""
        if self.p == inf[DType.float32]():
            var m = max_abs(g, n)
            self.total = bitcast[DType.float32, 1](max(bitcast[DType.uint32, 1](self.total),
                                                       bitcast[DType.uint32, 1](m)))
        elif self.p == Float32(1.0):
            self.total = self.total + sum_terms[NORM_ABS](g, n)
        elif self.p == Float32(2.0):
            self.total = self.total + sum_terms[NORM_SQUARE](g, n)
        else:
            self.total = self.total + sum_terms[NORM_POWER](g, n, self.p)

    def value(self) -> Float32:
        """The norm of everything added so far (+0 for nothing)."""
        if self.p == inf[DType.float32]() or self.p == Float32(1.0):
            return self.total
        if self.p == Float32(2.0):
            return sqrt_rn[1](self.total)[0]
        return exp32_scalar(log32_scalar(self.total) / self.p)


def scale_inplace(g: F32P, n: Int, c: Float32):
    """g = g * c, elementwise."""
    var i = 0
    while i + W <= n:
        g.unsafe_offset(i).unsafe_store(g.unsafe_load[width=W](i) * c)
        i += W
    while i < n:
        g[unsafe_offset=i] = g[unsafe_offset=i] * c
        i += 1


# ------------------------------------------------------------------------------------------
# Microbatch combination


def tree_sum(srcs: I64P, count: Int, dst: F32P, n: Int):
    """dst = the balanced-tree SUM of the `count` (a power of two) float32 buffers whose
    addresses are srcs[0:count]: level by level (s0+s1), (s2+s3), ..., ascending index.
    `dst` may be one of the sources."""
    var vec = List[SIMD[DType.float32, W]](length=count, fill=SIMD[DType.float32, W](0.0))
    var one = List[Float32](length=count, fill=Float32(0.0))
    var i = 0
    while i + W <= n:
        for k in range(count):
            vec[k] = F32P(unsafe_from_address=Int(srcs[unsafe_offset=k])).unsafe_load[width=W](i)
        var width = count
        while width > 1:
            width >>= 1
            for k in range(width):
                vec[k] = vec[2 * k] + vec[2 * k + 1]
        dst.unsafe_offset(i).unsafe_store(vec[0])
        i += W
    while i < n:
        for k in range(count):
            one[k] = F32P(unsafe_from_address=Int(srcs[unsafe_offset=k]))[unsafe_offset=i]
        var width = count
        while width > 1:
            width >>= 1
            for k in range(width):
                one[k] = one[2 * k] + one[2 * k + 1]
        dst[unsafe_offset=i] = one[0]
        i += 1
