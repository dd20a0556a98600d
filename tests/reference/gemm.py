"""Identical-mode GEMM, op by op: C[i,j] = (C[i,j] +) sum_p a[i,p]*b[p,j], p ascending from +0.0.

Matrices are flat row-major lists of float32 values (Python floats). op(A) is A (m×k) or, with
`ta`, the transpose of A stored k×m; op(B) is B (k×n) or, with `tb`, the transpose of B stored
n×k. Every product and every sum is rounded to float32 (`f32`), exactly as the kernel does.
"""

from .f32 import f32


def gemm_entry(a, b, i, j, m, n, k, ta=False, tb=False, c_old=None):
    """One output C[i, j]; `c_old` is the prior C[i, j] when accumulating."""
    acc = 0.0
    for p in range(k):
        x = a[p * m + i] if ta else a[i * k + p]
        y = b[j * k + p] if tb else b[p * n + j]
        acc = f32(acc + f32(x * y))
    return acc if c_old is None else f32(c_old + acc)


def gemm(a, b, m, n, k, ta=False, tb=False, c=None):
    """The whole m×n product as a flat list; with `c` (a flat list), accumulate into a copy."""
    return [
        gemm_entry(a, b, i, j, m, n, k, ta, tb, None if c is None else c[i * n + j])
        for i in range(m)
        for j in range(n)
    ]
