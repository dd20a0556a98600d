"""Dropout with a counter-based mask (docs/ARITHMETIC.md "Models: Dropout"; mirror
tests/reference/layers.py `dropout_*`).

The mask of element i (its row-major index in the whole batch, so that microbatches, threads
and processes draw the same) in step t of the layer at index `layer`:
  key = mix(mix(mix(seed + γ) ^ t + γ) ^ layer + γ);  u = mix(key + γ·(i + 1))
  kept = (u >> 40) >= threshold,  threshold = floor(p·2^24)
with mix SplitMix64's output function and γ = 0x9E3779B97F4A7C15, all mod 2^64: u is the
(i+1)-th draw of a SplitMix64 at state `key`. Kept elements are scaled by f32(1/(1−p)), formed
in binary64 by the host; dropped ones are +0.0. The backward recomputes the mask.
"""

from training.config import F32P

comptime GAMMA = UInt64(0x9E3779B97F4A7C15)


@always_inline
def mix64(x: UInt64) -> UInt64:
    var z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return z ^ (z >> 31)


def dropout_key(seed: UInt64, t: Int, layer: Int) -> UInt64:
    var k = mix64(seed + GAMMA)
    k = mix64((k ^ UInt64(t)) + GAMMA)
    return mix64((k ^ UInt64(layer)) + GAMMA)


@always_inline
def dropout_kept(key: UInt64, index: Int, threshold: Int) -> Bool:
    return Int(mix64(key + GAMMA * UInt64(index + 1)) >> 40) >= threshold


def dropout_apply(src: F32P, dst: F32P, n: Int, first: Int, key: UInt64, threshold: Int,
                  scale: Float32, accumulate: Bool):
    """dst = kept ? src·scale : +0.0 over n elements whose first has global index `first`
    (forward, and backward on the gradient); with `accumulate`, dst = dst + that."""
    for i in range(n):
        var v = src[unsafe_offset=i] * scale if dropout_kept(key, first + i, threshold) else Float32(0.0)
        if accumulate:
            v = dst[unsafe_offset=i] + v
        dst[unsafe_offset=i] = v
