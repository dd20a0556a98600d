"""Worker threads for the training step: MOJOLEARN_NUM_THREADS = N runs N - 1 workers beside
the calling thread, each split GEMM cut into N parts of its outputs (rows or columns of C),
never along k, and each split AdamW update into N ranges of its elements, so every thread
count gives the same bits in both numeric modes.

The threads are Python threads (mojolearn/_runtime/threads.py) parked in `serve` with the GIL released;
the pool is a calloc'd block of Int64 words, its address the handle. A split GEMM publishes
its task, runs part 0 itself (so the rows or parameters it wrote in this step's last task of
that shape are, as a rule, its own, in its caches), then every thread, the caller included,
claims parts from an atomic counter until none is left; the caller then waits for the parts
others claimed. A worker that is asleep (or was
never started, as in a forked child) claims nothing, and the caller runs every part itself: a
task never waits for a worker to wake.

Idle workers spin for about SPIN_NS (the gaps between a step's products are shorter) after
their last part of a task that is not a side task (one split only because they spin: its parts
would not pay for waking them, and must not keep them spinning), then sleep: on x86-64 Linux in futex_wait on the WAKE word, which a caller publishing a task bumps
and wakes only while a worker sleeps; elsewhere they poll every SLEEP_US microseconds.
"""
from std.atomic import Atomic
from std.ffi import external_call
from std.os import abort
from std.sys import simd_width_of, size_of
from std.sys.info import CompilationTarget
from std.time import perf_counter_ns

from training.arena import Scratch, release, scratch
from training.config import F32P, I64P
from training.gemm import (
    PANEL_ALIGN,
    TILE_MR,
    SHARED_CHUNK,
    shared_chunk,
    Epilogue,
    SharedGemm,
    gemm,
    gemm_block_pack,
    gemm_block_rows,
    gemm_blocks,
    gemm_bytes,
    gemm_columns,
    gemm_columns_bytes,
    gemm_pack_a,
    gemm_packs_a_once,
    gemm_tile_cols,
    SHARED_MAX_FLOATS,
    shared_a_floats,
    shared_b_floats,
    shared_fits,
    shared_pack,
    shared_pieces,
    shared_rows,
)
from training.optim import AdamScalars, adam_update_into

comptime MAGIC = 0x6D6C706F6F6C3031  # "mlpool01"
# 200 µs: a resident step's serial part between two steps (the Python call, the checks, the
# result views: ~60-80 µs at [784, 256, 10] batch 256) stays under it, so the worker is
# spinning when the next step's first product starts (with 50 µs it slept and joined late).
comptime SPIN_NS = 200_000
comptime SLEEP_US = 100
comptime _FUTEX = CompilationTarget.is_x86() and CompilationTarget.is_linux()
comptime SYS_FUTEX = 202  # x86-64 Linux
comptime FUTEX_WAIT_PRIVATE = 128
comptime FUTEX_WAKE_PRIVATE = 129
# Whether to split: each part must get enough work that the hand-over and, above all, the
# cache lines that move between the cores' L2s (a part reads what another core wrote) are a
# small share of it. Measured with tools/bench_mlp.py and tools/bench_models.py at 1 and 2
# threads on an AMD EPYC Zen 4 (x86-64-v4 build, 16 lanes): with 2^17 multiply-adds a part,
# [54,256,256,7] batch 32 (products of 2.1M and 0.4M) ran at 0.73x of one thread and
# [64,128,10] batch 256 (2.1M) at 0.92x, while [784,256,10] batch 32 (6.4M) gained 1.47x;
# at 2^21 a part (~40 µs of one core's GEMM) the small cells stay on one thread and the large
# ones still split. A build with half the lanes (v3: 8) does a part's multiply-adds in about
# twice the time, so half the count pays there.
comptime MIN_PART_MACS = (1 << 21) if simd_width_of[DType.float32]() >= 16 else (1 << 20)
# A layer's own parts (`parts_for`: convolutions, pools, attention, masks and sums) each read
# and write their own examples, planes or channels, with little shared between them: measured
# the same way, LeNet-5 at batch 256 ran 1.8x faster on 2 threads with 2^17 a part and 1.43x
# with 2^21 (its masks, sums and small pools then stayed on one thread).
comptime MIN_LAYER_WORK = 1 << 17
# A product under MIN_PART_MACS a part is still cut in two from this many multiply-adds when
# its work does not end at them and the workers are spinning (`pool_awake`): a Linear's dW and
# dX side by side (training/model.mojo), and a product's rows (`split_gemm`): the output
# Linear whose epilogue computes the loss (each row's exp and log: [784, 256, 10] at batch
# 256 spent ~30 µs a step there, the other core waiting), LeNet-5's 120 -> 84 Linear and
# [54, 256, 256, 7]'s first (2.6 M and 3.5 M at batch 256: in-process, two threads over one
# 1.69 -> 1.71 and 1.36 -> 1.44 on an Intel Xeon). At 2^18, [64, 128, 10] at batch 256 ran
# its second layer's pair (328 k each) side by side, and two threads were slower than one.
comptime SIDE_MACS = 1 << 19
comptime MIN_PIECE = 32  # rows or columns a part: every part packs all of the other operand
comptime SHARED_MIN_ROWS = 192  # a shared B pays for its hand-over from this many rows of C
# An AdamW range (~0.6 ns an element in identical mode, where its square root and two
# divisions bound it; four streams in and three out) is split only at 2^16 elements a part
# (~40 µs): below that, moving the ranges' lines between cores costs what the split saves.
comptime MIN_SPLIT_ELEMENTS = 1 << 16

