"""The model runner: executes a model's program (mojolearn/_model/program.py builds it; its
docstring gives the layout) — forward ops in order, the loss, backward ops in reverse, AdamW
over the flat buffer — the same steps for every stack of layers (docs/ARITHMETIC.md
"Models").

Header (int64): version, ops, seed (uint64 bits), arena floats per example, input floats per
example, output offset, output floats per example, loss (0 cross-entropy, 1 MSE), classes
(cross-entropy: the output's last axis; 0 for MSE). Records of
RECORD words: op, src, dst, five op-specific words, flags (ACCUMULATE, NEED_SRC_GRAD,
ACCUMULATE_OTHER). Tensor offsets are per example: a batch of `rows` examples keeps tensor t
at rows·t in the activation arena (offset 0, the input, is the caller's x) and the gradient
arena alike. A program whose first op is an Embedding has int32 token ids in x, which only
that op reads (training/layers/embedding.mojo); attention is its two Linears around
OP_ATTENTION (training/layers/attention.mojo).

A Linear's forward and backward are the MLP's `dense_forward`/GEMMs (training/mlp.mojo), a
Linear+ReLU pair its fused epilogue, the loss its `mean_cross_entropy`: an MLP program runs the
MLP step's operations in its order, so `Trainer` and `MLPTrainer` give the same bits.
"""
from std.memory import bitcast

from training.arena import ARENA_WORDS, arena_release, arena_reserve
from training.config import F32P, I32P, I64P
from training.gemm import Epilogue, gemm, gemm_bytes, gemm_tiles_hold_rows
from training.layers.activations import (gelu_backward, gelu_forward, sigmoid_backward,
                                         sigmoid_forward, tanh_backward, tanh_forward)
from training.layers.conv import conv2d_backward, conv2d_forward, unpack
from training.layers.attention import attention_backward, attention_forward
from training.layers.dropout import dropout_apply, dropout_key
from training.layers.embedding import (embedding_backward, embedding_forward,
                                       position_backward, position_forward)
from training.layers.elementwise import copy_or_add, mse_loss, relu_apply, relu_grad, sum_into
from training.layers.norm import layernorm_backward, layernorm_forward
from training.layers.pool2d import avgpool2d_forward, maxpool2d_forward, pool2d_backward
from training.loss import RowLosses, cross_entropy_rows, mean_cross_entropy, mean_of_rows
from training.mlp import adamw_flat_into, relu_backward, sum_rows, total_params
from training.pool import (MIN_PART_MACS, SIDE_MACS, heap_copy, heap_free, part_range,
                           parts_for, pool_awake, pool_threads, split_gemm, split_parts)

comptime VERSION = 1
comptime HEADER = 9
comptime RECORD = 10
comptime OP_LINEAR = 1
comptime OP_RELU = 2
comptime OP_LAYERNORM = 3
comptime OP_DROPOUT = 4
comptime OP_ADD = 5
comptime OP_GELU = 6
comptime OP_TANH = 7
comptime OP_SIGMOID = 8
comptime OP_CONV2D = 9
comptime OP_MAXPOOL2D = 10
comptime OP_AVGPOOL2D = 11
comptime OP_EMBEDDING = 20
comptime OP_POSITION = 21
comptime OP_ATTENTION = 22
comptime LOSS_CROSS_ENTROPY = 0
comptime LOSS_MSE = 1
comptime ACCUMULATE = 1
comptime NEED_SRC_GRAD = 2
comptime ACCUMULATE_OTHER = 4

comptime MODE_FORWARD = 0
comptime MODE_GRADS = 1
comptime MODE_TRAIN = 2
comptime MODE_EVAL = 3  # forward as in inference (no dropout) and the loss: no backward


