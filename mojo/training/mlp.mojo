"""MLP pieces and the fused training step: Linear(I, H) → ReLU → Linear(H, O), mean
cross-entropy, AdamW.

Dimensions: B batch rows, I inputs, H hidden units, O classes. Row-major everywhere:
X (B, I), W1 (H, I), b1 (H), W2 (O, H), b2 (O), H (B, H), logits (B, O).
Flat parameter order (195 values for 8→16→3): W1, b1, W2, b2, each row-major; gradients and
AdamW moments use the same order.

Summation orders (identical mode, every target; ARITHMETIC.md "The MLP step"):
- bias_activation: out[r, c] = v[r, c] + b[c] (one rounding), then ReLU keeps it when > 0
  and writes +0.0 otherwise. No reduction.
- relu_backward: out[r, c] = g[r, c] when a[r, c] > 0, else +0.0. No reduction.
- sum_rows: out[c] = ((+0.0 + v[0, c]) + v[1, c]) + ... rows ascending.
- GEMMs: training/gemm.mojo `gemm` (identical: k ascending from +0.0; fast: its FMA chain).
  The fused step applies steps 1 and 2's bias and ReLU in the GEMM's epilogue (the same
  operations on each output, on each tile just stored), and step 3's per-row losses and
  gradients too when the logits GEMM's tiles hold whole rows (`forward_loss`); the
  per-operation path makes them separate calls.

The step, in this order (the per-operation path makes the same calls one binding call each):
  1. H = X·W1ᵀ (GEMM NT), H = relu(H + b1)
  2. logits = H·W2ᵀ (GEMM NT), logits = logits + b2
  3. loss, dlogits = mean_cross_entropy(logits, targets)          [modes grads, train]
  4. dW2 = dlogitsᵀ·H (GEMM TN); db2 = sum_rows(dlogits)
  5. dH = dlogits·W2 (GEMM NN), masked by ReLU (H > 0)
  6. dW1 = dHᵀ·X (GEMM TN); db1 = sum_rows(dH)
  7. dX = dH·W1 (GEMM NN), only when asked
  8. AdamW over the flat buffers with t = step + 1                 [mode train]

A float32 `+ − × ÷ √` computed in Python double and rounded once to float32 is the correctly
rounded float32 result, so `tests/reference/mlp.py` matches this FMA-free, fixed-order code bit
for bit: the reference is the executable spec of the order above.
"""
from training.arena import ARENA_WORDS, arena_release
from training.config import F32P, I32P
from training.gemm import Epilogue, gemm_tiles_hold_rows
from training.loss import RowLosses, mean_cross_entropy, mean_of_rows
from training.optim import adam_scalars
from training.pool import split_adam, split_gemm

comptime MODE_FORWARD = 0
comptime MODE_GRADS = 1
comptime MODE_TRAIN = 2


# ---------------------------------------------------------------- elementwise pieces


# SIMD width of the elementwise pieces: every lane is an independent output (or, in sum_rows,
# an independent column's sum), so any width gives the same bits.
comptime EW = 8


def bias_activation(values: F32P, bias: F32P, dst: F32P, rows: Int, cols: Int, relu: Bool):
    """dst = values + bias (broadcast over rows), then ReLU when `relu`. `dst` may be `values`."""
    for r in range(rows):
        var src = values.unsafe_offset(r * cols)
        var out = dst.unsafe_offset(r * cols)
        var c = 0
        while c + EW <= cols:
            var z = src.unsafe_load[width=EW](c) + bias.unsafe_load[width=EW](c)
            if relu:
                z = z.gt(0).select(z, SIMD[DType.float32, EW](0.0))
            out.unsafe_offset(c).unsafe_store(z)
            c += EW
        while c < cols:
            var z = src[unsafe_offset=c] + bias[unsafe_offset=c]
            if relu and not (z > 0):
                z = Float32(0.0)
            out[unsafe_offset=c] = z
            c += 1


