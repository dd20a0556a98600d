"""The MLP step of any layer sizes on the device (cuda / hip builds): a sequence of kernels on
one DeviceContext's stream, each grid-sized over the independent outputs of one phase.

ARITHMETIC.md "Any layer sizes", operation for operation (`training.mlp.mlp_layers_steps`):
per step, one launch per layer forward (`forward_phase`), one for every row's cross-entropy,
one thread summing the row losses rows ascending, one launch per layer backward from the last
(`backward_phase`: dW, db and the masked gradient of the layer below, which all read only the
layer's output gradient), one AdamW launch. Launches on one stream run in order, so a phase
sees the whole previous phase; inside a phase each output is one thread's fixed-order
computation (training/mlp_gpu.mojo), so the bits are the CPU's in identical mode whatever the
grid. A small one-hidden-layer step (`fused_fits`) runs as the fused one-block kernel instead,
which computes every output with the same phase functions.

Device memory layout of a run: the parameters, moments and flat gradients in the order W1, b1,
..., WL, bL; scratch as training/mlp.mojo's `LayerScratch` (every hidden activation, dlogits,
ping and pong for the hidden gradients) plus the row losses.

`layer_steps` is that sequence, written once over a `PhaseLauncher`: `GridLauncher` launches
the kernels; mojo/tests/test_mlp_gpu_layers.mojo runs the same phases on the host (every grid
thread in turn) and compares them with the CPU step bit for bit. `enqueue_steps` serves both
the resident session (training/mlp_gpu_session.mojo, with the finiteness status words) and the
stateless `mlp_train_step` entry (`mlp_layers_steps_gpu`: everything uploaded and downloaded
per call). Compile-checked for sm_90 and gfx942 (CI reads the generated code); the layer
kernels have not run on a GPU.
"""
from std.math import ceildiv
from max.gpu import barrier, block_dim, block_idx, global_idx, grid_dim, thread_idx
from max.gpu.host import DeviceBuffer, DeviceContext

from training.config import F32P, I32P, I64P
from training.mlp import LayerScratch, hidden_floats, total_params, widest_hidden
from training.mlp_gpu import (BLOCK, CHECKS, adamw_phase, backward_phase, cross_entropy_phase,
                              enqueue_fused_steps, first_seen, forward_phase, fused_fits,
                              loss_mean, scan_phase, step_scalars)

# Grid-stride loops let a launch cover any number of outputs with at most this many blocks.
comptime MAX_BLOCKS = 1 << 16
# Blocks of the finiteness scan: its CHECKS × SCAN_BLOCKS × BLOCK partial results are reduced
# by CHECKS blocks of BLOCK threads, SCAN_BLOCKS values per thread.
comptime SCAN_BLOCKS = 32
comptime SEEN_WORDS = CHECKS * (SCAN_BLOCKS * BLOCK + BLOCK)


@always_inline
def _start() -> Int:
    return Int(global_idx.x)


@always_inline
def _stride() -> Int:
    return Int(grid_dim.x) * Int(block_dim.x)


def forward_kernel(src: F32P, w: F32P, b: F32P, dst: F32P, rows: Int64, n_out: Int64,
                   n_in: Int64, relu: Int64):
    forward_phase(src, w, b, dst, Int(rows), Int(n_out), Int(n_in), relu != 0, _start(),
                  _stride())


def cross_entropy_kernel(logits: F32P, y: I32P, dl: F32P, row_loss: F32P, rows: Int64,
                         classes: Int64):
    cross_entropy_phase(logits, y, dl, row_loss, Int(rows), Int(classes), _start(), _stride())


def loss_kernel(row_loss: F32P, rows: Int64, losses: F32P):
    """One thread: the sum is one chain, rows ascending."""
    losses[unsafe_offset=0] = loss_mean(row_loss, Int(rows))


def backward_kernel(g: F32P, below: F32P, w: F32P, grads: F32P, dbelow: F32P, rows: Int64,
                    n_out: Int64, n_in: Int64, want_below: Int64, mask: Int64):
    backward_phase(g, below, w, grads, dbelow, Int(rows), Int(n_out), Int(n_in),
                   want_below != 0, mask != 0, _start(), _stride())


