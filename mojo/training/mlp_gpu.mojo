"""The fused MLP training step as one GPU kernel (cuda / hip builds).

Same step, same order, same bits as `training/mlp.mojo` (whose header fixes the order): every
output is computed by one thread with the CPU kernels' formula — inner products from +0.0 with
k ascending, column sums with rows ascending, the cross-entropy row of `training/loss.mojo`,
AdamW of `training/optim.mojo` — so work is split only across independent outputs, never along
a reduction. One block runs the whole step (rows <= 256 for the trainer); phases are separated
by block barriers. Square roots are `training.fp.sqrt_rn` (`.rn` on NVIDIA), exp/log the
portable polynomials, and identical builds use `--fp-mode contract=off`; CI reads the PTX and
fails on fused, approximate or flush-to-zero instructions.

Dimensions: R rows, I inputs, H hidden, O classes; flat parameters W1 (H×I), b1, W2 (O×H), b2.

`mlp_steps_gpu` serves the stateless `mlp_train_step` entry (everything uploaded and
downloaded per call); the resident session launches the same kernel on its device-resident
state through `enqueue_mlp_steps` (training/mlp_gpu_session.mojo).

Run on an NVIDIA H200 (tools/device_check.sh, tools/device_extra.sh). The hip build is
compile-checked only.
"""
from max.gpu import barrier, block_dim, thread_idx
from max.gpu.host import DeviceBuffer, DeviceContext

from training.checks import is_finite32
from training.config import F32P, I32P, I64P
from training.optim import _adam_lanes, adam_scalars, bias_correction
from training.portable_math import exp32_scalar, log32_scalar

comptime BLOCK = 256
# Status words of a session run, in the order of training/mlp_resident.mojo's NF_* codes:
# logits, losses, grads, input_grad, params, m, v.
comptime CHECKS = 7


@always_inline
def _dot(a: F32P, sa: Int, b: F32P, sb: Int, n: Int) -> Float32:
    """acc = +0.0; acc = acc + a[q*sa] * b[q*sb], q ascending (the GEMM order)."""
    var acc = Float32(0.0)
    for q in range(n):
        acc = acc + a[unsafe_offset=q * sa] * b[unsafe_offset=q * sb]
    return acc


@always_inline
def _ce_row(z: F32P, y: Int, classes: Int, g: F32P, divisor: Float32) -> Float32:
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


def mlp_steps_kernel(x: F32P, y: I32P, p: F32P, m: F32P, v: F32P, losses: F32P, logits: F32P,
                     grads: F32P, dx: F32P, h: F32P, dl: F32P, dh: F32P, row_loss: F32P,
                     n_in: Int64, n_hid: Int64, n_out: Int64, n_rows: Int64, mode: Int64,
                     k_steps: Int64, t0: Int64, lr: Float32, beta1: Float32, beta2: Float32,
                     eps: Float32, weight_decay: Float32, want_dx: Int64, seen: I64P,
                     status: I32P, check: Int64):
    """`training.mlp.mlp_steps` for one block of threads; with `check`, then the finiteness
    status words of its outputs (a session reads them in the same download as the outputs)."""
    _steps(x, y, p, m, v, losses, logits, grads, dx, h, dl, dh, row_loss, n_in, n_hid, n_out,
           n_rows, mode, k_steps, t0, lr, beta1, beta2, eps, weight_decay, want_dx)
    if check == 0:
        return
    barrier()
    var R = Int(n_rows)
    var total = Int(n_hid * n_in + n_hid + n_out * n_hid + n_out)
    var grad_pass = mode != 0
    var train = mode == 2
    var tid = Int(thread_idx.x)
    var nt = Int(block_dim.x)
    seen[unsafe_offset=tid] = _first_bad(logits, R * Int(n_out), tid, nt)
    seen[unsafe_offset=nt + tid] = _first_bad(losses, Int(k_steps) if grad_pass else 0, tid, nt)
    seen[unsafe_offset=2 * nt + tid] = _first_bad(grads, total if grad_pass else 0, tid, nt)
    seen[unsafe_offset=3 * nt + tid] = _first_bad(
        dx, R * Int(n_in) if grad_pass and want_dx != 0 else 0, tid, nt)
    seen[unsafe_offset=4 * nt + tid] = _first_bad(p, total if train else 0, tid, nt)
    seen[unsafe_offset=5 * nt + tid] = _first_bad(m, total if train else 0, tid, nt)
    seen[unsafe_offset=6 * nt + tid] = _first_bad(v, total if train else 0, tid, nt)
    barrier()
    if tid < CHECKS:
        var best = Int64(-1)
        for j in range(nt):
            var at = seen[unsafe_offset=tid * nt + j]
            if at >= 0 and (best < 0 or at < best):
                best = at
        status[unsafe_offset=tid] = Int32(best)


@always_inline
def _first_bad(a: F32P, n: Int, tid: Int, nt: Int) -> Int64:
    """This thread's first non-finite index of a[0:n] among i ≡ tid (mod nt), or -1."""
    for i in range(tid, n, nt):
        if not is_finite32(a[unsafe_offset=i]):
            return Int64(i)
    return Int64(-1)


