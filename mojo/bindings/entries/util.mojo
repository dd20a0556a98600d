"""Binding entries shared by every family: finiteness scans."""
from std.python import PythonObject

from entries.args import Args, Layout
from training.checks import first_nonfinite
from training.config import VENDOR
from training.mlp_gpu import gpu_device_count

comptime ALL_FINITE = Layout("all_finite", "x", "n")


def all_finite(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """1 when the n float32 values at x are all finite, else 0."""
    var args = Args(ALL_FINITE, addrs, params)
    var n = args.int(0, "n")
    return PythonObject(1 if first_nonfinite(args.f32(0), n) < 0 else 0)


def device_count() raises -> PythonObject:
    """Devices the vendor runtime finds: 0 in cpu builds (which never touch a GPU runtime)."""
    comptime if VENDOR == "cpu":
        return PythonObject(0)
    else:
        return PythonObject(gpu_device_count())