struct Program(ImplicitlyCopyable):
    """A program's words and the batch it runs on, by address: `x` (rows × inputs), the
    activation and gradient arenas (rows × arena floats each); where the caller wants them,
    the output tensor (`out_at`: the caller's buffer instead of the arena's slot, so no copy)
    and the input's gradient (`dx_at`; 0: not computed), the worker pool and packing arena the
    GEMMs share (training/pool.mojo, training/arena.mojo; 0: this thread, a malloc per
    product), and `row_losses_at` (rows × positions floats: the cross-entropy rows' losses when
    the last Linear's epilogue computes them; 0: the loss is a pass of its own)."""

    var words_at: Int
    var x_at: Int
    var act_at: Int
    var dact_at: Int
    var rows: Int
    var out_at: Int
    var dx_at: Int
    var pool: Int
    var arena_at: Int
    var row_losses_at: Int

    def __init__(out self, words_at: Int, x_at: Int, act_at: Int, dact_at: Int, rows: Int,
                 out_at: Int = 0, dx_at: Int = 0, pool: Int = 0, arena_at: Int = 0,
                 row_losses_at: Int = 0):
        self.words_at = words_at
        self.x_at = x_at
        self.act_at = act_at
        self.dact_at = dact_at
        self.rows = rows
        self.out_at = out_at
        self.dx_at = dx_at
        self.pool = pool
        self.arena_at = arena_at
        self.row_losses_at = row_losses_at

    def w(self) -> I64P:
        return I64P(unsafe_from_address=self.words_at)

    def ops(self) -> Int:
        return Int(self.w()[unsafe_offset=1])

    def seed(self) -> UInt64:
        return UInt64(self.w()[unsafe_offset=2])

    def arena(self) -> Int:
        return Int(self.w()[unsafe_offset=3])

    def inputs(self) -> Int:
        return Int(self.w()[unsafe_offset=4])

    def output(self) -> Int:
        return Int(self.w()[unsafe_offset=5])

    def outputs(self) -> Int:
        return Int(self.w()[unsafe_offset=6])

    def loss(self) -> Int:
        return Int(self.w()[unsafe_offset=7])

    def classes(self) -> Int:
        return Int(self.w()[unsafe_offset=8])

    def word(self, op: Int, i: Int) -> Int:
        return Int(self.w()[unsafe_offset=HEADER + op * RECORD + i])

    def at(self, offset: Int) -> F32P:
        """Tensor `offset`'s activations for the batch (the input is the caller's x; the
        output the caller's buffer when it gave one)."""
        if offset == 0:
            return F32P(unsafe_from_address=self.x_at)
        if offset == self.output() and self.out_at != 0:
            return F32P(unsafe_from_address=self.out_at)
        return F32P(unsafe_from_address=self.act_at).unsafe_offset(self.rows * offset)

    def places(self, op: Int) -> Int:
        """The address of a 2 × 2 max pool's window places (word 7: a byte an output, kept
        in the activations), or 0."""
        var at = self.word(op, 7)
        return Int(F32P(unsafe_from_address=self.act_at).unsafe_offset(self.rows * at)) if at else 0

    def grad(self, offset: Int) -> F32P:
        if offset == 0 and self.dx_at != 0:
            return F32P(unsafe_from_address=self.dx_at)
        return F32P(unsafe_from_address=self.dact_at).unsafe_offset(self.rows * offset)

    def gemm(self, a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
             accumulate: Bool, epi: Epilogue = Epilogue.none()):
        split_gemm(self.pool, a, b, c, m, n, k, ta, tb, accumulate, epi, self.arena_at)


@fieldwise_init
struct _LinearGrads(ImplicitlyCopyable):
    """A Linear's backward products (addresses, sizes) for `_linear_grads_part`: dW (and db)
    from dY and x, dX from dY and W; their packing buffers at `buf` and `buf + dx_off`."""

    var dy: Int
    var x: Int
    var w: Int
    var dw: Int
    var db: Int  # 0: no bias
    var dx: Int
    var rows: Int
    var n_in: Int
    var n_out: Int
    var accumulate: Bool
    var buf: Int
    var dx_off: Int
    var mask: Int  # a ReLU's output that dX is masked by once complete (0: none)


def _side_by_side(pool: Int, macs: Int) -> Bool:
    """Whether a Linear's dW and dX (macs each) may run one a thread: each too small for
    `split_gemm` to share, large enough to pay for the hand-over ([784, 256, 10]'s second
    layer: 655 k multiply-adds each), or, on two threads, each up to SIDE_TWO_MACS, where one
    product a thread beats both cut in two (neither thread packs an operand the other packs
    too, one hand-over instead of two; LeNet-5's first Linear at batch 256, 12.3 M each, on
    an Intel Xeon, in-process: its backward 229 -> 196 µs, one thread's 377). They do when
    the workers are awake (spinning after the step's shared products): where nothing else is
    shared (the 64-256-256-10 MLP at batch 32), waking a sleeping worker for each such pair
    made the step 9 % slower than one thread."""
    var threads = pool_threads(pool)
    return threads >= 2 and SIDE_MACS <= macs and (
        macs < 2 * MIN_PART_MACS or threads == 2 and macs < SIDE_TWO_MACS)


