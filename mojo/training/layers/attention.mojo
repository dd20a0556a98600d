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
SIMD lanes hold independent outputs (scores of W keys from a transposed copy of the head's keys
or values; W elements of a head's output row), each still its own chain in the order above, so
every width and tail gives the same bits; sums (the softmax's, `dot`) walk j in order.
"""
from std.math import fma
from std.sys import simd_width_of

from training.config import F32P
from training.portable_math import exp32, exp32_scalar

comptime W = simd_width_of[DType.float32]()
comptime V = SIMD[DType.float32, W]


@always_inline
def _axpy(a: Float32, x: F32P, y: F32P, n: Int):
    """y[e] = fma(a, x[e], y[e]) for e < n (one step of n independent chains)."""
    var e = 0
    while e + W <= n:
        y.unsafe_offset(e).unsafe_store(fma(V(a), x.unsafe_load[width=W](e),
                                            y.unsafe_load[width=W](e)))
        e += W
    while e < n:
        y[unsafe_offset=e] = fma(a, x[unsafe_offset=e], y[unsafe_offset=e])
        e += 1


@always_inline
def _dots(a: F32P, bt: F32P, dst: F32P, n: Int, hd: Int, t: Int, scale: Float32):
    """dst[j] = (fma chain over e ascending of a[e]·bt[e, j], from +0.0)·scale for j < n
    (bt: hd × t, a head's keys or values transposed)."""
    var j = 0
    while j + W <= n:
        var acc = V(0.0)
        for e in range(hd):
            acc = fma(V(a[unsafe_offset=e]), bt.unsafe_offset(e * t).unsafe_load[width=W](j), acc)
        dst.unsafe_offset(j).unsafe_store(acc * scale)
        j += W
    while j < n:
        var acc = Float32(0.0)
        for e in range(hd):
            acc = fma(a[unsafe_offset=e], bt[unsafe_offset=e * t + j], acc)
        dst[unsafe_offset=j] = acc * scale
        j += 1


def _transpose(src: F32P, dst: F32P, t: Int, hd: Int, stride: Int):
    """dst (hd × t) = the t rows of hd values at `src`, `stride` apart, transposed."""
    for j in range(t):
        for e in range(hd):
            dst[unsafe_offset=e * t + j] = src[unsafe_offset=j * stride + e]


def _softmax_row(row: F32P, n: Int, t: Int):
    """row[j] = exp32(row[j] − mx) / Σ, j < n, the sum ascending; +0.0 for n <= j < t."""
    var mx = row[unsafe_offset=0]
    for j in range(1, n):
        if row[unsafe_offset=j] > mx:
            mx = row[unsafe_offset=j]
    var j = 0
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


def attention_forward(qkv: F32P, y: F32P, att: F32P, rows: Int, t: Int, d: Int, heads: Int,
                      scale: Float32):
    """y (rows × t × d) and att (rows × heads × t × t) from qkv (rows × t × 3d)."""
    var hd = d // heads
    var kt = List[Float32](length=hd * t, fill=0)
    var kT = F32P(unsafe_from_address=Int(kt.unsafe_ptr()))
    for b in range(rows):
        var base = qkv.unsafe_offset(b * t * 3 * d)
        for h in range(heads):
            var a = att.unsafe_offset((b * heads + h) * t * t)
            _transpose(base.unsafe_offset(d + h * hd), kT, t, hd, 3 * d)
            for i in range(t):
                var row = a.unsafe_offset(i * t)
                _dots(base.unsafe_offset(i * 3 * d + h * hd), kT, row, i + 1, hd, t, scale)
                _softmax_row(row, i + 1, t)
                var out = y.unsafe_offset((b * t + i) * d + h * hd)
                for e in range(hd):
                    out[unsafe_offset=e] = 0.0
                for j in range(i + 1):
                    _axpy(row[unsafe_offset=j], base.unsafe_offset(j * 3 * d + 2 * d + h * hd),
                          out, hd)
    _ = len(kt)


def attention_backward(qkv: F32P, att: F32P, dy: F32P, dqkv: F32P, rows: Int, t: Int, d: Int,
                       heads: Int, scale: Float32, accumulate: Bool):
    """dqkv (rows × t × 3d) from dy (rows × t × d); with `accumulate`, added to dqkv."""
    var hd = d // heads
    var ds_list = List[Float32](length=t * t, fill=0)
    var vt = List[Float32](length=hd * t, fill=0)
    var one = List[Float32](length=t * 3 * d if accumulate else 1, fill=0)
    var ds = F32P(unsafe_from_address=Int(ds_list.unsafe_ptr()))
    var vT = F32P(unsafe_from_address=Int(vt.unsafe_ptr()))
    var g = F32P(unsafe_from_address=Int(one.unsafe_ptr()))
    for b in range(rows):
        var base = qkv.unsafe_offset(b * t * 3 * d)
        var out = dqkv.unsafe_offset(b * t * 3 * d)
        var dst = g if accumulate else out
        for h in range(heads):
            var a = att.unsafe_offset((b * heads + h) * t * t)
            var qo = h * hd
            var ko = d + h * hd
            _transpose(base.unsafe_offset(2 * d + h * hd), vT, t, hd, 3 * d)
            for i in range(t):
                var n = i + 1
                var row = ds.unsafe_offset(i * t)
                var p = a.unsafe_offset(i * t)
                _dots(dy.unsafe_offset((b * t + i) * d + h * hd), vT, row, n, hd, t, 1.0)
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
                var dq = dst.unsafe_offset(i * 3 * d + qo)
                for e in range(hd):
                    dq[unsafe_offset=e] = 0.0
                for j2 in range(n):
                    _axpy(row[unsafe_offset=j2], base.unsafe_offset(j2 * 3 * d + ko), dq, hd)
            for j in range(t):  # dk and dv: chains over the queries i >= j
                var dk = dst.unsafe_offset(j * 3 * d + ko)
                var dv = dst.unsafe_offset(j * 3 * d + 2 * d + h * hd)
                for e in range(hd):
                    dk[unsafe_offset=e] = 0.0
                    dv[unsafe_offset=e] = 0.0
                for i in range(j, t):
                    _axpy(ds[unsafe_offset=i * t + j], base.unsafe_offset(i * 3 * d + qo), dk, hd)
                    _axpy(a[unsafe_offset=i * t + j], dy.unsafe_offset((b * t + i) * d + h * hd),
                          dv, hd)
        if accumulate:
            for e in range(t * 3 * d):
                out[unsafe_offset=e] = out[unsafe_offset=e] + g[unsafe_offset=e]
    _ = len(ds_list) + len(vt) + len(one)