def adamw_kernel(p: F32P, grads: F32P, m: F32P, v: F32P, n: Int64, t: Int64, lr: Float64,
                 beta1: Float64, beta2: Float64, eps: Float64, weight_decay: Float64):
    adamw_phase(p, grads, m, v, Int(n), step_scalars(Int(t), lr, beta1, beta2, eps,
                                                      weight_decay), _start(), _stride())


def scan_kernel(logits: F32P, n_logits: Int64, losses: F32P, n_losses: Int64, grads: F32P,
                n_grads: Int64, dx: F32P, n_dx: Int64, p: F32P, m: F32P, v: F32P,
                n_state: Int64, seen: I64P):
    scan_phase(logits, Int(n_logits), losses, Int(n_losses), grads, Int(n_grads), dx, Int(n_dx),
               p, m, v, Int(n_state), seen, _start(), _stride())


def status_kernel(seen: I64P, status: I32P):
    """Block c reduces output c's SCAN_BLOCKS × BLOCK partial results: each thread a strided
    share into the spare words after the scan's, then thread 0 those BLOCK values."""
    var c = Int(block_idx.x)
    var tid = Int(thread_idx.x)
    var scanned = SCAN_BLOCKS * BLOCK
    var spare = CHECKS * scanned + c * BLOCK
    seen[unsafe_offset=spare + tid] = first_seen(seen, c * scanned + tid, SCAN_BLOCKS, BLOCK)
    barrier()
    if tid == 0:
        status[unsafe_offset=c] = Int32(first_seen(seen, spare, BLOCK, 1))


def _grid(outputs: Int) -> Int:
    return max(1, min(ceildiv(outputs, BLOCK), MAX_BLOCKS))


@fieldwise_init
struct DeviceRun(ImplicitlyCopyable):
    """Device addresses of one run: inputs x (k·rows·n0) and int32 labels (k·rows), the state
    p | m | v, the outputs (losses k, logits rows·nL, flat grads, dx rows·n0), the scratch, and
    for a checked run `seen` (SEEN_WORDS int64) and `status` (CHECKS int32)."""

    var x_at: Int
    var y_at: Int
    var p_at: Int
    var m_at: Int
    var v_at: Int
    var losses_at: Int
    var logits_at: Int
    var grads_at: Int
    var dx_at: Int
    var scratch: LayerScratch
    var row_loss_at: Int
    var seen_at: Int
    var status_at: Int

    def x(self) -> F32P:
        return F32P(unsafe_from_address=self.x_at)

    def y(self) -> I32P:
        return I32P(unsafe_from_address=self.y_at)

    def p(self) -> F32P:
        return F32P(unsafe_from_address=self.p_at)

    def m(self) -> F32P:
        return F32P(unsafe_from_address=self.m_at)

    def v(self) -> F32P:
        return F32P(unsafe_from_address=self.v_at)

    def losses(self) -> F32P:
        return F32P(unsafe_from_address=self.losses_at)

    def logits(self) -> F32P:
        return F32P(unsafe_from_address=self.logits_at)

    def grads(self) -> F32P:
        return F32P(unsafe_from_address=self.grads_at)

    def dx(self) -> F32P:
        return F32P(unsafe_from_address=self.dx_at)

    def row_loss(self) -> F32P:
        return F32P(unsafe_from_address=self.row_loss_at)

    def seen(self) -> I64P:
        return I64P(unsafe_from_address=self.seen_at)

    def status(self) -> I32P:
        return I32P(unsafe_from_address=self.status_at)


def scratch_floats(sizes: List[Int], rows: Int) -> List[Int]:
    """Floats of the scratch regions (acts, dlogits, ping, pong, row losses), each at least 1."""
    var w = rows * widest_hidden(sizes)
    var out: List[Int] = [max(hidden_floats(sizes, rows), 1), max(rows * sizes[len(sizes) - 1], 1),
                          max(w, 1), max(w if len(sizes) > 3 else 0, 1), max(rows, 1)]
    return out^