comptime SIDE_TWO_MACS = 8 * MIN_PART_MACS


@always_inline
def _round64(bytes: Int) -> Int:
    """The next multiple of a cache line (packed panels start on one)."""
    return (bytes + 63) // 64 * 64


def _side_by_side_run(pool: Int, lg: _LinearGrads):
    """`_linear_grads_part`'s two parts over the pool, each reading a copy of `lg`."""
    split_parts(pool, _linear_grads_part, lg, 2, side=True)


def _linear_grads_part(ctx: Int, part: Int, parts: Int):
    """Part 0: dW = dYᵀ·x and db; part 1: dX (+)= dY·W, then, when `mask` is set, the
    ReLU's mask of the Linear below (`relu_backward`, in place: the op it would run on the
    calling thread while the other core waited). The bits of the products one after the other
    (each output its own chain; the mask an elementwise select)."""
    var g = Pointer[_LinearGrads, MutAnyOrigin](unsafe_from_address=ctx)[]
    var dy = F32P(unsafe_from_address=g.dy)
    if part == 0:
        gemm(dy, F32P(unsafe_from_address=g.x), F32P(unsafe_from_address=g.dw), g.n_out, g.n_in,
             g.rows, True, False, False, 0, g.n_out, 0, -1, Epilogue.none(), g.buf)
        if g.db != 0:
            sum_rows(dy, F32P(unsafe_from_address=g.db), g.rows, g.n_out)
        return
    gemm(dy, F32P(unsafe_from_address=g.w), F32P(unsafe_from_address=g.dx), g.rows, g.n_in,
         g.n_out, False, False, g.accumulate, 0, g.rows, 0, -1, Epilogue.none(),
         g.buf + g.dx_off)
    if g.mask != 0:
        relu_backward(F32P(unsafe_from_address=g.mask), F32P(unsafe_from_address=g.dx),
                      F32P(unsafe_from_address=g.dx), g.rows, g.n_in)


def _masks_below(pr: Program, op: Int) -> Bool:
    """Whether Linear `op`'s dX, once computed, is the whole gradient of a fused ReLU's output
    (the Linear just before it, whose output is op's input): no op between them reads that
    output, so every other consumer comes later in the forward and has added its part already
    in the backward. Its mask can then run beside op's dW, right after dX."""
    return (op >= 1 and pr.word(op - 1, 0) == OP_LINEAR and pr.word(op - 1, 7) != 0
            and pr.word(op - 1, 2) == pr.word(op, 1) and pr.word(op - 1, 8) == pr.word(op, 8))


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.int32, 1](Int32(bits)))[0]


