"""Binding entries of the MLP family: the per-operation pieces and the fused step.

`mlp_train_step` runs a whole step (modes forward / grads / train) or k training steps in ONE
call, through the very kernel functions the per-operation entries call, in the same order
(training/mlp.mojo), so both paths give the same bits. It never writes its inputs: in train
mode the updated parameters and moments go to `new_params`, `new_m`, `new_v`, so a refused
step leaves the caller's published state untouched.
"""
from std.ffi import external_call
from std.python import PythonObject

from entries.args import Args, Layout, refuse_nonfinite
from training.config import F32P, I32P
from training.mlp import (
    MLPDims,
    MODE_FORWARD,
    MODE_TRAIN,
    adamw_flat,
    bias_activation,
    mlp_steps,
    relu_backward,
    sum_rows,
)

comptime MLP_BIAS_ACTIVATION = Layout("mlp_bias_activation", "values,bias,out", "rows,cols,relu")
comptime MLP_RELU_BACKWARD = Layout("mlp_relu_backward", "activation,incoming,out", "rows,cols")
comptime MLP_SUM_ROWS = Layout("mlp_sum_rows", "values,out", "rows,cols")
comptime MLP_ADAMW = Layout("mlp_adamw", "params,grads,m,v",
                            "n,t,lr,beta1,beta2,eps,weight_decay")
comptime MLP_TRAIN_STEP = Layout(
    "mlp_train_step",
    "x,targets,params,m,v,new_params,new_m,new_v,losses,logits,grads,input_grad",
    "rows,inputs,hidden,classes,mode,k,t,lr,beta1,beta2,eps,weight_decay,want_input_grad")

comptime _MAX_ROWS = 1 << 24
comptime _MAX_WIDTH = 1 << 16
comptime _MAX_STEP = (1 << 31) - 1


