"""mojolearn: bit-reproducible training of small networks; pure Python API, Mojo kernels.

Importing mojolearn never imports NumPy and does not load the compiled binding: that happens
on first use, which also fixes the numeric mode for the process.

The API reference is built from the docstrings: `bash tools/build_docs.sh` (README).

Modules: the public ones are `mojolearn` (every name below), `mojolearn.training` (the
torch.optim-like names, `Batches`, `fit`), `mojolearn.distributed` (`DataParallel`),
`mojolearn.checkpoint` (checkpoint files without a trainer) and the `mojolearn` command line
(`mojolearn.cli:main`). Beneath them the package is four private wings, each importing only its
own layer and the ones below (`_buffers` < `_runtime` < `_mlp`, `_optim` < public < `cli`):

    _buffers/  Array, DLPack, the buffer reader, the one intake door, take
    _runtime/  the compiled binding and its ABI table, threads, portable math, files, MPI world
    _mlp/      layer sizes and result layout, state, schema records and codec, the batch
               reader, the trainer core and its mixins (session steps, per-operation path,
               persistence, inference, export), LR-schedule records
    _optim/    the optimizers' checks and Hyper record, state_dict, device residency, schedules
    cli/       parser, train, text runs, resume, predict, sample, info/verify, plot, data, history, progress

Example:
    >>> import mojolearn
    >>> trainer = mojolearn.MLPTrainer([8, 16, 3], seed=0, data_schedule={"seed": 0})
    >>> X, y = mojolearn.zeros((4, 8)), mojolearn.zeros((4,), "<i4")
    >>> trainer.train_step(X, y)["step"]
    1
"""

from __future__ import annotations

import ctypes as _ctypes
import os as _os

from ._buffers.alloc import empty, zeros
from ._buffers.array import Array
from ._runtime.backend import numeric_mode_used, set_numeric_mode, vendor_used

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    # What a type checker sees of the lazy names below (`import mojolearn` stays light):
    # exactly the keys of _LAZY (tests/test_public_surface.py checks).
    from typing import Any

    from . import nn as nn
    from . import training as training
    from ._buffers.array import from_dlpack as from_dlpack
    from ._mlp.spec import init_small_mlp as init_small_mlp
    from ._model.trainer import Trainer as Trainer
    from .batches import Batches as Batches
    from .fitting import fit as fit
    from .linalg import matmul as matmul
    from .loss import cross_entropy as cross_entropy
    from .mlp_trainer import MLPTrainer as MLPTrainer
    from .optim import SGD as SGD
    from .optim import Adam as Adam
    from .optim import AdamW as AdamW
    from .optim import clip_grad_norm_ as clip_grad_norm_
    from .schedules import ConstantLR as ConstantLR
    from .schedules import WarmupCosineLR as WarmupCosineLR
    from .schedules import WarmupLinearLR as WarmupLinearLR
    from .text import TextData as TextData
    from .trainer import SmallMLPTrainer as SmallMLPTrainer

    __version__: str

# __version__ is read on first access (module __getattr__ below), from pyproject.toml through
# the installed metadata: see _runtime/version.py.


def _preload_runtime() -> None:
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
    "Trainer": "_model.trainer",
    "init_small_mlp": "_mlp.spec",
    "from_dlpack": "_buffers.array",
    "training": "training",
    "nn": "nn",
    "Batches": "batches",
    "TextData": "text",
    "fit": "fitting",
}


def __getattr__(name: str) -> Any:
    value: Any
    if name == "__version__":
        from ._runtime.version import version

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
