"""GEMM: C[m, n] (+)= op(A)[m, k] · op(B)[k, n], float32, row-major.

Dimensions: m rows of C, n columns of C, k the contracted dimension.
op(A) = A (m×k, row stride k) or Aᵀ (A stored k×m); op(B) = B (k×n) or Bᵀ (B stored n×k).
Every function computes only rows [row_begin, row_end) of C (and, optionally, columns
[col_begin, col_end)), so threads can split the outputs (training/pool.mojo).

Both modes, every target (docs/ARITHMETIC.md, profile v2 "GEMM"): each output is one chain
    acc = +0.0 (or C[i,j] when accumulating); for p in 0..k-1: acc = fma(a[i,p], b[p,j], acc)
one correctly rounded fused multiply-add a step, p strictly ascending, then C[i,j] = acc. The
k-blocking stores acc in C between blocks (exact: it is a float32), and SIMD, tiles and threads
only run across outputs (i, j), never along p, so every width, tile, k block, split and thread
count gives these bits: identical and fast mode share this one kernel family.

Public kernels (other families import them; keep these signatures stable):
    gemm_naive(a, b, c, m, n, k, ta, tb, accumulate, row_begin, row_end)
        the algorithmic reference, one output at a time.
    gemm_on[W, NV](same arguments)      the packed kernel with a 6 × (NV·W) register tile at
        SIMD width W (any tile gives the same bits; tests run several).
    gemm(same arguments)                the production tile for the build's vector width.
    The last two also take col_begin, col_end (a range of columns), epi (an Epilogue) and
    buf: a packing buffer of at least `gemm_bytes` bytes (0: the call mallocs its own).

Epilogue (`Epilogue`): once an output's value is final (after the last k block) it may go through, in this order,
`z + bias[j]` (one rounded add), then ReLU `z > 0 ? z : +0.0` (each output exactly once): the
same operations as training/mlp.mojo's separate pass (bias_activation), so the bits are
theirs, done on each tile right after it is stored (still in L1) instead of in another pass
over C, and within each thread's part of a split product. Then, when `epi.loss` is set and
the tile holds whole rows, each of its rows' cross-entropy (training/loss.mojo
`cross_entropy_rows`).

Packing memory: `gemm_bytes` says how much a call needs; a caller that keeps a buffer (a
session's arena, training/arena.mojo) passes it as `buf`, else each call mallocs its own.

Blocking (after BLIS): B is packed into k×NR column panels and A into MR×k row panels (copies
only: no arithmetic), zero padded at the edges; a micro-kernel keeps an MR×NR tile of C in
registers; k is split into KC blocks for the caches, the chain carried through C.
"""
from std.math import fma
from std.sys import simd_width_of
from std.utils import StaticTuple

from training.arena import Scratch, release, scratch
from training.config import F32P
from training.loss import RowLosses, cross_entropy_rows

# The build's vector width: 16 floats (one zmm) in the x86-64-v4 build, 8 (one ymm) in v3.
comptime VW = simd_width_of[DType.float32]()
comptime TILE_MR = 6  # rows of the register tile (6 × 2 vectors: 12 accumulators, `gemm`)
comptime MC = 96  # rows of A packed at once (a multiple of every MR used)
# The k block. AVX-512 (W = 16): 512: on an AMD EPYC with AVX-512 (Zen 4) 1024³ ran at ~86
# GFLOP/s with KC 256 and ~103 with 512 (OpenBLAS: ~92; tools/bench_gemm.py, same runs), as
# each k block reloads and re-stores the C tile. AVX2 (W = 8): 1024, since a 6 × 1024 A panel
# fits L1: KC 256 ran 1024³ at ~86 GFLOP/s on an AMD EPYC (Zen 3), 1024 at ~91.
comptime KC = 512 if VW >= 16 else 1024
# Columns of B packed at once: 1024 (a 1 MiB B block at KC 256). At n = 1024 that packs A
# once instead of twice, ~10 % of the time at W = 16; the 6 × 16 tile at W = 8 gained ~3 %.
comptime NC = 1024
comptime PANEL_ALIGN = 64  # packed panels start on a cache line: no vector load splits one


struct Epilogue(ImplicitlyCopyable):
    """What each output goes through once final (module docstring): `bias`, the address of n
    floats added by column (0: none); `relu`; then `loss`, the address of a `RowLosses` whose
    logits are C (0: none): each row's cross-entropy, once the row is final. `loss` needs
    every tile to hold whole rows (`gemm_tiles_hold_rows`). The backward pass's ReLU mask is
    not among them: as an epilogue it made the 256 × 256 × 10 product of a [784, 256, 10]
    step ~30 % slower on one thread here (it reads a second m × n matrix per tile)."""

    var bias: Int
    var relu: Bool
    var loss: Int

    def __init__(out self, bias: Int, relu: Bool, loss: Int = 0):
        self.bias = bias
        self.relu = relu
        self.loss = loss

    @staticmethod
    def none() -> Epilogue:
        return Epilogue(0, False)

    def any(self) -> Bool:
        return self.bias != 0 or self.relu or self.loss != 0


@always_inline
def _finish[W: Int](z: SIMD[DType.float32, W], epi: Epilogue,
                    bias: F32P) -> SIMD[DType.float32, W]:
    """`z` through the epilogue; `bias` points at this vector's own column."""
    var out = z
    if epi.bias != 0:
        out = out + bias.unsafe_load[width=W]()
    if epi.relu:
        out = out.gt(0).select(out, SIMD[DType.float32, W](0.0))
    return out


