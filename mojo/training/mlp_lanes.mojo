"""The fused MLP step for small compile-time widths, with SIMD lanes across independent outputs
and, in cross-entropy, across samples: the bits of training/mlp.mojo's step (`mlp_forward`,
`mean_cross_entropy`, `mlp_backward`) in both numeric modes, several times faster at these
sizes (no GEMM packing buffers, no allocation, no scalar exp/log per logit).

Dimensions as in mlp.mojo: B rows, I inputs, H hidden, O classes; OP = O padded to a power of
two. Requirements: I and H powers of two (8 and 16 for the trainer).

Every output keeps mlp.mojo's order (ARITHMETIC.md "The MLP step"); lanes only ever hold
different outputs (or, in cross-entropy, different rows), never parts of one sum:
- H = relu(X·W1ᵀ + b1): per row, lanes over the H outputs; each is +0.0 then + x[r,p]·W1[j,p]
  for p ascending (`_madd`), then + b1[j], then ReLU (+0.0 unless > 0).
- logits = H·W2ᵀ + b2: lanes over 8 rows (each lane one output (r, c)), p ascending; a tail
  of fewer than 8 rows one row at a time, lanes over the (padded) O outputs.
- cross-entropy: lanes over 8 rows (a tail of fewer rows one at a time); per lane exactly
  loss.mojo's `_row` (first-wins max, exp32 per logit, s summed j ascending from +0.0,
  log32, nll, gradient (e/s − q)/B); the mean adds the row losses rows ascending from +0.0.
- dW2 = dlogitsᵀ·H, db2, dH = dlogits·W2 masked, db1: one pass over rows ascending with lanes
  over the outputs (dW2[c, :], dH[r, :], db1[:]); db2 one scalar chain per class.
- dW1 = dHᵀ·X: a second pass over rows ascending, lanes over dW1's (j, i) entries.
- dX = dH·W1 (when asked): per row, lanes over the I outputs, j ascending.
`_madd(acc, a, b)` is `fma(a, b, acc)` (one rounding) in both modes: exactly the GEMM's chains
(training/gemm.mojo, profile v2), so the per-operation path (GEMM entries) gives the same bits.
"""
from std.math import fma

from training.config import F32P, I32P
from training.portable_math import exp32, log32


def _pow2_at_least(x: Int) -> Int:
    var p = 1
    while p < x:
        p *= 2
    return p