# Words of the block. NEXT and PARTS carry the task's generation in their high 32 bits, so a
# claim that raced with the end of a task is recognised as stale and dropped.
comptime P_MAGIC = 0
comptime P_WORKERS = 1
comptime P_STOP = 2
comptime P_NEXT = 3  # generation << 32 | the next part to claim (atomic)
comptime P_DONE = 4  # parts finished (atomic)
comptime P_PARTS = 5  # generation << 32 | parts of the current task
comptime P_BUSY = 6  # a calling thread owns the pool (try-lock: others run alone)
comptime P_GEN = 7  # the last task's generation (written by the owner only)
comptime P_TASK = 8  # GEMM: a, b, c, m, n, k, ta, tb, accumulate, KIND_*; AdamW and a shared
# GEMM: the task's address (in P_CTX), then the kind in the same last slot
comptime P_KIND = P_TASK + 9
comptime P_BAD = 18  # parts of an AdamW task that found a NaN/Inf (atomic)
comptime P_BUF = 19  # KIND_ROWS / KIND_COLUMNS: the parts' packing buffers (0: each its own)
comptime P_WORKER_PARTS = 20  # parts the workers ran (atomic): tests see that they take part
comptime P_WAKE = 21  # bumped at every task (the futex word: its low 32 bits)
comptime P_SLEEPERS = 22  # workers about to sleep or asleep (atomic)
comptime P_BUF_STRIDE = 23  # bytes from one part's packing buffer (P_BUF) to the next
comptime P_EPI = 24  # a GEMM's Epilogue: bias address, relu, loss address
comptime P_CHUNK = 27  # KIND_ROWS, KIND_COLUMNS: rows or columns a claim
comptime P_PACK_NEXT = 28  # KIND_SHARED: B pieces claimed from the front | from the back << 32
comptime P_PACK_DONE = 29  # KIND_SHARED: B pieces packed (atomic)
# KIND_SHARED, KIND_COLUMNS: chunks of rows or columns claimed, as P_PACK_NEXT (`_claim_end`)
comptime P_CHUNK_NEXT = 30
comptime P_ROWS_AT = 31  # KIND_ROWS: the address of its counters (`_run_rows`)
# The task's context (`_hold`): what the parts read lives here, in the pool's own block, never
# on a caller's stack. A struct on the caller's stack, handed to the parts as an Int address,
# was read as garbage (a part jumped to a wild address) after an unrelated change to
# `_run_task`: an address turned into an Int keeps neither the struct's stores nor its stack
# slot alive for the compiler, and a "keep alive" read of one of its fields after the task
# did not either (mojo/tests/test_pool.mojo).
comptime P_CTX = 32
comptime CTX_WORDS = 64
# The task is split only because the workers spin (`_run_task`): running its parts does not
# keep a worker spinning. When it did, [64, 128, 10] at batch 256 in `train_steps` (woken by
# the input check, then its two 2.1 M multiply-add products cut in two step after step) kept
# the worker spinning all along (~5 ms of each 8 ms call) and ran 0.95x one thread; now the
# worker sleeps after the first steps: 1.01x (in-process, perf's samples, an Intel Xeon).
comptime P_SIDE = P_CTX + CTX_WORDS
comptime WORDS = P_SIDE + 1
comptime LOW = (Int64(1) << 32) - 1
comptime KIND_ROWS = 0  # a GEMM cut by rows of C (claimed in chunks, `_run_rows`)
comptime KIND_COLUMNS = 1  # a GEMM cut by columns of C
comptime KIND_ADAM = 2  # an AdamW update cut into ranges of its elements
comptime KIND_SHARED = 3  # a GEMM whose packed B the parts share (gemm.mojo SharedGemm); its
# address in P_TASK
comptime KIND_PARTS = 4  # a layer's own parts (`split_parts`): a PartsTask in P_TASK's words

# A layer's part: run(context address, part, parts). Each part writes outputs no other part
# writes, and every part computes its outputs in the one pinned order: the bits do not depend
# on how the parts fall on threads.
comptime PartFn = def(Int, Int, Int) thin -> None


@fieldwise_init
struct PartsTask(ImplicitlyCopyable):
    var run: PartFn
    var ctx: Int