def mlp_bias_activation(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """out = values + bias per row, ReLU when relu = 1; returns the outputs written."""
    var args = Args(MLP_BIAS_ACTIVATION, addrs, params)
    var rows = args.int(0, "rows", 0, _MAX_ROWS)
    var cols = args.int(1, "cols", 0, _MAX_WIDTH)
    var relu = args.flag(2, "relu")
    bias_activation(args.f32(0), args.f32(1), args.f32(2), rows, cols, relu)
    refuse_nonfinite(MLP_BIAS_ACTIVATION.name, "out", args.f32(2), rows * cols)
    return PythonObject(rows * cols)


def mlp_relu_backward(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """out = incoming where activation > 0, else 0; returns the outputs written."""
    var args = Args(MLP_RELU_BACKWARD, addrs, params)
    var rows = args.int(0, "rows", 0, _MAX_ROWS)
    var cols = args.int(1, "cols", 0, _MAX_WIDTH)
    relu_backward(args.f32(0), args.f32(1), args.f32(2), rows, cols)
    refuse_nonfinite(MLP_RELU_BACKWARD.name, "out", args.f32(2), rows * cols)
    return PythonObject(rows * cols)


def mlp_sum_rows(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """out[c] = column sums of values (rows ascending); returns the outputs written."""
    var args = Args(MLP_SUM_ROWS, addrs, params)
    var rows = args.int(0, "rows", 0, _MAX_ROWS)
    var cols = args.int(1, "cols", 0, _MAX_WIDTH)
    sum_rows(args.f32(0), args.f32(1), rows, cols)
    refuse_nonfinite(MLP_SUM_ROWS.name, "out", args.f32(1), cols)
    return PythonObject(cols)


def _check_hyper(entry: StaticString, args: Args, first: Int) raises:
    """lr, beta1, beta2, eps, weight_decay at params[first:first+5], as float32."""
    var lr = args.f32param(first)
    var b1 = args.f32param(first + 1)
    var b2 = args.f32param(first + 2)
    var eps = args.f32param(first + 3)
    var wd = args.f32param(first + 4)
    if not (lr > 0 and lr < Float32.MAX and eps > 0 and eps < Float32.MAX
            and wd >= 0 and wd < Float32.MAX and b1 >= 0 and b1 < 1 and b2 >= 0 and b2 < 1):
        raise Error("ValueError: ", entry, ": need lr > 0, eps > 0, weight_decay >= 0 (finite) ",
                    "and betas in [0, 1); got lr=", lr, " betas=(", b1, ", ", b2, ") eps=", eps,
                    " weight_decay=", wd)


def mlp_adamw(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """AdamW step t in place on the flat params, m, v (pass working copies: a refused result
    is left written). Returns n."""
    var args = Args(MLP_ADAMW, addrs, params)
    var n = args.int(0, "n", 0, 1 << 40)
    var t = args.int(1, "t", 1, _MAX_STEP)
    _check_hyper(MLP_ADAMW.name, args, 2)
    adamw_flat(args.f32(0), args.f32(1), args.f32(2), args.f32(3), n, t, args.f32param(2),
               args.f32param(3), args.f32param(4), args.f32param(5), args.f32param(6))
    refuse_nonfinite(MLP_ADAMW.name, "params", args.f32(0), n)
    refuse_nonfinite(MLP_ADAMW.name, "m", args.f32(2), n)
    refuse_nonfinite(MLP_ADAMW.name, "v", args.f32(3), n)
    return PythonObject(n)


def _copy(src: F32P, dst: F32P, n: Int):
    if src != dst:
        for i in range(n):
            dst[unsafe_offset=i] = src[unsafe_offset=i]


def mlp_train_step(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """A whole MLP step in one call: mode 0 forward (logits), 1 grads (+ losses[0], grads,
    input_grad), 2 train (k steps; new_params / new_m / new_v receive the updated state).
    x holds k*rows rows, targets k*rows labels. Returns the logits written (rows*classes)."""
    comptime E = MLP_TRAIN_STEP.name
    var args = Args(MLP_TRAIN_STEP, addrs, params)
    var rows = args.int(0, "rows", 1, _MAX_ROWS)
    var d = MLPDims(args.int(1, "inputs", 1, _MAX_WIDTH), args.int(2, "hidden", 1, _MAX_WIDTH),
                    args.int(3, "classes", 1, _MAX_WIDTH))
    var mode = args.int(4, "mode", 0, 2)
    var k = args.int(5, "k", 1, _MAX_ROWS)
    var t = args.int(6, "t", 1, _MAX_STEP)
    _check_hyper(E, args, 7)
    var want_dx = args.flag(12, "want_input_grad")
    if mode != MODE_TRAIN and k != 1:
        raise Error("ValueError: ", E, ": k must be 1 outside mode train (2), got ", k)
    if t + k - 1 > _MAX_STEP:
        raise Error("ValueError: ", E, ": steps t..t+k-1 = ", t, "..", t + k - 1,
                    " pass the step limit 2**31-1")
    var x = args.f32(0)
    var y = args.i32(1)
    if mode != MODE_FORWARD:
        for i in range(k * rows):
            var label = Int(y[unsafe_offset=i])
            if label < 0 or label >= d.classes:
                raise Error("ValueError: ", E, ": targets[", i, "] = ", label,
                            " is not a class in [0, ", d.classes, ")")
    var n = d.total()
    var p = args.f32(2)
    var m = args.f32(3)
    var v = args.f32(4)
    if mode == MODE_TRAIN:
        p = args.f32(5)
        m = args.f32(6)
        v = args.f32(7)
    var losses = args.f32(8)
    var logits = args.f32(9)
    var grads = args.f32(10)
    var dx = args.f32(11)
    var lr = args.f32param(7)
    var b1 = args.f32param(8)
    var b2 = args.f32param(9)
    var eps = args.f32param(10)
    var wd = args.f32param(11)
    # Pure Mojo from here to the restore: no Python API calls while the GIL is released.
    var ts = external_call["PyEval_SaveThread", Int]()
    if mode == MODE_TRAIN:
        _copy(args.f32(2), p, n)
        _copy(args.f32(3), m, n)
        _copy(args.f32(4), v, n)
    mlp_steps(d, x, y, p, m, v, losses, logits, grads, dx, rows, mode, k, t, lr, b1, b2, eps, wd,
              want_dx)
    external_call["PyEval_RestoreThread", NoneType](ts)
    refuse_nonfinite(E, "logits", logits, rows * d.classes)
    if mode != MODE_FORWARD:
        refuse_nonfinite(E, "losses", losses, k)
        refuse_nonfinite(E, "grads", grads, n)
        if want_dx:
            refuse_nonfinite(E, "input_grad", dx, rows * d.inputs)
    if mode == MODE_TRAIN:
        refuse_nonfinite(E, "new_params", p, n)
        refuse_nonfinite(E, "new_m", m, n)
        refuse_nonfinite(E, "new_v", v, n)
    return PythonObject(rows * d.classes)
