"""Build-time configuration shared by every kernel: vendor, numeric mode, pointer types.

`setup.py` passes `-D MOJOLEARN_VENDOR=cpu|cuda|hip` and `-D MOJOLEARN_MODE=identical|fast`.
"""
from std.sys import get_defined_string

comptime VENDOR = get_defined_string["MOJOLEARN_VENDOR", "cpu"]()
comptime MODE = get_defined_string["MOJOLEARN_MODE", "identical"]()
comptime TARGET_CPU = get_defined_string["MOJOLEARN_TARGET_CPU", "native"]()
comptime ACCELERATOR = get_defined_string["MOJOLEARN_ACCELERATOR", "none"]()
comptime IDENTICAL = MODE == "identical"
# tools/gpu_compile_check.sh only: the GPU dot products as a multiply and an add, so that a build
# with it shows no fma left (every fma of the real build is a dot product's, profile v2).
comptime CHECK_DOT_MULADD = get_defined_string["MOJOLEARN_CHECK_DOT_MULADD", "0"]() == "1"

comptime F32P = Pointer[Float32, MutAnyOrigin]
comptime I32P = Pointer[Int32, MutAnyOrigin]
comptime I64P = Pointer[Int64, MutAnyOrigin]
comptime F64P = Pointer[Float64, MutAnyOrigin]
