"""LayerNorm over the last axis (docs/ARITHMETIC.md "Models: LayerNorm"; mirror
tests/reference/layers.py `layernorm_forward` / `layernorm_backward`).

Per row of d values, identical mode, every step one binary32 operation:
  mean = (Σ x, ascending from +0.0) / f32(d)
  var  = (fma chain of (x − mean)², ascending from +0.0) / f32(d)      (two passes, biased)
  rstd = 1 / sqrt(var + eps)          (add, correctly rounded sqrt, one division)
  xhat = (x − mean)·rstd;  y = fma(xhat, w, b)  (y = xhat without the affine tensors)
Backward, llm.c's form, with gn = g·w (g without the affine tensors):
  a = (Σ gn) / f32(d);  c = (fma chain of gn·xhat) / f32(d)
  dx = ((gn − a) − xhat·c)·rstd      (added to dx when `accumulate`: dx = dx + that)
  dw = fma chain over rows ascending of g·xhat;  db = Σ over rows ascending of g
The per-row sums walk the row in order (one chain each); the elementwise parts run in SIMD
lanes of independent outputs, which gives the same bits at any width.
"""
from std.sys import simd_width_of
from std.math import fma

from training.config import F32P
from training.fp import sqrt_rn
from training.gemm import transpose8
from training.pool import PartFn, part_range, parts_for, split_parts

comptime W = simd_width_of[DType.float32]()  # the build's lanes (16 in x86-64-v4, 8 in v3): independent outputs, the same bits at any width


@always_inline
def _row_stats(x: F32P, d: Int, eps: Float32) -> Tuple[Float32, Float32]:
    var n = Float32(d)
    var s = Float32(0.0)
    for j in range(d):
        s = s + x[unsafe_offset=j]
    var mean = s / n
    var q = Float32(0.0)
    for j in range(d):
        var c = x[unsafe_offset=j] - mean
        q = fma(c, c, q)
    var rstd = Float32(1.0) / sqrt_rn[1](q / n + eps)[0]
    return (mean, rstd)