trait PhaseLauncher:
    """Runs one phase over all its outputs and returns once later phases may read them (in
    stream order on a device). `GridLauncher` launches the grid kernels above;
    mojo/tests/test_mlp_gpu_layers.mojo runs the same phases on the host, every grid thread
    in turn, to check `layer_steps` against the CPU step without a GPU."""

    def forward(self, src: F32P, w: F32P, b: F32P, dst: F32P, rows: Int, n_out: Int,
                n_in: Int, relu: Bool) raises:
        ...

    def cross_entropy(self, logits: F32P, y: I32P, dl: F32P, row_loss: F32P, rows: Int,
                      classes: Int) raises:
        ...

    def loss(self, row_loss: F32P, rows: Int, losses: F32P) raises:
        ...

    def backward(self, g: F32P, below: F32P, w: F32P, grads: F32P, dbelow: F32P, rows: Int,
                 n_out: Int, n_in: Int, want_below: Bool, mask: Bool) raises:
        ...

    def adamw(self, p: F32P, grads: F32P, m: F32P, v: F32P, n: Int, t: Int, lr: Float64,
              beta1: Float64, beta2: Float64, eps: Float64, weight_decay: Float64) raises:
        ...

    def check(self, d: DeviceRun, n_logits: Int, n_losses: Int, n_grads: Int, n_dx: Int,
              n_state: Int) raises:
        ...


struct GridLauncher(PhaseLauncher):
    """The phases as kernels on one context's stream, each sized to its outputs."""

    var ctx: DeviceContext

    def __init__(out self, ctx: DeviceContext):
        self.ctx = ctx

    def forward(self, src: F32P, w: F32P, b: F32P, dst: F32P, rows: Int, n_out: Int,
                n_in: Int, relu: Bool) raises:
        self.ctx.enqueue_function[forward_kernel](
            src, w, b, dst, Int64(rows), Int64(n_out), Int64(n_in), Int64(1 if relu else 0),
            grid_dim=_grid(rows * n_out), block_dim=BLOCK)

    def cross_entropy(self, logits: F32P, y: I32P, dl: F32P, row_loss: F32P, rows: Int,
                      classes: Int) raises:
        self.ctx.enqueue_function[cross_entropy_kernel](
            logits, y, dl, row_loss, Int64(rows), Int64(classes), grid_dim=_grid(rows),
            block_dim=BLOCK)

    def loss(self, row_loss: F32P, rows: Int, losses: F32P) raises:
        self.ctx.enqueue_function[loss_kernel](row_loss, Int64(rows), losses, grid_dim=1,
                                               block_dim=1)

    def backward(self, g: F32P, below: F32P, w: F32P, grads: F32P, dbelow: F32P, rows: Int,
                 n_out: Int, n_in: Int, want_below: Bool, mask: Bool) raises:
        var outputs = n_out * n_in + n_out + (rows * n_in if want_below else 0)
        self.ctx.enqueue_function[backward_kernel](
            g, below, w, grads, dbelow, Int64(rows), Int64(n_out), Int64(n_in),
            Int64(1 if want_below else 0), Int64(1 if mask else 0), grid_dim=_grid(outputs),
            block_dim=BLOCK)

    def adamw(self, p: F32P, grads: F32P, m: F32P, v: F32P, n: Int, t: Int, lr: Float64,
              beta1: Float64, beta2: Float64, eps: Float64, weight_decay: Float64) raises:
        self.ctx.enqueue_function[adamw_kernel](
            p, grads, m, v, Int64(n), Int64(t), lr, beta1, beta2, eps, weight_decay,
            grid_dim=_grid(n), block_dim=BLOCK)

    def check(self, d: DeviceRun, n_logits: Int, n_losses: Int, n_grads: Int, n_dx: Int,
              n_state: Int) raises:
        self.ctx.enqueue_function[scan_kernel](
            d.logits(), Int64(n_logits), d.losses(), Int64(n_losses), d.grads(),
            Int64(n_grads), d.dx(), Int64(n_dx), d.p(), d.m(), d.v(), Int64(n_state), d.seen(),
            grid_dim=SCAN_BLOCKS, block_dim=BLOCK)
        self.ctx.enqueue_function[status_kernel](d.seen(), d.status(), grid_dim=CHECKS,
                                                 block_dim=BLOCK)


