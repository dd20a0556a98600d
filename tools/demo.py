"""A short demo of the installed binding: one GEMM call, the vendor and the numeric mode."""
import mojolearn
from mojolearn import Array, _backend, zeros

a = Array([[1.0, 2.0], [3.0, 4.0]])
b = Array([[0.5, -1.0], [2.0, 0.25]])
c = zeros((2, 2))
_backend.binding().neural_gemm([a._addr, b._addr, c._addr], [2, 2, 2, 0, 0, 0, 0, 2])
print("A @ B =", c.tolist())
print("vendor:", mojolearn.vendor_used(), "| numeric mode:", mojolearn.numeric_mode_used())