@no_inline
def _finish_tile[W: Int](c: F32P, ldc: Int, rows: Int, cols: Int, epi: Epilogue, bias: F32P,
                         row0: Int):
    """`epi` over the rows × cols block of C at `c` (row stride ldc), rows row0.. of C, just
    stored by a tile (so in L1). Not inlined: inside the driver it changed the micro-kernel's
    register allocation (a move per k-step pair; dHᵀ·X at batch 256 ran ~4 % slower)."""
    if epi.bias != 0 or epi.relu:
        for r in range(rows):
            var row = c.unsafe_offset(r * ldc)
            var j = 0
            while j + W <= cols:
                row.unsafe_offset(j).unsafe_store(_finish[W](
                    row.unsafe_load[width=W](j), epi, bias.unsafe_offset(j)))
                j += W
            while j < cols:
                row[unsafe_offset=j] = _finish[1](row[unsafe_offset=j], epi,
                                                  bias.unsafe_offset(j))[0]
                j += 1
    if epi.loss != 0:
        cross_entropy_rows(Pointer[RowLosses, MutAnyOrigin](unsafe_from_address=epi.loss)[],
                           row0, row0 + rows)


# ---------------------------------------------------------------- reference


@always_inline
def _a_at(a: F32P, i: Int, p: Int, m: Int, k: Int, ta: Bool) -> Float32:
    return a[unsafe_offset=p * m + i] if ta else a[unsafe_offset=i * k + p]


@always_inline
def _b_at(b: F32P, p: Int, j: Int, n: Int, k: Int, tb: Bool) -> Float32:
    return b[unsafe_offset=j * k + p] if tb else b[unsafe_offset=p * n + j]


def gemm_naive(a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
               accumulate: Bool, row_begin: Int, row_end: Int):
    """The algorithmic reference: one output at a time, one fma chain k ascending from +0.0
    (or from C when accumulating). Rows [row_begin, row_end)."""
    for i in range(row_begin, row_end):
        for j in range(n):
            var acc = c[unsafe_offset=i * n + j] if accumulate else Float32(0.0)
            for p in range(k):
                acc = fma(_a_at(a, i, p, m, k, ta), _b_at(b, p, j, n, k, tb), acc)
            c[unsafe_offset=i * n + j] = acc


# ---------------------------------------------------------------- packing (copies only)