def layer_steps[L: PhaseLauncher](launch: L, sizes: List[Int], d: DeviceRun, rows: Int,
                                  mode: Int, k: Int, t0: Int, lr: Float64, beta1: Float64,
                                  beta2: Float64, eps: Float64, weight_decay: Float64,
                                  want_dx: Bool, check: Bool) raises:
    """`training.mlp.mlp_layers_steps` as a sequence of phases on the pointers of `d`: k steps
    (mode train, t = t0, t0+1, ...; p, m, v in place) or one forward / gradient pass; with
    `check`, then the CHECKS status words (first non-finite index of each output, -1 when all
    finite)."""
    var layers = len(sizes) - 1
    var s = d.scratch
    var classes = sizes[layers]
    var total = total_params(sizes)
    var w_off = List[Int](capacity=layers)
    var a_off = List[Int](capacity=layers)
    var off = 0
    var act = 0
    for l in range(layers):
        w_off.append(off)
        off += sizes[l + 1] * sizes[l] + sizes[l + 1]
        a_off.append(act)
        if l < layers - 1:
            act += rows * sizes[l + 1]
    for i in range(k):
        var xb = d.x().unsafe_offset(i * rows * sizes[0])
        # Forward (training.mlp.layers_forward): the last layer into logits, no ReLU.
        var src = xb
        for l in range(layers):
            var last = l == layers - 1
            var dst = d.logits() if last else s.acts().unsafe_offset(a_off[l])
            launch.forward(src, d.p().unsafe_offset(w_off[l]),
                           d.p().unsafe_offset(w_off[l] + sizes[l + 1] * sizes[l]), dst, rows,
                           sizes[l + 1], sizes[l], not last)
            src = dst
        if mode == 0:
            break
        launch.cross_entropy(d.logits(), d.y().unsafe_offset(i * rows), s.dlogits(),
                             d.row_loss(), rows, classes)
        launch.loss(d.row_loss(), rows, d.losses().unsafe_offset(i))
        # Backward (training.mlp.layers_backward): the hidden gradients alternate ping, pong.
        var g = s.dlogits()
        var spare = s.ping()
        var spare_is_ping = True
        for j in range(layers):
            var l = layers - 1 - j
            var below = xb if l == 0 else s.acts().unsafe_offset(a_off[l - 1])
            launch.backward(g, below, d.p().unsafe_offset(w_off[l]),
                            d.grads().unsafe_offset(w_off[l]), spare if l > 0 else d.dx(), rows,
                            sizes[l + 1], sizes[l], l > 0 or want_dx, l > 0)
            if l > 0:
                g = spare
                spare = s.pong() if spare_is_ping else s.ping()
                spare_is_ping = not spare_is_ping
        if mode == 2:
            launch.adamw(d.p(), d.grads(), d.m(), d.v(), total, t0 + i, lr, beta1, beta2, eps,
                         weight_decay)
    if check:
        var grad_pass = mode != 0
        launch.check(d, rows * classes, k if grad_pass else 0, total if grad_pass else 0,
                     rows * sizes[0] if grad_pass and want_dx else 0,
                     total if mode == 2 else 0)


def enqueue_steps(ctx: DeviceContext, sizes: List[Int], d: DeviceRun, rows: Int, mode: Int,
                  k: Int, t0: Int, lr: Float64, beta1: Float64, beta2: Float64, eps: Float64,
                  weight_decay: Float64, want_dx: Bool, check: Bool) raises:
    """`layer_steps` on the device: the fused one-block kernel when the step is small
    (`fused_fits`), else the grid kernels."""
    if fused_fits(sizes, rows):
        var s = d.scratch
        enqueue_fused_steps(ctx, d.x(), d.y(), d.p(), d.m(), d.v(), d.losses(), d.logits(),
                            d.grads(), d.dx(), s.acts(), s.dlogits(), s.ping(), d.row_loss(),
                            sizes[0], sizes[1], sizes[2], rows, mode, k, t0, lr, beta1, beta2,
                            eps, weight_decay, want_dx, d.seen(), d.status(), check)
        return
    layer_steps(GridLauncher(ctx), sizes, d, rows, mode, k, t0, lr, beta1, beta2, eps,
                weight_decay, want_dx, check)


