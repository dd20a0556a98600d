# split_parts (training/pool.mojo) hands every part a copy of the caller's context in memory of
# its own: on one thread (pool 0), through an open pool (its context words, the path the
# workers read; with no worker serving, this thread claims every part), and from inside a part
# (the pool is held: those parts run here, on a copy of their own, and leave the outer task's
# context as it was). The contexts are random each run; every part checks every field. A
# local's address passed on as an Int did not keep its stores alive (a part read garbage):
# these are the calls that broke.
from std.os import abort
from std.random import random_float64, random_ui64, seed
from std.testing import TestSuite, assert_equal, assert_true
from std.time import perf_counter_ns

from training.config import F32P, I64P
from training.gemm import KC, Epilogue, gemm
from training.pool import pool_open, split_gemm, split_parts


@fieldwise_init
struct _Ctx(ImplicitlyCopyable):
    """Values the parts must see, and where they write what they saw."""

    var a: Int
    var b: Int
    var c: Int
    var d: Int
    var e: Int
    var dst: Int  # parts × 6 words: a..e and part as each part read them
    var pool: Int  # nested: the pool to call split_parts on from inside part 0 (0: none)


def _part(ctx: Int, part: Int, parts: Int):
    var c = Pointer[_Ctx, MutAnyOrigin](unsafe_from_address=ctx)[]
    if c.pool != 0 and part == 0:  # a task inside this one: run here, its own copy
        var inner = List[Int64](length=6 * 3, fill=-1)
        var nested = _Ctx(c.e, c.d, c.c, c.b, c.a, Int(inner.unsafe_ptr()), 0)
        split_parts(c.pool, _leaf_part, nested, 3)
        for i in range(3):
            assert_ok(inner, i, nested)
        _ = len(inner)
        c = Pointer[_Ctx, MutAnyOrigin](unsafe_from_address=ctx)[]  # read again: unchanged?
    _write(c, part)


def _leaf_part(ctx: Int, part: Int, parts: Int):
    _write(Pointer[_Ctx, MutAnyOrigin](unsafe_from_address=ctx)[], part)


def _write(c: _Ctx, part: Int):
    """What part `part` read, into its six words at c.dst."""
    var o = I64P(unsafe_from_address=c.dst).unsafe_offset(6 * part)
    o[unsafe_offset=0] = Int64(c.a)
    o[unsafe_offset=1] = Int64(c.b)
    o[unsafe_offset=2] = Int64(c.c)
    o[unsafe_offset=3] = Int64(c.d)
    o[unsafe_offset=4] = Int64(c.e)
    o[unsafe_offset=5] = Int64(part)


def assert_ok(got: List[Int64], part: Int, want: _Ctx):
    """Abort on a mismatch (inside a part, which cannot raise)."""
    var expected = [Int64(want.a), Int64(want.b), Int64(want.c), Int64(want.d), Int64(want.e),
                    Int64(part)]
    for i in range(6):
        if got[6 * part + i] != expected[i]:
            abort(String("nested part ", part, " field ", i, ": ", got[6 * part + i], " for ",
                         expected[i]))


def _random_ctx(dst: Int, pool: Int) -> _Ctx:
    return _Ctx(Int(random_ui64(0, 1 << 40)), Int(random_ui64(0, 1 << 40)),
                Int(random_ui64(0, 1 << 40)), Int(random_ui64(0, 1 << 40)),
                Int(random_ui64(0, 1 << 40)), dst, pool)


def _check(got: List[Int64], parts: Int, want: _Ctx) raises:
    for part in range(parts):
        assert_equal(got[6 * part + 0], Int64(want.a), String("part ", part, " a"))
        assert_equal(got[6 * part + 1], Int64(want.b), String("part ", part, " b"))
        assert_equal(got[6 * part + 2], Int64(want.c), String("part ", part, " c"))
        assert_equal(got[6 * part + 3], Int64(want.d), String("part ", part, " d"))
        assert_equal(got[6 * part + 4], Int64(want.e), String("part ", part, " e"))
        assert_equal(got[6 * part + 5], Int64(part), String("part ", part, " index"))