@always_inline
def _steps(x: F32P, y: I32P, p: F32P, m: F32P, v: F32P, losses: F32P, logits: F32P,
           grads: F32P, dx: F32P, h: F32P, dl: F32P, dh: F32P, row_loss: F32P, n_in: Int64,
           n_hid: Int64, n_out: Int64, n_rows: Int64, mode: Int64, k_steps: Int64, t0: Int64,
           lr: Float32, beta1: Float32, beta2: Float32, eps: Float32, weight_decay: Float32,
           want_dx: Int64):
    """The body of `training.mlp.mlp_steps` for one block of threads."""
    var tid = Int(thread_idx.x)
    var nt = Int(block_dim.x)
    var I = Int(n_in)
    var H = Int(n_hid)
    var O = Int(n_out)
    var R = Int(n_rows)
    var w1 = p
    var b1 = p.unsafe_offset(H * I)
    var w2 = p.unsafe_offset(H * I + H)
    var b2 = p.unsafe_offset(H * I + H + O * H)
    var total = H * I + H + O * H + O
    for step in range(Int(k_steps)):
        var xb = x.unsafe_offset(step * R * I)
        var yb = y.unsafe_offset(step * R)
        # 1-2. H = relu(X·W1ᵀ + b1); logits = H·W2ᵀ + b2
        for o in range(tid, R * H, nt):
            var r = o // H
            var j = o % H
            var z = _dot(xb.unsafe_offset(r * I), 1, w1.unsafe_offset(j * I), 1, I)
            z = z + b1[unsafe_offset=j]
            if not (z > 0):
                z = Float32(0.0)
            h[unsafe_offset=o] = z
        barrier()
        for o in range(tid, R * O, nt):
            var r = o // O
            var c = o % O
            var z = _dot(h.unsafe_offset(r * H), 1, w2.unsafe_offset(c * H), 1, H)
            logits[unsafe_offset=o] = z + b2[unsafe_offset=c]
        barrier()
        if mode == 0:
            return
        # 3. mean cross-entropy: rows in parallel, their sum ascending on one thread
        var divisor = Float32(R)
        for r in range(tid, R, nt):
            row_loss[unsafe_offset=r] = _ce_row(logits.unsafe_offset(r * O),
                                                Int(yb[unsafe_offset=r]), O,
                                                dl.unsafe_offset(r * O), divisor)
        barrier()
        if tid == 0:
            var sum = Float32(0.0)
            for r in range(R):
                sum = sum + row_loss[unsafe_offset=r]
            losses[unsafe_offset=step] = sum / divisor
        # 4-5. dW2 = dlᵀ·H, db2 = column sums of dl, dH = (dl·W2) masked by H > 0
        for o in range(tid, O * H, nt):
            var c = o // H
            var j = o % H
            grads[unsafe_offset=H * I + H + o] = _dot(dl.unsafe_offset(c), O, h.unsafe_offset(j), H, R)
        for c in range(tid, O, nt):
            var acc = Float32(0.0)
            for r in range(R):
                acc = acc + dl[unsafe_offset=r * O + c]
            grads[unsafe_offset=H * I + H + O * H + c] = acc
        for o in range(tid, R * H, nt):
            var r = o // H
            var j = o % H
            var g = _dot(dl.unsafe_offset(r * O), 1, w2.unsafe_offset(j), H, O)
            dh[unsafe_offset=o] = g if h[unsafe_offset=o] > 0 else Float32(0.0)
        barrier()
        # 6-7. dW1 = dHᵀ·X, db1 = column sums of dH, dX = dH·W1
        for o in range(tid, H * I, nt):
            var j = o // I
            var q = o % I
            grads[unsafe_offset=o] = _dot(dh.unsafe_offset(j), H, xb.unsafe_offset(q), I, R)
        for j in range(tid, H, nt):
            var acc = Float32(0.0)
            for r in range(R):
                acc = acc + dh[unsafe_offset=r * H + j]
            grads[unsafe_offset=H * I + j] = acc
        if want_dx != 0:
            for o in range(tid, R * I, nt):
                var r = o // I
                var q = o % I
                dx[unsafe_offset=o] = _dot(dh.unsafe_offset(r * H), 1, w1.unsafe_offset(q), I, H)
        barrier()
        # 8. AdamW, elementwise, t = t0 + step
        if mode == 2:
            var t = Int(t0) + step
            var s = adam_scalars(lr, beta1, beta2, eps, weight_decay, True, False,
                                 bias_correction(beta1, t), bias_correction(beta2, t))
            for e in range(tid, total, nt):
                var pe = SIMD[DType.float32, 1](p[unsafe_offset=e])
                var me = SIMD[DType.float32, 1](m[unsafe_offset=e])
                var ve = SIMD[DType.float32, 1](v[unsafe_offset=e])
                _adam_lanes[1](pe, SIMD[DType.float32, 1](grads[unsafe_offset=e]), me, ve, s)
                p[unsafe_offset=e] = pe[0]
                m[unsafe_offset=e] = me[0]
                v[unsafe_offset=e] = ve[0]
            barrier()