@fieldwise_init
struct AdamTask(ImplicitlyCopyable):
    """One `adam_update_into` call, as the pool holds it while the parts run."""

    var p_in: Int
    var g: Int
    var m_in: Int
    var v_in: Int
    var p_out: Int
    var m_out: Int
    var v_out: Int
    var n: Int
    var s: AdamScalars


def pool_open(workers: Int) -> Int:
    """A pool for `workers` threads (they call `serve`); 0 when the allocation fails."""
    var addr = external_call["calloc", Int](WORDS, 8)
    if addr != 0:
        var w = I64P(unsafe_from_address=addr)
        w[unsafe_offset=P_MAGIC] = MAGIC
        w[unsafe_offset=P_WORKERS] = Int64(workers)
    return addr


def is_pool(addr: Int) -> Bool:
    return addr != 0 and I64P(unsafe_from_address=addr)[unsafe_offset=P_MAGIC] == MAGIC


def pool_stop(addr: Int):
    """Ask every worker to return from `serve`."""
    Atomic[Int64].store(_word(addr, P_STOP), 1)
    _wake(addr)


def worker_parts(addr: Int) -> Int:
    """Parts the pool's workers have run so far."""
    return Int(Atomic[Int64].load(_word(addr, P_WORKER_PARTS)))


@always_inline
def _word(addr: Int, i: Int) -> I64P:
    return I64P(unsafe_from_address=addr + 8 * i)


def serve(addr: Int):
    """A worker's loop: claim and run parts until `pool_stop`. Pure Mojo (no GIL needed)."""
    var idle_since = perf_counter_ns()
    while Atomic[Int64].load(_word(addr, P_STOP)) == 0:
        var ran = _claim_and_run(addr, True)
        if ran == 2:
            idle_since = perf_counter_ns()
        elif ran == 0 and Int(perf_counter_ns() - idle_since) > SPIN_NS:
            _sleep(addr)
            idle_since = perf_counter_ns()


def _sleep(addr: Int):
    comptime if _FUTEX:
        var seen = Atomic[Int64].load(_word(addr, P_WAKE))
        _ = Atomic[Int64].fetch_add(_word(addr, P_SLEEPERS), 1)
        # A task published after `seen` was read either shows in this check or changes the
        # word, and futex_wait then returns at once: no wake-up is lost.
        if not _has_work(addr) and Atomic[Int64].load(_word(addr, P_STOP)) == 0:
            _ = external_call["syscall", Int](SYS_FUTEX, addr + 8 * P_WAKE, FUTEX_WAIT_PRIVATE,
                                              Int(seen & LOW), 0, 0, 0)
        _ = Atomic[Int64].fetch_add(_word(addr, P_SLEEPERS), -1)
    else:
        _ = external_call["usleep", Int32](UInt32(SLEEP_US))


def _wake(addr: Int):
    """Bump the WAKE word and wake the sleeping workers, if any (a syscall only then)."""
    _ = Atomic[Int64].fetch_add(_word(addr, P_WAKE), 1)
    comptime if _FUTEX:
        if Atomic[Int64].load(_word(addr, P_SLEEPERS)) > 0:
            _ = external_call["syscall", Int](SYS_FUTEX, addr + 8 * P_WAKE, FUTEX_WAKE_PRIVATE,
                                              1 << 30, 0, 0, 0)


def _has_work(addr: Int) -> Bool:
    var task = Atomic[Int64].load(_word(addr, P_PARTS))
    var next = Atomic[Int64].load(_word(addr, P_NEXT))
    return next >> 32 == task >> 32 and next & LOW < task & LOW


def _claim_and_run(addr: Int, worker: Bool) -> Int:
    """Run parts of the current task while any is left: 0 if this thread ran none, 1 if only
    parts of a task that runs because the workers spin (P_SIDE), else 2."""
    var ran = 0
    while _has_work(addr):
        var claim = Atomic[Int64].fetch_add(_word(addr, P_NEXT), 1)
        # PARTS read after the claim describes the claim's own task whenever the claim is
        # good (a task's PARTS is published before its NEXT, and the next task's only after
        # every part of this one is done). A stale generation or a part past the end means
        # the task ended meanwhile or another thread took its last part.
        var task = Atomic[Int64].load(_word(addr, P_PARTS))
        if claim >> 32 != task >> 32 or claim & LOW >= task & LOW:
            return ran
        var side = I64P(unsafe_from_address=addr)[unsafe_offset=P_SIDE] != 0
        _run_part(addr, Int(claim & LOW), Int(task & LOW))
        if worker:
            _ = Atomic[Int64].fetch_add(_word(addr, P_WORKER_PARTS), 1)
        _ = Atomic[Int64].fetch_add(_word(addr, P_DONE), 1)
        ran = max(ran, 1 if side else 2)
    return ran


