"""Finiteness scans used by every entry that refuses non-finite inputs or outputs."""
from std.memory import bitcast

from training.config import F32P


@always_inline
def is_finite32(x: Float32) -> Bool:
    """True when `x` is neither NaN nor an infinity (exponent bits not all ones)."""
    return (bitcast[DType.uint32, 1](x) & 0x7F800000) != 0x7F800000


def first_nonfinite(p: F32P, n: Int) -> Int:
    """Index of the first NaN/Inf among `p[0:n]`, or -1 when all are finite."""
    comptime W = 8
    comptime EXP = UInt32(0x7F800000)
    var i = 0
    # 32 values per test: the largest exponent field of four vectors is all ones only when one
    # of them is a NaN/Inf (one compare and branch instead of four). The vector and scalar
    # loops below locate the first one.
    while i + 4 * W <= n:
        var e = bitcast[DType.uint32, W](p.unsafe_load[width=W](i)) & EXP
        comptime for u in range(1, 4):
            e = max(e, bitcast[DType.uint32, W](p.unsafe_load[width=W](i + u * W)) & EXP)
        if e.eq(EXP).reduce_or():
            break
        i += 4 * W
    while i + W <= n:
        var bits = bitcast[DType.uint32, W](p.unsafe_load[width=W](i))
        if ((bits & EXP).eq(EXP)).reduce_or():
            break
        i += W
    while i < n:
        if not is_finite32(p[unsafe_offset=i]):
            return i
        i += 1
    return -1