def relu_backward(activation: F32P, incoming: F32P, dst: F32P, rows: Int, cols: Int):
    """dst = incoming where activation > 0, else +0.0. `dst` may be `incoming`."""
    var n = rows * cols
    var i = 0
    while i + EW <= n:
        var g = incoming.unsafe_load[width=EW](i)
        var a = activation.unsafe_load[width=EW](i)
        dst.unsafe_offset(i).unsafe_store(a.gt(0).select(g, SIMD[DType.float32, EW](0.0)))
        i += EW
    while i < n:
        dst[unsafe_offset=i] = incoming[unsafe_offset=i] if activation[unsafe_offset=i] > 0 else Float32(0.0)
        i += 1


def sum_rows(values: F32P, dst: F32P, rows: Int, cols: Int):
    """dst[c] = sum of values[:, c], rows ascending from +0.0 (the bias gradient)."""
    # Columns are independent, so a block of columns is summed in registers down all the rows
    # (each column still rows ascending) and stored once.
    comptime BLOCK = 4 * EW
    var c = 0
    while c + BLOCK <= cols:
        var acc = SIMD[DType.float32, BLOCK](0.0)
        for r in range(rows):
            acc = acc + values.unsafe_load[width=BLOCK](r * cols + c)
        dst.unsafe_offset(c).unsafe_store(acc)
        c += BLOCK
    while c + EW <= cols:
        var acc = SIMD[DType.float32, EW](0.0)
        for r in range(rows):
            acc = acc + values.unsafe_load[width=EW](r * cols + c)
        dst.unsafe_offset(c).unsafe_store(acc)
        c += EW
    while c < cols:
        var acc = Float32(0.0)
        for r in range(rows):
            acc = acc + values[unsafe_offset=r * cols + c]
        dst[unsafe_offset=c] = acc
        c += 1


def gemm(a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
         pool: Int = 0, epi: Epilogue = Epilogue.none(), arena: Int = 0):
    """C = op(A)·op(B) with the build's GEMM (training/gemm.mojo `gemm`, the one `neural_gemm`
    calls), so the fused and per-operation paths share it in both numeric modes; shared with
    the workers of `pool` (training/pool.mojo) when there is one, for the same bits; packing
    in `arena` (training/arena.mojo) when there is one."""
    split_gemm(pool, a, b, c, m, n, k, ta, tb, False, epi, arena)


def adamw_flat(p: F32P, g: F32P, m: F32P, v: F32P, n: Int, t: Int, lr: Float64, beta1: Float64,
               beta2: Float64, eps: Float64, weight_decay: Float64):
    """AdamW (decoupled decay) in place on the flat buffers, step t (one-based)."""
    _ = adamw_flat_into(p, g, m, v, p, m, v, n, t, lr, beta1, beta2, eps, weight_decay)


def adamw_flat_into(p: F32P, g: F32P, m: F32P, v: F32P, p_out: F32P, m_out: F32P, v_out: F32P,
                    n: Int, t: Int, lr: Float64, beta1: Float64, beta2: Float64, eps: Float64,
                    weight_decay: Float64, pool: Int = 0) -> Bool:
    """`adamw_flat` writing the new p, m, v to the `_out` buffers (or in place); returns
    whether g and the new p, m, v are all finite (`adam_update_into`). Shared with the
    workers of `pool` when there is one (elementwise: the same bits)."""
    return split_adam(pool, p, g, m, v, p_out, m_out, v_out, n,
                      adam_scalars(lr, beta1, beta2, eps, weight_decay, True, False, t))


# ---------------------------------------------------------------- the fused step


@fieldwise_init
struct MLPDims(ImplicitlyCopyable):
    """Widths of a one-hidden-layer MLP; offsets of its tensors in the flat buffers."""

    var inputs: Int
    var hidden: Int
    var classes: Int

    def w1(self) -> Int:
        return 0

    def b1(self) -> Int:
        return self.hidden * self.inputs

    def w2(self) -> Int:
        return self.b1() + self.hidden

    def b2(self) -> Int:
        return self.w2() + self.classes * self.hidden

    def total(self) -> Int:
        return self.b2() + self.classes


