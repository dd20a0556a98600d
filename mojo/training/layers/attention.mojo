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
"""
from std.math import fma

from training.config import F32P
from training.portable_math import exp32_scalar


def attention_forward(qkv: F32P, y: F32P, att: F32P, rows: Int, t: Int, d: Int, heads: Int,
                      scale: Float32):
    """y (rows × t × d) and att (rows × heads × t × t) from qkv (rows × t × 3d)."""
    var hd = d // heads
    for b in range(rows):
        var base = qkv.unsafe_offset(b * t * 3 * d)
        for h in range(heads):
            var a = att.unsafe_offset((b * heads + h) * t * t)
            for i in range(t):
                var q = base.unsafe_offset(i * 3 * d + h * hd)
                var row = a.unsafe_offset(i * t)
                var mx = Float32(0)
                for j in range(i + 1):
                    var k = base.unsafe_offset(j * 3 * d + d + h * hd)
                    var acc = Float32(0.0)
                    for e in range(hd):
                        acc = fma(q[unsafe_offset=e], k[unsafe_offset=e], acc)
                    var s = acc * scale
                    row[unsafe_offset=j] = s
                    if j == 0 or s > mx:
                        mx = s
                var total = Float32(0.0)
                for j in range(i + 1):
                    var ex = exp32_scalar(row[unsafe_offset=j] - mx)
                    row[unsafe_offset=j] = ex
                    total = total + ex
                for j in range(i + 1):
                    row[unsafe_offset=j] = row[unsafe_offset=j] / total
                for j in range(i + 1, t):
                    row[unsafe_offset=j] = 0.0
                var out = y.unsafe_offset((b * t + i) * d + h * hd)
                for e in range(hd):
                    out[unsafe_offset=e] = 0.0
                for j in range(i + 1):
                    var v = base.unsafe_offset(j * 3 * d + 2 * d + h * hd)
                    var p = row[unsafe_offset=j]
                    for e in range(hd):
                        out[unsafe_offset=e] = fma(p, v[unsafe_offset=e], out[unsafe_offset=e])


def attention_backward(qkv: F32P, att: F32P, dy: F32P, dqkv: F32P, rows: Int, t: Int, d: Int,
                       heads: Int, scale: Float32, accumulate: Bool):
    """dqkv (rows × t × 3d) from dy (rows × t × d); with `accumulate`, added to dqkv."""
    var hd = d // heads
    var ds = List[Float32](length=t * t, fill=0)
    var one = List[Float32](length=t * 3 * d, fill=0)
    var g = F32P(unsafe_from_address=Int(one.unsafe_ptr()))
    for b in range(rows):
        var base = qkv.unsafe_offset(b * t * 3 * d)
        var out = dqkv.unsafe_offset(b * t * 3 * d)
        var dst = g if accumulate else out
        for h in range(heads):
            var a = att.unsafe_offset((b * heads + h) * t * t)
            var qo = h * hd
            var ko = d + h * hd
            var vo = 2 * d + h * hd
            for i in range(t):
                var dyi = dy.unsafe_offset((b * t + i) * d + h * hd)
                var dot = Float32(0.0)
                for j in range(i + 1):
                    var v = base.unsafe_offset(j * 3 * d + vo)
                    var acc = Float32(0.0)
                    for e in range(hd):
                        acc = fma(dyi[unsafe_offset=e], v[unsafe_offset=e], acc)
                    ds[i * t + j] = acc
                    dot = fma(a[unsafe_offset=i * t + j], acc, dot)
                for j in range(i + 1):
                    ds[i * t + j] = (a[unsafe_offset=i * t + j] * (ds[i * t + j] - dot)) * scale
            for i in range(t):  # dq
                var dq = dst.unsafe_offset(i * 3 * d + qo)
                for e in range(hd):
                    dq[unsafe_offset=e] = 0.0
                for j in range(i + 1):
                    var k = base.unsafe_offset(j * 3 * d + ko)
                    var s = ds[i * t + j]
                    for e in range(hd):
                        dq[unsafe_offset=e] = fma(s, k[unsafe_offset=e], dq[unsafe_offset=e])
            for j in range(t):  # dk and dv
                var dk = dst.unsafe_offset(j * 3 * d + ko)
                var dv = dst.unsafe_offset(j * 3 * d + vo)
                for e in range(hd):
                    dk[unsafe_offset=e] = 0.0
                    dv[unsafe_offset=e] = 0.0
                for i in range(j, t):
                    var q = base.unsafe_offset(i * 3 * d + qo)
                    var dyi = dy.unsafe_offset((b * t + i) * d + h * hd)
                    var s = ds[i * t + j]
                    var p = a[unsafe_offset=i * t + j]
                    for e in range(hd):
                        dk[unsafe_offset=e] = fma(s, q[unsafe_offset=e], dk[unsafe_offset=e])
                        dv[unsafe_offset=e] = fma(p, dyi[unsafe_offset=e], dv[unsafe_offset=e])
        if accumulate:
            for e in range(t * 3 * d):
                out[unsafe_offset=e] = out[unsafe_offset=e] + g[unsafe_offset=e]
    _ = len(ds) + len(one)