def _ptr(b: DeviceBuffer[DType.float32]) -> F32P:
    return F32P(unsafe_from_address=Int(b.unsafe_ptr()))


def enqueue_mlp_steps(ctx: DeviceContext, x: F32P, y: I32P, p: F32P, m: F32P, v: F32P,
                      losses: F32P, logits: F32P, grads: F32P, dx: F32P, h: F32P, dl: F32P,
                      dh: F32P, row_loss: F32P, inputs: Int, hidden: Int, classes: Int,
                      rows: Int, mode: Int, k: Int, t0: Int, lr: Float32, beta1: Float32,
                      beta2: Float32, eps: Float32, weight_decay: Float32,
                      want_dx: Bool, seen: I64P, status: I32P, check: Bool) raises:
    """Launch `mlp_steps_kernel` on device pointers: the one launch both the per-call path
    below and the resident session (training/mlp_gpu_session.mojo) use. With `check`, `seen`
    (CHECKS × BLOCK scratch) and `status` (CHECKS words) receive the finiteness status."""
    ctx.enqueue_function[mlp_steps_kernel](
        x, y, p, m, v, losses, logits, grads, dx, h, dl, dh, row_loss, Int64(inputs),
        Int64(hidden), Int64(classes), Int64(rows), Int64(mode), Int64(k), Int64(t0), lr, beta1,
        beta2, eps, weight_decay, Int64(1 if want_dx else 0), seen, status,
        Int64(1 if check else 0), grid_dim=1, block_dim=BLOCK)


def mlp_steps_gpu(inputs: Int, hidden: Int, classes: Int, x: F32P, y: I32P, p: F32P, m: F32P,
                  v: F32P, losses: F32P, logits: F32P, grads: F32P, dx: F32P, rows: Int,
                  mode: Int, k: Int, t0: Int, lr: Float32, beta1: Float32, beta2: Float32,
                  eps: Float32, weight_decay: Float32, want_dx: Bool) raises:
    """`training.mlp.mlp_steps` on the device: uploads the batches and the state, runs the
    kernel, downloads losses, logits, gradients, dx and (mode train) p, m, v in place."""
    var ctx = DeviceContext()
    var total = hidden * inputs + hidden + classes * hidden + classes
    var d_x = ctx.enqueue_create_buffer[DType.float32](max(k * rows * inputs, 1))
    var d_y = ctx.enqueue_create_buffer[DType.int32](max(k * rows, 1))
    var d_p = ctx.enqueue_create_buffer[DType.float32](total)
    var d_m = ctx.enqueue_create_buffer[DType.float32](total)
    var d_v = ctx.enqueue_create_buffer[DType.float32](total)
    var d_losses = ctx.enqueue_create_buffer[DType.float32](max(k, 1))
    var d_logits = ctx.enqueue_create_buffer[DType.float32](max(rows * classes, 1))
    var d_grads = ctx.enqueue_create_buffer[DType.float32](total)
    var d_dx = ctx.enqueue_create_buffer[DType.float32](max(rows * inputs, 1))
    var d_h = ctx.enqueue_create_buffer[DType.float32](max(rows * hidden, 1))
    var d_dl = ctx.enqueue_create_buffer[DType.float32](max(rows * classes, 1))
    var d_dh = ctx.enqueue_create_buffer[DType.float32](max(rows * hidden, 1))
    var d_rl = ctx.enqueue_create_buffer[DType.float32](max(rows, 1))
    ctx.enqueue_copy(d_x, x)
    ctx.enqueue_copy(d_y, y)
    ctx.enqueue_copy(d_p, p)
    ctx.enqueue_copy(d_m, m)
    ctx.enqueue_copy(d_v, v)
    enqueue_mlp_steps(ctx, _ptr(d_x), I32P(unsafe_from_address=Int(d_y.unsafe_ptr())),
                      _ptr(d_p), _ptr(d_m), _ptr(d_v), _ptr(d_losses), _ptr(d_logits),
                      _ptr(d_grads), _ptr(d_dx), _ptr(d_h), _ptr(d_dl), _ptr(d_dh), _ptr(d_rl),
                      inputs, hidden, classes, rows, mode, k, t0, lr, beta1, beta2, eps,
                      weight_decay, want_dx, I64P(unsafe_from_address=Int(d_rl.unsafe_ptr())),
                      I32P(unsafe_from_address=Int(d_rl.unsafe_ptr())), False)
    ctx.enqueue_copy(logits, d_logits)
    if mode != 0:
        ctx.enqueue_copy(losses, d_losses)
        ctx.enqueue_copy(grads, d_grads)
        if want_dx:
            ctx.enqueue_copy(dx, d_dx)
    if mode == 2:
        ctx.enqueue_copy(p, d_p)
        ctx.enqueue_copy(m, d_m)
        ctx.enqueue_copy(v, d_v)
    ctx.synchronize()


def gpu_device_count() raises -> Int:
    """Number of devices the vendor runtime reports (0 without a driver or a device)."""
    return DeviceContext.number_of_devices()
