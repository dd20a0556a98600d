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
The six products run as GEMMs (training/gemm.mojo's one family: each output one fma chain,
p ascending from +0.0) on contiguous copies of the head's q, k, v and dy: S = q·kᵀ, y = att·v,
datt = dy·vᵀ, dq = ds·k, dk = dsᵀ·q, dv = attᵀ·dy. The masked entries (att and ds above the
diagonal) are +0.0, and a chain from +0.0 is left exactly as it was by a product of +0.0 and
a finite value (the chain's value is never −0.0), so the GEMMs over all t positions give the
bits of the chains over the allowed ones above (a non-finite operand makes the step's result
non-finite, refused either way); S and datt above the diagonal are computed and never read.
"""
from std.math import fma
from std.sys import simd_width_of

from training.config import F32P
from training.gemm import Epilogue
from training.arena import ARENA_WORDS, arena_release
from training.pool import PartFn, part_range, parts_for, split_gemm, split_parts
from training.portable_math import exp32, exp32_scalar

comptime W = simd_width_of[DType.float32]()


def _gather(src: F32P, dst: F32P, t: Int, hd: Int, stride: Int):
    """dst (t × hd) = the t rows of hd values at `src`, `stride` apart."""
    for j in range(t):
        for e in range(hd):
            dst[unsafe_offset=j * hd + e] = src[unsafe_offset=j * stride + e]


def _scatter(src: F32P, dst: F32P, t: Int, hd: Int, stride: Int, accumulate: Bool):
    """The t rows of hd values at `dst`, `stride` apart, = src (t × hd), or + src."""
    for j in range(t):
        for e in range(hd):
            var v = src[unsafe_offset=j * hd + e]
            if accumulate:
                v = dst[unsafe_offset=j * stride + e] + v
            dst[unsafe_offset=j * stride + e] = v


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


def _forward_part(ctx: Int, part: Int, parts: Int):
    var a = Pointer[_Attention, MutAnyOrigin](unsafe_from_address=ctx)[]
    var t = a.t
    var d = a.d
    var hd = d // a.heads
    var span = part_range(a.rows * a.heads, part, parts)
    var buf = List[Float32](length=4 * t * hd, fill=0)
    var q = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var k = q.unsafe_offset(t * hd)
    var v = k.unsafe_offset(t * hd)
    var o = v.unsafe_offset(t * hd)
    var arena = List[Int64](length=ARENA_WORDS, fill=0)  # this part's GEMM packing
    var ar = Int(arena.unsafe_ptr())
    for pair in range(span[0], span[1]):
        var b = pair // a.heads
        var h = pair % a.heads
        var base = F32P(unsafe_from_address=a.qkv).unsafe_offset(b * t * 3 * d)
        var s = F32P(unsafe_from_address=a.att).unsafe_offset(pair * t * t)
        _gather(base.unsafe_offset(h * hd), q, t, hd, 3 * d)
        _gather(base.unsafe_offset(d + h * hd), k, t, hd, 3 * d)
        _gather(base.unsafe_offset(2 * d + h * hd), v, t, hd, 3 * d)
        split_gemm(0, q, k, s, t, t, hd, False, True, False, Epilogue.none(), ar)
        for i in range(t):
            _softmax_row(s.unsafe_offset(i * t), i + 1, t, a.scale)
        split_gemm(0, s, v, o, t, hd, t, False, False, False, Epilogue.none(), ar)
        _scatter(o, F32P(unsafe_from_address=a.y).unsafe_offset(b * t * d + h * hd), t, hd, d,
                 False)
    arena_release(ar)
    _ = len(buf)
    _ = len(arena)


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
    var span = part_range(a.rows * a.heads, part, parts)
    var buf = List[Float32](length=t * t + 5 * t * hd, fill=0)
    var ds = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var q = ds.unsafe_offset(t * t)
    var k = q.unsafe_offset(t * hd)
    var v = k.unsafe_offset(t * hd)
    var g = v.unsafe_offset(t * hd)
    var o = g.unsafe_offset(t * hd)
    var arena = List[Int64](length=ARENA_WORDS, fill=0)
    var ar = Int(arena.unsafe_ptr())
    comptime none = Epilogue.none()
    for pair in range(span[0], span[1]):
        var b = pair // a.heads
        var h = pair % a.heads
        var base = F32P(unsafe_from_address=a.qkv).unsafe_offset(b * t * 3 * d)
        var out = F32P(unsafe_from_address=a.dqkv).unsafe_offset(b * t * 3 * d)
        var s = F32P(unsafe_from_address=a.att).unsafe_offset(pair * t * t)
        _gather(base.unsafe_offset(h * hd), q, t, hd, 3 * d)
        _gather(base.unsafe_offset(d + h * hd), k, t, hd, 3 * d)
        _gather(base.unsafe_offset(2 * d + h * hd), v, t, hd, 3 * d)
        _gather(F32P(unsafe_from_address=a.y).unsafe_offset(b * t * d + h * hd), g, t, hd, d)
        split_gemm(0, g, v, ds, t, t, hd, False, True, False, none, ar)
        for i in range(t):
            _ds_row(s.unsafe_offset(i * t), ds.unsafe_offset(i * t), i + 1, t, a.scale)
        split_gemm(0, ds, k, o, t, hd, t, False, False, False, none, ar)
        _scatter(o, out.unsafe_offset(h * hd), t, hd, 3 * d, a.accumulate)
        split_gemm(0, ds, q, o, t, hd, t, True, False, False, none, ar)
        _scatter(o, out.unsafe_offset(d + h * hd), t, hd, 3 * d, a.accumulate)
        split_gemm(0, s, g, o, t, hd, t, True, False, False, none, ar)
        _scatter(o, out.unsafe_offset(2 * d + h * hd), t, hd, 3 * d, a.accumulate)
    arena_release(ar)
    _ = len(buf)
    _ = len(arena)
