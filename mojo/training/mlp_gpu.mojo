"""The MLP step's per-output device pieces (cuda / hip builds), and the one-block fused kernel
of a small one-hidden-layer network built from them.

Same step, same order, same bits as `training/mlp.mojo` (whose "any layer sizes" section fixes
the order): every output is computed by one thread with the CPU kernels' formula — inner
products from +0.0 with k ascending, column sums with rows ascending, the cross-entropy row of
`training/loss.mojo`, AdamW of `training/optim.mojo` — so work is split only across independent
outputs, never along a reduction. Each `*_phase` below computes the outputs o = start,
start + stride, ... of one phase; a one-block kernel passes (thread, block size) and separates
phases with barriers, the grid kernels of training/mlp_gpu_layers.mojo pass (global thread,
grid size) and separate phases by launches. Either way each output sees the same operations,
so the fused kernel and the layer kernels give the same bits. Square roots are
`training.fp.sqrt_rn` (`.rn` on NVIDIA), exp/log the portable polynomials, and identical
builds use `--fp-mode contract=off`; CI reads the PTX and fails on fused, approximate or
flush-to-zero instructions.

Dimensions: R rows; a layer maps I inputs to O outputs with W (O×I) and b (O), flat in the
parameter order W1, b1, W2, b2, ...

The fused kernel runs [I, H, O] networks whose whole step is small (`fused_fits`): one launch
per run instead of one per phase. The one-hidden-layer fused step ran on an NVIDIA H200 under
profile v1 (tools/device_check.sh); profile v2's is compile-checked only; the phase functions' use by the layer kernels has not run on a GPU.
The hip build is compile-checked only.
"""
from std.math import fma
from max.gpu import barrier, block_dim, thread_idx
from max.gpu.host import DeviceContext

from training.checks import is_finite32
from training.config import CHECK_DOT_MULADD, F32P, I32P, I64P
from training.optim import AdamScalars, _adam_lanes, adam_scalars
from training.portable_math import exp32_scalar, log32_scalar

comptime BLOCK = 256
# Status words of a session run, in the order of training/mlp_resident.mojo's NF_* codes:
# logits, losses, grads, input_grad, params, m, v.
comptime CHECKS = 7
# The fused kernel's 256 threads do about 3·rows·params/256 multiply-adds each per step; up to
# this rows·params that is a few microseconds, less than the ~2L+3 extra launches of the layer
# kernels would cost (launch latency, not measured per size: retune on a GPU).
comptime FUSED_MAX_WORK = 1 << 16


def fused_fits(sizes: List[Int], rows: Int) -> Bool:
    """Whether a step of `rows` rows runs as the one-block fused kernel."""
    if len(sizes) != 3:
        return False
    var n = sizes[1] * sizes[0] + sizes[1] + sizes[2] * sizes[1] + sizes[2]
    return rows * n <= FUSED_MAX_WORK


# ---------------------------------------------------------------- per-output pieces


@always_inline
def dot(a: F32P, sa: Int, b: F32P, sb: Int, n: Int) -> Float32:
    """acc = +0.0; acc = fma(a[q*sa], b[q*sb], acc), q ascending: the GEMM's chain (profile
    v2), an explicit fma so that the device's one correctly rounded fma.rn.f32 does it."""
    var acc = Float32(0.0)
    for q in range(n):
        comptime if CHECK_DOT_MULADD:
            acc = acc + a[unsafe_offset=q * sa] * b[unsafe_offset=q * sb]
        else:
            acc = fma(a[unsafe_offset=q * sa], b[unsafe_offset=q * sb], acc)
    return acc


@always_inline
def forward_phase(src: F32P, w: F32P, b: F32P, dst: F32P, R: Int, O: Int, I: Int, relu: Bool,
                  start: Int, stride: Int):
    """`training.mlp.dense_forward`: dst = src·Wᵀ + b, then ReLU when `relu`."""
    for o in range(start, R * O, stride):
        var r = o // O
        var c = o % O
        var z = dot(src.unsafe_offset(r * I), 1, w.unsafe_offset(c * I), 1, I)
        z = z + b[unsafe_offset=c]
        if relu and not (z > 0):
            z = Float32(0.0)
        dst[unsafe_offset=o] = z


@always_inline
def ce_row(z: F32P, y: Int, classes: Int, g: F32P, divisor: Float32) -> Float32:
    """`training/loss.mojo` `_row` without smoothing: loss of one row, gradient row / divisor."""
    var mx = z[unsafe_offset=0]
    for j in range(1, classes):
        if z[unsafe_offset=j] > mx:
            mx = z[unsafe_offset=j]
    var s = Float32(0.0)
    for j in range(classes):
        var e = exp32_scalar(z[unsafe_offset=j] - mx)
        g[unsafe_offset=j] = e
        s = s + e
    var loss = log32_scalar(s) - (z[unsafe_offset=y] - mx)
    var on = Float32(1.0)
    var spread = Float32(0.0)
    for j in range(classes):
        g[unsafe_offset=j] = (g[unsafe_offset=j] / s - (on if j == y else spread)) / divisor
    return loss


