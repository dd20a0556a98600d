"""The per-operation MLP step (MOJOLEARN_MLP_FUSED=0): the calls a fused step
(`mlp_resident_step`, `mlp_train_step`) makes in one.

Same kernels, same order as training/mlp.mojo's header: GEMM NT + bias/ReLU, GEMM NT + bias,
cross-entropy, GEMM TN + row sums, GEMM NN + ReLU backward, GEMM TN + row sums, GEMM NN (dX),
AdamW. Each is one binding call on addresses into the trainer's flat buffers; it exists as the
A/B partner of the fused step (`tools/mlp_step_check.py`) and as the readable spelling of it.
"""
from . import _mlp_state as S
from ._buffer import empty
from .loss import _IGNORE_NOTHING

_IN, _HID, _OUT = S.ARCHITECTURE
_MEAN = 2
_W1, _B1, _W2, _B2 = (4 * off for off in S.OFFSETS)  # byte offsets in the flat buffers


def _gemm(b, a, bb, c, m, n, k, ta, tb):
    b.neural_gemm([a, bb, c], [m, n, k, ta, tb, 0, 0, m])


def steps(b, x, y, rows, mode, k, st, new, losses, logits, grads, dx, want_dx, hyper):
    """Run `k` steps (mode 2) or one forward (0) / gradient (1) pass, writing the outputs like
    `mlp_train_step`: in mode 2 `new` receives the updated parameters and moments."""
    if mode == 2:
        new.params._mv[:] = st.params._mv
        new.m._mv[:] = st.m._mv
        new.v._mv[:] = st.v._mv
        p, m, v = new.params._addr, new.m._addr, new.v._addr
    else:
        p, m, v = st.params._addr, st.m._addr, st.v._addr
    h = empty((rows, _HID))
    dl = empty((rows, _OUT))
    row_losses = empty((rows,))
    incoming = empty((rows, _HID))
    dh = empty((rows, _HID))
    g = grads._addr
    for i in range(k):
        xa = x._addr + 4 * i * rows * _IN
        ya = y._addr + 4 * i * rows
        _gemm(b, xa, p + _W1, h._addr, rows, _HID, _IN, 0, 1)
        b.mlp_bias_activation([h._addr, p + _B1, h._addr], [rows, _HID, 1])
        _gemm(b, h._addr, p + _W2, logits._addr, rows, _OUT, _HID, 0, 1)
        b.mlp_bias_activation([logits._addr, p + _B2, logits._addr], [rows, _OUT, 0])
        if mode == 0:
            return
        losses._mv[i] = b.cross_entropy([logits._addr, ya, row_losses._addr, dl._addr],
                                        [rows, _OUT, _IGNORE_NOTHING, 0.0, _MEAN, 1])
        _gemm(b, dl._addr, h._addr, g + _W2, _OUT, _HID, rows, 1, 0)
        b.mlp_sum_rows([dl._addr, g + _B2], [rows, _OUT])
        _gemm(b, dl._addr, p + _W2, incoming._addr, rows, _HID, _OUT, 0, 0)
        b.mlp_relu_backward([h._addr, incoming._addr, dh._addr], [rows, _HID])
        _gemm(b, dh._addr, xa, g + _W1, _HID, _IN, rows, 1, 0)
        b.mlp_sum_rows([dh._addr, g + _B1], [rows, _HID])
        if want_dx:
            _gemm(b, dh._addr, p + _W1, dx._addr, rows, _IN, _HID, 0, 0)
        if mode == 2:
            b.mlp_adamw([p, g, m, v], [S.TOTAL, st.step + 1 + i, *hyper])
