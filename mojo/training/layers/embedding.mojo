"""Token and position embeddings (docs/ARITHMETIC.md "Models: Embedding, PositionEmbedding";
mirror tests/reference/attention.py `embedding_*`, `position_*`).

Token ids reach the runner in the input tensor's place as int32 (the caller's x buffer holds
them, read through an int32 pointer; never as float values), each already checked to lie in
[0, vocab) by the binding. The forward copies rows of the table; the backward writes the whole
table's gradient: +0.0, then for every (example, position) in ascending order its gradient row
added to the row of its id, one binary32 addition per element (no atomics: a fixed order).
PositionEmbedding adds row t of its table to position t of every example; its gradient is the
sum over the batch, examples ascending from +0.0.
"""
from training.config import F32P, I32P
from training.copy import copy_floats
from training.layers.elementwise import add_into


def embedding_forward(ids: I32P, w: F32P, y: F32P, n: Int, d: Int):
    """y[i] = w[ids[i]] for the n = rows × positions ids."""
    for i in range(n):
        copy_floats(w.unsafe_offset(Int(ids[unsafe_offset=i]) * d), y.unsafe_offset(i * d), d)


def embedding_backward(ids: I32P, g: F32P, dw: F32P, n: Int, d: Int, vocab: Int):
    """dw (vocab × d) = Σ over i ascending of g[i] into row ids[i], from +0.0."""
    for i in range(vocab * d):
        dw[unsafe_offset=i] = 0.0
    for i in range(n):
        var row = dw.unsafe_offset(Int(ids[unsafe_offset=i]) * d)
        add_into(row, g.unsafe_offset(i * d), row, d)


def position_forward(x: F32P, w: F32P, y: F32P, rows: Int, n: Int):
    """y[b, e] = x[b, e] + w[e] for each of the rows examples of n = positions × d values."""
    for b in range(rows):
        add_into(x.unsafe_offset(b * n), w, y.unsafe_offset(b * n), n)


def position_backward(g: F32P, dw: F32P, rows: Int, n: Int, table: Int):
    """dw[e] = Σ over examples b ascending of g[b, e], from +0.0; the table's rows past the
    batch's positions (up to `table` floats) get +0.0."""
    for e in range(table):
        dw[unsafe_offset=e] = 0.0
    for b in range(rows):
        add_into(dw, g.unsafe_offset(b * n), dw, n)