@always_inline
def cross_entropy_phase(logits: F32P, y: I32P, dl: F32P, row_loss: F32P, R: Int, O: Int,
                        start: Int, stride: Int):
    """Every row's loss and gradient row (mean over R rows); `loss_mean` then sums them."""
    for r in range(start, R, stride):
        row_loss[unsafe_offset=r] = ce_row(logits.unsafe_offset(r * O), Int(y[unsafe_offset=r]),
                                           O, dl.unsafe_offset(r * O), Float32(R))


@always_inline
def loss_mean(row_loss: F32P, R: Int) -> Float32:
    """`mean_cross_entropy`'s mean: the row losses summed rows ascending from +0.0, / R."""
    var sum = Float32(0.0)
    for r in range(R):
        sum = sum + row_loss[unsafe_offset=r]
    return sum / Float32(R)


@always_inline
def backward_phase(g: F32P, below: F32P, w: F32P, grads: F32P, dbelow: F32P, R: Int, O: Int,
                   I: Int, want_below: Bool, mask: Bool, start: Int, stride: Int):
    """`training.mlp.dense_backward` from the layer's output gradient g (R×O): its flat
    gradients `grads` = dW (O×I, gᵀ·below) | db (O, column sums rows ascending) and, when
    `want_below`, dbelow = g·W (R×I), masked by below > 0 when `mask`. All of them read only
    g, below and W, so they are one phase."""
    var n_w = O * I
    var n = n_w + O + (R * I if want_below else 0)
    for o in range(start, n, stride):
        if o < n_w:
            var c = o // I
            var q = o % I
            grads[unsafe_offset=o] = dot(g.unsafe_offset(c), O, below.unsafe_offset(q), I, R)
        elif o < n_w + O:
            var c = o - n_w
            var acc = Float32(0.0)
            for r in range(R):
                acc = acc + g[unsafe_offset=r * O + c]
            grads[unsafe_offset=o] = acc
        else:
            var e = o - n_w - O
            var r = e // I
            var q = e % I
            var d = dot(g.unsafe_offset(r * O), 1, w.unsafe_offset(q), I, O)
            if mask and not (below[unsafe_offset=e] > 0):
                d = Float32(0.0)
            dbelow[unsafe_offset=e] = d


@always_inline
def step_scalars(t: Int, lr: Float64, beta1: Float64, beta2: Float64, eps: Float64,
                 weight_decay: Float64) -> AdamScalars:
    """`training.mlp.adamw_flat_into`'s scalars for step t (the same operations)."""
    return adam_scalars(lr, beta1, beta2, eps, weight_decay, True, False, t)


@always_inline
def adamw_phase(p: F32P, grads: F32P, m: F32P, v: F32P, n: Int, s: AdamScalars, start: Int,
                stride: Int):
    """AdamW in place, element by element (`training/optim.mojo` `_adam_lanes`)."""
    for e in range(start, n, stride):
        var pe = SIMD[DType.float32, 1](p[unsafe_offset=e])
        var me = SIMD[DType.float32, 1](m[unsafe_offset=e])
        var ve = SIMD[DType.float32, 1](v[unsafe_offset=e])
        _adam_lanes[1](pe, SIMD[DType.float32, 1](grads[unsafe_offset=e]), me, ve, s)
        p[unsafe_offset=e] = pe[0]
        m[unsafe_offset=e] = me[0]
        v[unsafe_offset=e] = ve[0]


# ---------------------------------------------------------------- finiteness status
# A session run's CHECKS outputs are scanned on the device: `scan_phase` writes each thread's
# first non-finite index of every output (i ≡ start mod stride) to seen[c·stride + start], then
# `first_seen` takes the minimum. Integer minima do not depend on the order of the scan.


@always_inline
def _first_bad(a: F32P, n: Int, start: Int, stride: Int) -> Int64:
    for i in range(start, n, stride):
        if not is_finite32(a[unsafe_offset=i]):
            return Int64(i)
    return Int64(-1)


@always_inline
def scan_phase(logits: F32P, n_logits: Int, losses: F32P, n_losses: Int, grads: F32P,
               n_grads: Int, dx: F32P, n_dx: Int, p: F32P, m: F32P, v: F32P, n_state: Int,
               seen: I64P, start: Int, stride: Int):
    """This thread's first non-finite index of each output (-1: none) into `seen`."""
    seen[unsafe_offset=start] = _first_bad(logits, n_logits, start, stride)
    seen[unsafe_offset=stride + start] = _first_bad(losses, n_losses, start, stride)
    seen[unsafe_offset=2 * stride + start] = _first_bad(grads, n_grads, start, stride)
    seen[unsafe_offset=3 * stride + start] = _first_bad(dx, n_dx, start, stride)
    seen[unsafe_offset=4 * stride + start] = _first_bad(p, n_state, start, stride)
    seen[unsafe_offset=5 * stride + start] = _first_bad(m, n_state, start, stride)
    seen[unsafe_offset=6 * stride + start] = _first_bad(v, n_state, start, stride)


