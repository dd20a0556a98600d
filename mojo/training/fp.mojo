"""Correctly rounded elementary operations that some GPU lowerings approximate.

`std.math.sqrt` lowers to `sqrt.approx.ftz.f32` on NVIDIA GPUs (approximate AND flushing
subnormals), which identical mode forbids. `sqrt_rn` takes the `.rn` intrinsic there and the
standard (correctly rounded) square root on every other target; `comptime if` picks per
compilation target, so one function serves the host and the device code of one build.
"""
from std.math import sqrt
from std.sys import is_nvidia_gpu, llvm_intrinsic


@always_inline
def sqrt_rn[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """The correctly rounded float32 square root, lane by lane, on every target."""
    comptime if is_nvidia_gpu():
        var out = SIMD[DType.float32, w]()
        comptime for i in range(w):
            out[i] = llvm_intrinsic["llvm.nvvm.sqrt.rn.f", Float32](x[i])
        return out
    else:
        return sqrt(x)


@always_inline
def sqrt64_rn(x: Float64) -> Float64:
    """The correctly rounded binary64 square root on every target (the optimizers' scalars)."""
    comptime if is_nvidia_gpu():
        return llvm_intrinsic["llvm.nvvm.sqrt.rn.d", Float64](x)
    else:
        return sqrt(x)