def _run_part(addr: Int, part: Int, parts: Int):
    var w = I64P(unsafe_from_address=addr)
    var t = P_TASK
    if w[unsafe_offset=P_KIND] == KIND_ADAM:
        var task = Pointer[AdamTask, MutAnyOrigin](unsafe_from_address=Int(w[unsafe_offset=t]))[]
        var lo = _cut(task.n, part, parts, 16)
        var hi = _cut(task.n, part + 1, parts, 16)
        if not adam_update_into(_f(task.p_in, lo), _f(task.g, lo), _f(task.m_in, lo),
                                _f(task.v_in, lo), _f(task.p_out, lo), _f(task.m_out, lo),
                                _f(task.v_out, lo), hi - lo, task.s):
            _ = Atomic[Int64].fetch_add(_word(addr, P_BAD), 1)
        return
    if w[unsafe_offset=P_KIND] == KIND_PARTS:
        var parts_task = Pointer[PartsTask, MutAnyOrigin](unsafe_from_address=addr + 8 * t)[]
        parts_task.run(parts_task.ctx, part, parts)
        return
    if w[unsafe_offset=P_KIND] == KIND_SHARED:
        _run_shared(addr, Pointer[SharedGemm, MutAnyOrigin](
            unsafe_from_address=Int(w[unsafe_offset=t]))[], part)
        return
    var a = F32P(unsafe_from_address=Int(w[unsafe_offset=t]))
    var b = F32P(unsafe_from_address=Int(w[unsafe_offset=t + 1]))
    var c = F32P(unsafe_from_address=Int(w[unsafe_offset=t + 2]))
    var m = Int(w[unsafe_offset=t + 3])
    var n = Int(w[unsafe_offset=t + 4])
    var k = Int(w[unsafe_offset=t + 5])
    var ta = w[unsafe_offset=t + 6] != 0
    var tb = w[unsafe_offset=t + 7] != 0
    var accumulate = w[unsafe_offset=t + 8] != 0
    var epi = Epilogue(Int(w[unsafe_offset=P_EPI]), w[unsafe_offset=P_EPI + 1] != 0,
                       Int(w[unsafe_offset=P_EPI + 2]))
    var buf = Int(w[unsafe_offset=P_BUF])
    if buf != 0:
        buf += part * Int(w[unsafe_offset=P_BUF_STRIDE])
    if w[unsafe_offset=P_KIND] == KIND_COLUMNS:
        # Chunks claimed from the caller's end (front) or the workers' (back): the faster
        # thread takes more, and each mostly keeps its own columns of C from step to step.
        # An op(A) = Aᵀ is packed once, at the part's first claim (`gemm_columns`).
        var chunk = Int(w[unsafe_offset=P_CHUNK])
        var packs_a = gemm_packs_a_once(m, k, ta) and buf != 0
        var packed = False
        while True:
            var i = _claim_end(_word(addr, P_CHUNK_NEXT), (n + chunk - 1) // chunk, part == 0)
            if i < 0:
                break
            if not packs_a:
                gemm(a, b, c, m, n, k, ta, tb, accumulate, 0, m, i * chunk,
                     min(n, (i + 1) * chunk), epi, buf)
                continue
            if not packed:
                gemm_pack_a(a, m, k, buf)
                packed = True
            gemm_columns(m, n, k, b, tb, c, accumulate, epi, i * chunk, min(n, (i + 1) * chunk),
                         buf)
    else:
        _run_rows(a, b, c, m, n, k, ta, tb, accumulate, epi, Int(w[unsafe_offset=P_CHUNK]),
                  Int(w[unsafe_offset=P_ROWS_AT]), part == 0, buf)


# A KIND_ROWS task's counters: for each block of op(B) (`gemm_blocks`) the claims of its
# chunks of rows (from the front | from the back << 32), then for each chunk the blocks of
# each column block done on it.
def _rows_counters(n: Int, k: Int, chunks: Int) -> Int:
    var blocks = gemm_blocks(n, k)
    return blocks[0] * blocks[1] + blocks[0] * chunks


def _run_rows(a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool, tb: Bool,
              accumulate: Bool, epi: Epilogue, chunk: Int, counters: Int, front: Bool,
              buf: Int):
    """A part of a KIND_ROWS task, block of op(B) by block, as `gemm` runs them: pack the
    block into the part's own buffer `buf` (while any of its chunks of rows is unclaimed), then
    compute chunks of rows over it while any is left, each once its previous k block is
    done (by whichever thread took it). The faster thread takes more rows (a static half
    each left the calling thread waiting ~0.3 ms a weight-gradient product of the
    transformer, k = 4096); the caller claims from the front, the others from the back, so
    each mostly keeps its rows of C from block to block. A wait is only ever for a chunk of
    an earlier block that another thread is computing."""
    var blocks = gemm_blocks(n, k)
    var chunks = (m + chunk - 1) // chunk
    var done = counters + 8 * blocks[0] * blocks[1]
    for block in range(blocks[0] * blocks[1]):
        var claims = _at(counters, block)
        var claimed = Atomic[Int64].load(claims)
        if Int(claimed & LOW) + Int(claimed >> 32) >= chunks:
            continue  # every chunk of this block taken: no need to pack it
        gemm_block_pack(b, n, k, tb, block, buf)
        var pc = block % blocks[1]
        var flags = done + 8 * (block // blocks[1]) * chunks
        while True:
            var i = _claim_end(claims, chunks, front)
            if i < 0:
                break
            while Atomic[Int64].load(_at(flags, i)) < Int64(pc):  # its chain so far
                pass
            gemm_block_rows(a, m, n, k, ta, c, accumulate, epi, block, i * chunk,
                            min(m, (i + 1) * chunk), buf)
            Atomic[Int64].store(_at(flags, i), Int64(pc + 1))


@always_inline
def _at(words: Int, i: Int) -> I64P:
    return I64P(unsafe_from_address=words + 8 * i)


def _run_shared(addr: Int, g: SharedGemm, part: Int):
    """Part `part` of a KIND_SHARED task: pack B pieces while any is left, wait until all are
    packed, then compute chunks of rows (in the part's own A buffer) while any is left. Every
    part does the same, so the faster thread takes more of both (a part no worker claimed
    finds nothing left). Part 0 (the caller's, `_run_task`) takes pieces and rows from the
    front, the others from the back: each thread then writes and reads mostly the same half
    of B, A and C every step, in its own caches."""
    var pieces = shared_pieces(g.n, g.k)
    var front = part == 0
    while True:
        var piece = _claim_end(_word(addr, P_PACK_NEXT), pieces, front)
        if piece < 0:
            break
        shared_pack(g, piece)
        _ = Atomic[Int64].fetch_add(_word(addr, P_PACK_DONE), 1)
    while Atomic[Int64].load(_word(addr, P_PACK_DONE)) < Int64(pieces):
        pass
    var chunks = (g.m + g.chunk - 1) // g.chunk
    var ap = F32P(unsafe_from_address=g.ap).unsafe_offset(part * shared_a_floats(g.k))
    while True:
        var chunk = _claim_end(_word(addr, P_CHUNK_NEXT), chunks, front)
        if chunk < 0:
            break
        var r0 = chunk * g.chunk
        shared_rows(g, r0, min(g.m, r0 + g.chunk), ap)


def _claim_end(word: I64P, items: Int, front: Bool) -> Int:
    """The next unclaimed of `items` from the front (or the back) of a range whose claims
    meet in the middle: the word counts claims from the front in its low 32 bits, from the
    back in its high ones (one atomic add each: every item goes to exactly one claim); -1
    once all are claimed."""
    var old = Atomic[Int64].fetch_add(word, Int64(1) if front else Int64(1) << 32)
    var from_front = Int(old & LOW)
    var from_back = Int(old >> 32)
    if from_front + from_back >= items:
        return -1
    return from_front if front else items - 1 - from_back


@always_inline
def _f(addr: Int, offset: Int) -> F32P:
    return F32P(unsafe_from_address=addr + 4 * offset)


@always_inline
def _cut(extent: Int, i: Int, parts: Int, align: Int) -> Int:
    """Boundary i of `parts` near-equal pieces of [0, extent), on multiples of `align`."""
    if i >= parts:
        return extent
    return min(extent, (extent * i // parts + align // 2) // align * align)


def split_gemm(pool: Int, a: F32P, b: F32P, c: F32P, m: Int, n: Int, k: Int, ta: Bool,
               tb: Bool, accumulate: Bool, epi: Epilogue = Epilogue.none(), arena: Int = 0):
    """C (+)= op(A)·op(B) through `epi`, all of C, shared with the pool's workers when it is
    large enough (pool 0: this thread alone). The bits of `gemm` on any thread count. Every
    thread's packing buffers come from the caller's `arena` (training/arena.mojo; 0: a
    malloc per product), which the workers never touch outside the caller's task."""
    var workers = Int(I64P(unsafe_from_address=pool)[unsafe_offset=P_WORKERS]) if pool else 0
    # Rows from one packed op(B) that the parts share and pack together, when op(B) is one
    # block and there are enough rows that the faster thread can take more. Else cut the
    # dimension whose other operand is cheaper to pack twice: every part packs all of op(A)
    # when columns are split, all of op(B) when rows are.
    var chunks = (m + SHARED_CHUNK - 1) // SHARED_CHUNK  # at its largest claims
    # Columns first where each part holds all of op(A) in its core's L2 while its claims
    # sweep it, read in place (A not transposed) or packed once a part (Aᵀ in one k block,
    # `gemm_columns`): every part packs only its own columns of op(B), and nothing packed
    # crosses cores (a shared B is half packed by the other core). [784, 256, 10] at batch
    # 256, two threads over one in-process on an Intel Xeon: 1.74 -> 1.82 with its forward
    # product by columns; then its dW product (Aᵀ = dHᵀ) by columns too, 1.808 -> 1.834 (a
    # quiet hour; loaded, 1.695 -> 1.790), both threads' GEMM time 2058 -> 1907 µs a step in
    # perf's samples (one thread's: 1979).
    var cols_first = ((not ta or gemm_packs_a_once(m, k, ta)) and epi.loss == 0
                      and m * k <= SHARED_MAX_FLOATS and n >= 2 * MIN_PIECE)
    var shared = shared_fits(n, k) and m >= SHARED_MIN_ROWS and not cols_first
    var by_columns = (m < n or cols_first) and epi.loss == 0  # the loss needs whole rows
    var pieces = chunks // 4 if shared else (n if by_columns else m) // MIN_PIECE
    # Not below MIN_PART_MACS a part, even while the workers spin: sharing from an eighth of
    # it (a later session) made [64, 128, 10] at batch 256 (two 2.1 M multiply-add products)
    # 0.83-0.87x one thread in train_steps on an Intel Xeon, where its three shared tasks
    # took 85 µs a step for ~26 µs of one thread's work (timed inside the pool).
    var parts = min(workers + 1, pieces, m * n * k // MIN_PART_MACS)
    # Rows in two parts from SIDE_MACS while the workers spin: reserved whether or not they
    # spin now, so the arena grows in a session's first step only.
    var side_rows = parts < 2 and workers > 0 and m * n * k >= SIDE_MACS and m >= 2 * MIN_PIECE
    var single = gemm_bytes(n, k, m, n)
    var side = False
    if side_rows:
        var chunk = _rows_chunk(m, 2)
        single = max(single, _split_bytes(False, 2, n, k, m)
                     + 8 * _rows_counters(n, k, (m + chunk - 1) // chunk))
        if pool_awake(pool):
            parts = 2
            shared = False
            by_columns = False
            side = True
    if parts < 2 or not _acquire(pool):  # too small, or another caller has the pool
        var own = scratch(arena, single)
        gemm(a, b, c, m, n, k, ta, tb, accumulate, 0, m, 0, -1, epi, own.addr)
        release(own)
        return
    var w = I64P(unsafe_from_address=pool)
    # One buffer: the shared B block, then each part's A buffer.
    var b_floats = shared_b_floats(n, k) if shared else 0
    var bbuf = Scratch(0, False)
    if shared:
        bbuf = scratch(arena, _split_bytes(True, parts, n, k, m))
    if bbuf.addr != 0:
        var bp = (bbuf.addr + PANEL_ALIGN - 1) // PANEL_ALIGN * PANEL_ALIGN
        var g = SharedGemm(Int(a), Int(b), Int(c), m, n, k, ta, tb, accumulate, epi, bp,
                           bp + 4 * b_floats, shared_chunk(m, parts))
        Atomic[Int64].store(_word(pool, P_PACK_NEXT), 0)
        Atomic[Int64].store(_word(pool, P_PACK_DONE), 0)
        Atomic[Int64].store(_word(pool, P_CHUNK_NEXT), 0)
        w[unsafe_offset=P_TASK] = Int64(_hold(pool, g))
        w[unsafe_offset=P_KIND] = KIND_SHARED
        _run_task(pool, parts)
        release(bbuf)
        return
    if shared:  # no memory for the shared B: rows, each part packing its own
        by_columns = False
    var bytes = _split_bytes(False, parts, n, k, m)
    var cols = _columns_chunk(n, parts, cols_first)
    if by_columns and gemm_packs_a_once(m, k, ta):
        var each = max(bytes // parts, gemm_columns_bytes(m, k, cols))
        bytes = parts * ((each + PANEL_ALIGN - 1) // PANEL_ALIGN * PANEL_ALIGN)
    var chunk = _rows_chunk(m, parts)
    var counters = 0 if by_columns else _rows_counters(n, k, (m + chunk - 1) // chunk)
    var held = scratch(arena, bytes + 8 * counters)
    if held.addr == 0 and counters > 0:  # no memory for the counters: this thread alone
        _ = Atomic[Int64].fetch_add(_word(pool, P_BUSY), -1)
        gemm(a, b, c, m, n, k, ta, tb, accumulate, 0, m, 0, -1, epi, 0)
        return
    w[unsafe_offset=P_BUF] = Int64(held.addr)  # (0: each part a buffer of its own)
    w[unsafe_offset=P_BUF_STRIDE] = Int64(bytes // parts)
    if by_columns:
        w[unsafe_offset=P_CHUNK] = Int64(cols)
        Atomic[Int64].store(_word(pool, P_CHUNK_NEXT), 0)
    if counters > 0:
        for i in range(counters):
            _at(held.addr + bytes, i)[] = 0
        w[unsafe_offset=P_CHUNK] = Int64(chunk)
        w[unsafe_offset=P_ROWS_AT] = Int64(held.addr + bytes)
    var t = P_TASK
    w[unsafe_offset=t] = Int64(Int(a))
    w[unsafe_offset=t + 1] = Int64(Int(b))
    w[unsafe_offset=t + 2] = Int64(Int(c))
    w[unsafe_offset=t + 3] = Int64(m)
    w[unsafe_offset=t + 4] = Int64(n)
    w[unsafe_offset=t + 5] = Int64(k)
    w[unsafe_offset=t + 6] = Int64(1 if ta else 0)
    w[unsafe_offset=t + 7] = Int64(1 if tb else 0)
    w[unsafe_offset=t + 8] = Int64(1 if accumulate else 0)
    w[unsafe_offset=P_EPI] = Int64(epi.bias)
    w[unsafe_offset=P_EPI + 1] = Int64(1 if epi.relu else 0)
    w[unsafe_offset=P_EPI + 2] = Int64(epi.loss)
    w[unsafe_offset=P_KIND] = Int64(KIND_COLUMNS if by_columns else KIND_ROWS)
    _run_task(pool, parts, side)
    release(held)


def _columns_chunk(n: Int, parts: Int, cols_first: Bool) -> Int:
    """Columns a claim of a KIND_COLUMNS task, whole register tiles: about six claims a part
    when each part holds op(A) in its core's L2 (`cols_first`: a claim packs only its own
    columns of op(B)), else one (each claim would pack, or stream from memory, all of op(A)
    again). [784, 256, 10]'s dW product (784 columns) in 7 claims of 128 left the calling
    thread waiting ~90 µs a step for the other's last, in 9 of 96 about half that."""
    var tile = gemm_tile_cols(n)
    var claims = (6 if cols_first else 1) * parts
    return max(tile, (n + claims - 1) // claims + tile - 1) // tile * tile


def _rows_chunk(m: Int, parts: Int) -> Int:
    """Rows a claim of a KIND_ROWS task: whole register tiles, about four claims a part."""
    return max(TILE_MR, (m + 4 * parts - 1) // (4 * parts) + TILE_MR - 1) // TILE_MR * TILE_MR


def _split_bytes(shared: Bool, parts: Int, n: Int, k: Int, m: Int) -> Int:
    """The packing bytes of `parts` parts: the shared B block and each part's A buffer, or
    each part's own buffer a stride apart (enough for any part: all rows or columns)."""
    if shared:
        return 4 * (shared_b_floats(n, k) + parts * shared_a_floats(k)) + PANEL_ALIGN
    return parts * ((gemm_bytes(n, k, m, n) + PANEL_ALIGN - 1) // PANEL_ALIGN * PANEL_ALIGN)


def split_adam(pool: Int, p_in: F32P, g: F32P, m_in: F32P, v_in: F32P, p_out: F32P,
               m_out: F32P, v_out: F32P, n: Int, s: AdamScalars) -> Bool:
    """`adam_update_into` (same arguments, same result), its elements shared with the pool's
    workers when there are enough of them (pool 0: this thread alone)."""
    var workers = Int(I64P(unsafe_from_address=pool)[unsafe_offset=P_WORKERS]) if pool else 0
    # Up to 4 ranges a thread, claimed as threads come free: the faster one takes more.
    var parts = min(4 * (workers + 1), n // MIN_SPLIT_ELEMENTS) if workers > 0 else 1
    if parts > workers + 1:  # whole rounds of the threads
        parts = parts // (workers + 1) * (workers + 1)
    # While the workers spin (the step's products were split), from a quarter of that a part:
    # M1 at batch 256 (85 k parameters) and [54, 256, 256, 7] (82 k) updated on the calling
    # thread while the worker waited, ~100 µs a step (two threads over one, in-process: 1.42
    # -> 1.43 and 1.19 -> 1.28 on an Intel Xeon; their batch-32 steps, whose workers sleep,
    # unchanged); LeNet-5 (62 k) at batch 256: the caller's 109 µs -> 39 + 38 on the worker.
    var side = parts < 2 and workers > 0 and pool_awake(pool)
    if side:
        parts = min(workers + 1, n // (MIN_SPLIT_ELEMENTS // 4))
    if parts < 2 or not _acquire(pool):
        return adam_update_into(p_in, g, m_in, v_in, p_out, m_out, v_out, n, s)
    var task = AdamTask(Int(p_in), Int(g), Int(m_in), Int(v_in), Int(p_out), Int(m_out),
                        Int(v_out), n, s)
    var w = I64P(unsafe_from_address=pool)
    w[unsafe_offset=P_TASK] = Int64(_hold(pool, task))
    w[unsafe_offset=P_KIND] = KIND_ADAM
    Atomic[Int64].store(_word(pool, P_BAD), 0)
    _run_task(pool, parts, side)
    return Atomic[Int64].load(_word(pool, P_BAD)) == 0


def pool_threads(pool: Int) -> Int:
    """The threads a task on `pool` may use, the caller's included (1 for pool 0)."""
    return 1 + (Int(I64P(unsafe_from_address=pool)[unsafe_offset=P_WORKERS]) if pool else 0)


def pool_awake(pool: Int) -> Bool:
    """Whether every worker is spinning (none asleep or going to sleep): a task handed over
    now starts at once, where waking a sleeper costs a system call and tens of µs."""
    return pool != 0 and Atomic[Int64].load(_word(pool, P_SLEEPERS)) == 0


def parts_for(pool: Int, items: Int, work: Int) -> Int:
    """How many parts to cut `items` independent items into, `work` multiply-adds (or
    weighted element operations) in all: 1 when the work is too small to pay for the
    hand-over (MIN_LAYER_WORK a part), else up to 4 a thread, so the faster thread takes more, in whole
    rounds of the threads."""
    var threads = pool_threads(pool)
    var parts = min(4 * threads, items, work // MIN_LAYER_WORK)
    if parts < 2 or threads < 2:
        return 1
    # whole rounds of the threads (3 parts on 2 threads would leave one idle a third)
    return max(min(threads, items), parts // threads * threads)


def split_parts[T: ImplicitlyCopyable & Deinitable](pool: Int, run: PartFn, ctx: T, parts: Int,
                                                    side: Bool = False):
    """run(address of a copy of ctx, i, parts) for every i in [0, parts), shared with the
    pool's workers (pool 0, one part, or a pool another caller holds: all on this thread, in
    order). The parts read the copy (`_hold`), never write it. `side`: split only because the
    workers spin (P_SIDE)."""
    if parts < 2 or pool == 0 or not _acquire(pool):
        # A copy in memory of its own here too (P_CTX says why): a local copy passed on as
        # `Int(Pointer(to=local))` crashed at its first part.
        var at = heap_copy(ctx)
        for i in range(parts):
            run(at, i, parts)
        heap_free(at)
        return
    var at = _hold(pool, ctx)
    Pointer[PartsTask, MutAnyOrigin](unsafe_from_address=pool + 8 * P_TASK).unsafe_write(
        PartsTask(run, at))
    I64P(unsafe_from_address=pool)[unsafe_offset=P_KIND] = KIND_PARTS
    _run_task(pool, parts, side)


def heap_copy[T: ImplicitlyCopyable & Deinitable](value: T) -> Int:
    """`value` (plain values only: it is never destroyed) copied into a malloc'd block whose
    address others may read it through (P_CTX says why not a local's); `heap_free` it."""
    var at = external_call["malloc", Int](size_of[T]())
    if at == 0:
        abort("mojolearn: no memory for a task's context")
    Pointer[T, MutAnyOrigin](unsafe_from_address=at).unsafe_write(value)
    return at


def heap_free(at: Int):
    external_call["free", NoneType](at)


def _hold[T: ImplicitlyCopyable & Deinitable](pool: Int, value: T) -> Int:
    """`value` copied into the pool's context words (P_CTX), which the task owns while it
    runs (the caller holds the pool): their address."""
    comptime assert size_of[T]() <= 8 * CTX_WORDS, "a task context outgrows the pool's words"
    var at = pool + 8 * P_CTX
    Pointer[T, MutAnyOrigin](unsafe_from_address=at).unsafe_write(value)
    return at


def part_range(items: Int, part: Int, parts: Int) -> Tuple[Int, Int]:
    """Items [lo, hi) of part `part` of `parts` near-equal ranges of [0, items)."""
    return (items * part // parts, items * (part + 1) // parts)


def _acquire(pool: Int) -> Bool:
    """Take the pool for one task (a try-lock: False while another caller has it)."""
    if Atomic[Int64].fetch_add(_word(pool, P_BUSY), 1) != 0:
        _ = Atomic[Int64].fetch_add(_word(pool, P_BUSY), -1)
        return False
    return True


def _run_task(pool: Int, parts: Int, side: Bool = False):
    """Publish the task in the P_TASK words as `parts` parts, run parts until none is left,
    wait for those the workers claimed, and release the pool (taken by `_acquire`). `side`:
    split only because the workers spin (P_SIDE)."""
    var w = I64P(unsafe_from_address=pool)
    var gen = (w[unsafe_offset=P_GEN] + 1) & LOW
    w[unsafe_offset=P_GEN] = gen
    w[unsafe_offset=P_SIDE] = 1 if side else 0
    Atomic[Int64].store(_word(pool, P_DONE), 0)
    Atomic[Int64].store(_word(pool, P_PARTS), (gen << 32) | Int64(parts))
    # Part 0 is this thread's, the others the workers' to claim (and this thread's once it is
    # done, if any is left): in a step, the thread that wrote a range of rows or parameters
    # is then the one that reads it, from its own caches.
    Atomic[Int64].store(_word(pool, P_NEXT), (gen << 32) | 1)  # publishes the task
    _wake(pool)
    _run_part(pool, 0, parts)
    _ = Atomic[Int64].fetch_add(_word(pool, P_DONE), 1)
    _ = _claim_and_run(pool, False)
    while Atomic[Int64].load(_word(pool, P_DONE)) < Int64(parts):
        pass
    _ = Atomic[Int64].fetch_add(_word(pool, P_BUSY), -1)