@always_inline
def first_seen(seen: I64P, at: Int, count: Int, step: Int) -> Int64:
    """The smallest of seen[at + i·step], i < count, that is not -1 (else -1)."""
    var best = Int64(-1)
    for i in range(count):
        var x = seen[unsafe_offset=at + i * step]
        if x >= 0 and (best < 0 or x < best):
            best = x
    return best


# ---------------------------------------------------------------- the fused kernel


def mlp_fused_kernel(x: F32P, y: I32P, p: F32P, m: F32P, v: F32P, losses: F32P, logits: F32P,
                     grads: F32P, dx: F32P, h: F32P, dl: F32P, dh: F32P, row_loss: F32P,
                     n_in: Int64, n_hid: Int64, n_out: Int64, n_rows: Int64, mode: Int64,
                     k_steps: Int64, t0: Int64, lr: Float64, beta1: Float64, beta2: Float64,
                     eps: Float64, weight_decay: Float64, want_dx: Int64, seen: I64P,
                     status: I32P, check: Int64):
    """`training.mlp.mlp_steps` for one block of threads; with `check`, then the finiteness
    status words of its outputs (a session reads them in the same download as the outputs)."""
    var tid = Int(thread_idx.x)
    var nt = Int(block_dim.x)
    var I = Int(n_in)
    var H = Int(n_hid)
    var O = Int(n_out)
    var R = Int(n_rows)
    var w2_at = H * I + H
    var total = w2_at + O * H + O
    var grad_pass = mode != 0
    var train = mode == 2
    for step in range(Int(k_steps)):
        var xb = x.unsafe_offset(step * R * I)
        forward_phase(xb, p, p.unsafe_offset(H * I), h, R, H, I, True, tid, nt)
        barrier()
        forward_phase(h, p.unsafe_offset(w2_at), p.unsafe_offset(w2_at + O * H), logits, R, O, H,
                      False, tid, nt)
        barrier()
        if not grad_pass:
            break
        cross_entropy_phase(logits, y.unsafe_offset(step * R), dl, row_loss, R, O, tid, nt)
        barrier()
        if tid == 0:
            losses[unsafe_offset=step] = loss_mean(row_loss, R)
        backward_phase(dl, h, p.unsafe_offset(w2_at), grads.unsafe_offset(w2_at), dh, R, O, H,
                       True, True, tid, nt)
        barrier()
        backward_phase(dh, xb, p, grads, dx, R, H, I, want_dx != 0, False, tid, nt)
        barrier()
        if train:
            adamw_phase(p, grads, m, v, total,
                        step_scalars(Int(t0) + step, lr, beta1, beta2, eps, weight_decay), tid,
                        nt)
            barrier()
    if check == 0:
        return
    scan_phase(logits, R * O, losses, Int(k_steps) if grad_pass else 0, grads,
               total if grad_pass else 0, dx, R * I if grad_pass and want_dx != 0 else 0, p, m,
               v, total if train else 0, seen, tid, nt)
    barrier()
    if tid < CHECKS:
        status[unsafe_offset=tid] = Int32(first_seen(seen, tid * nt, nt, 1))


def enqueue_fused_steps(ctx: DeviceContext, x: F32P, y: I32P, p: F32P, m: F32P, v: F32P,
                        losses: F32P, logits: F32P, grads: F32P, dx: F32P, h: F32P, dl: F32P,
                        dh: F32P, row_loss: F32P, inputs: Int, hidden: Int, classes: Int,
                        rows: Int, mode: Int, k: Int, t0: Int, lr: Float64, beta1: Float64,
                        beta2: Float64, eps: Float64, weight_decay: Float64,
                        want_dx: Bool, seen: I64P, status: I32P, check: Bool) raises:
    """Launch `mlp_fused_kernel` on device pointers. With `check`, `seen` (CHECKS × BLOCK
    scratch) and `status` (CHECKS words) receive the finiteness status."""
    ctx.enqueue_function[mlp_fused_kernel](
        x, y, p, m, v, losses, logits, grads, dx, h, dl, dh, row_loss, Int64(inputs),
        Int64(hidden), Int64(classes), Int64(rows), Int64(mode), Int64(k), Int64(t0), lr, beta1,
        beta2, eps, weight_decay, Int64(1 if want_dx else 0), seen, status,
        Int64(1 if check else 0), grid_dim=1, block_dim=BLOCK)


def gpu_device_count() raises -> Int:
    """Number of devices the vendor runtime reports (0 without a driver or a device)."""
    return DeviceContext.number_of_devices()
