"""Causal multi-head self-attention between c_attn and c_proj (docs/ARITHMETIC.md "Models:
CausalSelfAttention"; mirror tests/reference/attention.py `attention_forward` /
`attention_backward`).

Per example, position i has q, k, v side by side in its row of 3·d (c_attn's output); head h
reads the hd = d / heads values at h·hd of each. Per example, head and query position i, with
the allowed positions j = 0..i and `scale` = f32(1/sqrt(hd)) (binary64, rounded once):
  s[j]   = (fma chain over the head dimension ascending of q[i]·k[j], from +0.0) · scale
  mx     = max over j ascending of s[j];  e[j] = exp32(s[j] − mx)
  sum    = Σ e[j], j ascending from +0.0;  att[i, j] = e[j] / sum  (+0.0 for j > i, kept)
  y[i]   = fma chain over j ascending of att[i, j]·v[j], from +0.0
Backward, from dy:
  datt[j] = fma chain over the head dimension of dy[i]·v[j];  dot = fma chain over j of
  att[i, j]·datt[j];  ds[i, j] = (att[i, j]·(datt[j] − dot))·scale
  dq[i] = fma chain over j ≤ i ascending of ds[i, j]·k[j]
  dk[j] = fma chain over i ≥ j ascending of ds[i, j]·q[i]
  dv[j] = fma chain over i ≥ j ascending of att[i, j]·dy[i]
The six products run as direct kernels (no packing: a head's products are 64 × 64 × 32 at
nanoGPT's size), each output one fma chain ascending from +0.0: S and datt over the head
dimension with positions j in SIMD lanes (k and v transposed once per head), only for the
rows' allowed j; y = att·v, dq = ds·k, dk = dsᵀ·q, dv = attᵀ·dy over positions with the head
dimension in lanes, read and written in place in qkv, y and dqkv. A block of R rows runs its
chains over the block's whole range of positions; the extra terms are products of the masked
entries (att and ds above the diagonal are +0.0) and finite values, and a chain from +0.0 is
left exactly as it was by such a product (the chain's value is never −0.0), so every output
has the bits of its chain over the allowed positions above (a non-finite operand makes the
step's result non-finite, refused either way).
"""
from std.math import fma
from std.sys import simd_width_of

from training.config import F32P
from training.pool import PartFn, part_range, parts_for, split_parts
from training.portable_math import exp32, exp32_scalar

comptime W = simd_width_of[DType.float32]()


def _softmax_row(row: F32P, n: Int, t: Int, scale: Float32):
    """row[j] = exp32(s[j] − mx) / Σ with s[j] = row[j]·scale, j < n, the sum ascending;
    +0.0 for n <= j < t."""
    var j = 0
    while j + W <= n:
        row.unsafe_offset(j).unsafe_store(row.unsafe_load[width=W](j) * scale)
        j += W
    while j < n:
        row[unsafe_offset=j] = row[unsafe_offset=j] * scale
        j += 1
    var mx = row[unsafe_offset=0]
    for i in range(1, n):
        if row[unsafe_offset=i] > mx:
            mx = row[unsafe_offset=i]
    j = 0
    while j + W <= n:
        row.unsafe_offset(j).unsafe_store(exp32[W](row.unsafe_load[width=W](j) - mx))
        j += W
    while j < n:
        row[unsafe_offset=j] = exp32_scalar(row[unsafe_offset=j] - mx)
        j += 1
    var total = Float32(0.0)
    for i in range(n):
        total = total + row[unsafe_offset=i]
    j = 0
    while j + W <= n:
        row.unsafe_offset(j).unsafe_store(row.unsafe_load[width=W](j) / total)
        j += W
    while j < n:
        row[unsafe_offset=j] = row[unsafe_offset=j] / total
        j += 1
    for i in range(n, t):
        row[unsafe_offset=i] = 0.0


def _ds_row(p: F32P, row: F32P, n: Int, t: Int, scale: Float32):
    """row (datt) = (p·(datt − dot))·scale, dot the fma chain of p·datt, j < n; +0.0 after."""
    var dot = Float32(0.0)
    for j in range(n):
        dot = fma(p[unsafe_offset=j], row[unsafe_offset=j], dot)
    var j = 0
    while j + W <= n:
        row.unsafe_offset(j).unsafe_store(
            (p.unsafe_load[width=W](j) * (row.unsafe_load[width=W](j) - dot)) * scale)
        j += W
    while j < n:
        row[unsafe_offset=j] = (p[unsafe_offset=j] * (row[unsafe_offset=j] - dot)) * scale
        j += 1
    for i in range(n, t):
        row[unsafe_offset=i] = 0.0


@fieldwise_init
struct _Attention(ImplicitlyCopyable):
    """One call's tensors (addresses) and sizes, read by its parts."""

    var qkv: Int
    var att: Int
    var y: Int  # the forward's output, or the backward's dy
    var dqkv: Int
    var rows: Int
    var t: Int
    var d: Int
    var heads: Int
    var scale: Float32
    var accumulate: Bool