def dense_forward(src: F32P, w: F32P, b: F32P, dst: F32P, rows: Int, n_out: Int, n_in: Int,
                  relu: Bool, pool: Int = 0, arena: Int = 0, loss: Int = 0):
    """One layer forward: dst = src·Wᵀ (GEMM NT) + b, then ReLU when `relu` (bias_activation's
    bits, in the GEMM's epilogue), then each row's cross-entropy when `loss` is the address of
    a RowLosses over dst (also in the epilogue; `gemm_tiles_hold_rows(n_out)` must hold)."""
    gemm(src, w, dst, rows, n_out, n_in, False, True, pool, Epilogue(Int(b), relu, loss), arena)


def dense_backward(g: F32P, below: F32P, w: F32P, dw: F32P, db: F32P, dbelow: F32P, rows: Int,
                   n_out: Int, n_in: Int, want_below: Bool, mask: Bool, pool: Int = 0,
                   arena: Int = 0):
    """One layer backward from its output gradient g (rows × n_out): dW = gᵀ·below (GEMM TN),
    db = sum_rows(g); when `want_below`, dbelow = g·W (GEMM NN), masked by below > 0 when
    `mask` (the layer below's ReLU)."""
    gemm(g, below, dw, n_out, n_in, rows, True, False, pool, Epilogue.none(), arena)
    sum_rows(g, db, rows, n_out)
    if want_below:
        gemm(g, w, dbelow, rows, n_in, n_out, False, False, pool, Epilogue.none(), arena)
        # A pass of its own, not the GEMM's epilogue (gemm.mojo `Epilogue` says why).
        if mask:
            relu_backward(below, dbelow, dbelow, rows, n_in)


def mlp_forward(d: MLPDims, x: F32P, p: F32P, h: F32P, logits: F32P, rows: Int):
    """Steps 1-2: hidden activations `h` (rows, H) and `logits` (rows, O)."""
    dense_forward(x, p.unsafe_offset(d.w1()), p.unsafe_offset(d.b1()), h, rows, d.hidden,
                  d.inputs, True)
    dense_forward(h, p.unsafe_offset(d.w2()), p.unsafe_offset(d.b2()), logits, rows, d.classes,
                  d.hidden, False)


def mlp_backward(d: MLPDims, x: F32P, p: F32P, h: F32P, dlogits: F32P, dh: F32P, grads: F32P,
                 dx: F32P, rows: Int, want_dx: Bool):
    """Steps 4-7: flat `grads` from `dlogits`; `dh` is scratch (rows, H)."""
    dense_backward(dlogits, h, p.unsafe_offset(d.w2()), grads.unsafe_offset(d.w2()),
                   grads.unsafe_offset(d.b2()), dh, rows, d.classes, d.hidden, True, True)
    dense_backward(dh, x, p.unsafe_offset(d.w1()), grads.unsafe_offset(d.w1()),
                   grads.unsafe_offset(d.b1()), dx, rows, d.hidden, d.inputs, want_dx, False)


def mlp_steps(d: MLPDims, x: F32P, y: I32P, p: F32P, m: F32P, v: F32P, losses: F32P,
              logits: F32P, grads: F32P, dx: F32P, rows: Int, mode: Int, k: Int, t0: Int,
              lr: Float64, beta1: Float64, beta2: Float64, eps: Float64, weight_decay: Float64,
              want_dx: Bool):
    """`k` consecutive steps over k batches of `rows` rows stacked in x / y, in place on the
    flat p, m, v (mode train; t = t0, t0+1, ...). `losses[i]` is batch i's loss; `logits`,
    `grads` and `dx` hold the last batch's. Modes forward and grads run one batch (k = 1)
    and leave p, m, v untouched. Targets must already be checked to lie in [0, O). The
    [I, H, O] case of `mlp_layers_steps`."""
    var sizes: List[Int] = [d.inputs, d.hidden, d.classes]
    mlp_layers_steps(sizes, x, y, p, m, v, losses, logits, grads, dx, rows, mode, k, t0, lr,
                     beta1, beta2, eps, weight_decay, want_dx)


