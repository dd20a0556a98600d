"""Elementwise layers and the MSE loss (docs/ARITHMETIC.md "Models"; mirror
tests/reference/layers.py). Every output is independent, so SIMD lanes give the same bits at
any width; sums (MSE) walk the elements in order."""
from std.sys import simd_width_of
from std.math import fma

from training.config import F32P
from training.copy import copy_floats
from training.pool import part_range, parts_for, split_parts

comptime W = simd_width_of[DType.float32]()  # the build's lanes (16 in x86-64-v4, 8 in v3): independent outputs, the same bits at any width


def add_into(a: F32P, b: F32P, dst: F32P, n: Int):
    """dst = a + b (a Residual's output: x + f(x)), one add per element."""
    var i = 0
    while i + W <= n:
        dst.unsafe_offset(i).unsafe_store(a.unsafe_load[width=W](i) + b.unsafe_load[width=W](i))
        i += W
    while i < n:
        dst[unsafe_offset=i] = a[unsafe_offset=i] + b[unsafe_offset=i]
        i += 1


@fieldwise_init
struct _Sum(ImplicitlyCopyable):
    """One `sum_into` call (addresses), read by its parts (ranges of whole vectors)."""

    var a: Int
    var b: Int  # 0: a copy
    var dst: Int
    var n: Int


def sum_into(a: F32P, b: Int, dst: F32P, n: Int, pool: Int):
    """dst = a + b (b: an address; 0 copies a), ranges of whole vectors on the threads of
    `pool` (the transformer's residual sums and gradient copies at batch 64 took 4 % of a
    two-thread step on one thread, the other waiting)."""
    var e = _Sum(Int(a), b, Int(dst), n)
    split_parts(pool, _sum_part, e, parts_for(pool, (n + W - 1) // W, n))


def _sum_part(ctx: Int, part: Int, parts: Int):
    var e = Pointer[_Sum, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range((e.n + W - 1) // W, part, parts)
    var lo = r[0] * W
    var n = min(e.n, r[1] * W) - lo
    var a = F32P(unsafe_from_address=e.a).unsafe_offset(lo)
    var dst = F32P(unsafe_from_address=e.dst).unsafe_offset(lo)
    if e.b == 0:
        copy_floats(a, dst, n)
    else:
        add_into(a, F32P(unsafe_from_address=e.b).unsafe_offset(lo), dst, n)


def copy_or_add(src: F32P, dst: F32P, n: Int, accumulate: Bool, pool: Int = 0):
    """dst = src, or dst = dst + src when `accumulate` (a gradient reaching a tensor twice)."""
    sum_into(src, Int(dst) if accumulate else 0, dst, n, pool)


@always_inline
def _relu_grad[V: Int](y: F32P, g: F32P, dst: F32P, i: Int, accumulate: Bool):
    var v = y.unsafe_load[width=V](i).gt(0).select(g.unsafe_load[width=V](i),
                                                   SIMD[DType.float32, V](0.0))
    if accumulate:
        v = dst.unsafe_load[width=V](i) + v
    dst.unsafe_offset(i).unsafe_store(v)


def relu_grad(y: F32P, g: F32P, dst: F32P, n: Int, accumulate: Bool):
    """dst = y > 0 ? g : +0.0 (the mask is the output), or added to dst."""
    var i = 0
    while i + W <= n:
        _relu_grad[W](y, g, dst, i, accumulate)
        i += W
    while i < n:
        _relu_grad[1](y, g, dst, i, accumulate)
        i += 1


def relu_apply(x: F32P, y: F32P, n: Int):
    """y = x > 0 ? x : +0.0 (−0.0 and NaN give +0.0, as the scalar compare)."""
    var i = 0
    while i + W <= n:
        var v = x.unsafe_load[width=W](i)
        y.unsafe_offset(i).unsafe_store(v.gt(0).select(v, SIMD[DType.float32, W](0.0)))
        i += W
    while i < n:
        var v = x[unsafe_offset=i]
        y[unsafe_offset=i] = v if v > 0 else Float32(0.0)
        i += 1


def mse_loss(y: F32P, target: F32P, dy: F32P, n: Int, divide_by: Int) -> Float32:
    """loss = (fma chain of d·d ascending from +0.0) / f32(divide_by), d = y − target;
    dy = (d + d) / f32(divide_by) (F.mse_loss 'mean' when divide_by = n)."""
    var m = Float32(divide_by)
    var q = Float32(0.0)
    for i in range(n):
        var d = y[unsafe_offset=i] - target[unsafe_offset=i]
        q = fma(d, d, q)
        dy[unsafe_offset=i] = (d + d) / m
    return q / m
