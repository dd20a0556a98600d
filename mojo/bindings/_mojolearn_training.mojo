"""The mojolearn training binding: one Python extension module per (vendor, numeric mode).

Layout table: every entry's ordered address names and param names. `mojolearn/_runtime/abi.py`
declares the same table; `_backend` compares the two when it loads this module and refuses
to run on any difference (a silent reorder would be a wrong answer, not a crash).
"""
from std.python import Python, PythonObject
from std.python.bindings import PythonModuleBuilder

from entries.array import ARRAY_TAKE, array_take
from entries.gemm import MATMUL, NEURAL_GEMM, matmul_entry, neural_gemm
from entries.intake import INTAKE_READ, intake_read
from entries.loss import (ARGMAX, CROSS_ENTROPY, PORTABLE_MATH_EVAL, SOFTMAX, argmax_entry,
                          cross_entropy_entry, portable_math_eval, softmax_entry)
from entries.mlp import (MLP_ADAMW, MLP_BIAS_ACTIVATION, MLP_RELU_BACKWARD, MLP_SUM_ROWS,
                         MLP_TRAIN_STEP, mlp_adamw, mlp_bias_activation, mlp_relu_backward,
                         mlp_sum_rows, mlp_train_step)
from entries.mlp import (MLP_RESIDENT_APPLY, MLP_RESIDENT_ARENA, MLP_RESIDENT_CLOSE,
                         MLP_RESIDENT_DOWNLOAD,
                         MLP_RESIDENT_GRADS, MLP_RESIDENT_OPEN, MLP_RESIDENT_ROLLBACK,
                         MLP_RESIDENT_SET_LR, MLP_RESIDENT_STEP, MLP_RESIDENT_STEPS,
                         mlp_resident_apply, mlp_resident_arena, mlp_resident_set_lr,
                         mlp_resident_close, mlp_resident_download, mlp_resident_grads,
                         mlp_resident_open, mlp_resident_rollback, mlp_resident_step,
                         mlp_resident_steps)
from entries.model import MODEL_STEP, model_step
from entries.optim import (OPTIM_CLIP_GRAD_NORM, OPTIM_COPY, OPTIM_RESIDENT_ALLOC,
                           OPTIM_RESIDENT_FREE, OPTIM_STEP, OPTIM_TREE_SUM, optim_clip_grad_norm,
                           optim_copy, optim_resident_alloc, optim_resident_free, optim_step,
                           optim_tree_sum)
from entries.pool import (MLP_RESIDENT_USE_POOL, POOL_OPEN, POOL_SERVE, POOL_STOP,
                          POOL_WORKER_PARTS, mlp_resident_use_pool, pool_open_entry,
                          pool_serve_entry, pool_stop_entry, pool_worker_parts_entry)
from entries.util import ALL_FINITE, all_finite, device_count
from training.config import ACCELERATOR, MODE, TARGET_CPU, VENDOR


def abi_layout() raises -> PythonObject:
    """Entry -> (address names, param names), as 'entry|a,b|p,q' strings."""
    var out = Python.list()
    comptime for spec in [ALL_FINITE, NEURAL_GEMM, MATMUL,
                          MLP_BIAS_ACTIVATION, MLP_RELU_BACKWARD,
                          MLP_SUM_ROWS, MLP_ADAMW, MLP_TRAIN_STEP, MLP_RESIDENT_OPEN,
                          MLP_RESIDENT_STEP, MLP_RESIDENT_STEPS, MLP_RESIDENT_DOWNLOAD,
                          MLP_RESIDENT_ROLLBACK, MLP_RESIDENT_CLOSE, MLP_RESIDENT_ARENA,
                          MLP_RESIDENT_GRADS, MLP_RESIDENT_SET_LR,
                          MLP_RESIDENT_APPLY, MLP_RESIDENT_USE_POOL, POOL_OPEN, POOL_SERVE,
                          POOL_STOP, POOL_WORKER_PARTS, OPTIM_STEP, OPTIM_CLIP_GRAD_NORM,
                          OPTIM_TREE_SUM, OPTIM_RESIDENT_ALLOC, OPTIM_RESIDENT_FREE, OPTIM_COPY,
                          CROSS_ENTROPY, SOFTMAX, ARGMAX, PORTABLE_MATH_EVAL, INTAKE_READ, ARRAY_TAKE,
                          MODEL_STEP]:
        out.append(PythonObject(String(spec.name, "|", spec.addrs, "|", spec.params)))
    return out


def build_info() raises -> PythonObject:
    return Python.list(PythonObject(VENDOR), PythonObject(MODE), PythonObject(TARGET_CPU),
                       PythonObject(ACCELERATOR))


def build_module(name: StaticString) raises -> PythonObject:
    var m = PythonModuleBuilder(name)
    m.def_function[abi_layout]("abi_layout", docstring="entry layouts: 'entry|addrs|params'")
    m.def_function[build_info]("build_info", docstring="[vendor, mode, target_cpu, accelerator]")
    m.def_function[device_count]("device_count", docstring="devices found (0 in cpu builds)")
    m.def_function[all_finite]("all_finite")
    m.def_function[neural_gemm]("neural_gemm")
    m.def_function[matmul_entry]("matmul")
    m.def_function[mlp_bias_activation]("mlp_bias_activation")
    m.def_function[mlp_relu_backward]("mlp_relu_backward")
    m.def_function[mlp_sum_rows]("mlp_sum_rows")
    m.def_function[mlp_adamw]("mlp_adamw")
    m.def_function[mlp_train_step]("mlp_train_step")
    m.def_function[mlp_resident_open]("mlp_resident_open")
    m.def_function[mlp_resident_step]("mlp_resident_step")
    m.def_function[mlp_resident_steps]("mlp_resident_steps")
    m.def_function[mlp_resident_download]("mlp_resident_download")
    m.def_function[mlp_resident_rollback]("mlp_resident_rollback")
    m.def_function[mlp_resident_close]("mlp_resident_close")
    m.def_function[mlp_resident_arena]("mlp_resident_arena")
    m.def_function[mlp_resident_grads]("mlp_resident_grads")
    m.def_function[mlp_resident_apply]("mlp_resident_apply")
    m.def_function[mlp_resident_set_lr]("mlp_resident_set_lr")
    m.def_function[mlp_resident_use_pool]("mlp_resident_use_pool")
    m.def_function[pool_open_entry]("pool_open")
    m.def_function[pool_serve_entry]("pool_serve")
    m.def_function[pool_stop_entry]("pool_stop")
    m.def_function[pool_worker_parts_entry]("pool_worker_parts")
    m.def_function[optim_step]("optim_step")
    m.def_function[optim_clip_grad_norm]("optim_clip_grad_norm")
    m.def_function[optim_tree_sum]("optim_tree_sum")
    m.def_function[optim_resident_alloc]("optim_resident_alloc")
    m.def_function[optim_resident_free]("optim_resident_free")
    m.def_function[optim_copy]("optim_copy")
    m.def_function[cross_entropy_entry]("cross_entropy")
    m.def_function[softmax_entry]("softmax")
    m.def_function[argmax_entry]("argmax")
    m.def_function[portable_math_eval]("portable_math_eval")
    m.def_function[intake_read]("intake_read")
    m.def_function[array_take]("array_take")
    m.def_function[model_step]("model_step")
    return m.finalize()
