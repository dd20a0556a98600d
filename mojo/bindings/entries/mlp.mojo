"""Binding entries of the MLP family: the per-operation pieces, the fused step and the
resident session (`mlp_resident_open/_step/_steps/_download/_rollback/_close`, the trainer's
hot path: plain int arguments, state kept in binding-owned memory, training/mlp_resident.mojo;
`_set_lr` and `_steps`' per-step rates carry a learning-rate schedule).

`mlp_train_step` runs a whole step (modes forward / grads / train) or k training steps in ONE
call, through the very kernel functions the per-operation entries call, in the same order
(training/mlp.mojo), so both paths give the same bits. It never writes its inputs: in train
mode the updated parameters and moments go to `new_params`, `new_m`, `new_v`, so a refused
step leaves the caller's published state untouched.
"""
from std.ffi import external_call
from std.python import Python, PythonObject
from std.python._cpython import PyObjectPtr

from entries.args import Args, Layout, addr_arg, int_arg, refuse_nonfinite
from entries.intake import (SPEC_F32, SPEC_LABELS, Held, Seen, input_arg, is_int, new_floats,
                            new_int, new_tuple, tuple_set)
from training.arena import arena_bytes, arena_grows
from training.checks import first_nonfinite
from training.config import F32P, F64P, I64P, VENDOR
from training.copy import copy_floats
from training.mlp import (
    MODE_FORWARD,
    MODE_GRADS,
    MODE_TRAIN,
    adamw_flat,
    bias_activation,
    total_params,
    relu_backward,
    sum_rows,
)
from training.mlp_gpu_layers import mlp_layers_steps_gpu
from training.model import mlp_layers_steps
from training.mlp_resident import (
    BAD_TARGET,
    BAD_X,
    DEVICE_FAILED,
    NONFINITE,
    Outcome,
    Outputs,
    STATE_LOST,
    Session,
    is_session,
    read_label,
    run_steps,
    apply_gradients,
    on_device,
    session_close,
    session_download,
    session_open,
    session_rollback,
)

comptime MLP_BIAS_ACTIVATION = Layout("mlp_bias_activation", "values,bias,out", "rows,cols,relu")
comptime MLP_RELU_BACKWARD = Layout("mlp_relu_backward", "activation,incoming,out", "rows,cols")
comptime MLP_SUM_ROWS = Layout("mlp_sum_rows", "values,out", "rows,cols")
comptime MLP_ADAMW = Layout("mlp_adamw", "params,grads,m,v",
                            "n,t,lr,beta1,beta2,eps,weight_decay")
comptime MLP_TRAIN_STEP = Layout(
    "mlp_train_step",
    "x,targets,params,m,v,new_params,new_m,new_v,losses,logits,grads,input_grad,sizes",
    "layers,rows,mode,k,t,lr,beta1,beta2,eps,weight_decay,want_input_grad")

comptime _MAX_ROWS = 1 << 24
comptime _MAX_LAYERS = 16
comptime _MAX_WIDTH = 1 << 16
comptime _MAX_STEP = (1 << 31) - 1
# Binary64 values at or above this round to +inf in binary32 (halfway between FLT_MAX and 2**128;
# `Float32.MAX` is +inf): the bound of a finite float32 hyperparameter, as Python checks it.
comptime _F32_OVERFLOW: Float64 = 3.4028235677973366e38


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
    """lr, beta1, beta2, eps, weight_decay at params[first:first+5], as given (binary64)."""
    var lr = args.f64param(first)
    var b1 = args.f64param(first + 1)
    var b2 = args.f64param(first + 2)
    var eps = args.f64param(first + 3)
    var wd = args.f64param(first + 4)
    var big = _F32_OVERFLOW
    # lr 0 is a step (moments move, weights stay): a schedule's decay may end there.
    if not (lr >= 0 and lr < big and eps > 0 and eps < big
            and wd >= 0 and wd < big and b1 >= 0 and b1 < 1 and b2 >= 0 and b2 < 1):
        raise Error("ValueError: ", entry, ": need lr >= 0, eps > 0, weight_decay >= 0 (finite) ",
                    "and betas in [0, 1); got lr=", lr, " betas=(", b1, ", ", b2, ") eps=", eps,
                    " weight_decay=", wd)


