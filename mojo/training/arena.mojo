"""Scratch memory for GEMM packing that outlives one product.

An arena is three Int64 words at a fixed address (in a session's header, or on a caller's
stack): the address of a heap buffer, its bytes, and how many times it grew. `arena_reserve`
hands out the buffer, first replacing it by a larger one when it is too small (its contents
are scratch: nothing is copied). A session's step asks for the same sizes every time, so the
buffer grows during the first step and then stays: the steps after it allocate nothing.

`scratch` is what a GEMM calls: the arena's buffer, or, with no arena (address 0), a buffer of
its own that `release` frees.
"""
from std.ffi import external_call

from training.config import I64P

comptime ARENA_WORDS = 3
comptime _ADDR = 0
comptime _BYTES = 1
comptime _GROWS = 2


def arena_reserve(arena: Int, bytes: Int) -> Int:
    """The arena's buffer, at least `bytes` bytes long; 0 when it had to grow and could not
    (the arena is then empty)."""
    var w = I64P(unsafe_from_address=arena)
    if Int(w[unsafe_offset=_BYTES]) >= bytes:
        return Int(w[unsafe_offset=_ADDR])
    external_call["free", NoneType](Int(w[unsafe_offset=_ADDR]))
    var addr = external_call["malloc", Int](bytes)
    w[unsafe_offset=_ADDR] = Int64(addr)
    w[unsafe_offset=_BYTES] = Int64(bytes if addr != 0 else 0)
    w[unsafe_offset=_GROWS] += 1
    return addr


def arena_release(arena: Int):
    """Free the arena's buffer and empty it (its growth count stays)."""
    var w = I64P(unsafe_from_address=arena)
    external_call["free", NoneType](Int(w[unsafe_offset=_ADDR]))
    w[unsafe_offset=_ADDR] = 0
    w[unsafe_offset=_BYTES] = 0


def arena_bytes(arena: Int) -> Int:
    return Int(I64P(unsafe_from_address=arena)[unsafe_offset=_BYTES])


def arena_grows(arena: Int) -> Int:
    """How many times the arena's buffer was (re)allocated."""
    return Int(I64P(unsafe_from_address=arena)[unsafe_offset=_GROWS])


@fieldwise_init
struct Scratch(ImplicitlyCopyable):
    """A buffer from `scratch`: `addr` (0 when out of memory), and whether `release` frees it."""

    var addr: Int
    var owned: Bool


def scratch(arena: Int, bytes: Int) -> Scratch:
    """`bytes` bytes from the arena at `arena`, or from malloc when `arena` is 0."""
    if arena != 0:
        return Scratch(arena_reserve(arena, bytes), False)
    return Scratch(external_call["malloc", Int](bytes), True)


def release(s: Scratch):
    if s.owned:
        external_call["free", NoneType](s.addr)