def test_parts_on_one_thread_read_the_callers_context() raises:
    for parts in [1, 2, 7]:
        var got = List[Int64](length=6 * parts, fill=-1)
        var want = _random_ctx(Int(got.unsafe_ptr()), 0)
        split_parts(0, _part, want, parts)
        _check(got, parts, want)


def test_parts_through_a_pool_read_its_copy_of_the_context() raises:
    var pool = pool_open(1)  # no worker serves it: this thread claims every part
    assert_true(pool != 0, "pool_open")
    for parts in [2, 5]:
        var got = List[Int64](length=6 * parts, fill=-1)
        var want = _random_ctx(Int(got.unsafe_ptr()), 0)
        split_parts(pool, _part, want, parts)
        _check(got, parts, want)


def test_a_task_inside_a_part_leaves_the_outer_context_as_it_was() raises:
    var pool = pool_open(1)
    assert_true(pool != 0, "pool_open")
    var got = List[Int64](length=6 * 4, fill=-1)
    var want = _random_ctx(Int(got.unsafe_ptr()), pool)
    split_parts(pool, _part, want, 4)
    _check(got, 4, want)


def test_a_gemm_by_rows_through_a_pool_gives_the_bits_of_gemm() raises:
    """The rows of split_gemm claimed block of op(B) by block (more than one column block and
    k block, tails of both), with no worker serving: this thread takes every part's claims."""
    _check_split_gemm(1200, 1100, 600, random_ui64(0, 1) == 1)
    _check_split_gemm(200, 150, 1500, random_ui64(0, 1) == 1)
    _check_split_gemm(97, 64, 2100, True)  # (A in place and this small: by columns)


def test_a_gemm_by_columns_through_a_pool_gives_the_bits_of_gemm() raises:
    """The columns of split_gemm claimed in chunks, every part holding op(A): read in place (A
    not transposed, within SHARED_MAX_FLOATS: a tail tile of 16 columns, two k blocks) or
    packed once a part (Aᵀ in one k block: [784, 256, 10]'s dW product, a last panel of 4
    rows); or packed by each claim (Aᵀ past one k block, more columns than rows: a claim a
    part)."""
    _check_split_gemm(256, 784, 600, False)
    _check_split_gemm(100, 200, 250, False)
    _check_split_gemm(256, 784, 256, True)
    _check_split_gemm(40, 300, 500, True)
    _check_split_gemm(40, 300, 700 if KC < 700 else 1100, True)


def _check_split_gemm(m: Int, n: Int, k: Int, ta: Bool) raises:
    var s = UInt64(perf_counter_ns())
    seed(Int(s))
    var pool = pool_open(1)
    assert_true(pool != 0, "pool_open")
    var a = _random(m * k)
    var b = _random(k * n)
    var bias = _random(n)
    var want = _random(m * n)
    var got = want.copy()
    var tb = random_ui64(0, 1) == 1
    var accumulate = random_ui64(0, 1) == 1
    var epi = Epilogue(Int(bias.unsafe_ptr()), True)
    gemm(_p(a), _p(b), _p(want), m, n, k, ta, tb, accumulate, 0, m, 0, -1, epi)
    split_gemm(pool, _p(a), _p(b), _p(got), m, n, k, ta, tb, accumulate, epi)
    for i in range(m * n):
        if got[i] != want[i]:
            assert_true(False, String("seed ", s, " shape ", m, "x", n, "x", k, " ta ", ta,
                                      " output ", i, ": ", got[i], " for ", want[i]))


def _random(count: Int) -> List[Float32]:
    var v = List[Float32](length=count, fill=0)
    for i in range(count):
        v[i] = Float32(random_float64(-1.0, 1.0))
    return v^


def _p(v: List[Float32]) -> F32P:
    return F32P(unsafe_from_address=Int(v.unsafe_ptr()))


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