def _to_lanes(src: F32P, d: Int, dst: F32P):
    """dst[j·W + i] = src[i·d + j] for a block of W rows, j < d: each column of the block one
    vector of its rows, by 8 x 8 register transposes (the strided loads this replaced are
    gathers: the row chains ran ~4x slower), the columns past the last multiple of 8 one by
    one."""
    var d8 = d // 8 * 8
    comptime for g in range(W // 8):
        var j = 0
        while j < d8:
            transpose8(src.unsafe_offset(g * 8 * d + j), d, dst.unsafe_offset(j * W + g * 8), W)
            j += 8
    for j in range(d8, d):
        for i in range(W):
            dst[unsafe_offset=j * W + i] = src[unsafe_offset=i * d + j]


def _stats(x: F32P, stats: F32P, rows: Int, d: Int, eps: Float32):
    """Each row's (mean, rstd) into `stats`, W rows at a time in SIMD lanes (lane i is row
    r + i, its columns laid out by `_to_lanes`: every row's sums still run j ascending, so the
    bits are `_row_stats`'), the last rows one by one."""
    var r = 0
    var n = SIMD[DType.float32, W](Float32(d))
    var buf = List[Float32](length=W * d, fill=0)
    var xt = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    while r + W <= rows:
        _to_lanes(x.unsafe_offset(r * d), d, xt)
        var s = SIMD[DType.float32, W](0.0)
        for j in range(d):
            s = s + xt.unsafe_load[width=W](j * W)
        var mean = s / n
        var q = SIMD[DType.float32, W](0.0)
        for j in range(d):
            var c = xt.unsafe_load[width=W](j * W) - mean
            q = fma(c, c, q)
        var rstd = SIMD[DType.float32, W](1.0) / sqrt_rn[W](q / n + eps)
        for i in range(W):
            stats[unsafe_offset=2 * (r + i)] = mean[i]
            stats[unsafe_offset=2 * (r + i) + 1] = rstd[i]
        r += W
    while r < rows:
        var st = _row_stats(x.unsafe_offset(r * d), d, eps)
        stats[unsafe_offset=2 * r] = st[0]
        stats[unsafe_offset=2 * r + 1] = st[1]
        r += 1
    _ = len(buf)


comptime NORM_WORK = 8  # an element of a row (a few passes) against a multiply-add


@fieldwise_init
struct _Norm(ImplicitlyCopyable):
    """One call's tensors (addresses) and sizes, read by its parts."""

    var x: Int
    var y: Int  # the forward's output, or the backward's incoming gradient
    var w: Int
    var b: Int
    var stats: Int
    var sums: Int
    var dx: Int
    var dw: Int
    var db: Int
    var rows: Int
    var d: Int
    var eps: Float32
    var affine: Bool
    var accumulate: Bool


def _rows_of(n: _Norm, part: Int, parts: Int) -> Tuple[Int, Int]:
    """Rows of part `part`: whole blocks of W rows (the last rows to the last part)."""
    var r = part_range((n.rows + W - 1) // W, part, parts)
    return (r[0] * W, min(n.rows, r[1] * W))


def _parts(pool: Int, n: _Norm) -> Int:
    return parts_for(pool, (n.rows + W - 1) // W, n.rows * n.d * NORM_WORK)


def _split(pool: Int, run: PartFn, n: _Norm, parts: Int):
    """run's parts over the pool, each reading a copy of `n`."""
    split_parts(pool, run, n, parts)


def layernorm_forward(x: F32P, y: F32P, w: F32P, b: F32P, stats: F32P, rows: Int, d: Int,
                      eps: Float32, affine: Bool, pool: Int):
    """y (rows × d) from x; `stats` receives each row's (mean, rstd) for the backward. Blocks
    of rows shared over `pool` (training/pool.mojo)."""
    var n = _Norm(Int(x), Int(y), Int(w), Int(b), Int(stats), 0, 0, 0, 0, rows, d, eps, affine,
                  False)
    _split(pool, _forward_part, n, _parts(pool, n))


def _forward_part(ctx: Int, part: Int, parts: Int):
    var n = Pointer[_Norm, MutAnyOrigin](unsafe_from_address=ctx)[]
    var span = _rows_of(n, part, parts)
    var d = n.d
    var x = F32P(unsafe_from_address=n.x)
    var y = F32P(unsafe_from_address=n.y)
    var w = F32P(unsafe_from_address=n.w)
    var b = F32P(unsafe_from_address=n.b)
    var stats = F32P(unsafe_from_address=n.stats)
    _stats(x.unsafe_offset(span[0] * d), stats.unsafe_offset(2 * span[0]), span[1] - span[0], d,
           n.eps)
    for r in range(span[0], span[1]):
        var xr = x.unsafe_offset(r * d)
        var yr = y.unsafe_offset(r * d)
        var mean = stats[unsafe_offset=2 * r]
        var rstd = stats[unsafe_offset=2 * r + 1]
        var j = 0
        while j + W <= d:
            var xhat = (xr.unsafe_load[width=W](j) - mean) * rstd
            if n.affine:
                xhat = fma(xhat, w.unsafe_load[width=W](j), b.unsafe_load[width=W](j))
            yr.unsafe_offset(j).unsafe_store(xhat)
            j += W
        while j < d:
            var xhat = (xr[unsafe_offset=j] - mean) * rstd
            if n.affine:
                xhat = fma(xhat, w[unsafe_offset=j], b[unsafe_offset=j])
            yr[unsafe_offset=j] = xhat
            j += 1


def _grad_sums(g: F32P, x: F32P, w: F32P, stats: F32P, dst: F32P, rows: Int,
               d: Int, affine: Bool):
    """Each row's `a = (Σ gn) / f32(d)` and `c = (fma chain of gn·xhat) / f32(d)` into `out`,
    W rows at a time in SIMD lanes (lane i is row r + i, laid out by `_to_lanes`: each row's
    sums still run j ascending), the last rows one by one."""
    var n = Float32(d)
    var r = 0
    var buf = List[Float32](length=2 * W * d, fill=0)
    var xt = F32P(unsafe_from_address=Int(buf.unsafe_ptr()))
    var gt = xt.unsafe_offset(W * d)
    while r + W <= rows:
        _to_lanes(x.unsafe_offset(r * d), d, xt)
        _to_lanes(g.unsafe_offset(r * d), d, gt)
        var mean = stats.unsafe_offset(2 * r).unsafe_strided_load[width=W](2)
        var rstd = stats.unsafe_offset(2 * r + 1).unsafe_strided_load[width=W](2)
        var s = SIMD[DType.float32, W](0.0)
        var c = SIMD[DType.float32, W](0.0)
        for j in range(d):
            var xhat = (xt.unsafe_load[width=W](j * W) - mean) * rstd
            var gn = gt.unsafe_load[width=W](j * W)
            if affine:
                gn = gn * w[unsafe_offset=j]
            s = s + gn
            c = fma(gn, xhat, c)
        var a = s / n
        c = c / n
        for i in range(W):
            dst[unsafe_offset=2 * (r + i)] = a[i]
            dst[unsafe_offset=2 * (r + i) + 1] = c[i]
        r += W
    while r < rows:
        var xr = x.unsafe_offset(r * d)
        var gr = g.unsafe_offset(r * d)
        var mean = stats[unsafe_offset=2 * r]
        var rstd = stats[unsafe_offset=2 * r + 1]
        var s = Float32(0.0)
        var c = Float32(0.0)
        for j in range(d):
            var xhat = (xr[unsafe_offset=j] - mean) * rstd
            var gn = gr[unsafe_offset=j] * w[unsafe_offset=j] if affine else gr[unsafe_offset=j]
            s = s + gn
            c = fma(gn, xhat, c)
        dst[unsafe_offset=2 * r] = s / n
        dst[unsafe_offset=2 * r + 1] = c / n
        r += 1
    _ = len(buf)


def layernorm_backward(g: F32P, x: F32P, w: F32P, stats: F32P, dx: F32P, dw: F32P, db: F32P,
                       rows: Int, d: Int, affine: Bool, accumulate: Bool, pool: Int):
    """dx (rows × d) from the output gradient g; dw, db (d each) written when `affine`. Two
    passes, each shared over `pool`: dx by blocks of rows, then dw and db (chains over the
    rows) by ranges of columns (the same code at any thread count: fast mode's contractions
    too)."""
    var sums = List[Float32](length=2 * rows, fill=0)
    var n = _Norm(Int(x), Int(g), Int(w), 0, Int(stats), Int(sums.unsafe_ptr()), Int(dx),
                  Int(dw), Int(db), rows, d, 0.0, affine, accumulate)
    var parts = _parts(pool, n)
    _split(pool, _dx_part, n, parts)
    if affine:
        _split(pool, _dw_part, n, max(1, min(parts, (d + W - 1) // W)))
    _ = len(sums)


def _dx_part(ctx: Int, part: Int, parts: Int):
    """The part's rows: their sums, then dx."""
    var n = Pointer[_Norm, MutAnyOrigin](unsafe_from_address=ctx)[]
    var span = _rows_of(n, part, parts)
    var sums = F32P(unsafe_from_address=n.sums)
    _grad_sums(F32P(unsafe_from_address=n.y).unsafe_offset(span[0] * n.d),
               F32P(unsafe_from_address=n.x).unsafe_offset(span[0] * n.d),
               F32P(unsafe_from_address=n.w),
               F32P(unsafe_from_address=n.stats).unsafe_offset(2 * span[0]),
               sums.unsafe_offset(2 * span[0]), span[1] - span[0], n.d, n.affine)
    _dx_rows(n, span[0], span[1])


def _dw_part(ctx: Int, part: Int, parts: Int):
    """dw and db of the part's columns (whole vectors), chains over every row ascending."""
    var n = Pointer[_Norm, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range((n.d + W - 1) // W, part, parts)
    var j = r[0] * W
    var j1 = min(n.d, r[1] * W)
    while j + 4 * W <= j1:
        _dw_columns[4 * W](n, j)
        j += 4 * W
    while j + W <= j1:
        _dw_columns[W](n, j)
        j += W
    while j < j1:
        _dw_columns[1](n, j)
        j += 1


@always_inline
def _dw_columns[B: Int](n: _Norm, j: Int):
    """dw and db of columns j..j+B: each a chain from +0.0 over every row ascending, kept in
    registers and stored once (a store a row went through memory and, where two parts'
    columns share a cache line, bounced it between the cores: 2 threads ran these 12x
    slower than one)."""
    var x = F32P(unsafe_from_address=n.x).unsafe_offset(j)
    var g = F32P(unsafe_from_address=n.y).unsafe_offset(j)
    var stats = F32P(unsafe_from_address=n.stats)
    var dw = SIMD[DType.float32, B](0.0)
    var db = SIMD[DType.float32, B](0.0)
    for r in range(n.rows):
        var mean = stats[unsafe_offset=2 * r]
        var rstd = stats[unsafe_offset=2 * r + 1]
        var xhat = (x.unsafe_load[width=B](r * n.d) - mean) * rstd
        var gv = g.unsafe_load[width=B](r * n.d)
        dw = fma(gv, xhat, dw)
        db = db + gv
    F32P(unsafe_from_address=n.dw).unsafe_offset(j).unsafe_store(dw)
    F32P(unsafe_from_address=n.db).unsafe_offset(j).unsafe_store(db)


def _dx_rows(n: _Norm, r0: Int, r1: Int):
    """dx of rows r0..r1, from the rows' sums."""
    var g = F32P(unsafe_from_address=n.y)
    var x = F32P(unsafe_from_address=n.x)
    var w = F32P(unsafe_from_address=n.w)
    var stats = F32P(unsafe_from_address=n.stats)
    var sums = F32P(unsafe_from_address=n.sums)
    var dx = F32P(unsafe_from_address=n.dx)
    var d = n.d
    for r in range(r0, r1):
        var xr = x.unsafe_offset(r * d)
        var gr = g.unsafe_offset(r * d)
        var dxr = dx.unsafe_offset(r * d)
        var mean = stats[unsafe_offset=2 * r]
        var rstd = stats[unsafe_offset=2 * r + 1]
        var a = sums[unsafe_offset=2 * r]
        var c = sums[unsafe_offset=2 * r + 1]
        var j = 0
        while j + W <= d:
            var xhat = (xr.unsafe_load[width=W](j) - mean) * rstd
            var gv = gr.unsafe_load[width=W](j)
            var gn = gv * w.unsafe_load[width=W](j) if n.affine else gv
            var v = ((gn - a) - xhat * c) * rstd
            if n.accumulate:
                v = dxr.unsafe_load[width=W](j) + v
            dxr.unsafe_offset(j).unsafe_store(v)
            j += W
        while j < d:
            var xhat = (xr[unsafe_offset=j] - mean) * rstd
            var gv = gr[unsafe_offset=j]
            var gn = gv * w[unsafe_offset=j] if n.affine else gv
            var v = ((gn - a) - xhat * c) * rstd
            if n.accumulate:
                v = dxr[unsafe_offset=j] + v
            dxr[unsafe_offset=j] = v
            j += 1
