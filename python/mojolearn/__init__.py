"""mojolearn: bit-reproducible training of small networks; pure Python API, Mojo kernels.

Importing mojolearn never imports NumPy and does not load the compiled binding: that happens
on first use, which also fixes the numeric mode for the process.
"""

import ctypes as _ctypes
import os as _os

from ._array import Array
from ._backend import numeric_mode_used, set_numeric_mode, vendor_used
from ._buffer import empty, zeros

# __version__ is read on first access (module __getattr__ below), from pyproject.toml through
# the installed metadata: see _version.py.


def _preload_runtime():
    # The binding's RUNPATH is $ORIGIN/_mojo_libs and the vendored libs carry their own
    # $ORIGIN rpath; preloading in dependency order is a safety net for odd loaders.
    libs = _os.path.join(_os.path.dirname(__file__), "_mojo_libs")
    for name in (
        "libMSupportGlobals.so",
        "libAsyncRTRuntimeGlobals.so",
        "libKGENCompilerRTShared.so",
        "libAsyncRTMojoBindings.so",
    ):
        path = _os.path.join(libs, name)
        if _os.path.exists(path):
            _ctypes.CDLL(path)


_preload_runtime()

# Public names that live in modules written on top of the binding, imported on first access.
_LAZY = {
    "matmul": "linalg",
    "cross_entropy": "loss",
    "Adam": "optim",
    "AdamW": "optim",
    "SGD": "optim",
    "clip_grad_norm_": "optim",
    "ConstantLR": "schedules",
    "WarmupLinearLR": "schedules",
    "WarmupCosineLR": "schedules",
    "SmallMLPTrainer": "trainer",
    "MLPTrainer": "mlp_trainer",
    "init_small_mlp": "_rng",
    "from_dlpack": "_dlpack",
    "training": "training",
}


def __getattr__(name):
    if name == "__version__":
        from ._version import version

        value = globals()["__version__"] = version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mojolearn' has no attribute {name!r}")
    import importlib

    mod = importlib.import_module(f"mojolearn.{module}")
    value = mod if name == module else getattr(mod, name)
    globals()[name] = value
    return value


__all__ = [
    "Array",
    "empty",
    "zeros",
    "set_numeric_mode",
    "numeric_mode_used",
    "vendor_used",
    *_LAZY,
]
