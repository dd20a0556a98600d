"""Finiteness scans used by every entry that refuses non-finite inputs or outputs."""
from std.memory import bitcast

from training.config import F32P, I64P
from training.pool import part_range, parts_for, split_parts


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


@fieldwise_init
struct _Scan(ImplicitlyCopyable):
    """One shared scan: the floats (address, count) and each part's answer (address)."""

    var p: Int
    var n: Int
    var found: Int


comptime SCAN_WORK = 4  # a float read and tested against a multiply-add (it streams from L2/L3)


def first_nonfinite_shared(pool: Int, p: F32P, n: Int) -> Int:
    """`first_nonfinite` with ranges of the floats shared over `pool` (training/pool.mojo):
    the same index (the least of the parts' first ones). A batch's input is checked before
    every step, alone on one core while the others wait ([784, 256, 10] at batch 256: 200 k
    floats, a fiftieth of the step)."""
    var parts = parts_for(pool, (n + 4095) // 4096, n * SCAN_WORK)
    if parts < 2:
        return first_nonfinite(p, n)
    var found = List[Int64](length=parts, fill=-1)
    var scan = _Scan(Int(p), n, Int(found.unsafe_ptr()))
    split_parts(pool, _scan_part, scan, parts)
    var at = -1
    for i in range(parts):  # ranges ascend: the first part that found one has the answer
        if found[i] >= 0:
            at = Int(found[i])
            break
    return at


def _scan_part(ctx: Int, part: Int, parts: Int):
    var s = Pointer[_Scan, MutAnyOrigin](unsafe_from_address=ctx)[]
    var r = part_range((s.n + 4095) // 4096, part, parts)
    var lo = r[0] * 4096
    var hi = min(s.n, r[1] * 4096)
    var at = first_nonfinite(F32P(unsafe_from_address=s.p).unsafe_offset(lo), hi - lo)
    I64P(unsafe_from_address=s.found)[unsafe_offset=part] = Int64(lo + at if at >= 0 else -1)
