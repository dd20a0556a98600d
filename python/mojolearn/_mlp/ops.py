"""The per-operation MLP step: the calls a fused step (`mlp_resident_step`, `mlp_train_step`)
makes in one, for any layer sizes (`_layers.LayerSizes`).

Same kernels, same order as training/mlp.mojo's header and docs/ARITHMETIC.md "The MLP step":
forward layer by layer (GEMM NT + bias, ReLU on every layer but the last), mean cross-entropy,
then backward from the last layer (GEMM TN for the weight gradient, row sums for the bias
gradient, GEMM NN + ReLU backward for the layer below; the input gradient last), AdamW over the
flat buffers. Each is one binding call on addresses into the trainer's flat buffers. It is the
A/B partner of SmallMLPTrainer's fused step (`tools/mlp_step_check.py`), the readable
spelling of it, and MLPTrainer's step.
"""

from .._buffers.alloc import empty
from .._runtime.abi import IGNORE_NOTHING

_MEAN = 2


def _gemm(b, a, bb, c, m, n, k, ta, tb):
    b.neural_gemm([a, bb, c], [m, n, k, ta, tb, 0, 0, m])


def mean_loss(b, z, y, rows, classes, row_losses, dlogits=0):
    """The mean cross-entropy of `rows` rows of logits `z` against int32 targets `y` (addresses),
    the kernel a step's loss is; with a `dlogits` address, its gradient too."""
    return b.cross_entropy(
        [z, y, row_losses, dlogits or row_losses],
        [rows, classes, IGNORE_NOTHING, 0.0, _MEAN, 1 if dlogits else 0],
    )


def steps(b, spec, x, y, rows, mode, k, st, new, losses, logits, grads, dx, want_dx, hyper, rates):
    """Run `k` steps (mode 2) or one forward (0) / gradient (1) pass of the network `spec`,
    writing the outputs like `mlp_train_step`: in mode 2 `new` receives the updated
    parameters and moments (`st` is never written), step i at learning rate `rates[i]` (the
    other hyperparameters from `hyper`, in `mlp_adamw`'s order)."""
    if mode == 2:
        new.params._mv[:] = st.params._mv
        new.m._mv[:] = st.m._mv
        new.v._mv[:] = st.v._mv
        p, m, v = new.params._addr, new.m._addr, new.v._addr
    else:
        p, m, v = st.params._addr, st.m._addr, st.v._addr
    sizes, layers = spec.sizes, spec.layers
    acts = [empty((rows, w)) for w in sizes[1:-1]]  # each hidden layer's ReLU output
    masked = [empty((rows, w)) for w in sizes[1:-1]]  # its gradient, masked by the ReLU
    incoming = empty((rows, max(sizes[1:-1], default=1)))
    dl = empty((rows, spec.classes))
    row_losses = empty((rows,))
    g = grads._addr
    for i in range(k):
        xa = x._addr + 4 * i * rows * spec.inputs
        ya = y._addr + 4 * i * rows
        src = xa
        for l in range(layers):
            last = l == layers - 1
            out = logits._addr if last else acts[l]._addr
            _gemm(b, src, p + 4 * spec.weight(l), out, rows, sizes[l + 1], sizes[l], 0, 1)
            b.mlp_bias_activation(
                [out, p + 4 * spec.bias(l), out], [rows, sizes[l + 1], 0 if last else 1]
            )
            src = out
        if mode == 0:
            return
        losses._mv[i] = mean_loss(
            b, logits._addr, ya, rows, spec.classes, row_losses._addr, dl._addr
        )
        upstream = dl._addr
        for l in range(layers - 1, -1, -1):
            below = acts[l - 1]._addr if l else xa
            n_out, n_in = sizes[l + 1], sizes[l]
            _gemm(b, upstream, below, g + 4 * spec.weight(l), n_out, n_in, rows, 1, 0)
            b.mlp_sum_rows([upstream, g + 4 * spec.bias(l)], [rows, n_out])
            if l:
                _gemm(b, upstream, p + 4 * spec.weight(l), incoming._addr, rows, n_in, n_out, 0, 0)
                b.mlp_relu_backward([below, incoming._addr, masked[l - 1]._addr], [rows, n_in])
                upstream = masked[l - 1]._addr
            elif want_dx:
                _gemm(b, upstream, p + 4 * spec.weight(0), dx._addr, rows, n_in, n_out, 0, 0)
        if mode == 2:
            b.mlp_adamw([p, g, m, v], [spec.total, st.step + 1 + i, rates[i], *hyper[1:]])
