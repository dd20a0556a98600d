"""GEMM: C[m, n] (+)= op(A)[m, k] · op(B)[k, n], float32, row-major.

Dimensions: m rows of C, n columns of C, k the contracted dimension.
op(A) = A (m×k, row stride k) or Aᵀ (A stored k×m); op(B) = B (k×n) or Bᵀ (B stored n×k).

Identical mode, every target (ARITHMETIC.md "Reductions"): each output is
    acc = +0.0; for p in 0..k-1: acc = acc + a[i,p] * b[p,j]     (product rounded, sum rounded)
then C[i,j] = acc, or C[i,j] = C[i,j] + acc when accumulating. SIMD and threads only run
across outputs (i, j), never along p, so every schedule gives these bits.
"""
from training.config import F32P


@always_inline
def _a_at(a: F32P, i: Int, p: Int, m: Int, k: Int, ta: Bool) -> Float32:
    return a[unsafe_offset=p * m + i] if ta else a[unsafe_offset=i * k + p]


@always_inline
def _b_at(b: F32P, p: Int, j: Int, n: Int, k: Int, tb: Bool) -> Float32:
    return b[unsafe_offset=j * k + p] if tb else b[unsafe_offset=p * n + j]


def gemm_naive(a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
               accumulate: Bool, row_begin: Int, row_end: Int):
    """The algorithmic reference: one output at a time, k ascending. Rows [row_begin, row_end)."""
    for i in range(row_begin, row_end):
        for j in range(n):
            var acc = Float32(0.0)
            for p in range(k):
                acc = acc + _a_at(a, i, p, m, k, ta) * _b_at(b, p, j, n, k, tb)
            if accumulate:
                c[unsafe_offset=i * n + j] = c[unsafe_offset=i * n + j] + acc
            else:
                c[unsafe_offset=i * n + j] = acc