@always_inline
def _madd[w: Int](acc: SIMD[DType.float32, w], a: SIMD[DType.float32, w],
                  b: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    return fma(a, b, acc)


def lanes_forward[I: Int, H: Int, O: Int](x: F32P, p: F32P, h: F32P, logits: F32P, rows: Int):
    """H (rows × H) and logits (rows × O) of `rows` rows. The weights are read in place or
    gathered into registers: no transposed copy is stored and reloaded per step."""
    comptime OP = _pow2_at_least(O)
    comptime B1 = H * I
    comptime W2 = B1 + H
    comptime B2 = W2 + O * H
    # W1's columns, gathered once into registers (column q: lanes j = W1[j, q]).
    var w1c = SIMD[DType.float32, I * H](0.0)
    comptime for q in range(I):
        w1c = w1c.insert[offset=q * H](p.unsafe_offset(q).unsafe_strided_load[width=H](I))
    var b1 = p.unsafe_load[width=H](B1)
    var b2 = SIMD[DType.float32, OP](0.0)
    comptime for c in range(O):
        b2[c] = p[unsafe_offset=B2 + c]
    for r in range(rows):
        var xr = x.unsafe_offset(r * I)
        var acc = SIMD[DType.float32, H](0.0)
        comptime for q in range(I):
            acc = _madd[H](acc, SIMD[DType.float32, H](xr[unsafe_offset=q]),
                           w1c.slice[H, offset=q * H]())
        var z = acc + b1
        z = z.gt(0.0).select(z, SIMD[DType.float32, H](0.0))
        h.unsafe_offset(r * H).unsafe_store(z)
    # Layer 2 with lanes over 8 rows (a row's 16-step chain is the critical path otherwise);
    # the rows left over run one at a time with lanes over the classes.
    comptime W = 8
    var r0 = 0
    while r0 + W <= rows:
        var acc = SIMD[DType.float32, _pow2_at_least(O * W)](0.0)  # class c at lanes c·W
        comptime for q in range(H):
            var hq = h.unsafe_offset(r0 * H + q).unsafe_strided_load[width=W](H)
            comptime for c in range(O):
                acc = acc.insert[offset=c * W](_madd[W](
                    acc.slice[W, offset=c * W](), hq,
                    SIMD[DType.float32, W](p[unsafe_offset=W2 + c * H + q])))
        comptime for c in range(O):
            var out = acc.slice[W, offset=c * W]() + SIMD[DType.float32, W](b2[c])
            comptime for l in range(W):
                logits[unsafe_offset=(r0 + l) * O + c] = out[l]
        r0 += W
    if r0 == rows:
        return
    # W2's columns, gathered into registers (column q: lanes c = W2[c, q], padded with 0).
    var w2c = SIMD[DType.float32, OP * H](0.0)
    comptime for c in range(O):
        var row = p.unsafe_load[width=H](W2 + c * H)
        comptime for q in range(H):
            w2c[q * OP + c] = row[q]
    for r in range(r0, rows):
        var acc2 = SIMD[DType.float32, OP](0.0)
        comptime for q in range(H):
            acc2 = _madd[OP](acc2, SIMD[DType.float32, OP](h[unsafe_offset=r * H + q]),
                             w2c.slice[OP, offset=q * OP]())
        var out = acc2 + b2
        comptime for c in range(O):
            logits[unsafe_offset=r * O + c] = out[c]


@always_inline
def _ce_block[O: Int, W: Int](logits: F32P, y: I32P, dl: F32P, r0: Int,
                              divisor: Float32) -> SIMD[DType.float32, W]:
    """Row losses of rows r0..r0+W-1 (lanes = rows) and their dlogits rows."""
    comptime T = _pow2_at_least(O * W)  # class c's lanes at offset c·W (a register array)
    var z = SIMD[DType.float32, T](0.0)
    var yv = SIMD[DType.int32, W](0)
    comptime for l in range(W):
        yv[l] = y[unsafe_offset=r0 + l]
    comptime for c in range(O):
        comptime for l in range(W):
            z[c * W + l] = logits[unsafe_offset=(r0 + l) * O + c]
    var mx = z.slice[W, offset=0]()
    comptime for c in range(1, O):
        var zc = z.slice[W, offset=c * W]()
        mx = zc.gt(mx).select(zc, mx)
    var e = SIMD[DType.float32, T](0.0)
    var s = SIMD[DType.float32, W](0.0)
    var zy = z.slice[W, offset=0]()
    comptime for c in range(O):
        var zc = z.slice[W, offset=c * W]()
        var ec = exp32[W](zc - mx)
        e = e.insert[offset=c * W](ec)
        s = s + ec
        comptime if c > 0:
            zy = yv.eq(Int32(c)).select(zc, zy)
    var ls = log32[W](s)
    var loss = ls - (zy - mx)
    comptime for c in range(O):
        var q = yv.eq(Int32(c)).select(SIMD[DType.float32, W](1.0), SIMD[DType.float32, W](0.0))
        var g = (e.slice[W, offset=c * W]() / s - q) / divisor
        comptime for l in range(W):
            dl[unsafe_offset=(r0 + l) * O + c] = g[l]
    return loss


def lanes_cross_entropy[O: Int](logits: F32P, y: I32P, dl: F32P, rows: Int) -> Float32:
    """loss.mojo's `mean_cross_entropy` (with its gradient) with 8 rows per SIMD vector."""
    comptime W = 8
    var divisor = Float32(rows)
    var total = Float32(0.0)
    var r = 0
    while r + W <= rows:
        var loss = _ce_block[O, W](logits, y, dl, r, divisor)
        comptime for l in range(W):
            total = total + loss[l]
        r += W
    while r < rows:
        total = total + _ce_block[O, 1](logits, y, dl, r, divisor)[0]
        r += 1
    return total / divisor


def lanes_backward[I: Int, H: Int, O: Int](x: F32P, p: F32P, h: F32P, dl: F32P, dh: F32P,
                                           grads: F32P, dx: F32P, rows: Int, want_dx: Bool):
    """Flat grads (dW1, db1, dW2, db2) from dlogits; `dh` is scratch (rows × H)."""
    comptime B1 = H * I
    comptime W2 = B1 + H
    comptime B2 = W2 + O * H
    comptime T2 = _pow2_at_least(O * H)
    var w2 = SIMD[DType.float32, T2](0.0)  # W2's rows at offsets c·H
    comptime for c in range(O):
        w2 = w2.insert[offset=c * H](p.unsafe_load[width=H](W2 + c * H))
    var acc_w2 = SIMD[DType.float32, T2](0.0)
    var acc_b1 = SIMD[DType.float32, H](0.0)
    var acc_b2 = SIMD[DType.float32, _pow2_at_least(O)](0.0)
    for r in range(rows):
        var hr = h.unsafe_load[width=H](r * H)
        var d = SIMD[DType.float32, H](0.0)
        comptime for c in range(O):
            var g = dl[unsafe_offset=r * O + c]
            var gv = SIMD[DType.float32, H](g)
            acc_w2 = acc_w2.insert[offset=c * H](
                _madd[H](acc_w2.slice[H, offset=c * H](), gv, hr))
            acc_b2[c] = acc_b2[c] + g
            d = _madd[H](d, gv, w2.slice[H, offset=c * H]())
        d = hr.gt(0.0).select(d, SIMD[DType.float32, H](0.0))
        acc_b1 = acc_b1 + d
        dh.unsafe_offset(r * H).unsafe_store(d)
    comptime for c in range(O):
        grads.unsafe_offset(W2 + c * H).unsafe_store(acc_w2.slice[H, offset=c * H]())
        grads[unsafe_offset=B2 + c] = acc_b2[c]
    grads.unsafe_offset(B1).unsafe_store(acc_b1)
    # dW1 in two halves of H/2 rows of dW1 each, so the accumulators stay in registers.
    comptime HALF = H // 2 if H >= 2 else H
    comptime for j0 in range(0, H, HALF):
        var acc = SIMD[DType.float32, HALF * I](0.0)
        for r in range(rows):
            var xr = x.unsafe_load[width=I](r * I)
            comptime for j in range(HALF):
                acc = acc.insert[offset=j * I](_madd[I](
                    acc.slice[I, offset=j * I](),
                    SIMD[DType.float32, I](dh[unsafe_offset=r * H + j0 + j]), xr))
        grads.unsafe_offset(j0 * I).unsafe_store(acc)
    if want_dx:
        for r in range(rows):
            var acc = SIMD[DType.float32, I](0.0)
            comptime for j in range(H):
                acc = _madd[I](acc, SIMD[DType.float32, I](dh[unsafe_offset=r * H + j]),
                               p.unsafe_load[width=I](j * I))
            dx.unsafe_offset(r * I).unsafe_store(acc)