def model_forward(pr: Program, p: F32P, t: Int, train: Bool, first_row: Int, loss: Int = 0):
    """Every op forward; Dropout draws its mask only when `train` (step t, the batch's first
    row at `first_row` of its whole batch), else is the identity. `loss`: the address of a
    RowLosses over the output, which the Linear writing the output computes in its epilogue
    (`fused_loss` says when it can), or 0."""
    var rows = pr.rows
    for op in range(pr.ops()):
        var code = pr.word(op, 0)
        var src = pr.at(pr.word(op, 1))
        var dst = pr.at(pr.word(op, 2))
        if code == OP_LINEAR:
            var b = pr.word(op, 6)
            var bias = Int(p.unsafe_offset(b)) if b >= 0 else 0
            var last = op == pr.ops() - 1 and pr.word(op, 2) == pr.output()
            pr.gemm(src, p.unsafe_offset(pr.word(op, 5)), dst, rows * pr.word(op, 8),
                    pr.word(op, 4), pr.word(op, 3), False, True, False,
                    Epilogue(bias, pr.word(op, 7) != 0, loss if last else 0))
        elif code == OP_RELU:
            relu_apply(src, dst, rows * pr.word(op, 3))
        elif code == OP_LAYERNORM:
            var w = pr.word(op, 5)
            layernorm_forward(src, dst, p.unsafe_offset(max(w, 0)),
                              p.unsafe_offset(max(pr.word(op, 6), 0)), pr.at(pr.word(op, 7)),
                              rows * pr.word(op, 4), pr.word(op, 3), _f32(pr.word(op, 8)),
                              w >= 0, pr.pool)
        elif code == OP_DROPOUT:
            var n = pr.word(op, 3)
            if train:
                dropout_apply(src, dst, rows * n, first_row * n,
                              dropout_key(pr.seed(), t, pr.word(op, 5)), pr.word(op, 4),
                              _f32(pr.word(op, 6)), False)
            else:
                copy_or_add(src, dst, rows * n, False)
        elif code == OP_ADD:
            sum_into(src, Int(pr.at(pr.word(op, 4))), dst, rows * pr.word(op, 3), pr.pool)
        elif code == OP_GELU:
            gelu_forward(src, dst, pr.at(pr.word(op, 5)), rows * pr.word(op, 3),
                         pr.word(op, 4) != 0, pr.pool)
        elif code == OP_TANH:
            tanh_forward(src, dst, rows * pr.word(op, 3))
        elif code == OP_SIGMOID:
            sigmoid_forward(src, dst, rows * pr.word(op, 3))
        elif code == OP_CONV2D:
            var scratch = pr.word(op, 8)  # work | mid << 32
            # the masking pool after it, when that keeps places: run by the conv (y unwritten)
            var places = pr.places(op + 1) if unpack(pr.word(op, 5), 2) == 2 else 0
            conv2d_forward(src, dst, p, pr.at(scratch & 0xFFFFFFFF), pr.at(scratch >> 32), rows,
                           pr.word(op, 3), pr.word(op, 4), pr.word(op, 5), pr.word(op, 6),
                           pr.word(op, 7), pr.pool, Int(pr.at(pr.word(op + 1, 2))) if places
                           else 0, places)
        elif code == OP_MAXPOOL2D:
            if pr.word(op, 6) == 0 or pr.places(op) == 0:  # (else its conv ran it)
                maxpool2d_forward(src, dst, pr.places(op), pr.word(op, 6) != 0, rows,
                                  pr.word(op, 3), pr.word(op, 4), pr.word(op, 5), pr.pool)
        elif code == OP_AVGPOOL2D:
            avgpool2d_forward(src, dst, rows, pr.word(op, 3), pr.word(op, 4), pr.word(op, 5),
                              pr.pool)
        elif code == OP_EMBEDDING:  # src: the caller's x, holding int32 ids
            embedding_forward(I32P(unsafe_from_address=Int(src)), p.unsafe_offset(pr.word(op, 5)),
                              dst, rows * pr.word(op, 3), pr.word(op, 4))
        elif code == OP_POSITION:
            position_forward(src, p.unsafe_offset(pr.word(op, 5)), dst, rows,
                             pr.word(op, 3) * pr.word(op, 4))
        elif code == OP_ATTENTION:
            attention_forward(src, dst, pr.at(pr.word(op, 6)), rows, pr.word(op, 3),
                              pr.word(op, 4), pr.word(op, 5), _f32(pr.word(op, 7)), pr.pool,
                              pr.arena_at)


def _needs(pr: Program, op: Int) -> Bool:
    """Whether op's backward computes its input's gradient (the model's input's only when the
    caller gave it a place, `dx_at`)."""
    return (pr.word(op, 9) & NEED_SRC_GRAD) != 0 or (pr.word(op, 1) == 0 and pr.dx_at != 0)


def _folded_pool(pr: Program, op: Int) -> Int:
    """The window places of the 2 × 2 max pool after Conv2d `op` (stride 1, the ReLU masked by
    that pool), whose gradient and places the conv's dW and dX read (conv2d_backward's
    `places`: the pool's backward does not run), else 0."""
    var conv = pr.word(op, 5)
    if (pr.word(op, 0) != OP_CONV2D or unpack(conv, 2) != 2 or unpack(conv, 0) != 1
            or unpack(conv, 1) != 1):
        return 0
    return pr.places(op + 1)  # (flag 2: op + 1 is the masking MaxPool2d, checked)