def _pack_b[NR: Int](b: F32P, n: Int, k: Int, tb: Bool, p0: Int, kc: Int, j0: Int, nc: Int,
                     dst: F32P):
    """op(B)[p0:p0+kc, j0:j0+nc] as ceil(nc/NR) panels of kc rows × NR columns, zero padded."""
    var panels = (nc + NR - 1) // NR
    for jp in range(panels):
        var out = dst.unsafe_offset(jp * kc * NR)
        var jb = j0 + jp * NR
        var cols = min(NR, j0 + nc - jb)
        if tb:  # B stored n×k: column j of op(B) is contiguous
            # p outermost: each panel row is written once, whole, from `cols` read streams
            # (jj outermost scatters every write across all kc rows of the panel).
            var src = b.unsafe_offset(jb * k + p0)
            if cols == NR:  # a whole panel
                var p = 0
                comptime if NR % 8 == 0:  # 8 × 8 blocks through registers
                    while p + 8 <= kc:
                        comptime for g in range(NR // 8):
                            transpose8(src.unsafe_offset(g * 8 * k + p), k,
                                       out.unsafe_offset(p * NR + g * 8), NR)
                        p += 8
                while p < kc:  # the unrolled gather keeps NR loads in flight
                    comptime for jj in range(NR):
                        out[unsafe_offset=p * NR + jj] = src[unsafe_offset=jj * k + p]
                    p += 1
            else:
                for p in range(kc):
                    for jj in range(cols):
                        out[unsafe_offset=p * NR + jj] = src[unsafe_offset=jj * k + p]
        else:
            for p in range(kc):
                var src = b.unsafe_offset((p0 + p) * n + jb)
                if cols == NR:  # one vector copy per panel row
                    out.unsafe_offset(p * NR).unsafe_store(src.unsafe_load[width=NR]())
                else:
                    for jj in range(cols):
                        out[unsafe_offset=p * NR + jj] = src[unsafe_offset=jj]
        for jj in range(cols, NR):
            for p in range(kc):
                out[unsafe_offset=p * NR + jj] = 0.0


@always_inline
def transpose8[R: Int = 8](src: F32P, ld_src: Int, dst: F32P, ld_dst: Int):
    """dst[q * ld_dst + r] = src[r * ld_src + q] for r < R, q < 8: eight vector loads, three
    rounds of two-source shuffles (the unpack, shufps, permute2f128 pattern), eight vector
    stores, q ascending. With R < 8 rows, +0.0 stands for the missing ones and each store
    writes 8 - R zeros past its R (a packed panel's next store overwrites them; the last
    one's land past dst + 7 * ld_dst + R; a channel-last row keeps them as its padding). A scalar gather of a 256 × 256 B block took
    ~27 µs on this AMD EPYC (Zen 3), about a third of a 32-row forward product."""
    # Eight rows of eight, one 8-lane register each (not slices of one 64-lane SIMD value,
    # which the x86-64-v4 build lowers as halves of 16-lane registers).
    comptime B = StaticTuple[SIMD[DType.float32, 8], 8]
    var r = B(fill=SIMD[DType.float32, 8](0.0))
    comptime for i in range(R):
        r[i] = src.unsafe_load[width=8](i * ld_src)
    var t = B(fill=SIMD[DType.float32, 8](0.0))
    comptime for i in range(4):  # rows 2i, 2i+1 interleaved within each 128-bit half
        t[2 * i] = r[2 * i].shuffle[0, 8, 1, 9, 4, 12, 5, 13](r[2 * i + 1])
        t[2 * i + 1] = r[2 * i].shuffle[2, 10, 3, 11, 6, 14, 7, 15](r[2 * i + 1])
    var u = B(fill=SIMD[DType.float32, 8](0.0))
    comptime for h in range(2):  # u[4h + q]: rows 4h..4h+3 of columns q and q + 4
        comptime for j in range(2):
            var x = t[4 * h + j]
            var y = t[4 * h + j + 2]
            u[4 * h + 2 * j] = x.shuffle[0, 1, 8, 9, 4, 5, 12, 13](y)
            u[4 * h + 2 * j + 1] = x.shuffle[2, 3, 10, 11, 6, 7, 14, 15](y)
    comptime for q in range(8):  # ascending: each store overwrites the last one's spill
        var x = u[q % 4]
        var y = u[q % 4 + 4]
        comptime if q < 4:
            dst.unsafe_offset(q * ld_dst).unsafe_store(x.shuffle[0, 1, 2, 3, 8, 9, 10, 11](y))
        else:
            dst.unsafe_offset(q * ld_dst).unsafe_store(
                x.shuffle[4, 5, 6, 7, 12, 13, 14, 15](y))


def _pack_a[MR: Int](a: F32P, m: Int, k: Int, i0: Int, mc: Int, p0: Int, kc: Int, dst: F32P):
    """op(A)[i0:i0+mc, p0:p0+kc] of op(A) = Aᵀ (A stored k × m: row p of A holds op(A)[:, p])
    as ceil(mc/MR) panels of kc steps × MR rows, zero padded (an op(A) = A is read in place,
    `_rows_on_packed_b`)."""
    var panels = (mc + MR - 1) // MR
    var first = 0  # whole panels in groups (`_pack_a_rows`)
    comptime if MR <= 8:
        while (first + PACK_GROUP) * MR <= mc:
            _pack_a_rows[MR, PACK_GROUP](a, m, k, i0 + first * MR, p0, kc,
                                         dst.unsafe_offset(first * kc * MR))
            first += PACK_GROUP
    for ip in range(first, panels):
        var out = dst.unsafe_offset(ip * kc * MR)
        var ib = i0 + ip * MR
        var rows = min(MR, i0 + mc - ib)
        # Whole panels of MR <= 8 rows move 8 floats per store; a store's floats past MR are
        # overwritten by the next one, and the panel's last one spills into the next panel
        # (written after it) or the slack `_gemm_blocked` leaves after the A panels.
        for p in range(kc):
            var src = a.unsafe_offset((p0 + p) * m + ib)
            comptime if MR <= 8:
                # A vector load stays inside A: its last row may end within 8 floats.
                if rows == MR and (p0 + p) * m + ib + 8 <= m * k:
                    out.unsafe_offset(p * MR).unsafe_store(src.unsafe_load[width=8]())
                    continue
            for ii in range(rows):
                out[unsafe_offset=p * MR + ii] = src[unsafe_offset=ii]
        for ii in range(rows, MR):
            for p in range(kc):
                out[unsafe_offset=p * MR + ii] = 0.0


comptime PACK_GROUP = 4  # panels of a transposed A packed together


@always_inline
def _pack_a_rows[MR: Int, PG: Int](a: F32P, m: Int, k: Int, ib: Int, p0: Int, kc: Int,
                                   dst: F32P):
    """PG whole panels of op(A) = Aᵀ (A stored k × m), columns ib.. of A: each row of A read
    once for all of them (PG·MR floats, a line or two), where panel after panel read each
    line PG times from L2 (the transformer's dW: MR floats a row, rows 0.5-2 KB apart). A
    store's 8 - MR floats past its row are overwritten by the next row's; the last row's
    would land in the next panel, already written: it stores MR."""
    for p in range(kc):
        var src = a.unsafe_offset((p0 + p) * m + ib)
        var whole = p < kc - 1
        comptime for g in range(PG):
            var o = dst.unsafe_offset(g * kc * MR + p * MR)
            if whole and (p0 + p) * m + ib + g * MR + 8 <= m * k:  # (inside A)
                o.unsafe_store(src.unsafe_load[width=8](g * MR))
            else:
                comptime for ii in range(MR):
                    o[unsafe_offset=ii] = src[unsafe_offset=g * MR + ii]


# ---------------------------------------------------------------- micro-kernel


def _pow2_at_least(x: Int) -> Int:
    var p = 1
    while p < x:
        p *= 2
    return p

@always_inline
def _micro[W: Int, MR: Int, NV: Int, LDA: Int = MR, IN_PLACE: Bool = False](
    kc: Int, ap: F32P, bp: F32P, c: F32P, ldc: Int, rows: Int, cols: Int, chain: Bool,
    fin: Epilogue, bias: F32P, lda: Int = 0,
) -> Bool:
    """The MR × (NV·W) tile of C at `c` from B's packed panel and A's packed one (LDA rows
    wide: a narrower tile reads the first MR rows of a wider panel) or, IN_PLACE, A's rows
    themselves (`lda` floats apart from `ap`); only rows×cols of it are real. The chain
    starts from +0.0, or from C when `chain` (accumulating, or a later k block). A whole tile
    goes through `fin`'s bias and ReLU in registers on its way out (`bias`: its first
    column's); returns whether it did (an edge tile leaves them to `_finish_tile`)."""
    comptime NR = NV * W
    # SIMD lengths are powers of two; lanes past MR·NR are never touched and optimized away.
    comptime T = _pow2_at_least(MR * NR)
    var acc = SIMD[DType.float32, T](0.0)
    var full = rows == MR and cols == NR
    if chain:
        if full:
            comptime for r in range(MR):
                comptime for v in range(NV):
                    acc = acc.insert[offset=(r * NV + v) * W](
                        c.unsafe_load[width=W](r * ldc + v * W))
        else:
            acc = _load_edge[W, MR, NV, T](c, ldc, rows, cols)
    # Two k steps per iteration (each output's chain still p ascending): the loop overhead
    # is paid once per two steps, and the scheduler sees both steps' loads ahead.
    # In place, a row's address each (rows past `rows` read the last real one: nothing
    # past A); packed, unused.
    var rows_at = StaticTuple[Int, MR](fill=0)
    comptime if IN_PLACE:
        comptime for r in range(MR):
            rows_at[r] = Int(ap) + 4 * min(r, rows - 1) * lda
    var p = 0
    while p + 2 <= kc:
        comptime for u in range(2):
            _k_step[W, MR, NV, T, LDA, IN_PLACE](acc, ap, rows_at, bp, p + u)
        p += 2
    if p < kc:
        _k_step[W, MR, NV, T, LDA, IN_PLACE](acc, ap, rows_at, bp, p)
    if full:
        # The epilogue in registers: a tile stored, then reloaded by `_finish_tile`, cost
        # ~45 cycles a vector where C's rows are not 64-byte aligned (no store forwarding).
        comptime for r in range(MR):
            comptime for v in range(NV):
                c.unsafe_offset(r * ldc + v * W).unsafe_store(
                    _finish[W](acc.slice[W, offset=(r * NV + v) * W](), fin,
                               bias.unsafe_offset(v * W)))
        return True
    _store_edge[W, MR, NV, T](acc, c, ldc, rows, cols)
    return False


@always_inline
def _k_step[W: Int, MR: Int, NV: Int, T: Int, LDA: Int, IN_PLACE: Bool](
    mut acc: SIMD[DType.float32, T], ap: F32P, rows_at: StaticTuple[Int, MR], bp: F32P, p: Int
):
    """One fma step of every accumulator: acc = fma(step p's A column, its B row, acc) (MR·NV
    independent chains, 12 in the production tile: enough to cover an fma's 4-cycle latency
    on two fma pipes); A's column from the packed panel, or IN_PLACE from rows_at[r] + 4p."""
    comptime NR = NV * W
    var brow = bp.unsafe_offset(p * NR)
    var arow = ap.unsafe_offset(p * LDA)
    comptime for r in range(MR):
        var x: Float32
        comptime if IN_PLACE:
            x = F32P(unsafe_from_address=rows_at[r])[unsafe_offset=p]
        else:
            x = arow[unsafe_offset=r]
        var av = SIMD[DType.float32, W](x)
        comptime for v in range(NV):
            comptime off = (r * NV + v) * W
            var bv = brow.unsafe_load[width=W](v * W)
            acc = acc.insert[offset=off](fma(av, bv, acc.slice[W, offset=off]()))


# An edge tile (fewer than MR rows or NR columns are real) moves one W-lane slice at a time:
# indexing the whole MR·NR-lane accumulator with a run-time lane spills all of it to the stack
# per element, which made n=16 products ~6× slower than a full tile at W=16.


@always_inline
def _load_edge[W: Int, MR: Int, NV: Int, T: Int](c: F32P, ldc: Int, rows: Int,
                                                 cols: Int) -> SIMD[DType.float32, T]:
    var acc = SIMD[DType.float32, T](0.0)
    comptime for r in range(MR):
        if r < rows:
            comptime for v in range(NV):
                var lanes = min(max(cols - v * W, 0), W)
                var src = c.unsafe_offset(r * ldc + v * W)
                var tile = SIMD[DType.float32, W](0.0)
                if lanes == W:
                    tile = src.unsafe_load[width=W]()
                else:
                    for j in range(lanes):
                        tile[j] = src[unsafe_offset=j]
                acc = acc.insert[offset=(r * NV + v) * W](tile)
    return acc


@always_inline
def _store_edge[W: Int, MR: Int, NV: Int, T: Int](acc: SIMD[DType.float32, T], c: F32P,
                                                  ldc: Int, rows: Int, cols: Int):
    """The real rows × cols of an edge tile into C."""
    comptime for r in range(MR):
        if r < rows:
            comptime for v in range(NV):
                var lanes = min(max(cols - v * W, 0), W)
                var out = c.unsafe_offset(r * ldc + v * W)
                var tile = acc.slice[W, offset=(r * NV + v) * W]()
                if lanes == W:
                    out.unsafe_store(tile)
                else:
                    for j in range(lanes):
                        out[unsafe_offset=j] = tile[j]


# ---------------------------------------------------------------- blocked driver


def _rows_on_packed_b[W: Int, MR: Int, NV: Int](
    a: F32P, m: Int, k: Int, ta: Bool, bp: F32P, c: F32P, n: Int, pc: Int, kc: Int, jc: Int,
    nc: Int, row_begin: Int, row_end: Int, chain: Bool, fin: Epilogue, ap: F32P,
):
    """Rows [row_begin, row_end) × columns [jc, jc + nc) of C for the k block [pc, pc + kc),
    from B's block packed at `bp`. An op(A) = A is read where it lies (a tile's broadcasts
    from its rows, each k-contiguous); an op(A) = Aᵀ is packed MC rows at a time into `ap`
    (in place, a tile's k steps would be rows of A apart: 0.6-0.8x at 1 thread)."""
    if ta:
        _rows_from[W, MR, NV, False](a, m, k, ta, bp, c, n, pc, kc, jc, nc, row_begin,
                                     row_end, chain, fin, ap)
    else:
        # Packing A read and wrote all of it once per column block for nothing the tile
        # needs: in place, one thread's [784, 256, 10] forward product ran 1.05x faster,
        # 4096 × 256 × 1024 1.04x, narrow ones (n = 10, 33, 65) 1.1-1.35x, wide ones (4096
        # × 1024 × 256, 1024 × 1024 × 256) 0.996-1.003x (in-process, an Intel Xeon,
        # x86-64-v4), and threads that split the columns no longer each pack all of A.
        _rows_from[W, MR, NV, True](a, m, k, ta, bp, c, n, pc, kc, jc, nc, row_begin,
                                    row_end, chain, fin, ap)


@always_inline
def _rows_from[W: Int, MR: Int, NV: Int, IN_PLACE: Bool, PACKED: Bool = False](
    a: F32P, m: Int, k: Int, ta: Bool, bp: F32P, c: F32P, n: Int, pc: Int, kc: Int, jc: Int,
    nc: Int, row_begin: Int, row_end: Int, chain: Bool, fin: Epilogue, ap: F32P,
):
    """`_rows_on_packed_b`'s loops; PACKED: `ap` holds all of op(A)'s rows packed already
    (`gemm_pack_a`, one k block), `a` unread."""
    comptime NR = NV * W
    for ic in range(row_begin, row_end, MC):
        var mc = min(MC, row_end - ic)
        comptime if not IN_PLACE and not PACKED:
            _pack_a[MR](a, m, k, ic, mc, pc, kc, ap)
        for jr in range(0, nc, NR):
            var bpanel = bp.unsafe_offset(jr * kc)
            for ir in range(0, mc, MR):
                var rows = min(MR, mc - ir)
                var apanel: F32P
                comptime if IN_PLACE:
                    apanel = a.unsafe_offset((ic + ir) * k + pc)
                elif PACKED:
                    apanel = ap.unsafe_offset((ic + ir) * kc)
                else:
                    apanel = ap.unsafe_offset(ir * kc)
                var ct = c.unsafe_offset((ic + ir) * n + jc + jr)
                var cols = min(NR, nc - jr)
                var bias = F32P(unsafe_from_address=fin.bias).unsafe_offset(jc + jr)
                var done: Bool
                # A last panel of 1-2 (3-4) rows takes a 2-row (4-row) tile: at 32
                # rows a full 6-row one wasted 2/3 of a sixth of the product.
                comptime if MR > 4:
                    if rows <= 2:
                        done = _micro[W, 2, NV, MR, IN_PLACE](kc, apanel, bpanel, ct, n, rows,
                                                              cols, chain, fin, bias, k)
                    elif rows <= 4:
                        done = _micro[W, 4, NV, MR, IN_PLACE](kc, apanel, bpanel, ct, n, rows,
                                                              cols, chain, fin, bias, k)
                    else:
                        done = _micro[W, MR, NV, MR, IN_PLACE](kc, apanel, bpanel, ct, n, rows,
                                                               cols, chain, fin, bias, k)
                else:
                    done = _micro[W, MR, NV, MR, IN_PLACE](kc, apanel, bpanel, ct, n, rows,
                                                           cols, chain, fin, bias, k)
                if fin.loss != 0 or (fin.any() and not done):
                    _finish_tile[W](ct, n, rows, cols, Epilogue(0, False, fin.loss) if done
                                    else fin, bias, ic + ir)


@always_inline
def _round_up(x: Int, to: Int) -> Int:
    return (x + to - 1) // to * to


def _blocked_bytes[MR: Int, NR: Int](rows: Int, cols: Int, k: Int, kc_max: Int) -> Int:
    """The packing buffer `_gemm_blocked` needs for `rows` × `cols` of C: one k block of a
    column block of B and of a row block of A, in whole panels, and the alignment slack (at
    least PANEL_ALIGN bytes after the A panels for `_pack_a`'s spill of up to 8 - MR floats).
    Packing writes every float of a panel, padding included: the buffer needs no zero fill."""
    var kcb = min(kc_max, max(k, 1))
    var panels = _round_up(min(NC, cols), NR) + _round_up(min(MC, rows), MR)
    return 4 * kcb * panels + 2 * PANEL_ALIGN




def _gemm_blocked[W: Int, MR: Int, NV: Int](
    a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool, accumulate: Bool,
    row_begin: Int, row_end: Int, col_begin: Int = 0, col_end: Int = -1,
    epi: Epilogue = Epilogue.none(), buf: Int = 0,
):
    """Rows [row_begin, row_end) and columns [col_begin, col_end) of C (col_end -1: n),
    each output through `epi` once final; packing into `buf` (`_blocked_bytes`), or into a
    buffer of its own when `buf` is 0."""
    comptime NR = NV * W
    var c_end = n if col_end < 0 else col_end
    if row_begin >= row_end or col_begin >= c_end:
        return
    if k == 0:  # no products: the chain is +0.0, or C itself when accumulating
        if not accumulate:
            for i in range(row_begin, row_end):
                for j in range(col_begin, c_end):
                    c[unsafe_offset=i * n + j] = 0.0
        if epi.any():
            var at = row_begin * n + col_begin
            _finish_tile[W](c.unsafe_offset(at), n, row_end - row_begin, c_end - col_begin, epi,
                            F32P(unsafe_from_address=epi.bias).unsafe_offset(col_begin),
                            row_begin)
        return
    var kcb = min(KC, k)
    var b_floats = kcb * _round_up(min(NC, c_end - col_begin), NR)
    var own = Scratch(buf, False)
    if buf == 0:
        own = scratch(0, _blocked_bytes[MR, NR](row_end - row_begin, c_end - col_begin, k, KC))
    # B panels on a cache line: unaligned, every other 32-byte load of a panel row straddled
    # two lines, and 1024³ ran ~8 % slower. A panels are read one float at a time.
    var bp = F32P(unsafe_from_address=_round_up(own.addr, PANEL_ALIGN))
    var ap = bp.unsafe_offset(b_floats)
    for jc in range(col_begin, c_end, NC):
        var nc = min(NC, c_end - jc)
        for pc in range(0, k, kcb):
            var kc = min(kcb, k - pc)
            _pack_b[NR](b, n, k, tb, pc, kc, jc, nc, bp)
            # The chain is final only after its last k block.
            var fin = epi if pc + kc >= k else Epilogue.none()
            _rows_on_packed_b[W, MR, NV](a, m, k, ta, bp, c, n, pc, kc, jc, nc, row_begin,
                                         row_end, pc > 0 or accumulate, fin, ap)
    release(own)


def gemm_on[W: Int, NV: Int](a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool,
                             tb: Bool, accumulate: Bool, row_begin: Int, row_end: Int,
                             col_begin: Int = 0, col_end: Int = -1,
                             epi: Epilogue = Epilogue.none(), buf: Int = 0):
    """The packed kernel with a 6 × (NV·W) register tile at SIMD width W: the bits of
    `gemm_naive` at every W and NV (then `epi`). Tests run several tiles; `gemm` picks one."""
    _gemm_blocked[W, TILE_MR, NV](a, b, c, m, n, k, ta, tb, accumulate, row_begin, row_end,
                                  col_begin, col_end, epi, buf)


def gemm_tile_cols(n: Int) -> Int:
    """The width of `gemm`'s register tile for n columns: 2 vectors (6 × 2 = 12 accumulators,
    two B loads, a broadcast: 15 of 16 ymm registers at W = 8, or 15 of 32 zmm at W = 16),
    or one for narrow products (n ≤ W, as in the MLP), or 8 when n ≤ 8 and W = 16, so the
    tile is not mostly padding. Every output's chain is the same under every tile."""
    comptime if VW >= 16:
        if n <= VW // 2:
            return VW // 2
    return VW if n <= VW else 2 * VW


def gemm(a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
         accumulate: Bool, row_begin: Int, row_end: Int, col_begin: Int = 0, col_end: Int = -1,
         epi: Epilogue = Epilogue.none(), buf: Int = 0):
    """The GEMM of both modes, on rows [row_begin, row_end) and columns [col_begin, col_end)
    of C (col_end -1: all n), each output through `epi`; packing into `buf` (at least
    `gemm_bytes`) or, when it is 0, into a buffer of its own."""
    var nr = gemm_tile_cols(n)
    comptime if VW >= 16:
        if nr == VW // 2:
            gemm_on[VW // 2, 1](a, b, c, m, n, k, ta, tb, accumulate, row_begin, row_end,
                                col_begin, col_end, epi, buf)
            return
    if nr == VW:
        gemm_on[VW, 1](a, b, c, m, n, k, ta, tb, accumulate, row_begin, row_end, col_begin,
                       col_end, epi, buf)
        return
    gemm_on[VW, 2](a, b, c, m, n, k, ta, tb, accumulate, row_begin, row_end, col_begin,
                   col_end, epi, buf)


def gemm_tiles_hold_rows(n: Int) -> Bool:
    """Whether every register tile of `gemm` on an n-column C holds whole rows (so an
    Epilogue's `loss` may see each row once it is final)."""
    return n <= gemm_tile_cols(n)


def gemm_bytes(n: Int, k: Int, rows: Int, cols: Int) -> Int:
    """The packing buffer `gemm` needs to compute `rows` rows × `cols` columns of an m × n
    product over k (any rows and columns that many)."""
    return _blocked_bytes[TILE_MR, 2 * VW](rows, cols, k, KC)  # the widest tile needs most


# ---------------------------------------------------------------- columns on one packed op(A)


def gemm_packs_a_once(m: Int, k: Int, ta: Bool) -> Bool:
    """Whether a thread that claims columns packs op(A) = Aᵀ once (`gemm_pack_a`): one k
    block, and small enough to stay in its L2 (SHARED_MAX_FLOATS) while the claims read it."""
    return ta and 0 < k and k <= KC and m * k <= SHARED_MAX_FLOATS


def gemm_columns_bytes(m: Int, k: Int, cols: Int) -> Int:
    """The buffer of a thread that packs all of op(A) (`gemm_pack_a`) and then computes
    `cols` columns at a time over it (`gemm_columns`): the A panels, B's, and the slack."""
    return 4 * k * (_round_up(m, TILE_MR) + _round_up(cols, 2 * VW)) + 4 * PANEL_ALIGN


def gemm_pack_a(a: F32P, m: Int, k: Int, buf: Int):
    """All of op(A) = Aᵀ (A stored k × m, k ≤ KC) packed into `buf` as `gemm` packs its row
    blocks, for `gemm_columns`."""
    _pack_a[TILE_MR](a, m, k, 0, m, 0, k, F32P(unsafe_from_address=_round_up(buf, PANEL_ALIGN)))


def gemm_columns(m: Int, n: Int, k: Int, b: F32P, tb: Bool, c: F32P, accumulate: Bool,
                 epi: Epilogue, col_begin: Int, col_end: Int, buf: Int):
    """Columns [col_begin, col_end) of C (+)= op(A)·op(B) through `epi`, every row, from the
    op(A) that `gemm_pack_a` packed into `buf` (B's panels after it): the bits of `gemm`.
    A thread that claims columns a chunk at a time packs op(A) once, where `gemm` would pack
    it again each chunk."""
    var nr = gemm_tile_cols(n)
    comptime if VW >= 16:
        if nr == VW // 2:
            _columns_on[VW // 2, 1](m, n, k, b, tb, c, accumulate, epi, col_begin, col_end, buf)
            return
    if nr == VW:
        _columns_on[VW, 1](m, n, k, b, tb, c, accumulate, epi, col_begin, col_end, buf)
        return
    _columns_on[VW, 2](m, n, k, b, tb, c, accumulate, epi, col_begin, col_end, buf)


def _columns_on[W: Int, NV: Int](m: Int, n: Int, k: Int, b: F32P, tb: Bool, c: F32P,
                                 accumulate: Bool, epi: Epilogue, col_begin: Int, col_end: Int,
                                 buf: Int):
    var ap = F32P(unsafe_from_address=_round_up(buf, PANEL_ALIGN))
    var bp = F32P(unsafe_from_address=_round_up(
        Int(ap) + 4 * _round_up(m, TILE_MR) * k + 2 * PANEL_ALIGN, PANEL_ALIGN))
    _pack_b[NV * W](b, n, k, tb, 0, k, col_begin, col_end - col_begin, bp)
    _rows_from[W, TILE_MR, NV, False, True](ap, m, k, True, bp, c, n, 0, k, col_begin,
                                            col_end - col_begin, 0, m, accumulate, epi, ap)


# ---------------------------------------------------------------- rows by blocks of op(B)


def gemm_blocks(n: Int, k: Int) -> Tuple[Int, Int]:
    """`gemm`'s blocks of op(B): (column blocks of NC, k blocks of KC)."""
    return ((n + NC - 1) // NC, (k + KC - 1) // KC if k > 0 else 1)


def gemm_block_pack(b: F32P, n: Int, k: Int, tb: Bool, block: Int, buf: Int):
    """Block `block` (column block × k blocks + k block) of op(B) packed into `buf` (at least
    `gemm_bytes`), as `gemm` packs it."""
    var nr = gemm_tile_cols(n)
    comptime if VW >= 16:
        if nr == VW // 2:
            _block_pack[VW // 2](b, n, k, tb, block, buf)
            return
    if nr == VW:
        _block_pack[VW](b, n, k, tb, block, buf)
        return
    _block_pack[2 * VW](b, n, k, tb, block, buf)


def gemm_block_rows(a: F32P, m: Int, n: Int, k: Int, ta: Bool, c: F32P, accumulate: Bool,
                    epi: Epilogue, block: Int, row_begin: Int, row_end: Int, buf: Int):
    """Rows [row_begin, row_end) of C over block `block` of op(B), packed in `buf` by
    `gemm_block_pack`: the chains from C after the column block's first k block (or when
    `accumulate`), through `epi` after its last. Over every block in order: `gemm`'s bits."""
    var nr = gemm_tile_cols(n)
    comptime if VW >= 16:
        if nr == VW // 2:
            _block_rows[VW // 2, 1](a, m, n, k, ta, c, accumulate, epi, block, row_begin,
                                    row_end, buf)
            return
    if nr == VW:
        _block_rows[VW, 1](a, m, n, k, ta, c, accumulate, epi, block, row_begin, row_end, buf)
        return
    _block_rows[VW, 2](a, m, n, k, ta, c, accumulate, epi, block, row_begin, row_end, buf)


@always_inline
def _block_at(n: Int, k: Int, block: Int) -> Tuple[Int, Int, Int, Int]:
    """Block `block`'s first column, columns, first k and depth."""
    var kcb = min(KC, k)
    var pcs = gemm_blocks(n, k)[1]
    var jc = block // pcs * NC
    var pc = block % pcs * kcb
    return (jc, min(NC, n - jc), pc, min(kcb, k - pc))


def _block_pack[NR: Int](b: F32P, n: Int, k: Int, tb: Bool, block: Int, buf: Int):
    var at = _block_at(n, k, block)
    _pack_b[NR](b, n, k, tb, at[2], at[3], at[0], at[1],
                F32P(unsafe_from_address=_round_up(buf, PANEL_ALIGN)))


def _block_rows[W: Int, NV: Int](a: F32P, m: Int, n: Int, k: Int, ta: Bool, c: F32P,
                                 accumulate: Bool, epi: Epilogue, block: Int, row_begin: Int,
                                 row_end: Int, buf: Int):
    comptime NR = NV * W
    var at = _block_at(n, k, block)
    var bp = F32P(unsafe_from_address=_round_up(buf, PANEL_ALIGN))
    var ap = bp.unsafe_offset(min(KC, k) * _round_up(min(NC, n), NR))
    var fin = epi if at[2] + at[3] >= k else Epilogue.none()
    _rows_on_packed_b[W, TILE_MR, NV](a, m, k, ta, bp, c, n, at[2], at[3], at[0], at[1],
                                      row_begin, row_end, at[2] > 0 or accumulate, fin, ap)


# ---------------------------------------------------------------- one packed B, many threads

comptime SHARED_CHUNK = 24  # the most rows of C a thread claims at a time (four 6-row tiles)


def shared_chunk(m: Int, threads: Int) -> Int:
    """Rows of C a thread claims at a time: whole 6-row tiles, at least 16 claims a thread
    (so the threads end a product at most a small claim apart: at [784, 256, 10] batch 256 a
    24-row claim is ~45 µs of one core; 2 threads ran its step 1.6x faster than one with 24
    rows, 1.7x with 6), at most SHARED_CHUNK (each claim reads all of the packed B from L2:
    the transformer at batch 64 ran 1.45x with 6 rows, 1.8x with 24)."""
    var rows = m // (16 * threads) // TILE_MR * TILE_MR
    return max(TILE_MR, min(SHARED_CHUNK, rows))


comptime SHARED_PIECE = 4  # B panels a thread packs at a time
comptime _OP_FLOATS = 0
comptime _OP_PIECES = 1
comptime _OP_PACK = 2
comptime _OP_ROWS = 3


@fieldwise_init
struct SharedGemm(ImplicitlyCopyable):
    """C (+)= op(A)·op(B) through `epi`, all of C, the bits of `gemm`, for threads that share
    one packed op(B) (`shared_fits`): they pack its pieces into `bp` (`shared_pack`, any
    thread any piece), and once every piece is packed they compute rows of C from it
    (`shared_rows`), each with its own A buffer. Splitting rows with a private B instead
    packs all of op(B) once per thread: at [784, 256, 10] batch 256 that is 0.8 MB a product."""

    var a: Int
    var b: Int
    var c: Int
    var m: Int
    var n: Int
    var k: Int
    var ta: Bool
    var tb: Bool
    var accumulate: Bool
    var epi: Epilogue
    var bp: Int  # shared_b_floats(n, k) floats on a PANEL_ALIGN boundary
    var ap: Int  # the parts' A buffers, shared_a_floats(k) floats each
    var chunk: Int  # rows a claim computes (`shared_chunk`)


# The deepest op(B) the threads share as one block: with k past KC the rows run one k range
# (an A panel of 6 × 1024 floats still fits L1), which at [784, 256, 10] batch 256 packs W1
# once instead of once per thread and lets the faster thread take more rows.
comptime SHARED_KC = 1024


# The largest op(B) the threads share, in floats (1 MB: half an Intel Xeon's L2, where each
# claim of rows reads all of it). Above it each part packs its own (the blocked `gemm`'s
# blocks stay in its L2): two threads over one, in-process on that Xeon, [1024, 512, 10] at
# batch 512 (B 2 MB) 1.52x shared, 1.82x not; [1024, 1024, 1024, 10] at 1024 (4 MB) 1.55x,
# 1.91x; [512, 512, 10] at 512 (1 MB) 1.60x both ways; [784, 256, 10] at 256 (0.8 MB) 1.59x
# shared, 1.46x not.
comptime SHARED_MAX_FLOATS = 1 << 18


def shared_fits(n: Int, k: Int) -> Bool:
    """Whether op(B) is one block the threads can share (at most NC columns, SHARED_KC deep,
    SHARED_MAX_FLOATS in all)."""
    return k > 0 and n <= NC and k <= max(KC, SHARED_KC) and k * n <= SHARED_MAX_FLOATS


def shared_b_floats(n: Int, k: Int) -> Int:
    return _shared(SharedGemm(0, 0, 0, 0, n, k, False, False, False, Epilogue.none(), 0, 0, 0),
                   _OP_FLOATS, 0, 0, 0)


def shared_pieces(n: Int, k: Int) -> Int:
    return _shared(SharedGemm(0, 0, 0, 0, n, k, False, False, False, Epilogue.none(), 0, 0, 0),
                   _OP_PIECES, 0, 0, 0)


def shared_a_floats(k: Int) -> Int:
    """The A buffer a thread needs for `shared_rows` (with `_pack_a`'s slack)."""
    return ((SHARED_CHUNK + TILE_MR - 1) // TILE_MR) * TILE_MR * k + 2 * PANEL_ALIGN // 4


def shared_pack(g: SharedGemm, piece: Int):
    _ = _shared(g, _OP_PACK, piece, 0, 0)


def shared_rows(g: SharedGemm, row_begin: Int, row_end: Int, ap: F32P):
    """Rows [row_begin, row_end) of C (at most SHARED_CHUNK) from the packed B."""
    _ = _shared(g, _OP_ROWS, row_begin, row_end, Int(ap))


def _shared(g: SharedGemm, op: Int, x: Int, y: Int, ap: Int) -> Int:
    """`op` with the register tile `gemm` takes for this product."""
    var nr = gemm_tile_cols(g.n)
    comptime if VW >= 16:
        if nr == VW // 2:
            return _shared_on[VW // 2, 1](g, op, x, y, ap)
    if nr == VW:
        return _shared_on[VW, 1](g, op, x, y, ap)
    return _shared_on[VW, 2](g, op, x, y, ap)


def _shared_on[W: Int, NV: Int](g: SharedGemm, op: Int, x: Int, y: Int, ap: Int) -> Int:
    comptime NR = NV * W
    var panels = (g.n + NR - 1) // NR
    if op == _OP_FLOATS:
        return g.k * panels * NR
    if op == _OP_PIECES:
        return (panels + SHARED_PIECE - 1) // SHARED_PIECE
    var bp = F32P(unsafe_from_address=g.bp)
    if op == _OP_PACK:  # panel j0 / NR of the block starts at float j0 * k
        var j0 = x * SHARED_PIECE * NR
        _pack_b[NR](F32P(unsafe_from_address=g.b), g.n, g.k, g.tb, 0, g.k, j0,
                    min(SHARED_PIECE * NR, g.n - j0), bp.unsafe_offset(j0 * g.k))
        return 0
    var abuf = (ap + PANEL_ALIGN - 1) // PANEL_ALIGN * PANEL_ALIGN
    _rows_on_packed_b[W, TILE_MR, NV](F32P(unsafe_from_address=g.a), g.m, g.k, g.ta, bp,
                                      F32P(unsafe_from_address=g.c), g.n, 0, g.k, 0, g.n, x, y,
                                      g.accumulate, g.epi, F32P(unsafe_from_address=abuf))
    return 0