# ---------------------------------------------------------------- any layer sizes
#
# Widths [n0, n1, ..., nL] (L layers): W_l (n_l × n_{l-1}) and b_l (n_l) in the flat buffers in
# the order W1, b1, ..., WL, bL. ARITHMETIC.md "Any layer sizes": forward layer by layer
# (GEMM NT, bias, ReLU on every layer but the last), mean cross-entropy, backward from the
# last layer (dW_l = G_lᵀ·A_{l-1} GEMM TN, db_l = sum_rows(G_l), G_{l-1} = (G_l·W_l) masked by
# A_{l-1} > 0, dX = G_1·W_1), AdamW. For [I, H, O] these are `mlp_steps`' operations in its
# order, so both give the same bits; mojolearn/_mlp/ops.py makes the same calls one by one.


def total_params(sizes: List[Int]) -> Int:
    """Floats in the flat buffer of an MLP with these widths."""
    var n = 0
    for l in range(len(sizes) - 1):
        n += sizes[l + 1] * sizes[l] + sizes[l + 1]
    return n


def hidden_floats(sizes: List[Int], rows: Int) -> Int:
    """Floats of every hidden layer's activations for `rows` rows (`LayerScratch.acts`)."""
    var n = 0
    for l in range(1, len(sizes) - 1):
        n += rows * sizes[l]
    return n


def widest_hidden(sizes: List[Int]) -> Int:
    var w = 1
    for l in range(1, len(sizes) - 1):
        w = max(w, sizes[l])
    return w


struct LayerScratch(ImplicitlyCopyable):
    """A step's scratch for `rows` rows: `acts` every hidden layer's ReLU output, layer by
    layer (`hidden_floats`), kept for the backward pass; `dlogits` (rows × n_L); `ping` and
    `pong` (rows × `widest_hidden`), the hidden layers' gradients in turn (pong is needed from
    two hidden layers on); `pool`, the worker pool the step's GEMMs share (0: none); `arena`,
    the address of the arena their packing buffers come from (0: a malloc per product);
    `row_losses_at`, rows floats for each row's loss (0: none; `forward_loss` then runs the
    cross-entropy as a pass of its own)."""

    var acts_at: Int
    var dlogits_at: Int
    var ping_at: Int
    var pong_at: Int
    var pool: Int
    var arena: Int
    var row_losses_at: Int

    def __init__(out self, acts_at: Int, dlogits_at: Int, ping_at: Int, pong_at: Int,
                 pool: Int = 0, arena: Int = 0, row_losses_at: Int = 0):
        self.acts_at = acts_at
        self.dlogits_at = dlogits_at
        self.ping_at = ping_at
        self.pong_at = pong_at
        self.pool = pool
        self.arena = arena
        self.row_losses_at = row_losses_at

    def acts(self) -> F32P:
        return F32P(unsafe_from_address=self.acts_at)

    def dlogits(self) -> F32P:
        return F32P(unsafe_from_address=self.dlogits_at)

    def ping(self) -> F32P:
        return F32P(unsafe_from_address=self.ping_at)

    def pong(self) -> F32P:
        return F32P(unsafe_from_address=self.pong_at)


def layers_forward(sizes: List[Int], x: F32P, p: F32P, s: LayerScratch, logits: F32P,
                   rows: Int, loss: Int = 0):
    """Step 1 of "Any layer sizes": every layer in turn, the last one's output into logits
    (through the RowLosses at `loss`, when not 0: `dense_forward`)."""
    var layers = len(sizes) - 1
    var off = 0
    var act = 0
    var src = x
    for l in range(layers):
        var last = l == layers - 1
        var dst = logits if last else s.acts().unsafe_offset(act)
        var b = off + sizes[l + 1] * sizes[l]
        dense_forward(src, p.unsafe_offset(off), p.unsafe_offset(b), dst, rows, sizes[l + 1],
                      sizes[l], not last, s.pool, s.arena, loss if last else 0)
        off = b + sizes[l + 1]
        if not last:
            act += rows * sizes[l + 1]
        src = dst