def model_backward(pr: Program, p: F32P, grads: F32P, t: Int, first_row: Int):
    """Every op backward, last first, from the output's gradient in the gradient arena."""
    var rows = pr.rows
    var masked = False  # the op after this one masked this op's fused ReLU (`_masks_below`)
    for j in range(pr.ops()):
        var op = pr.ops() - 1 - j
        var mask_done = masked
        masked = False
        var code = pr.word(op, 0)
        var flags = pr.word(op, 9)
        var s = pr.word(op, 1)
        # The model's input has a gradient only when the caller gave it a place (`dx_at`).
        var need = _needs(pr, op)
        var acc = (flags & ACCUMULATE) != 0
        var src = pr.at(s)
        var dsrc = pr.grad(s)
        var dy = pr.grad(pr.word(op, 2))
        if code == OP_LINEAR:
            var n_in = pr.word(op, 3)
            var n_out = pr.word(op, 4)
            var r = rows * pr.word(op, 8)
            var w = pr.word(op, 5)
            var b = pr.word(op, 6)
            if pr.word(op, 7) != 0 and not mask_done:  # the fused ReLU: mask by its output
                relu_backward(pr.at(pr.word(op, 2)), dy, dy, r, n_out)
            var lg = _LinearGrads(Int(dy), Int(src), Int(p.unsafe_offset(w)),
                                  Int(grads.unsafe_offset(w)),
                                  Int(grads.unsafe_offset(b)) if b >= 0 else 0, Int(dsrc), r,
                                  n_in, n_out, acc, 0, 0, 0)
            # each product too small to share, but two of them: one a thread (not for the
            # model's input gradient, which a step computes only when asked)
            if need and s != 0 and pr.arena_at != 0 and _side_by_side(pr.pool, r * n_in * n_out):
                # reserved whether or not the workers spin now: the arena grows in a
                # session's first step only
                var dw_bytes = _round64(gemm_bytes(n_in, r, n_out, n_in))
                var bytes = dw_bytes + gemm_bytes(n_in, n_out, r, n_in) + 64
                lg.buf = _round64(arena_reserve(pr.arena_at, bytes))
                lg.dx_off = dw_bytes
                if lg.buf != 0 and pool_awake(pr.pool):  # (0: no memory)
                    if _masks_below(pr, op):
                        lg.mask = Int(src)
                        masked = True
                    _side_by_side_run(pr.pool, lg)
                    continue
            pr.gemm(dy, src, grads.unsafe_offset(w), n_out, n_in, r, True, False, False)
            if b >= 0:
                sum_rows(dy, grads.unsafe_offset(b), r, n_out, pr.pool)
            if need:
                pr.gemm(dy, p.unsafe_offset(w), dsrc, r, n_in, n_out, False, False, acc)
        elif code == OP_RELU:
            if need:
                relu_grad(pr.at(pr.word(op, 2)), dy, dsrc, rows * pr.word(op, 3), acc)
        elif code == OP_LAYERNORM:
            var w = pr.word(op, 5)
            var b = pr.word(op, 6)
            var r = rows * pr.word(op, 4)
            var d = pr.word(op, 3)
            # dx is needed to reach the parameters below; with no parameters and no input
            # gradient wanted, there is nothing to do.
            if need or w >= 0:
                var scratch = List[Float32](length=r * d if not need else 0, fill=0)
                var out = dsrc if need else scratch.unsafe_ptr()
                layernorm_backward(dy, src, p.unsafe_offset(max(w, 0)), pr.at(pr.word(op, 7)),
                                   F32P(unsafe_from_address=Int(out)),
                                   grads.unsafe_offset(max(w, 0)), grads.unsafe_offset(max(b, 0)),
                                   r, d, w >= 0, acc and need, pr.pool)
        elif code == OP_DROPOUT:
            if need:
                var n = pr.word(op, 3)
                dropout_apply(dy, dsrc, rows * n, first_row * n,
                              dropout_key(pr.seed(), t, pr.word(op, 5)), pr.word(op, 4),
                              _f32(pr.word(op, 6)), acc)
        elif code == OP_ADD:
            var n = rows * pr.word(op, 3)
            var o = pr.word(op, 4)
            if o != pr.word(op, 2):  # (in place, f(x)'s gradient is dy itself)
                copy_or_add(dy, pr.grad(o), n, (flags & ACCUMULATE_OTHER) != 0, pr.pool)
            if need:
                copy_or_add(dy, dsrc, n, acc, pr.pool)
        elif code == OP_GELU:  # from the input x and what the forward kept
            if need:
                gelu_backward(src, pr.at(pr.word(op, 5)), dy, dsrc, rows * pr.word(op, 3),
                              pr.word(op, 4) != 0, acc, pr.pool)
        elif code == OP_TANH:  # from the output y
            if need:
                tanh_backward(pr.at(pr.word(op, 2)), dy, dsrc, rows * pr.word(op, 3), acc)
        elif code == OP_SIGMOID:
            if need:
                sigmoid_backward(pr.at(pr.word(op, 2)), dy, dsrc, rows * pr.word(op, 3), acc)
        elif code == OP_CONV2D:
            var work = pr.word(op, 8) & 0xFFFFFFFF
            var mid = pr.word(op, 8) >> 32
            # dW and dX from the masking pool's gradient and places (its backward skipped)
            var places = _folded_pool(pr, op)
            var pool_dy = Int(pr.grad(pr.word(op + 1, 2))) if places != 0 else 0
            conv2d_backward(src, pr.at(pr.word(op, 2)), dy, pr.at(work), pr.grad(work),
                            pr.at(mid), pr.grad(mid), p, grads, dsrc, rows, pr.word(op, 3),
                            pr.word(op, 4), pr.word(op, 5), pr.word(op, 6), pr.word(op, 7), need,
                            acc, pr.pool, places, pool_dy)
        elif code == OP_MAXPOOL2D or code == OP_AVGPOOL2D:
            var conv = op - 1  # (a masked pool's input is the conv before it)
            if need and (pr.word(op, 6) == 0 or _folded_pool(pr, conv) == 0):
                pool2d_backward(src, dy, dsrc, pr.places(op), rows, pr.word(op, 3),
                                pr.word(op, 4), pr.word(op, 5), code == OP_MAXPOOL2D, acc,
                                pr.word(op, 6) != 0, pr.pool)
        elif code == OP_EMBEDDING:  # ids have no gradient
            embedding_backward(I32P(unsafe_from_address=Int(src)), dy,
                               grads.unsafe_offset(pr.word(op, 5)), rows * pr.word(op, 3),
                               pr.word(op, 4), pr.word(op, 6))
        elif code == OP_POSITION:
            var n = pr.word(op, 3) * pr.word(op, 4)
            position_backward(dy, grads.unsafe_offset(pr.word(op, 5)), rows, n,
                              pr.word(op, 6) * pr.word(op, 4))
            if need:
                copy_or_add(dy, dsrc, rows * n, acc, pr.pool)
        elif code == OP_ATTENTION:
            if need:
                attention_backward(src, pr.at(pr.word(op, 6)), dy, dsrc, rows, pr.word(op, 3),
                                   pr.word(op, 4), pr.word(op, 5), _f32(pr.word(op, 7)), acc,
                                   pr.pool, pr.arena_at)


