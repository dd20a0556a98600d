"""The mojolearn training binding: one Python extension module per (vendor, numeric mode).

Layout table: every entry's ordered address names and param names. `mojolearn/_abi.py`
declares the same table; `_backend` compares the two when it loads this module and refuses
to run on any difference (a silent reorder would be a wrong answer, not a crash).
"""
from std.python import Python, PythonObject
from std.python.bindings import PythonModuleBuilder

from entries.gemm import NEURAL_GEMM, neural_gemm
from entries.util import ALL_FINITE, all_finite
from training.config import ACCELERATOR, MODE, TARGET_CPU, VENDOR


def abi_layout() raises -> PythonObject:
    """Entry -> (address names, param names), as 'entry|a,b|p,q' strings."""
    var out = Python.list()
    comptime for spec in [ALL_FINITE, NEURAL_GEMM]:
        out.append(PythonObject(String(spec.name, "|", spec.addrs, "|", spec.params)))
    return out


def build_info() raises -> PythonObject:
    return Python.list(PythonObject(VENDOR), PythonObject(MODE), PythonObject(TARGET_CPU),
                       PythonObject(ACCELERATOR))


def build_module(name: StaticString) raises -> PythonObject:
    var m = PythonModuleBuilder(name)
    m.def_function[abi_layout]("abi_layout", docstring="entry layouts: 'entry|addrs|params'")
    m.def_function[build_info]("build_info", docstring="[vendor, mode, target_cpu, accelerator]")
    m.def_function[all_finite]("all_finite")
    m.def_function[neural_gemm]("neural_gemm")
    return m.finalize()
