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
from training.pool import part_range, parts_for, split_adam, split_gemm, split_parts

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


@fieldwise_init
struct _SumRows(ImplicitlyCopyable):
    """One `sum_rows` call (addresses), read by its parts (ranges of columns)."""

    var values: Int
    var dst: Int
    var rows: Int
    var cols: Int


comptime SUM_PIECE = 4 * EW  # columns a part takes at least: a 128-byte run of each row


def sum_rows(values: F32P, dst: F32P, rows: Int, cols: Int, pool: Int = 0):
    """dst[c] = sum of values[:, c], rows ascending from +0.0 (the bias gradient). With a
    `pool`, ranges of columns go to its threads (each column its own chain: the same bits):
    on one thread the transformer's bias gradients at batch 64 were 3 % of a two-thread step,
    the other thread waiting."""
    var s = _SumRows(Int(values), Int(dst), rows, cols)
    var pieces = (cols + SUM_PIECE - 1) // SUM_PIECE
    split_parts(pool, _sum_rows_part, s, parts_for(pool, pieces, rows * cols))


def _sum_rows_part(ctx: Int, part: Int, parts: Int):
    var s = Pointer[_SumRows, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range((s.cols + SUM_PIECE - 1) // SUM_PIECE, part, parts)
    _sum_columns(F32P(unsafe_from_address=s.values), F32P(unsafe_from_address=s.dst), s.rows,
                 s.cols, r[0] * SUM_PIECE, min(s.cols, r[1] * SUM_PIECE))


def _sum_columns(values: F32P, dst: F32P, rows: Int, cols: Int, first: Int, end: Int):
    """sum_rows on columns [first, end)."""
    # Columns are independent, so a block of columns is summed in registers down all the rows
    # (each column still rows ascending) and stored once. 128 columns a block (the
    # transformer's 384-wide qkv gradient: 3 strided walks down 768 rows, not 12) keeps eight
    # 64-byte lines a row in flight.
    var c = first
    while c + 16 * EW <= end:
        _sum_block[16 * EW](values, dst, rows, cols, c)
        c += 16 * EW
    while c + 4 * EW <= end:
        _sum_block[4 * EW](values, dst, rows, cols, c)
        c += 4 * EW
    while c + EW <= end:
        _sum_block[EW](values, dst, rows, cols, c)
        c += EW
    while c < end:
        _sum_block[1](values, dst, rows, cols, c)
        c += 1


@always_inline
def _sum_block[B: Int](values: F32P, dst: F32P, rows: Int, cols: Int, c: Int):
    var acc = SIMD[DType.float32, B](0.0)
    for r in range(rows):
        acc = acc + values.unsafe_load[width=B](r * cols + c)
    dst.unsafe_offset(c).unsafe_store(acc)


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
