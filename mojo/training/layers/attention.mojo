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

Query positions run in SIMD lanes, a block of W at a time: a block's scores (and datt) are
computed transposed, one row per key position j holding the block's queries in lanes (q and
dy transposed once per head), so the softmax's max, its sum and the backward's dot are
vector chains over j ascending, each lane its own query's chain in the pinned order (they
were scalar chains, one latency-bound add per element). att is kept transposed (attᵀ[j, i]
at j·t + i; +0.0 for j > i); the mixes y = att·v, dq = ds·k, dk = dsᵀ·q, dv = attᵀ·dy run
over positions with the head dimension in lanes, 4 rows by two vectors (8 independent
chains), read and written in place in qkv, y and dqkv. A block of rows runs its chains over
the block's whole range of positions, and a block of queries its max, sum and dot over the
block's last row of keys: the extra terms are masked entries (att and ds are +0.0 above the
diagonal, e selected to +0.0, the max's candidates selected away), and a chain from +0.0 is
left exactly as it was by +0.0 or by a product of +0.0 and a finite value (the chain's value
is never −0.0), so every output has the bits of its chain over the allowed positions above (a
non-finite operand makes the step's result non-finite, refused either way).
"""
from std.math import fma
from std.sys import simd_width_of

from training.config import F32P
from training.gemm import transpose8
from training.pool import PartFn, part_range, parts_for, split_parts
from training.portable_math import exp32

comptime W = simd_width_of[DType.float32]()
comptime V = SIMD[DType.float32, W]
comptime JR = 8  # key positions a block of scores: 8 independent chains share each q vector
comptime R = 4  # rows a mix block, over two vectors of the head dimension: 8 chains


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
    split_parts(pool, run, a, parts_for(pool, a.rows * a.heads, work))


def attention_forward(qkv: F32P, y: F32P, att: F32P, rows: Int, t: Int, d: Int, heads: Int,
                      scale: Float32, pool: Int, arena: Int):
    """y (rows × t × d) and att (rows × heads × t × t, each t × t block transposed) from qkv
    (rows × t × 3d), the (example, head) pairs shared over `pool` (training/pool.mojo)."""
    _split(pool, _forward_part, _Attention(Int(qkv), Int(att), Int(y), 0, rows, t, d, heads,
                                           scale, False))


def attention_backward(qkv: F32P, att: F32P, dy: F32P, dqkv: F32P, rows: Int, t: Int, d: Int,
                       heads: Int, scale: Float32, accumulate: Bool, pool: Int, arena: Int):
    """dqkv (rows × t × 3d) from dy (rows × t × d); with `accumulate`, added to dqkv."""
    _split(pool, _backward_part, _Attention(Int(qkv), Int(att), Int(dy), Int(dqkv), rows, t,
                                            d, heads, scale, accumulate))


# ---------------------------------------------------------------- a block of queries in lanes


@always_inline
def _dots[NJ: Int](a: F32P, a_stride: Int, bt: F32P, tp: Int, i0: Int, hd: Int, panel: F32P,
                   j0: Int):
    """panel[(j0 + r)·W + l] = fma chain over e ascending from +0.0 of a[j0 + r, e]·
    bt[e, i0 + l], for r < NJ and every lane l."""
    var acc = SIMD[DType.float32, NJ * W](0.0)
    for e in range(hd):
        var b = bt.unsafe_load[width=W](e * tp + i0)
        comptime for r in range(NJ):
            acc = acc.insert[offset=r * W](fma(V(a[unsafe_offset=(j0 + r) * a_stride + e]), b,
                                               acc.slice[W, offset=r * W]()))
    comptime for r in range(NJ):
        panel.unsafe_offset((j0 + r) * W).unsafe_store(acc.slice[W, offset=r * W]())


def _block_dots(a: F32P, a_stride: Int, bt: F32P, tp: Int, i0: Int, jn: Int, hd: Int,
                panel: F32P):
    """Panel row j < jn, lane l: the chain over the head dimension of a[j, :]·b[i0 + l, :]
    (bt: b transposed, hd × tp, zero past t)."""
    var j = 0
    while j + JR <= jn:
        _dots[JR](a, a_stride, bt, tp, i0, hd, panel, j)
        j += JR
    while j < jn:
        _dots[1](a, a_stride, bt, tp, i0, hd, panel, j)
        j += 1


@always_inline
def _allowed(i0: Int, j: Int) -> SIMD[DType.bool, W]:
    """The lanes whose query i0 + l may attend to key j (j <= i0 + l)."""
    var lanes = SIMD[DType.int32, W](0)
    comptime for l in range(W):
        lanes[l] = Int32(l)
    return lanes.ge(SIMD[DType.int32, W](Int32(j - i0)))


def _softmax_block(panel: F32P, jn: Int, i0: Int, scale: Float32):
    """Each lane's scores (rows j < jn) to its causal softmax: s = chain·scale, the max from
    s[0] replaced when strictly greater, e = exp32(s − mx), the sum ascending from +0.0, one
    division; +0.0 for j past the lane's query."""
    var mx = panel.unsafe_load[width=W]() * scale
    panel.unsafe_store(mx)
    for j in range(1, jn):
        var s = panel.unsafe_load[width=W](j * W) * scale
        panel.unsafe_offset(j * W).unsafe_store(s)
        var c = _allowed(i0, j).select(s, mx)
        mx = c.gt(mx).select(c, mx)
    var total = V(0.0)
    for j in range(jn):
        var e = _allowed(i0, j).select(exp32[W](panel.unsafe_load[width=W](j * W) - mx), V(0.0))
        panel.unsafe_offset(j * W).unsafe_store(e)
        total = total + e
    for j in range(jn):
        panel.unsafe_offset(j * W).unsafe_store(panel.unsafe_load[width=W](j * W) / total)


def _ds_block(at: F32P, panel: F32P, jn: Int, i0: Int, scale: Float32, ds: F32P,
              ds_stride: Int):
    """ds[j, i0 + l] (at ds + j·ds_stride + i0) = (att·(datt − dot))·scale for each lane's
    allowed keys, dot the fma chain over j ascending of att·datt (att from `at`, the block's
    transposed att rows of W; datt the panel); +0.0 above the diagonal, rows past jn never
    written (as attᵀ's, `_store_block`)."""
    var dot = V(0.0)
    for j in range(jn):
        dot = fma(at.unsafe_load[width=W](j * W), panel.unsafe_load[width=W](j * W), dot)
    for j in range(jn):
        var p = at.unsafe_load[width=W](j * W)
        var v = (p * (panel.unsafe_load[width=W](j * W) - dot)) * scale
        ds.unsafe_offset(j * ds_stride + i0).unsafe_store(_allowed(i0, j).select(v, V(0.0)))


def _store_block(panel: F32P, jn: Int, i0: Int, t: Int, dst: F32P):
    """dst[j·t + i0 + l] = panel[j·W + l] for j < jn and the block's lanes below t. Rows
    past jn are never written nor read: a block of R mix rows (R divides W) reads no row of
    attᵀ past its block of queries' last (they were 37 % of att's stores as zeros)."""
    var n = min(W, t - i0)
    for j in range(jn):
        if n == W:
            dst.unsafe_offset(j * t + i0).unsafe_store(panel.unsafe_load[width=W](j * W))
        else:
            for l in range(n):
                dst[unsafe_offset=j * t + i0 + l] = panel[unsafe_offset=j * W + l]


def _load_block(src: F32P, jn: Int, i0: Int, t: Int, panel: F32P):
    """panel[j·W + l] = src[j·t + i0 + l] for j < jn, +0.0 in the lanes past t."""
    var n = min(W, t - i0)
    for j in range(jn):
        if n == W:
            panel.unsafe_offset(j * W).unsafe_store(src.unsafe_load[width=W](j * t + i0))
        else:
            for l in range(W):
                panel[unsafe_offset=j * W + l] = src[unsafe_offset=j * t + i0 + l] if l < n else 0.0


# ---------------------------------------------------------------- mixes: rows by positions


@always_inline
def _mix_block[NR: Int, VW: Int](w: F32P, w_row: Int, w_col: Int, src: F32P, src_stride: Int,
                                 dst: F32P, dst_stride: Int, r0: Int, c0: Int, c1: Int, e: Int,
                                 accumulate: Bool):
    """dst[r0 + r, e:e+VW] (+)= the fma chain over c in [c0, c1) ascending from +0.0 of
    w[r0 + r, c]·src[c, e:e+VW] (w at w_row·row + w_col·c), for NR rows."""
    var acc = SIMD[DType.float32, NR * VW](0.0)
    for c in range(c0, c1):
        var v = src.unsafe_load[width=VW](c * src_stride + e)
        comptime for r in range(NR):
            acc = acc.insert[offset=r * VW](fma(
                SIMD[DType.float32, VW](w[unsafe_offset=(r0 + r) * w_row + c * w_col]), v,
                acc.slice[VW, offset=r * VW]()))
    comptime for r in range(NR):
        var at = dst.unsafe_offset((r0 + r) * dst_stride + e)
        var z = acc.slice[VW, offset=r * VW]()
        at.unsafe_store(at.unsafe_load[width=VW]() + z if accumulate else z)


@always_inline
def _mix_rows[NR: Int](w: F32P, w_row: Int, w_col: Int, src: F32P, src_stride: Int, dst: F32P,
                       dst_stride: Int, r0: Int, c0: Int, c1: Int, hd: Int, accumulate: Bool):
    var e = 0
    while e + 2 * W <= hd:
        _mix_block[NR, 2 * W](w, w_row, w_col, src, src_stride, dst, dst_stride, r0, c0, c1, e,
                              accumulate)
        e += 2 * W
    while e + W <= hd:
        _mix_block[NR, W](w, w_row, w_col, src, src_stride, dst, dst_stride, r0, c0, c1, e,
                          accumulate)
        e += W
    while e < hd:
        _mix_block[NR, 1](w, w_row, w_col, src, src_stride, dst, dst_stride, r0, c0, c1, e,
                          accumulate)
        e += 1


def _causal_mix(w: F32P, w_row: Int, w_col: Int, src: F32P, src_stride: Int, dst: F32P,
                dst_stride: Int, t: Int, hd: Int, upper: Bool, accumulate: Bool):
    """dst[r, :] (+)= Σ over c of w(r, c)·src[c, :] (w(r, c) at w_row·r + w_col·c), each row
    one fma chain ascending from +0.0 over c <= r (y = att·v, dq = ds·k), or over c >= r with
    `upper` (dk = dsᵀ·q, dv = attᵀ·dy). A block of rows runs its chains over the block's whole
    range: the extra terms are products of w's +0.0 entries and finite values, which leave a
    chain from +0.0 as it was (it never holds -0.0), so each row has the bits of its own range."""
    comptime assert W % R == 0, "a block of mix rows stays within a block of queries"
    var r0 = 0
    while r0 < t:
        var nr = min(R, t - r0)
        if nr == R:
            _mix_rows[R](w, w_row, w_col, src, src_stride, dst, dst_stride, r0,
                         r0 if upper else 0, t if upper else r0 + R, hd, accumulate)
        else:
            for r in range(nr):
                _mix_rows[1](w, w_row, w_col, src, src_stride, dst, dst_stride, r0 + r,
                             r0 + r if upper else 0, t if upper else r0 + r + 1, hd,
                             accumulate)
        r0 += nr


def _gather(src: F32P, stride: Int, dst: F32P, t: Int, hd: Int):
    """dst (t × hd, contiguous) = the t rows of hd values at src, `stride` apart. The rows of a
    head in qkv are 3·d floats apart (1536 bytes at d = 128): 64 of them fall in 8 sets of
    the L1 cache and the mixes' and dots' row walks missed it."""
    for j in range(t):
        var e = 0
        while e + W <= hd:
            dst.unsafe_offset(j * hd + e).unsafe_store(src.unsafe_load[width=W](j * stride + e))
            e += W
        while e < hd:
            dst[unsafe_offset=j * hd + e] = src[unsafe_offset=j * stride + e]
            e += 1


def _transpose(src: F32P, stride: Int, dst: F32P, t: Int, hd: Int, tp: Int):
    """dst (hd × tp) = the t rows of hd values at src, `stride` apart, transposed: 8 x 8
    register transposes, the rows and columns past the last multiples of 8 one by one."""
    var t8 = t // 8 * 8
    var h8 = hd // 8 * 8
    for j in range(0, t8, 8):
        for e in range(0, h8, 8):
            transpose8(src.unsafe_offset(j * stride + e), stride, dst.unsafe_offset(e * tp + j),
                       tp)
        for e in range(h8, hd):
            for r in range(8):
                dst[unsafe_offset=e * tp + j + r] = src[unsafe_offset=(j + r) * stride + e]
    for j in range(t8, t):
        for e in range(hd):
            dst[unsafe_offset=e * tp + j] = src[unsafe_offset=j * stride + e]


# ---------------------------------------------------------------- the parts


def _forward_part(ctx: Int, part: Int, parts: Int):
    var a = Pointer[_Attention, MutAnyOrigin](unsafe_from_address=ctx)[]
    var t = a.t
    var d = a.d
    var hd = d // a.heads
    var tp = (t + W - 1) // W * W
    var span = part_range(a.rows * a.heads, part, parts)
    var buf = List[Float32](length=hd * tp + t * W + 2 * t * hd, fill=0)  # qt zero past t
    var qt = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var panel = qt.unsafe_offset(hd * tp)
    var k = panel.unsafe_offset(t * W)
    var v = k.unsafe_offset(t * hd)
    for pair in range(span[0], span[1]):
        var b = pair // a.heads
        var h = pair % a.heads
        var base = F32P(unsafe_from_address=a.qkv).unsafe_offset(b * t * 3 * d + h * hd)
        var att = F32P(unsafe_from_address=a.att).unsafe_offset(pair * t * t)
        _transpose(base, 3 * d, qt, t, hd, tp)
        _gather(base.unsafe_offset(d), 3 * d, k, t, hd)
        _gather(base.unsafe_offset(2 * d), 3 * d, v, t, hd)
        var i0 = 0
        while i0 < t:
            var jn = min(t, i0 + W)
            _block_dots(k, hd, qt, tp, i0, jn, hd, panel)
            _softmax_block(panel, jn, i0, a.scale)
            _store_block(panel, jn, i0, t, att)
            i0 += W
        _causal_mix(att, 1, t, v, hd,
                    F32P(unsafe_from_address=a.y).unsafe_offset(b * t * d + h * hd), d, t, hd,
                    False, False)
    _ = len(buf)


def _backward_part(ctx: Int, part: Int, parts: Int):
    var a = Pointer[_Attention, MutAnyOrigin](unsafe_from_address=ctx)[]
    var t = a.t
    var d = a.d
    var hd = d // a.heads
    var tp = (t + W - 1) // W * W
    var span = part_range(a.rows * a.heads, part, parts)
    var buf = List[Float32](length=hd * tp + 2 * t * W + t * tp + 4 * t * hd, fill=0)
    var dyt = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var panel = dyt.unsafe_offset(hd * tp)
    var at = panel.unsafe_offset(t * W)
    var ds = at.unsafe_offset(t * W)  # dsᵀ (t × tp)
    var q = ds.unsafe_offset(t * tp)
    var k = q.unsafe_offset(t * hd)
    var v = k.unsafe_offset(t * hd)
    var dy = v.unsafe_offset(t * hd)
    for pair in range(span[0], span[1]):
        var b = pair // a.heads
        var h = pair % a.heads
        var base = F32P(unsafe_from_address=a.qkv).unsafe_offset(b * t * 3 * d + h * hd)
        var out = F32P(unsafe_from_address=a.dqkv).unsafe_offset(b * t * 3 * d + h * hd)
        var g = F32P(unsafe_from_address=a.y).unsafe_offset(b * t * d + h * hd)
        var att = F32P(unsafe_from_address=a.att).unsafe_offset(pair * t * t)
        _transpose(g, d, dyt, t, hd, tp)
        _gather(base, 3 * d, q, t, hd)
        _gather(base.unsafe_offset(d), 3 * d, k, t, hd)
        _gather(base.unsafe_offset(2 * d), 3 * d, v, t, hd)
        _gather(g, d, dy, t, hd)
        var i0 = 0
        while i0 < t:
            var jn = min(t, i0 + W)
            _block_dots(v, hd, dyt, tp, i0, jn, hd, panel)  # dattᵀ
            _load_block(att, jn, i0, t, at)
            _ds_block(at, panel, jn, i0, a.scale, ds, tp)
            i0 += W
        _causal_mix(ds, 1, tp, k, hd, out, 3 * d, t, hd, False, a.accumulate)
        _causal_mix(ds, tp, 1, q, hd, out.unsafe_offset(d), 3 * d, t, hd, True, a.accumulate)
        _causal_mix(att, t, 1, dy, hd, out.unsafe_offset(2 * d), 3 * d, t, hd, True,
                    a.accumulate)
    _ = len(buf)