def mlp_adamw(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """AdamW step t in place on the flat params, m, v (pass working copies: a refused result
    is left written). Returns n."""
    var args = Args(MLP_ADAMW, addrs, params)
    var n = args.int(0, "n", 0, 1 << 40)
    var t = args.int(1, "t", 1, _MAX_STEP)
    _check_hyper(MLP_ADAMW.name, args, 2)
    adamw_flat(args.f32(0), args.f32(1), args.f32(2), args.f32(3), n, t, args.f64param(2),
               args.f64param(3), args.f64param(4), args.f64param(5), args.f64param(6))
    refuse_nonfinite(MLP_ADAMW.name, "params", args.f32(0), n)
    refuse_nonfinite(MLP_ADAMW.name, "m", args.f32(2), n)
    refuse_nonfinite(MLP_ADAMW.name, "v", args.f32(3), n)
    return PythonObject(n)


def _sizes(entry: StaticString, args: Args, at: Int, layers: Int) raises -> List[Int]:
    """The layers+1 int64 widths at address `at` of the call, each in [1, 65536]."""
    var sp = I64P(unsafe_from_address=args.addrs[at])
    var sizes = List[Int](capacity=layers + 1)
    for l in range(layers + 1):
        var w = Int(sp[unsafe_offset=l])
        if w < 1 or w > _MAX_WIDTH:
            raise Error("ValueError: ", entry, ": sizes[", l, "] must be in [1, ", _MAX_WIDTH,
                        "], got ", w)
        sizes.append(w)
    return sizes^


def mlp_train_step(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """A whole MLP step in one call, any layer sizes (`sizes`: the address of layers+1 int64
    widths [n0, ..., nL]): mode 0 forward (logits), 1 grads (+ losses[0], grads, input_grad),
    2 train (k steps; new_params / new_m / new_v receive the updated state). x holds k*rows
    rows, targets k*rows labels. GPU builds run every network on the device (uploaded and
    downloaded per call), with the CPU's bits in identical mode. Returns the logits written (rows*classes)."""
    comptime E = MLP_TRAIN_STEP.name
    var args = Args(MLP_TRAIN_STEP, addrs, params)
    var layers = args.int(0, "layers", 1, _MAX_LAYERS)
    var rows = args.int(1, "rows", 1, _MAX_ROWS)
    var mode = args.int(2, "mode", 0, 2)
    var k = args.int(3, "k", 1, _MAX_ROWS)
    var t = args.int(4, "t", 1, _MAX_STEP)
    _check_hyper(E, args, 5)
    var want_dx = args.flag(10, "want_input_grad")
    if mode != MODE_TRAIN and k != 1:
        raise Error("ValueError: ", E, ": k must be 1 outside mode train (2), got ", k)
    if t + k - 1 > _MAX_STEP:
        raise Error("ValueError: ", E, ": steps t..t+k-1 = ", t, "..", t + k - 1,
                    " pass the step limit 2**31-1")
    var sizes = _sizes(E, args, 12, layers)
    var n = total_params(sizes)
    var classes = sizes[layers]
    var x = args.f32(0)
    var y = args.i32(1)
    if mode != MODE_FORWARD:
        for i in range(k * rows):
            var label = Int(y[unsafe_offset=i])
            if label < 0 or label >= classes:
                raise Error("ValueError: ", E, ": targets[", i, "] = ", label,
                            " is not a class in [0, ", classes, ")")
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
    # Pure Mojo from here to the restore: no Python API calls while the GIL is released.
    var ts = external_call["PyEval_SaveThread", Int]()
    if mode == MODE_TRAIN:
        copy_floats(args.f32(2), p, n)
        copy_floats(args.f32(3), m, n)
        copy_floats(args.f32(4), v, n)
    var lr = args.f64param(5)
    var b1 = args.f64param(6)
    var b2 = args.f64param(7)
    var eps = args.f64param(8)
    var wd = args.f64param(9)
    var device_error = String()
    comptime if VENDOR != "cpu":
        try:
            mlp_layers_steps_gpu(sizes, x, y, p, m, v, losses, logits, grads, dx, rows, mode, k,
                                 t, lr, b1, b2, eps, wd, want_dx)
        except e:
            device_error = String(e)
    else:
        mlp_layers_steps(sizes, x, y, p, m, v, losses, logits, grads, dx, rows, mode, k, t, lr,
                         b1, b2, eps, wd, want_dx)
    external_call["PyEval_RestoreThread", NoneType](ts)
    if device_error:
        raise Error("RuntimeError: ", E, ": the GPU runtime failed to run the step (",
                    device_error, ")")
    refuse_nonfinite(E, "logits", logits, rows * classes)
    if mode != MODE_FORWARD:
        refuse_nonfinite(E, "losses", losses, k)
        refuse_nonfinite(E, "grads", grads, n)
        if want_dx:
            refuse_nonfinite(E, "input_grad", dx, rows * sizes[0])
    if mode == MODE_TRAIN:
        refuse_nonfinite(E, "new_params", p, n)
        refuse_nonfinite(E, "new_m", m, n)
        refuse_nonfinite(E, "new_v", v, n)
    return PythonObject(rows * classes)


# ---------------------------------------------------------------- the resident session
# A session is the address of a binding-owned block (training/mlp_resident.mojo) holding the
# parameters, AdamW moments, step count and scratch between calls. The hot entries (`_step`,
# `_steps`) take their layout's addresses and params as positional Python ints, in layout
# order (~15 ns each to convert; a Python list item costs ~60 ns to read).
# Results go to ONE flat float32 buffer `out`: [losses (k) | logits (rows × O) | grads (195)
# | input_grad (rows × I, when asked)].

comptime MLP_RESIDENT_OPEN = Layout(
    "mlp_resident_open", "params,m,v,sizes",
    "layers,capacity_rows,t,lr,beta1,beta2,eps,weight_decay")
comptime MLP_RESIDENT_STEP = Layout("mlp_resident_step", "session,x,targets,out_or_template",
                                    "mode,rows,target_itemsize,want_input_grad,t")
comptime MLP_RESIDENT_STEPS = Layout("mlp_resident_steps",
                                     "session,x,targets,out_or_template,lrs",
                                     "rows,k,target_itemsize,t")
comptime MLP_RESIDENT_SET_LR = Layout("mlp_resident_set_lr", "session", "lr")  # positional
comptime MLP_RESIDENT_DOWNLOAD = Layout("mlp_resident_download", "session,params,m,v", "")
comptime MLP_RESIDENT_GRADS = Layout("mlp_resident_grads", "session,x,targets,out",
                                     "rows,target_itemsize,divide_by,t")
comptime MLP_RESIDENT_APPLY = Layout("mlp_resident_apply", "session,grads", "t")
comptime MLP_RESIDENT_ROLLBACK = Layout("mlp_resident_rollback", "session", "t_before")
comptime MLP_RESIDENT_CLOSE = Layout("mlp_resident_close", "session", "")
comptime MLP_RESIDENT_ARENA = Layout("mlp_resident_arena", "session", "")

# Below this many rows × steps (~2 µs of work) the GIL round trip (~0.1 µs) is a noticeable
# part of the call and frees too little time for another thread to use.
comptime _GIL_RELEASE_ROWS = 64
comptime _MAX_CAPACITY = 1 << 20
comptime _X_SPEC = SPEC_F32 | (2 << 4)
comptime _Y_SPEC = SPEC_LABELS | (1 << 4)


def _session(entry: StaticString, addr: Int) raises -> Session:
    if not is_session(addr):
        raise Error("ValueError: ", entry, ": not an open session (closed or never opened)")
    return Session(addr)


def mlp_resident_open(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """A new session (its address, the handle) holding copies of params, m, v and step t,
    with scratch for up to capacity_rows rows per step."""
    comptime E = MLP_RESIDENT_OPEN.name
    var args = Args(MLP_RESIDENT_OPEN, addrs, params)
    var sizes = _sizes(E, args, 3, args.int(0, "layers", 1, _MAX_LAYERS))
    var capacity = args.int(1, "capacity_rows", 1, _MAX_CAPACITY)
    var t = args.int(2, "t", 0, _MAX_STEP)
    _check_hyper(E, args, 3)
    var n = total_params(sizes)
    var names: List[StaticString] = ["params", "m", "v"]
    for i in range(3):
        var bad = first_nonfinite(args.f32(i), n)
        if bad >= 0:
            raise Error("ValueError: ", E, ": ", names[i], " must be finite (index ", bad,
                        " is ", args.f32(i)[unsafe_offset=bad], ")")
    var addr = session_open(sizes, capacity, t, args.f64param(3), args.f64param(4),
                            args.f64param(5), args.f64param(6), args.f64param(7), args.f32(0),
                            args.f32(1), args.f32(2))
    if addr == 0:
        raise Error("MemoryError: ", E, ": cannot allocate a session for ", capacity, " rows")
    return PythonObject(addr)


def mlp_resident_close(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Free a session; returns 0."""
    var args = Args(MLP_RESIDENT_CLOSE, addrs, params)
    _ = _session(MLP_RESIDENT_CLOSE.name, args.addrs[0])
    session_close(args.addrs[0])
    return PythonObject(0)


def mlp_resident_arena(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """[bytes, times grown] of the session's GEMM packing arena (tests check that steps after
    the first allocate nothing)."""
    var args = Args(MLP_RESIDENT_ARENA, addrs, params)
    var s = _session(MLP_RESIDENT_ARENA.name, args.addrs[0])
    return Python.list(PythonObject(arena_bytes(s.arena())), PythonObject(arena_grows(s.arena())))


def mlp_resident_download(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Copy the session's params, m, v into the given buffers; returns its step count."""
    var args = Args(MLP_RESIDENT_DOWNLOAD, addrs, params)
    var s = _session(MLP_RESIDENT_DOWNLOAD.name, args.addrs[0])
    return PythonObject(session_download(s, args.f32(1), args.f32(2), args.f32(3)))


def _check_lr(entry: StaticString, name: StaticString, index: Int, lr: Float64) raises:
    """A learning rate as `_check_hyper` takes it: finite and >= 0 (binary64, as given)."""
    if not (lr >= 0 and lr < _F32_OVERFLOW):
        if index >= 0:
            raise Error("ValueError: ", entry, ": ", name, "[", index, "] must be finite and ",
                        ">= 0, got ", lr)
        raise Error("ValueError: ", entry, ": ", name, " must be finite and >= 0, got ", lr)


def mlp_resident_set_lr(session: PythonObject, lr: PythonObject) raises -> PythonObject:
    """Set the learning rate (a Python float, binary64 as given) the session's next steps and
    `mlp_resident_apply` use: a schedule's rate, set before each scheduled step. Positional
    like `_step` (a list-form call cost ~1 µs, a third of a small step); returns None."""
    comptime E = MLP_RESIDENT_SET_LR.name
    var s = _session(E, addr_arg(E, "session", session))
    var v = external_call["PyFloat_AsDouble", Float64](lr._obj_ptr)
    if v == -1.0 and external_call["PyErr_Occurred", Int]() != 0:
        external_call["PyErr_Clear", NoneType]()
        raise Error("TypeError: ", E, ": lr must be a float")
    _check_lr(E, "lr", -1, v)
    s.set_lr(v)
    return PythonObject(None)


def mlp_resident_rollback(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Undo the last training run when it started at step t_before (and only then); returns
    the session's step count afterwards."""
    var args = Args(MLP_RESIDENT_ROLLBACK, addrs, params)
    var s = _session(MLP_RESIDENT_ROLLBACK.name, args.addrs[0])
    _ = session_rollback(s, args.int(0, "t_before", 0, _MAX_STEP))
    return PythonObject(s.t())


def _resident_run(E: StaticString, s: Session, x_at: Int, y: Int, out_at: Int, mode: Int,
                  rows: Int, k: Int, itemsize: Int, want_dx: Bool,
                  t: Int, divide_by: Int = 0, rates: Int = 0) raises -> Int:
    if divide_by != 0 and on_device(s):
        raise Error("RuntimeError: ", E, ": microbatch gradients of a device-resident session "
                    "are not supported yet; use MOJOLEARN_VENDOR=cpu")
    if rows > s.capacity:
        raise Error("ValueError: ", E, ": rows = ", rows, " exceeds the session's capacity of ",
                    s.capacity, " rows")
    if itemsize != 4 and itemsize != 8:
        raise Error("ValueError: ", E, ": target_itemsize must be 4 or 8, got ", itemsize)
    if t != s.t():
        raise Error("RuntimeError: ", E, ": the caller expects step ", t,
                    " but the session is at step ", s.t())
    if mode == MODE_TRAIN and t + k > _MAX_STEP:
        raise Error("ValueError: ", E, ": steps ", t + 1, "..", t + k,
                    " pass the step limit 2**31-1")
    if rates != 0:
        var r = F64P(unsafe_from_address=rates)
        for i in range(k):
            _check_lr(E, "lrs", i, r[unsafe_offset=i])
    var o = Outputs.packed(out_at, s.classes(), s.n, rows, k)
    var x = F32P(unsafe_from_address=x_at)
    var outcome: Outcome
    if rows * k >= _GIL_RELEASE_ROWS:
        var ts = external_call["PyEval_SaveThread", Int]()  # pure Mojo until restored
        outcome = run_steps(s, x, y, itemsize, o, rows, k, mode, want_dx, divide_by, rates)
        external_call["PyEval_RestoreThread", NoneType](ts)
    else:
        outcome = run_steps(s, x, y, itemsize, o, rows, k, mode, want_dx, divide_by, rates)
    if outcome.status == BAD_TARGET:
        raise Error("ValueError: ", E, ": targets must be classes 0..", s.classes() - 1,
                    "; targets[", outcome.detail, "] = ", read_label(y, itemsize, outcome.detail))
    if outcome.status == BAD_X:
        raise Error("ValueError: ", E, ": X must be finite (flat index ", outcome.detail, " is ",
                    x[unsafe_offset=outcome.detail], ")")
    if outcome.status == DEVICE_FAILED:
        if outcome.detail == STATE_LOST:
            raise Error("RuntimeError: ", E, ": the GPU runtime failed and the session's device "
                        "state was lost; only closing the session is possible")
        raise Error("RuntimeError: ", E, ": the GPU runtime failed to run the step (the session "
                    "is unchanged)")
    if outcome.status == NONFINITE:
        var names: List[StaticString] = ["logits", "losses", "grads", "input_grad", "params",
                                         "m", "v"]
        raise Error("RuntimeError: ", E, ": output '", names[outcome.detail],
                    "' is not finite at index ", outcome.index, " (the session is unchanged)")
    return s.t()


# A declined call returns why, as a negative int (a step count is never negative), and does
# nothing: the Python side (`_mlp/batches.BatchReader`) then copies or converts that operand
# or refuses it by name (X: not float32 (rows, inputs) C-contiguous on the CPU, or not an
# object read here; TARGETS: X read, the labels not int32/int64 (rows,) C-contiguous;
# CAPACITY: both fine, but more rows than the session's scratch holds: the session grows).
comptime DECLINED_X = -1
comptime DECLINED_TARGETS = -2
comptime DECLINED_CAPACITY = -3

# `_user_int`: an int stands for an address the caller checked only with the rows (X) or the
# itemsize (targets) that say what it holds; without them it is a user's int passed as a batch
# (`train_step(12345, y)`, `train_step(X, 678)`), and the call is declined, so that the Python
# side refuses it by name (TypeError naming X or targets), never reading the int as memory.
def _batch_run(E: StaticString, session: PythonObject, x: PythonObject, targets: PythonObject,
               out_: PythonObject, mode: Int, rows_given: Int, k: Int,
               target_itemsize: PythonObject, want_dx: Bool, t: PythonObject,
               rates: Int = 0) raises -> PythonObject:
    """`_resident_run` with X and targets each an address or an object read here (their
    views held until the step ends). rows_given 0: the rows are X's (an object). `out_` the
    address of the result buffer (the return is the step count), or a one-item float32
    array.array of +0.0 from which the buffer is made here (the return is (step, buffer, its
    address, rows): cheaper than making it in Python). A DECLINED_* code when an object is
    declined, or (rows from X) when they are not k batches the session holds."""
    var s = _session(E, addr_arg(E, "session", session))
    if is_int(x) and is_int(targets) and is_int(out_):  # all addresses: nothing to read here
        if rows_given == 0:
            return PythonObject(DECLINED_X)  # a caller's int, not a checked address: `_user_int`
        if int_arg(E, "target_itemsize", target_itemsize, 0, 8) == 0:
            return PythonObject(DECLINED_TARGETS)  # `_user_int`
        return PythonObject(_resident_run(
            E, s, addr_arg(E, "x", x), addr_arg(E, "targets", targets), addr_arg(E, "out", out_),
            mode, rows_given, k, int_arg(E, "target_itemsize", target_itemsize, 4, 8), want_dx,
            int_arg(E, "t", t, 0, _MAX_STEP), 0, rates))
    return _objects_run(E, s, x, targets, out_, mode, rows_given, k, target_itemsize, want_dx,
                        t, rates)


def _objects_run(E: StaticString, s: Session, x: PythonObject, targets: PythonObject,
                 out_: PythonObject, mode: Int, rows_given: Int, k: Int,
                 target_itemsize: PythonObject, want_dx: Bool, t: PythonObject,
                 rates: Int) raises -> PythonObject:
    """`_batch_run` when X, targets or out is an object."""
    var xs = Seen()
    var xh = Held()
    var rows = rows_given
    var x_at: Int
    if rows_given == 0:
        if is_int(x) or is_int(out_):
            return PythonObject(DECLINED_X)  # `_user_int`
        x_at = input_arg(E, "x", x, _X_SPEC, -1, s.inputs(), xs, xh)
        rows = Int(xs.shape[0]) // k
        if x_at == 0 or rows < 1 or rows * k != Int(xs.shape[0]):
            return PythonObject(DECLINED_X)
    else:
        x_at = input_arg(E, "x", x, _X_SPEC, rows * k, s.inputs(), xs, xh)
        if x_at == 0:
            return PythonObject(DECLINED_X)
    var ys = Seen()
    var yh = Held()
    var y_at = x_at  # forward mode reads no targets
    var itemsize = 4
    if mode != MODE_FORWARD:
        if is_int(targets) and int_arg(E, "target_itemsize", target_itemsize, 0, 8) == 0:
            return PythonObject(DECLINED_TARGETS)  # `_user_int`
        y_at = input_arg(E, "targets", targets, _Y_SPEC, rows * k, 0, ys, yh)
        if y_at == 0:
            return PythonObject(DECLINED_TARGETS)
        itemsize = ys.itemsize if ys.itemsize != 0 else int_arg(E, "target_itemsize",
                                                                  target_itemsize, 4, 8)
    if rows > s.capacity:  # both read: the caller grows the session and calls again
        return PythonObject(DECLINED_CAPACITY)
    var step = int_arg(E, "t", t, 0, _MAX_STEP)
    if is_int(out_):
        var done = _resident_run(E, s, x_at, y_at, addr_arg(E, "out", out_), mode, rows, k,
                                 itemsize, want_dx, step, 0, rates)
        xh.release()
        yh.release()
        return PythonObject(done)
    var made: PyObjectPtr
    var out_at: Int
    made, out_at = new_floats(out_, k + rows * s.classes() + s.n + (
        rows * s.inputs() if want_dx else 0), E)
    var after: Int
    try:
        after = _resident_run(E, s, x_at, y_at, out_at, mode, rows, k, itemsize, want_dx, step,
                              0, rates)
    except e:
        external_call["Py_DecRef", NoneType](made)
        raise e^
    xh.release()
    yh.release()
    var r = PythonObject(from_owned=new_tuple(4))
    tuple_set(r._obj_ptr, 0, new_int(after))
    tuple_set(r._obj_ptr, 1, made)  # steals our reference
    tuple_set(r._obj_ptr, 2, new_int(out_at))
    tuple_set(r._obj_ptr, 3, new_int(rows))
    return r


def mlp_resident_step(session: PythonObject, x: PythonObject, targets: PythonObject,
                      out_: PythonObject, mode: PythonObject, rows: PythonObject,
                      target_itemsize: PythonObject, want_input_grad: PythonObject,
                      t: PythonObject) raises -> PythonObject:
    """One pass on a session: mode 0 forward (logits), 1 gradients (loss, logits, grads,
    input_grad), 2 one training step. x / targets: addresses, or the objects themselves
    (float32 (rows, inputs) / int32 or int64 (rows,), C-contiguous: else a DECLINED_* code
    is returned and nothing is done; an object's own itemsize overrides target_itemsize).
    out_or_template: the result buffer's address, or the template it is made from (`_batch_run`).
    Returns the session's step count afterwards."""
    comptime E = MLP_RESIDENT_STEP.name
    return _batch_run(E, session, x, targets, out_, int_arg(E, "mode", mode, 0, 2),
                      int_arg(E, "rows", rows, 0, _MAX_CAPACITY), 1, target_itemsize,
                      int_arg(E, "want_input_grad", want_input_grad, 0, 1) == 1, t)


def mlp_resident_steps(session: PythonObject, x: PythonObject, targets: PythonObject,
                       out_: PythonObject, lrs: PythonObject, rows: PythonObject,
                       k: PythonObject, target_itemsize: PythonObject,
                       t: PythonObject) raises -> PythonObject:
    """k training steps in one call over k batches of `rows` rows stacked in x / targets
    (addresses or objects, as `mlp_resident_step`); out holds the k losses and the last
    step's logits and grads. `lrs`: the address of k binary64 learning rates, step i at
    lrs[i] (a schedule's; each finite and >= 0), or 0 for the session's lr. Returns the new
    step count, or a DECLINED_* code (an object declined)."""
    comptime E = MLP_RESIDENT_STEPS.name
    return _batch_run(E, session, x, targets, out_, MODE_TRAIN,
                      int_arg(E, "rows", rows, 0, _MAX_CAPACITY),
                      int_arg(E, "k", k, 1, _MAX_STEP), target_itemsize, False, t,
                      int_arg(E, "lrs", lrs, 0, Int.MAX))


def mlp_resident_grads(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Loss and gradients of one microbatch on the session's current state, divided by
    `divide_by` (the whole batch's row count) instead of its own rows; out = [loss | logits |
    grads]. The state is not changed. Returns the session's step count."""
    comptime E = MLP_RESIDENT_GRADS.name
    var args = Args(MLP_RESIDENT_GRADS, addrs, params)
    var rows = args.int(0, "rows", 1, _MAX_CAPACITY)
    var divide_by = args.int(2, "divide_by", 1, 1 << 40)
    if divide_by < rows:
        raise Error("ValueError: ", E, ": divide_by = ", divide_by, " is less than the ", rows,
                    " rows of the microbatch")
    return PythonObject(_resident_run(E, _session(E, args.addrs[0]), args.addrs[1],
                                      args.addrs[2], args.addrs[3], MODE_GRADS, rows, 1,
                                      args.int(1, "target_itemsize", 4, 8), False,
                                      args.int(3, "t", 0, _MAX_STEP), divide_by))


def mlp_resident_apply(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """One AdamW step with the flat gradients at `grads` (parameter order), in the session,
    all or nothing. Returns the new step count."""
    comptime E = MLP_RESIDENT_APPLY.name
    var args = Args(MLP_RESIDENT_APPLY, addrs, params)
    var s = _session(E, args.addrs[0])
    var t = args.int(0, "t", 0, _MAX_STEP)
    if on_device(s):
        raise Error("RuntimeError: ", E, ": applying gradients to a device-resident session is "
                    "not supported yet; use MOJOLEARN_VENDOR=cpu")
    if t != s.t():
        raise Error("RuntimeError: ", E, ": the caller expects step ", t,
                    " but the session is at step ", s.t())
    if t + 1 > _MAX_STEP:
        raise Error("ValueError: ", E, ": step ", t + 1, " passes the step limit 2**31-1")
    var outcome = apply_gradients(s, args.f32(1))
    if outcome.status == NONFINITE:
        var names: List[StaticString] = ["logits", "losses", "grads", "input_grad", "params",
                                         "m", "v"]
        raise Error("RuntimeError: ", E, ": ", "input " if outcome.detail == 2 else "output ",
                    "'", names[outcome.detail], "' is not finite at index ", outcome.index,
                    " (the session is unchanged)")
    return PythonObject(s.t())
