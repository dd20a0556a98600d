"""A model's program: what the binding's model runner executes, built once from a ModelSpec.

The program is a packed int64 array: a header of HEADER words, then one record of RECORD
words per op, in forward order; the runner walks them forward, applies the loss, then walks
them backward in reverse (mojo/training/model.mojo reads the same layout, and the binding
checks the header's version, sizes and every offset before running anything).

Activations live in one arena per batch: every tensor has a per-example offset and size in
floats, and a batch of `rows` examples puts tensor t at [rows·offset, rows·(offset + size)).
The gradient arena has the same layout. Offsets of parameters are the flat buffer's.

Program-level rewrites, never a second engine: a Linear followed by a ReLU is one op (the
GEMM's bias-and-ReLU epilogue, the MLP step's bits), and so is a Conv2d followed by a ReLU;
Flatten is no op at all (row-major reshape: its output is its input's buffer). A tensor read by two ops (a Residual's input) gets
its gradient written by the first op the backward visits and added to by the next (flag
ACCUMULATE), in that fixed order.
"""

from __future__ import annotations

import array
import math
import struct

from .layers import (
    GELU,
    AvgPool2d,
    CausalSelfAttention,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    MaxPool2d,
    PositionEmbedding,
    ReLU,
    Residual,
    Sequential,
    Sigmoid,
    Tanh,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .spec import ModelSpec

VERSION = 1
HEADER = 9  # version, ops, seed (uint64 bits), arena, inputs, output offset, outputs, loss, classes
RECORD = 10  # op, src, dst, then seven op-specific words (the last one the flags)

# Opcodes (mojo/training/model.mojo has the same table).
OP_LINEAR = 1  # src dst n_in n_out w b(-1: none) relu lead flags
OP_RELU = 2  # src dst n . . . . . . flags
OP_LAYERNORM = 3  # src dst d lead w(-1: none) b stats eps_bits flags
OP_DROPOUT = 4  # src dst n threshold layer scale_bits . . flags
OP_ADD = 5  # src(x) dst(other: in place) n other(f(x)) . . . . flags
OP_GELU = 6  # src dst n approximate(0 none, 1 tanh) kept(1 + erf, or the tanh form's t) . . . flags
OP_TANH = 7  # src dst n . . . . . flags
OP_SIGMOID = 8  # src dst n . . . . . flags
# Image ops pack small sizes three to a word (`pack`: 21 bits each, every size < 2**21):
OP_CONV2D = 9  # src dst (C,H,W) (OC,KH,KW) (SH,SW,relu) (PH,PW) w|(b+1)<<32 work|mid<<32 flags
OP_MAXPOOL2D = 10  # src dst (C,H,W) (KH,KW) (SH,SW) masked(1: relu 2 before it) places . flags
OP_AVGPOOL2D = 11  # src dst (C,H,W) (KH,KW) (SH,SW) . . . flags
# 9..19: convolution and pooling
OP_EMBEDDING = 20  # src(the input: int32 ids) dst T D w vocab . . flags
OP_POSITION = 21  # src dst T D w max_len . . flags
OP_ATTENTION = 22  # src(qkv: T × 3D) dst(T × D) T D heads att(heads × T × T: attᵀ) scale . flags
LOSS_CROSS_ENTROPY, LOSS_MSE = 0, 1

# flags
ACCUMULATE = 1  # the src's gradient is already written: add to it
NEED_SRC_GRAD = 2  # the src's gradient is wanted (not for the model's input, unless asked)
ACCUMULATE_OTHER = 4  # OP_ADD: the same for its second operand


def pack(*sizes: int) -> int:
    """Up to three sizes in [0, 2**21) in one word, the first in the low bits."""
    return sum(v << (21 * i) for i, v in enumerate(sizes))


def f32_bits(x: float) -> int:
    return int(struct.unpack("<i", struct.pack("<f", x))[0])


class Program:
    """The packed program of a spec, and the arena facts the trainer needs."""

    __slots__ = (
        "words",
        "ops",
        "arena",
        "inputs",
        "output",
        "outputs",
        "positions",
        "_offsets",
        "_steps",
    )

    def __init__(self, spec: ModelSpec, seed: int) -> None:
        self.arena = 0
        self.ops: list[list[int]] = []
        self._offsets = dict(zip(spec.names, spec.offsets))
        # The spec's layers in its pre-order walk (containers included), with their index
        # there (a Dropout's `layer` key) and shapes; the program visits them in that order.
        self._steps = iter(enumerate(spec.steps))
        next(self._steps)  # the model's own Sequential
        self.inputs = math.prod(spec.input_shape)
        x = self._alloc(self.inputs)
        out = self._stack(spec.model, x)
        self.output, self.outputs = out, math.prod(spec.output_shape)
        self._flags(x)
        loss = LOSS_CROSS_ENTROPY if spec.loss == "cross_entropy" else LOSS_MSE
        header = [VERSION, len(self.ops), seed - (1 << 64) if seed >= 1 << 63 else seed]
        classes = spec.output_shape[-1] if loss == LOSS_CROSS_ENTROPY else 0
        self.positions = self.outputs // classes if classes else 0  # cross-entropy's rows
        header += [self.arena, self.inputs, self.output, self.outputs, loss, classes]
        self.words = array.array("q", header + [w for op in self.ops for w in op])

    @property
    def address(self) -> int:
        return int(self.words.buffer_info()[0])

    def _alloc(self, floats: int) -> int:
        at, self.arena = self.arena, self.arena + floats
        return at

    def _op(self, *words: int) -> None:
        self.ops.append(list(words) + [0] * (RECORD - len(words)))

    def _stack(self, stack: Sequential | Residual, src: int) -> int:
        """Emit the ops of a container's layers from the tensor at `src`; the output's offset."""
        layers = stack.layers
        i = 0
        masked = False  # the next op is a MaxPool2d that masks the fused ReLU's gradient
        while i < len(layers):
            at, (path, layer, shape, out_shape) = next(self._steps)
            n, n_out = math.prod(shape), math.prod(out_shape)
            if isinstance(layer, (Sequential, Residual)):
                inner = self._stack(layer, src)
                if isinstance(layer, Residual):
                    dst = inner if self._in_place(src, inner) else self._alloc(n)
                    self._op(OP_ADD, src, dst, n, inner)
                    inner = dst
                src = inner
            elif isinstance(layer, Flatten):
                pass  # a row-major reshape: the same buffer
            elif isinstance(layer, Linear):
                relu = i + 1 < len(layers) and type(layers[i + 1]) is ReLU
                dst = self._alloc(n_out)
                w = self._offsets[f"{path}.weight"]
                b = self._offsets[f"{path}.bias"] if layer.bias else -1
                lead = n // layer.in_features
                self._op(
                    OP_LINEAR,
                    src,
                    dst,
                    layer.in_features,
                    layer.out_features,
                    w,
                    b,
                    int(relu),
                    lead,
                )
                src = dst
                if relu:  # the ReLU is the GEMM's epilogue
                    next(self._steps)
                    i += 1
            elif isinstance(layer, LayerNorm):
                d = layer.normalized_shape
                dst, stats = self._alloc(n), self._alloc(2 * (n // d))
                w = self._offsets[f"{path}.weight"] if layer.elementwise_affine else -1
                b = self._offsets[f"{path}.bias"] if layer.elementwise_affine else -1
                self._op(OP_LAYERNORM, src, dst, d, n // d, w, b, stats, f32_bits(layer.eps))
                src = dst
            elif isinstance(layer, (Conv2d, MaxPool2d, AvgPool2d)):
                relu = isinstance(layer, Conv2d) and i + 1 < len(layers)
                relu = relu and type(layers[i + 1]) is ReLU
                # a MaxPool2d right after the ReLU is the only reader of its output: its
                # backward masks dY as it writes it (ReLU flag 2), one pass over the planes
                mask_in_pool = relu and i + 2 < len(layers) and type(layers[i + 2]) is MaxPool2d
                fused = (2 if mask_in_pool else 1) if relu else 0
                src = self._image(layer, path, src, shape, out_shape, fused, masked)
                masked = mask_in_pool
                if relu:  # fused, as a Linear's
                    next(self._steps)
                    i += 1
            elif isinstance(layer, (Embedding, PositionEmbedding, CausalSelfAttention)):
                src = self._sequence_op(path, layer, src, shape)
            elif isinstance(layer, Dropout):
                if layer.p > 0:
                    dst = self._alloc(n)
                    threshold = math.floor(layer.p * (1 << 24))
                    scale = f32_bits(1.0 / (1.0 - layer.p))
                    self._op(OP_DROPOUT, src, dst, n, threshold, at, scale)
                    src = dst
            else:
                code = {ReLU: OP_RELU, GELU: OP_GELU, Tanh: OP_TANH, Sigmoid: OP_SIGMOID}[
                    type(layer)
                ]
                dst = self._alloc(n)
                if isinstance(layer, GELU):  # its forward keeps a value its backward reuses
                    tanh_form = int(layer.approximate == "tanh")
                    self._op(code, src, dst, n, tanh_form, self._alloc(n))
                else:
                    self._op(code, src, dst, n)
                src = dst
            i += 1
        return src

    def _in_place(self, src: int, inner: int) -> bool:
        """Whether a Residual's sum may overwrite f(x) (OP_ADD with dst = other): f(x) is the
        output of the last op, which only the sum reads, of a Linear whose backward never
        reads it (no fused ReLU). Then f(x)'s gradient is the sum's, the same floats: the
        backward copies nothing there (the transformer's blocks end so, twice a layer)."""
        last = self.ops[-1] if self.ops else None
        return (
            inner != src
            and last is not None
            and last[0] == OP_LINEAR
            and last[2] == inner
            and last[7] == 0
        )

    def _image(
        self,
        layer: Conv2d | MaxPool2d | AvgPool2d,
        path: str,
        src: int,
        shape: tuple[int, ...],
        out_shape: tuple[int, ...],
        relu: int,
        masked: bool,
    ) -> int:
        """Emit the op of an image layer (a Conv2d with the ReLU after it fused when `relu`:
        1, or 2 when the MaxPool2d after it masks, which is then `masked`); its output's
        offset."""
        dst = self._alloc(math.prod(out_shape))
        if not isinstance(layer, Conv2d):
            code = OP_MAXPOOL2D if isinstance(layer, MaxPool2d) else OP_AVGPOOL2D
            shapes = pack(*shape), pack(*layer.kernel_size), pack(*layer.stride)
            # a 2 x 2 max pool at stride 2 keeps each window's place (a byte an output) for
            # its backward, which then never reads its input again
            places = 0
            if code == OP_MAXPOOL2D and layer.kernel_size == (2, 2) and layer.stride == (2, 2):
                places = self._alloc(-(-math.prod(out_shape) // 4))
            self._op(code, src, dst, *shapes, int(masked), places)
            return dst
        # private tensors (training/layers/conv.mojo): `work`, the forward's cols (kept for
        # dW) and the backward's g; `mid`, the product in channel-major order
        c, hw, pos = shape[0], math.prod(shape[1:]), math.prod(out_shape[1:])
        kernel = math.prod(layer.kernel_size)
        # (g only where the input's gradient is wanted: not for the model's input, at 0)
        g = layer.out_channels * kernel * hw if src != 0 else 0
        work = self._alloc(max(c * kernel * pos, g))
        mid = self._alloc(max(layer.out_channels * pos, c * hw))
        w = self._offsets[f"{path}.weight"]
        b = self._offsets[f"{path}.bias"] if layer.bias else -1
        self._op(
            OP_CONV2D,
            src,
            dst,
            pack(*shape),
            pack(layer.out_channels, *layer.kernel_size),
            pack(*layer.stride, relu),
            pack(*layer.padding),
            w | (b + 1) << 32,
            work | mid << 32,
        )
        return dst

    def _sequence_op(
        self,
        path: str,
        layer: Embedding | PositionEmbedding | CausalSelfAttention,
        src: int,
        shape: tuple[int, ...],
    ) -> int:
        """The ops of a text layer from the tensor at `src`; the output's offset. Attention is
        its two Linears (the GEMM ops, c_attn's output q, k, v side by side per position)
        around OP_ATTENTION, which keeps each head's probabilities for its backward."""
        if isinstance(layer, Embedding):
            t, d = shape[0], layer.embedding_dim
            dst = self._alloc(t * d)
            w = self._offsets[f"{path}.weight"]
            self._op(OP_EMBEDDING, src, dst, t, d, w, layer.num_embeddings)
            return dst
        t, d = shape
        if isinstance(layer, PositionEmbedding):
            dst = self._alloc(t * d)
            w = self._offsets[f"{path}.weight"]
            self._op(OP_POSITION, src, dst, t, d, w, layer.max_len)
            return dst
        src = self._linear(path + ".c_attn", layer.bias, src, d, 3 * d, t)
        dst, att = self._alloc(t * d), self._alloc(layer.num_heads * t * t)
        # 1/sqrt(head_dim) in binary64, rounded once to float32
        scale = f32_bits(1.0 / math.sqrt(d // layer.num_heads))
        self._op(OP_ATTENTION, src, dst, t, d, layer.num_heads, att, scale)
        return self._linear(path + ".c_proj", layer.bias, dst, d, d, t)

    def _linear(self, name: str, bias: bool, src: int, n_in: int, n_out: int, lead: int) -> int:
        dst = self._alloc(n_out * lead)
        w = self._offsets[f"{name}.weight"]
        b = self._offsets[f"{name}.bias"] if bias else -1
        self._op(OP_LINEAR, src, dst, n_in, n_out, w, b, 0, lead)
        return dst

    def _flags(self, model_input: int) -> None:
        """Set the gradient flags in the backward's order: ops in reverse, and within an
        OP_ADD its second operand (f(x)) before its first (x), as the runner does."""
        written: set[int] = set()
        for op in reversed(self.ops):
            flags = 0
            if op[0] == OP_ADD and op[4] != op[2]:  # (in place: f(x)'s gradient is dy)
                flags |= ACCUMULATE_OTHER if op[4] in written else 0
                written.add(op[4])
            if op[1] != model_input:
                flags |= NEED_SRC_GRAD | (ACCUMULATE if op[1] in written else 0)
                written.add(op[1])
            op[9] = flags