def _split(pool: Int, run: PartFn, a: _Attention):
    """The call's (example, head) pairs cut into parts over the pool: each pair's outputs
    (its att block and its columns of y or dqkv) are its own."""
    var work = a.rows * a.heads * a.t * a.t * (a.d // a.heads)
    split_parts(pool, run, Int(Pointer(to=a)), parts_for(pool, a.rows * a.heads, work))
    _ = a.rows  # the parts read `a` through its address


def attention_forward(qkv: F32P, y: F32P, att: F32P, rows: Int, t: Int, d: Int, heads: Int,
                      scale: Float32, pool: Int, arena: Int):
    """y (rows × t × d) and att (rows × heads × t × t) from qkv (rows × t × 3d), the
    (example, head) pairs shared over `pool` (training/pool.mojo)."""
    _split(pool, _forward_part, _Attention(Int(qkv), Int(att), Int(y), 0, rows, t, d, heads,
                                           scale, False))


comptime R = 4  # rows a register block: R independent chains share each vector load


@always_inline
def _dots_block[NR: Int](a: F32P, a_stride: Int, bt: F32P, tp: Int, dst: F32P, i0: Int,
                         hd: Int, jmax: Int):
    """dst[r, j] (row r of NR, tp apart) = fma chain over e ascending from +0.0 of
    a[i0 + r, e]·bt[e, j], for j in [0, jmax) in vectors (lanes past jmax computed too)."""
    var jv = 0
    while jv < jmax:
        var acc = SIMD[DType.float32, NR * W](0.0)
        for e in range(hd):
            var b = bt.unsafe_load[width=W](e * tp + jv)
            comptime for r in range(NR):
                acc = acc.insert[offset=r * W](fma(
                    SIMD[DType.float32, W](a[unsafe_offset=(i0 + r) * a_stride + e]), b,
                    acc.slice[W, offset=r * W]()))
        comptime for r in range(NR):
            dst.unsafe_offset(r * tp + jv).unsafe_store(acc.slice[W, offset=r * W]())
        jv += W


def _causal_dots(a: F32P, a_stride: Int, bt: F32P, tp: Int, dst: F32P, t: Int, hd: Int,
                 block: F32P):
    """dst[i, j] (t × t) = the chain over the head dimension of a[i, :]·b[j, :] for j <= i
    (bt: b transposed, hd × tp, zero past t); entries j > i are left as they were."""
    var i0 = 0
    while i0 < t:
        var nr = min(R, t - i0)
        var jmax = i0 + nr  # the block's last row needs j < i0 + nr
        if nr == R:
            _dots_block[R](a, a_stride, bt, tp, block, i0, hd, jmax)
        else:
            for r in range(nr):
                _dots_block[1](a, a_stride, bt, tp, block.unsafe_offset(r * tp), i0 + r, hd,
                               jmax)
        for r in range(nr):
            for j in range(i0 + r + 1):
                dst[unsafe_offset=(i0 + r) * t + j] = block[unsafe_offset=r * tp + j]
        i0 += nr


@always_inline
def _mix_block[NR: Int, V: Int](w: F32P, w_row: Int, w_col: Int, src: F32P, src_stride: Int,
                                dst: F32P, dst_stride: Int, r0: Int, c0: Int, c1: Int, e: Int,
                                accumulate: Bool):
    """dst[r0 + r, e:e+V] (+)= the fma chain over c in [c0, c1) ascending from +0.0 of
    w[r0 + r, c]·src[c, e:e+V] (w at w_row·row + w_col·c), for NR rows."""
    var acc = SIMD[DType.float32, NR * V](0.0)
    for c in range(c0, c1):
        var v = src.unsafe_load[width=V](c * src_stride + e)
        comptime for r in range(NR):
            acc = acc.insert[offset=r * V](fma(
                SIMD[DType.float32, V](w[unsafe_offset=(r0 + r) * w_row + c * w_col]), v,
                acc.slice[V, offset=r * V]()))
    comptime for r in range(NR):
        var at = dst.unsafe_offset((r0 + r) * dst_stride + e)
        var z = acc.slice[V, offset=r * V]()
        at.unsafe_store(at.unsafe_load[width=V]() + z if accumulate else z)


@always_inline
def _mix_rows[NR: Int](w: F32P, w_row: Int, w_col: Int, src: F32P, src_stride: Int, dst: F32P,
                       dst_stride: Int, r0: Int, c0: Int, c1: Int, hd: Int, accumulate: Bool):
    var e = 0
    while e + W <= hd:
        _mix_block[NR, W](w, w_row, w_col, src, src_stride, dst, dst_stride, r0, c0, c1, e,
                          accumulate)
        e += W
    while e < hd:
        _mix_block[NR, 1](w, w_row, w_col, src, src_stride, dst, dst_stride, r0, c0, c1, e,
                          accumulate)
        e += 1


def _causal_mix(w: F32P, src: F32P, src_stride: Int, dst: F32P, dst_stride: Int, t: Int,
                hd: Int, transposed: Bool, accumulate: Bool):
    """dst[r, :] (+)= Σ w·src rows, each output one fma chain ascending from +0.0, w (t × t)
    lower triangular: not `transposed`, row r = Σ over c <= r of w[r, c]·src[c, :] (y = att·v,
    dq = ds·k); `transposed`, row r = Σ over c >= r of w[c, r]·src[c, :] (dk = dsᵀ·q, dv =
    attᵀ·dy). A block of rows runs its chains over the block's whole range: the extra terms
    are products of w's +0.0 entries and finite values, which leave a chain from +0.0 as it
    was (it never holds -0.0), so each row has the bits of its own range."""
    var w_row = 1 if transposed else t
    var w_col = t if transposed else 1
    var r0 = 0
    while r0 < t:
        var nr = min(R, t - r0)
        var c0 = r0 if transposed else 0
        var c1 = t if transposed else r0 + nr
        if nr == R:
            _mix_rows[R](w, w_row, w_col, src, src_stride, dst, dst_stride, r0, c0, c1, hd,
                         accumulate)
        else:
            for r in range(nr):
                _mix_rows[1](w, w_row, w_col, src, src_stride, dst, dst_stride, r0 + r,
                             c0 if transposed else 0, t if transposed else r0 + r + 1, hd,
                             accumulate)
        r0 += nr


def _transpose(src: F32P, stride: Int, dst: F32P, t: Int, hd: Int, tp: Int):
    """dst (hd × tp) = the t rows of hd values at src, `stride` apart, transposed."""
    for j in range(t):
        for e in range(hd):
            dst[unsafe_offset=e * tp + j] = src[unsafe_offset=j * stride + e]


def _forward_part(ctx: Int, part: Int, parts: Int):
    var a = Pointer[_Attention, MutAnyOrigin](unsafe_from_address=ctx)[]
    var t = a.t
    var d = a.d
    var hd = d // a.heads
    var tp = (t + W - 1) // W * W
    var span = part_range(a.rows * a.heads, part, parts)
    var buf = List[Float32](length=hd * tp + R * tp, fill=0)  # zero past t: kt's padding
    var kt = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var block = kt.unsafe_offset(hd * tp)
    for pair in range(span[0], span[1]):
        var b = pair // a.heads
        var h = pair % a.heads
        var base = F32P(unsafe_from_address=a.qkv).unsafe_offset(b * t * 3 * d + h * hd)
        var s = F32P(unsafe_from_address=a.att).unsafe_offset(pair * t * t)
        _transpose(base.unsafe_offset(d), 3 * d, kt, t, hd, tp)
        _causal_dots(base, 3 * d, kt, tp, s, t, hd, block)
        for i in range(t):
            _softmax_row(s.unsafe_offset(i * t), i + 1, t, a.scale)
        _causal_mix(s, base.unsafe_offset(2 * d), 3 * d,
                    F32P(unsafe_from_address=a.y).unsafe_offset(b * t * d + h * hd), d, t, hd,
                    False, False)
    _ = len(buf)


def attention_backward(qkv: F32P, att: F32P, dy: F32P, dqkv: F32P, rows: Int, t: Int, d: Int,
                       heads: Int, scale: Float32, accumulate: Bool, pool: Int, arena: Int):
    """dqkv (rows × t × 3d) from dy (rows × t × d); with `accumulate`, added to dqkv."""
    _split(pool, _backward_part, _Attention(Int(qkv), Int(att), Int(dy), Int(dqkv), rows, t,
                                            d, heads, scale, accumulate))


def _backward_part(ctx: Int, part: Int, parts: Int):
    var a = Pointer[_Attention, MutAnyOrigin](unsafe_from_address=ctx)[]
    var t = a.t
    var d = a.d
    var hd = d // a.heads
    var tp = (t + W - 1) // W * W
    var span = part_range(a.rows * a.heads, part, parts)
    var buf = List[Float32](length=t * t + hd * tp + R * tp, fill=0)
    var ds = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var vt = ds.unsafe_offset(t * t)
    var block = vt.unsafe_offset(hd * tp)
    for pair in range(span[0], span[1]):
        var b = pair // a.heads
        var h = pair % a.heads
        var base = F32P(unsafe_from_address=a.qkv).unsafe_offset(b * t * 3 * d + h * hd)
        var out = F32P(unsafe_from_address=a.dqkv).unsafe_offset(b * t * 3 * d + h * hd)
        var g = F32P(unsafe_from_address=a.y).unsafe_offset(b * t * d + h * hd)
        var s = F32P(unsafe_from_address=a.att).unsafe_offset(pair * t * t)
        _transpose(base.unsafe_offset(2 * d), 3 * d, vt, t, hd, tp)
        _causal_dots(g, d, vt, tp, ds, t, hd, block)  # datt = dy·vᵀ
        for i in range(t):
            _ds_row(s.unsafe_offset(i * t), ds.unsafe_offset(i * t), i + 1, t, a.scale)
        _causal_mix(ds, base.unsafe_offset(d), 3 * d, out, 3 * d, t, hd, False, a.accumulate)
        _causal_mix(ds, base, 3 * d, out.unsafe_offset(d), 3 * d, t, hd, True, a.accumulate)
        _causal_mix(s, g, d, out.unsafe_offset(2 * d), 3 * d, t, hd, True, a.accumulate)
    _ = len(buf)