def forward_loss(sizes: List[Int], x: F32P, p: F32P, s: LayerScratch, logits: F32P, y: I32P,
                 rows: Int, divide_by: Int = 0) -> Float32:
    """Steps 1-2 of "Any layer sizes": the logits, and `mean_cross_entropy(logits, y, rows,
    classes, s.dlogits(), True, divide_by)` (returned; dlogits in s). When the last GEMM's
    tiles hold whole rows, each row's loss and gradient are computed in its epilogue, on the
    tile just stored (in parallel when the GEMM is shared with workers), and their mean after
    it: the same operations in the same order, so the same bits."""
    var classes = sizes[len(sizes) - 1]
    if s.row_losses_at == 0 or not gemm_tiles_hold_rows(classes):
        layers_forward(sizes, x, p, s, logits, rows)
        return mean_cross_entropy(logits, y, rows, classes, s.dlogits(), True, divide_by)
    var t = RowLosses(Int(logits), Int(y), s.dlogits_at, s.row_losses_at, classes,
                      Float32(divide_by if divide_by > 0 else rows))
    layers_forward(sizes, x, p, s, logits, rows, Int(Pointer(to=t)))
    return mean_of_rows(t, rows)


def layers_backward(sizes: List[Int], x: F32P, p: F32P, s: LayerScratch, grads: F32P,
                    dx: F32P, rows: Int, want_dx: Bool):
    """Step 3: the flat gradients from `s.dlogits`, last layer first; dX when `want_dx`."""
    var layers = len(sizes) - 1
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
    var g = s.dlogits()
    var spare = s.ping()
    var spare_is_ping = True
    for j in range(layers):
        var l = layers - 1 - j
        var below = x if l == 0 else s.acts().unsafe_offset(a_off[l - 1])
        var dbelow = spare if l > 0 else dx
        var b = w_off[l] + sizes[l + 1] * sizes[l]
        dense_backward(g, below, p.unsafe_offset(w_off[l]), grads.unsafe_offset(w_off[l]),
                       grads.unsafe_offset(b), dbelow, rows, sizes[l + 1], sizes[l],
                       l > 0 or want_dx, l > 0, s.pool, s.arena)
        if l > 0:
            g = spare
            spare = s.pong() if spare_is_ping else s.ping()
            spare_is_ping = not spare_is_ping


def mlp_layers_steps(sizes: List[Int], x: F32P, y: I32P, p: F32P, m: F32P, v: F32P,
                     losses: F32P, logits: F32P, grads: F32P, dx: F32P, rows: Int, mode: Int,
                     k: Int, t0: Int, lr: Float64, beta1: Float64, beta2: Float64, eps: Float64,
                     weight_decay: Float64, want_dx: Bool):
    """`mlp_steps` for any layer sizes: `k` consecutive steps over k batches of `rows` rows
    stacked in x / y, in place on the flat p, m, v (mode train; t = t0, t0+1, ...); modes
    forward and grads run one batch and leave p, m, v untouched. Targets must already be
    checked to lie in [0, n_L)."""
    var layers = len(sizes) - 1
    var classes = sizes[layers]
    var acts = List[Float32](length=max(hidden_floats(sizes, rows), 1), fill=0)
    var ping = List[Float32](length=rows * widest_hidden(sizes), fill=0)
    var pong = List[Float32](length=rows * widest_hidden(sizes), fill=0)
    var dlogits = List[Float32](length=rows * classes, fill=0)
    var row_losses = List[Float32](length=rows, fill=0)
    var arena = List[Int64](length=ARENA_WORDS, fill=0)
    var s = LayerScratch(Int(acts.unsafe_ptr()), Int(dlogits.unsafe_ptr()),
                         Int(ping.unsafe_ptr()), Int(pong.unsafe_ptr()), 0,
                         Int(arena.unsafe_ptr()), Int(row_losses.unsafe_ptr()))
    var total = total_params(sizes)
    for i in range(k):
        var xb = x.unsafe_offset(i * rows * sizes[0])
        var yb = y.unsafe_offset(i * rows)
        if mode == MODE_FORWARD:
            layers_forward(sizes, xb, p, s, logits, rows)
            break
        losses[unsafe_offset=i] = forward_loss(sizes, xb, p, s, logits, yb, rows)
        layers_backward(sizes, xb, p, s, grads, dx, rows, want_dx)
        if mode == MODE_TRAIN:
            adamw_flat(p, grads, m, v, total, t0 + i, lr, beta1, beta2, eps, weight_decay)
    arena_release(s.arena)
    # `s` holds the scratch by address: keep every buffer alive until here.
    _ = len(acts) + len(ping) + len(pong) + len(dlogits) + len(row_losses) + Int(arena[0])
