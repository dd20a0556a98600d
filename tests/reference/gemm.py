"""Identical-mode GEMM, profile v2, op by op: C[i,j] = fma chain over p ascending.

Matrices are flat row-major lists of float32 values (Python floats). op(A) is A (m×k) or, with
`ta`, the transpose of A stored k×m; op(B) is B (k×n) or, with `tb`, the transpose of B stored
n×k. Each output is `acc = fma32(op(A)[i,p], op(B)[p,j], acc)` for p = 0, 1, ..., k-1, one
correctly rounded binary32 fused multiply-add a step (`tests/reference/f32.py` `fma32`), acc
starting from +0.0, or from the prior C[i,j] when accumulating. So k = 0 writes +0.0, and k = 0
with accumulation leaves C[i,j] exactly as it was (-0.0 included).
"""

from .f32 import fma32


def gemm_entry(a, b, i, j, m, n, k, ta=False, tb=False, c_old=None):
    """One output C[i, j]; `c_old` is the prior C[i, j] when accumulating (the chain's start)."""
    acc = 0.0 if c_old is None else c_old
    for p in range(k):
        x = a[p * m + i] if ta else a[i * k + p]
        y = b[j * k + p] if tb else b[p * n + j]
        acc = fma32(x, y, acc)
    return acc


def gemm(a, b, m, n, k, ta=False, tb=False, c=None):
    """The whole m×n product as a flat list; with `c` (a flat list), accumulate into a copy."""
    a = [float(x) for x in a]
    b = [float(y) for y in b]
    rows = [a[i * k : (i + 1) * k] for i in range(m)] if not ta else [a[i::m] for i in range(m)]
    cols = [b[j * k : (j + 1) * k] for j in range(n)] if tb else [b[j::n] for j in range(n)]
    out = []
    for i in range(m):
        row = rows[i]
        for j in range(n):
            acc = 0.0 if c is None else float(c[i * n + j])
            for x, y in zip(row, cols[j]):
                acc = fma32(x, y, acc)
            out.append(acc)
    return out