def _f(b: DeviceBuffer[DType.float32]) -> F32P:
    return F32P(unsafe_from_address=Int(b.unsafe_ptr()))


def mlp_layers_steps_gpu(sizes: List[Int], x: F32P, y: I32P, p: F32P, m: F32P, v: F32P,
                         losses: F32P, logits: F32P, grads: F32P, dx: F32P, rows: Int,
                         mode: Int, k: Int, t0: Int, lr: Float64, beta1: Float64,
                         beta2: Float64, eps: Float64, weight_decay: Float64,
                         want_dx: Bool) raises:
    """`training.mlp.mlp_layers_steps` on the device: uploads the batches and the state, runs
    the steps, downloads losses, logits, gradients, dx and (mode train) p, m, v in place."""
    var ctx = DeviceContext()
    var n = total_params(sizes)
    var inputs = sizes[0]
    var classes = sizes[len(sizes) - 1]
    var sf = scratch_floats(sizes, rows)
    var d_x = ctx.enqueue_create_buffer[DType.float32](max(k * rows * inputs, 1))
    var d_y = ctx.enqueue_create_buffer[DType.int32](max(k * rows, 1))
    var d_state = ctx.enqueue_create_buffer[DType.float32](3 * n)
    var d_losses = ctx.enqueue_create_buffer[DType.float32](max(k, 1))
    var d_logits = ctx.enqueue_create_buffer[DType.float32](max(rows * classes, 1))
    var d_grads = ctx.enqueue_create_buffer[DType.float32](n)
    var d_dx = ctx.enqueue_create_buffer[DType.float32](max(rows * inputs, 1))
    var d_acts = ctx.enqueue_create_buffer[DType.float32](sf[0])
    var d_dl = ctx.enqueue_create_buffer[DType.float32](sf[1])
    var d_ping = ctx.enqueue_create_buffer[DType.float32](sf[2])
    var d_pong = ctx.enqueue_create_buffer[DType.float32](sf[3])
    var d_rl = ctx.enqueue_create_buffer[DType.float32](sf[4])
    var state = _f(d_state)
    ctx.enqueue_copy(d_x, x)
    ctx.enqueue_copy(d_y, y)
    ctx.enqueue_copy(d_state.create_sub_buffer[DType.float32](0, n), p)
    ctx.enqueue_copy(d_state.create_sub_buffer[DType.float32](n, n), m)
    ctx.enqueue_copy(d_state.create_sub_buffer[DType.float32](2 * n, n), v)
    var scratch = LayerScratch(Int(d_acts.unsafe_ptr()), Int(d_dl.unsafe_ptr()),
                               Int(d_ping.unsafe_ptr()), Int(d_pong.unsafe_ptr()))
    # Unchecked: the entry refuses non-finite outputs on the host after the download.
    var at = Int(state)
    var run = DeviceRun(Int(_f(d_x)), Int(d_y.unsafe_ptr()), at, at + 4 * n, at + 8 * n,
                        Int(_f(d_losses)), Int(_f(d_logits)), Int(_f(d_grads)), Int(_f(d_dx)),
                        scratch, Int(_f(d_rl)), 0, 0)
    enqueue_steps(ctx, sizes, run, rows, mode, k, t0, lr, beta1, beta2, eps, weight_decay,
                  want_dx, False)
    ctx.enqueue_copy(logits, d_logits)
    if mode != 0:
        ctx.enqueue_copy(losses, d_losses)
        ctx.enqueue_copy(grads, d_grads)
        if want_dx:
            ctx.enqueue_copy(dx, d_dx)
    if mode == 2:
        ctx.enqueue_copy(p, d_state.create_sub_buffer[DType.float32](0, n))
        ctx.enqueue_copy(m, d_state.create_sub_buffer[DType.float32](n, n))
        ctx.enqueue_copy(v, d_state.create_sub_buffer[DType.float32](2 * n, n))
    ctx.synchronize()
    # The launches took bare addresses: no buffer may be freed before the stream is done.
    _ = (d_x^, d_y^, d_state^, d_losses^, d_logits^, d_grads^, d_dx^, d_acts^, d_dl^, d_ping^,
         d_pong^, d_rl^)
