"""The float32 buffer copy the kernels, the sessions and the binding entries share."""
from training.config import F32P


def copy_floats(src: F32P, dst: F32P, n: Int):
    """dst[0:n] = src[0:n]; nothing when n <= 0 or src is dst (other overlaps are not
    allowed). Also copies int32 data bit for bit (loads and stores never change bits)."""
    if src == dst:
        return
    comptime W = 8
    var i = 0
    while i + W <= n:
        dst.unsafe_offset(i).unsafe_store(src.unsafe_load[width=W](i))
        i += W
    while i < n:
        dst[unsafe_offset=i] = src[unsafe_offset=i]
        i += 1
