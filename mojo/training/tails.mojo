"""A vector's first n lanes from memory and back (masked loads and stores): a row's tail in
one operation instead of narrower vectors and single floats (LeNet-5's rows of 28, 14, 10 and
5 floats are mostly tail), never touching memory past its n floats."""
from std.sys.intrinsics import masked_load, masked_store

from training.config import F32P


@always_inline
def lanes_below[V: Int](n: Int) -> SIMD[DType.bool, V]:
    """Lanes 0..n-1."""
    var lanes = SIMD[DType.int32, V](0)
    comptime for l in range(V):
        lanes[l] = Int32(l)
    return lanes.lt(SIMD[DType.int32, V](Int32(n)))


@always_inline
def load_first[V: Int](p: F32P, n: Int) -> SIMD[DType.float32, V]:
    """p[0:V], or its first n floats (the other lanes +0.0, nothing read there) when n < V."""
    if n >= V:
        return p.unsafe_load[width=V]()
    return masked_load[V](p, lanes_below[V](n), SIMD[DType.float32, V](0.0))


@always_inline
def store_first[V: Int](p: F32P, v: SIMD[DType.float32, V], n: Int):
    """p[0:V] = v, or only its first n lanes when n < V."""
    if n >= V:
        p.unsafe_store(v)
    else:
        masked_store[V](v, p, lanes_below[V](n))