def fused_loss(pr: Program) -> Bool:
    """Whether the cross-entropy is computed in the epilogue of the Linear that writes the
    output: it needs a place for the rows' losses and GEMM tiles that hold whole rows. The
    same operations in the same order as the pass `model_loss` makes, so the same bits
    (ARITHMETIC.md "Any layer sizes")."""
    if pr.row_losses_at == 0 or pr.loss() != LOSS_CROSS_ENTROPY:
        return False
    # the last op: a Residual's sum in place writes the same buffer after its Linear
    var op = pr.ops() - 1
    if pr.word(op, 0) == OP_LINEAR and pr.word(op, 2) == pr.output():
        return gemm_tiles_hold_rows(pr.classes())
    return False


def model_pass(pr: Program, p: F32P, y: I32P, target: F32P, grads: F32P, mode: Int, t: Int,
               first_row: Int, divide_by: Int) -> Float32:
    """One batch: the forward (dropout on in modes grads and train), the loss (not in mode
    forward: 0 then) and, in modes grads and train, the backward into `grads`."""
    var train = mode == MODE_GRADS or mode == MODE_TRAIN
    var loss = Float32(0)
    if mode != MODE_FORWARD and fused_loss(pr):
        var positions = pr.rows * (pr.outputs() // pr.classes())
        var rl = RowLosses(Int(pr.at(pr.output())), Int(y), Int(pr.grad(pr.output())),
                           pr.row_losses_at, pr.classes(),
                           Float32(divide_by if divide_by > 0 else positions))
        # The logits product's epilogue (on any thread) reads `rl` by address: a copy in
        # memory of its own (training/pool.mojo P_CTX says why not a local's address).
        var at = heap_copy(rl)
        model_forward(pr, p, t, train, first_row, at)
        heap_free(at)
        loss = mean_of_rows(rl, positions)
    else:
        model_forward(pr, p, t, train, first_row)
        if mode != MODE_FORWARD:
            loss = model_loss(pr, y, target, divide_by)
    if train:
        model_backward(pr, p, grads, t, first_row)
    return loss


def model_loss(pr: Program, y: I32P, target: F32P, divide_by: Int) -> Float32:
    """The loss of the output and its gradient into the gradient arena: mean cross-entropy
    over every position (rows × positions rows of `classes`), or MSE over every element."""
    var z = pr.at(pr.output())
    var dz = pr.grad(pr.output())
    var n = pr.rows * pr.outputs()
    if pr.loss() == LOSS_MSE:
        return mse_loss(z, target, dz, n, divide_by if divide_by > 0 else n)
    var classes = pr.classes()
    var rows = n // classes
    # The rows in parts on the pool (a loss the last Linear's epilogue cannot compute: more
    # classes than a register tile holds): the transformer's 4096 rows of 65 at batch 64 took
    # ~0.9 ms a step on the calling thread alone while the worker waited.
    var parts = parts_for(pr.pool, rows, rows * classes * LOSS_WORK)
    if parts < 2 or pr.row_losses_at == 0:
        return mean_cross_entropy(z, y, rows, classes, dz, True, divide_by)
    var rl = RowLosses(Int(z), Int(y), Int(dz), pr.row_losses_at, classes,
                       Float32(divide_by if divide_by > 0 else rows))
    split_parts(pr.pool, _loss_part, _LossRows(rl, rows), parts)
    return mean_of_rows(rl, rows)


comptime LOSS_WORK = 16  # a logit's weight against a multiply-add: its exp, a max, a divide


@fieldwise_init
struct _LossRows(ImplicitlyCopyable):
    var rl: RowLosses
    var rows: Int


def _loss_part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_LossRows, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range(c.rows, part, parts)
    cross_entropy_rows(c.rl, r[0], r[1])


def model_steps(words: I64P, x: F32P, y: I32P, target: F32P, p: F32P, m: F32P, v: F32P,
                p_out: F32P, m_out: F32P, v_out: F32P, losses: F32P, outputs: F32P,
                grads: F32P, scratch: F32P, rows: Int, mode: Int, k: Int, t0: Int, lr: Float64,
                beta1: Float64, beta2: Float64, eps: Float64, weight_decay: Float64, total: Int,
                first_row: Int = 0, divide_by: Int = 0, pool: Int = 0, dx_at: Int = 0) -> Bool:
    """`k` steps over k batches of `rows` examples stacked in x and the targets (y: int32 class
    ids for cross-entropy, target: float32 for MSE) in mode train (t = t0, t0 + 1, ...): the
    first step reads p, m, v and writes the new state to p_out, m_out, v_out (AdamW's `_into`
    form: no copy), the next ones update those in place; p, m, v are never written. Modes
    forward, grads and eval (the loss of inference's forward) run one batch on p.
    `losses[i]` is batch i's loss; `outputs` and `grads` hold the last batch's (and `dx_at`, when
    not 0, its input gradient). `scratch` holds `scratch_floats(words, rows)` floats (the
    activations, their gradients and the rows' losses: every value is written before it is
    read, so it needs no clearing). `pool`: the worker pool the GEMMs and AdamW share, or 0.
    A microbatch of a larger batch (ARITHMETIC.md "Data parallel"): its first row is row
    `first_row` of the whole batch (Dropout's global element index), and `divide_by` > 0 is
    the whole batch's loss count (its rows × positions, or × outputs for MSE), the divisor in
    place of this batch's own. Returns whether every AdamW update found its gradients and the
    new state finite (False when none ran: nothing was checked)."""
    var checked = False
    var arena_floats = rows * Int(words[unsafe_offset=3])
    var inputs = Int(words[unsafe_offset=4])
    var outs = Int(words[unsafe_offset=6])
    var classes = Int(words[unsafe_offset=8])
    var labels = outs // classes if classes > 0 else 0  # class targets per example
    var arena = List[Int64](length=ARENA_WORDS, fill=0)
    var params = p
    for i in range(k):
        var pr = Program(Int(words), Int(x.unsafe_offset(i * rows * inputs)), Int(scratch),
                         Int(scratch.unsafe_offset(arena_floats)), rows, Int(outputs), dx_at,
                         pool, Int(arena.unsafe_ptr()),
                         Int(scratch.unsafe_offset(2 * arena_floats)))
        var t = t0 + i
        var loss = model_pass(pr, params, y.unsafe_offset(i * rows * labels),
                              target.unsafe_offset(i * rows * outs), grads, mode, t, first_row,
                              divide_by)
        if mode != MODE_FORWARD:
            losses[unsafe_offset=i] = loss
        if mode != MODE_TRAIN:
            break
        var finite: Bool
        if i == 0:
            finite = adamw_flat_into(p, grads, m, v, p_out, m_out, v_out, total, t, lr, beta1,
                                     beta2, eps, weight_decay, pool)
            params = p_out
        else:
            finite = adamw_flat_into(p_out, grads, m_out, v_out, p_out, m_out, v_out, total, t,
                                     lr, beta1, beta2, eps, weight_decay, pool)
        checked = finite and (i == 0 or checked)
    arena_release(Int(arena.unsafe_ptr()))
    _ = len(arena)
    return checked


def scratch_floats(words: I64P, rows: Int) -> Int:
    """The floats `model_steps` needs in `scratch` for batches of `rows` examples: two arenas
    and, for cross-entropy, the rows' losses (one per position)."""
    var classes = Int(words[unsafe_offset=8])
    var positions = Int(words[unsafe_offset=6]) // classes if classes > 0 else 0
    return rows * (2 * Int(words[unsafe_offset=3]) + positions)


# ---------------------------------------------------------------- the MLP as a program


def mlp_program(sizes: List[Int]) -> List[Int64]:
    """The program mojolearn/_model/program.py builds for `Sequential(Linear(n0, n1), ReLU(),
    ..., Linear(n_{L-1}, n_L))` with cross-entropy (seed 0: it has no Dropout): the input at
    offset 0, then each Linear's output; every Linear but the last carries the ReLU in its
    epilogue; the flat parameters W1, b1, ..., WL, bL. `MLPTrainer`'s steps run it
    (training/mlp_resident.mojo), so they are `Trainer`'s steps on the same model
    (tests/test_model_trainer.py checks the two give the same bits step for step)."""
    var layers = len(sizes) - 1
    var arena = sizes[0]
    var src = 0
    var off = 0
    var ops = List[Int64](capacity=layers * RECORD)
    for l in range(layers):
        var n_in = sizes[l]
        var n_out = sizes[l + 1]
        var record: List[Int] = [OP_LINEAR, src, arena, n_in, n_out, off, off + n_out * n_in,
                                 Int(l < layers - 1), 1, NEED_SRC_GRAD if src != 0 else 0]
        for w in record:
            ops.append(Int64(w))
        src = arena
        arena += n_out
        off += n_out * n_in + n_out
    var header: List[Int] = [VERSION, layers, 0, arena, sizes[0], src, sizes[layers],
                             LOSS_CROSS_ENTROPY, sizes[layers]]
    var words = List[Int64](capacity=HEADER + len(ops))
    for w in header:
        words.append(Int64(w))
    for w in ops:
        words.append(w)
    return words^


def mlp_layers_steps(sizes: List[Int], x: F32P, y: I32P, p: F32P, m: F32P, v: F32P,
                     losses: F32P, logits: F32P, grads: F32P, dx: F32P, rows: Int, mode: Int,
                     k: Int, t0: Int, lr: Float64, beta1: Float64, beta2: Float64, eps: Float64,
                     weight_decay: Float64, want_dx: Bool):
    """`k` steps of the MLP of widths `sizes` (its `mlp_program`) over k batches of `rows` rows
    stacked in x / y, in place on the flat p, m, v (mode train; t = t0, t0+1, ...); modes
    forward and grads run one batch and leave p, m, v untouched. `losses[i]` is batch i's
    loss; `logits`, `grads` and `dx` (when `want_dx`) hold the last batch's. Targets must
    already be checked to lie in [0, n_L)."""
    var words = mlp_program(sizes)
    var w = I64P(unsafe_from_address=Int(words.unsafe_ptr()))
    var scratch = List[Float32](length=scratch_floats(w, rows), fill=0)
    # x stands in for MSE's float targets: a cross-entropy program never reads them.
    _ = model_steps(w, x, y, x, p, m, v, p, m, v, losses, logits, grads,
                F32P(unsafe_from_address=Int(scratch.unsafe_ptr())), rows, mode, k, t0, lr,
                beta1, beta2, eps, weight_decay, total_params(sizes), 0, 0, 0,
                Int(dx) if want_dx else 0)
    _ = len(words) + len(scratch)
