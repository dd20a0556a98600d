"""Binding entry of the model engine (training/model.mojo): a whole step of any program.

model_step
    addresses: program (int64 words, mojolearn/_model/program.py), x (k·rows × inputs float32;
               int32 token ids when the program's first op is an Embedding),
               targets (int32 class ids for cross-entropy, float32 for MSE), params, m, v
               (read), new_params, new_m, new_v (written in mode train), losses (k, out),
               outputs (rows × outputs, out: the last batch's), grads (total, out),
               scratch (training/model.mojo `scratch_floats`: rows × (2 × the program's
               arena + the positions of a cross-entropy output) floats, the caller's, reused
               between calls; no clearing needed)
    params:    rows >= 1, mode (0 forward, 1 grads, 2 train, 3 eval: the loss of inference's
               forward, no dropout, no gradients), k >= 1 (1 outside train), t >= 1
               (the first step's one-based index), lr, beta1, beta2, eps, weight_decay,
               total (floats of the flat buffer), first_row (the batch's first row in a larger
               batch: Dropout's global element index starts there; 0 for a whole batch),
               divide_by (0: the batch's own loss count; else the larger batch's, at least
               this batch's: rows × positions for cross-entropy, rows × outputs for MSE;
               ARITHMETIC.md "Data parallel"), pool (the address of the worker pool the
               step's GEMMs and AdamW share, mojolearn/_runtime/threads.py; 0: this thread)
    returns:   rows × outputs, the floats written to `outputs`
    refuses:   a program that does not check (version, op codes, every tensor inside the arena,
               every parameter tensor inside the flat buffer), class ids outside [0,
               classes) and token ids outside [0, vocab) (ValueError, before anything is
               written); a non-finite output, loss,
               gradient or new state (RuntimeError naming it). It never writes its inputs.
"""
from std.ffi import external_call
from std.python import PythonObject

from entries.args import Args, Layout, refuse_nonfinite
from training.config import F32P, I32P, I64P
from training.layers.conv import unpack
from training.model import (HEADER, MODE_EVAL, MODE_FORWARD, MODE_TRAIN, NEED_SRC_GRAD, OP_ADD,
                            OP_ATTENTION, OP_AVGPOOL2D, OP_CONV2D, OP_DROPOUT, OP_EMBEDDING,
                            OP_GELU, OP_LAYERNORM, OP_LINEAR, OP_MAXPOOL2D, OP_POSITION, OP_RELU,
                            OP_SIGMOID, OP_TANH, RECORD, VERSION,
                            model_steps)
from training.pool import is_pool

comptime MODEL_STEP = Layout(
    "model_step",
    "program,x,targets,params,m,v,new_params,new_m,new_v,losses,outputs,grads,scratch",
    "rows,mode,k,t,lr,beta1,beta2,eps,weight_decay,total,first_row,divide_by,pool")

comptime _MAX_ROWS = 1 << 24
comptime _MAX_STEP = (1 << 31) - 1
comptime _MAX_OPS = 4096
comptime _MAX_ARENA = 1 << 32  # floats of one example's activations
comptime _MAX_TOTAL = 1 << 26
comptime _F32_OVERFLOW = 3.4028235677973366e38


def _inside(E: StaticString, what: StaticString, op: Int, at: Int, n: Int, size: Int) raises:
    if at < 0 or n < 1 or at > size or n > size - at:
        raise Error("ValueError: ", E, ": program op ", op, ": ", what, " [", at, ", +", n,
                    ") is outside [0, ", size, ")")


def _times(E: StaticString, op: Int, a: Int, b: Int) raises -> Int:
    """a·b of two sizes in [0, _MAX_ARENA], refused above _MAX_ARENA (no overflow)."""
    if b != 0 and a > _MAX_ARENA // b:
        raise Error("ValueError: ", E, ": program op ", op, ": sizes ", a, " × ", b,
                    " exceed 2^32")
    return a * b


def _check_image_op(E: StaticString, op: Int, r: I64P, arena: Int, total: Int) raises:
    """OP_CONV2D, OP_MAXPOOL2D, OP_AVGPOOL2D: every packed size (training/layers/conv.mojo
    `unpack`) and every tensor the runner reads or writes, as it computes them."""
    var conv = Int(r[unsafe_offset=0]) == OP_CONV2D
    var c = unpack(Int(r[unsafe_offset=3]), 0)
    var h = unpack(Int(r[unsafe_offset=3]), 1)
    var w = unpack(Int(r[unsafe_offset=3]), 2)
    var k = Int(r[unsafe_offset=4])
    var oc = unpack(k, 0) if conv else 1
    var kh = unpack(k, 1) if conv else unpack(k, 0)
    var kw = unpack(k, 2) if conv else unpack(k, 1)
    var sh = unpack(Int(r[unsafe_offset=5]), 0)
    var sw = unpack(Int(r[unsafe_offset=5]), 1)
    if unpack(Int(r[unsafe_offset=5]), 2) > (2 if conv else 0):  # a Conv2d's fused ReLU flag
        raise Error("ValueError: ", E, ": program op ", op, ": bad fused ReLU flag")
    var ph = unpack(Int(r[unsafe_offset=6]), 0) if conv else 0
    var pw = unpack(Int(r[unsafe_offset=6]), 1) if conv else 0
    if (c < 1 or h < 1 or w < 1 or oc < 1 or kh < 1 or kw < 1 or sh < 1 or sw < 1
            or kh > h + 2 * ph or kw > w + 2 * pw):
        raise Error("ValueError: ", E, ": program op ", op, ": bad image sizes")
    var oh = (h + 2 * ph - kh) // sh + 1
    var ow = (w + 2 * pw - kw) // sw + 1
    var n_in = _times(E, op, _times(E, op, c, h), w)
    _inside(E, "src", op, Int(r[unsafe_offset=1]), n_in, arena)
    var pos = _times(E, op, oh, ow)
    _inside(E, "dst", op, Int(r[unsafe_offset=2]), _times(E, op, oc if conv else c, pos),
            arena)
    if not conv:
        var places = Int(r[unsafe_offset=7])  # a 2 × 2 max pool's window places, or 0
        if places != 0:
            if Int(r[unsafe_offset=0]) != OP_MAXPOOL2D or kh != 2 or kw != 2 or sh != 2 or sw != 2:
                raise Error("ValueError: ", E, ": program op ", op, ": window places for ",
                            "a pool that is not a 2 x 2 MaxPool2d at stride 2")
            _inside(E, "places", op, places, (_times(E, op, c, pos) + 3) // 4, arena)
        return
    var taps = _times(E, op, _times(E, op, c, kh), kw)
    var scratch = Int(r[unsafe_offset=8])  # work | mid << 32
    if scratch < 0:
        raise Error("ValueError: ", E, ": program op ", op, ": bad Conv2d scratch")
    var g = 0  # the backward's g, only where it computes the input's gradient
    if (Int(r[unsafe_offset=9]) & NEED_SRC_GRAD) != 0:
        g = _times(E, op, _times(E, op, _times(E, op, oc, kh), kw), n_in // c)
    _inside(E, "work", op, scratch & 0xFFFFFFFF, max(_times(E, op, taps, pos), g), arena)
    var mid = max(_times(E, op, oc, pos), n_in)
    _inside(E, "mid", op, scratch >> 32, mid, arena)
    var params = Int(r[unsafe_offset=7])
    if params < 0:
        raise Error("ValueError: ", E, ": program op ", op, ": bad Conv2d parameters")
    if taps > _MAX_TOTAL // oc:
        raise Error("ValueError: ", E, ": program op ", op, ": weight too large")
    _inside(E, "weight", op, params & 0xFFFFFFFF, oc * taps, total)
    if (params >> 32) > 0:
        _inside(E, "bias", op, (params >> 32) - 1, oc, total)


def _check_program(E: StaticString, w: I64P, total: Int) raises -> Int:
    """Checks every word a step will read; returns the arena's floats per example."""
    if Int(w[unsafe_offset=0]) != VERSION:
        raise Error("ValueError: ", E, ": program version ", Int(w[unsafe_offset=0]),
                    ", this binding runs ", VERSION)
    var ops = Int(w[unsafe_offset=1])
    var arena = Int(w[unsafe_offset=3])
    var inputs = Int(w[unsafe_offset=4])
    var loss = Int(w[unsafe_offset=7])
    var classes = Int(w[unsafe_offset=8])
    if ops < 1 or ops > _MAX_OPS or arena < 1 or arena > _MAX_ARENA or loss < 0 or loss > 1:
        raise Error("ValueError: ", E, ": program header out of range (ops ", ops, ", arena ",
                    arena, ", loss ", loss, ")")
    _inside(E, "input", -1, 0, inputs, arena)
    var outputs = Int(w[unsafe_offset=6])
    _inside(E, "output", -1, Int(w[unsafe_offset=5]), outputs, arena)
    if loss == 0 and (classes < 2 or outputs % classes != 0):
        raise Error("ValueError: ", E, ": program classes ", classes, " do not divide the ",
                    outputs, " outputs")
    for op in range(ops):
        var r = w.unsafe_offset(HEADER + op * RECORD)
        var code = Int(r[unsafe_offset=0])
        var src = Int(r[unsafe_offset=1])
        var dst = Int(r[unsafe_offset=2])
        var a = Int(r[unsafe_offset=3])
        if code == OP_LINEAR:
            var n_out = Int(r[unsafe_offset=4])
            var lead = Int(r[unsafe_offset=8])
            if a < 1 or n_out < 1 or lead < 1 or a > _MAX_ARENA // lead or n_out > _MAX_ARENA // lead:
                raise Error("ValueError: ", E, ": program op ", op, ": bad Linear sizes")
            _inside(E, "src", op, src, a * lead, arena)
            _inside(E, "dst", op, dst, n_out * lead, arena)
            if a > _MAX_TOTAL // n_out:
                raise Error("ValueError: ", E, ": program op ", op, ": weight too large")
            _inside(E, "weight", op, Int(r[unsafe_offset=5]), a * n_out, total)
            if Int(r[unsafe_offset=6]) >= 0:
                _inside(E, "bias", op, Int(r[unsafe_offset=6]), n_out, total)
        elif code == OP_LAYERNORM:
            var lead = Int(r[unsafe_offset=4])
            if a < 1 or lead < 1 or a > _MAX_ARENA // lead:
                raise Error("ValueError: ", E, ": program op ", op, ": bad LayerNorm sizes")
            _inside(E, "src", op, src, a * lead, arena)
            _inside(E, "dst", op, dst, a * lead, arena)
            _inside(E, "stats", op, Int(r[unsafe_offset=7]), 2 * lead, arena)
            if Int(r[unsafe_offset=5]) >= 0 or Int(r[unsafe_offset=6]) >= 0:
                _inside(E, "weight", op, Int(r[unsafe_offset=5]), a, total)
                _inside(E, "bias", op, Int(r[unsafe_offset=6]), a, total)
        elif (code == OP_RELU or code == OP_DROPOUT or code == OP_ADD or code == OP_GELU
              or code == OP_TANH or code == OP_SIGMOID):
            _inside(E, "src", op, src, a, arena)
            _inside(E, "dst", op, dst, a, arena)
            if code == OP_ADD:
                _inside(E, "other", op, Int(r[unsafe_offset=4]), a, arena)
            if code == OP_DROPOUT:
                var th = Int(r[unsafe_offset=4])
                if th < 0 or th >= (1 << 24):
                    raise Error("ValueError: ", E, ": program op ", op, ": bad Dropout threshold")
            if code == OP_GELU and Int(r[unsafe_offset=4]) != 0 and Int(r[unsafe_offset=4]) != 1:
                raise Error("ValueError: ", E, ": program op ", op, ": GELU form ",
                            Int(r[unsafe_offset=4]), " is not 0 (none) or 1 (tanh)")
            if code == OP_GELU:  # what its forward keeps for its backward
                _inside(E, "kept", op, Int(r[unsafe_offset=5]), a, arena)
        elif code == OP_CONV2D or code == OP_MAXPOOL2D or code == OP_AVGPOOL2D:
            _check_image_op(E, op, r, arena, total)
            _check_pool_mask(E, w, op, ops)
        elif code == OP_EMBEDDING or code == OP_POSITION or code == OP_ATTENTION:
            _check_sequence_op(E, r, op, code, arena, total, inputs)
        else:
            raise Error("ValueError: ", E, ": program op ", op, ": op code ", code,
                        " is not one this binding runs")
    return arena


def _check_pool_mask(E: StaticString, w: I64P, op: Int, ops: Int) raises:
    """A Conv2d's ReLU flag 2 (its mask left to the MaxPool2d after it) and a MaxPool2d's
    `masked` word come in pairs: the pool is the next op, reads the conv's output and masks;
    either alone would skip the ReLU's mask or apply one that is not there."""
    var r = w.unsafe_offset(HEADER + op * RECORD)
    var code = Int(r[unsafe_offset=0])
    var masked = Int(r[unsafe_offset=6])
    if code == OP_CONV2D:
        if unpack(Int(r[unsafe_offset=5]), 2) != 2:
            return
        var nxt = w.unsafe_offset(HEADER + (op + 1) * RECORD)
        if (op + 1 >= ops or Int(nxt[unsafe_offset=0]) != OP_MAXPOOL2D
                or Int(nxt[unsafe_offset=1]) != Int(r[unsafe_offset=2])
                or Int(nxt[unsafe_offset=6]) != 1):
            raise Error("ValueError: ", E, ": program op ", op, ": fused ReLU flag 2 without ",
                        "the masking MaxPool2d after it")
        return
    if masked == 0:
        return
    var prev = w.unsafe_offset(HEADER + (op - 1) * RECORD)
    if (code != OP_MAXPOOL2D or masked != 1 or op == 0 or Int(prev[unsafe_offset=0]) != OP_CONV2D
            or unpack(Int(prev[unsafe_offset=5]), 2) != 2
            or Int(prev[unsafe_offset=2]) != Int(r[unsafe_offset=1])):
        raise Error("ValueError: ", E, ": program op ", op, ": bad pool mask word ", masked)


def _check_sequence_op(E: StaticString, r: I64P, op: Int, code: Int, arena: Int, total: Int,
                       inputs: Int) raises:
    """An Embedding (its src the model's input: the ids, checked by `_check_ids`), a
    PositionEmbedding or an attention record: sizes, tensors and tables inside their buffers."""
    var t = Int(r[unsafe_offset=3])
    var d = Int(r[unsafe_offset=4])
    var w = Int(r[unsafe_offset=5])
    var a = Int(r[unsafe_offset=6])
    if t < 1 or d < 1 or t > _MAX_ARENA // d:
        raise Error("ValueError: ", E, ": program op ", op, ": bad sizes T ", t, ", D ", d)
    if code == OP_EMBEDDING:
        if op != 0 or Int(r[unsafe_offset=1]) != 0 or inputs != t:
            raise Error("ValueError: ", E, ": program op ", op, ": an Embedding is the first ",
                        "op and reads the model's input (offset 0, ", inputs, " ids), not [",
                        Int(r[unsafe_offset=1]), ", +", t, ")")
        if a < 1 or a > _MAX_TOTAL // d:
            raise Error("ValueError: ", E, ": program op ", op, ": bad vocabulary ", a)
        _inside(E, "weight", op, w, a * d, total)
    else:
        _inside(E, "src", op, Int(r[unsafe_offset=1]), t * d * (3 if code == OP_ATTENTION else 1),
                arena)
    _inside(E, "dst", op, Int(r[unsafe_offset=2]), t * d, arena)
    if code == OP_POSITION:
        if a < t or a > _MAX_TOTAL // d:
            raise Error("ValueError: ", E, ": program op ", op, ": max_len ", a, " < T ", t)
        _inside(E, "weight", op, w, a * d, total)
    if code == OP_ATTENTION:
        if w < 1 or d % w != 0 or t > _MAX_ARENA // (w * t):
            raise Error("ValueError: ", E, ": program op ", op, ": heads ", w,
                        " do not divide D ", d)
        _inside(E, "att", op, a, w * t * t, arena)


def _check_ids(E: StaticString, w: I64P, x: Int, n: Int) raises:
    """Every token id of a model whose first op is an Embedding: in [0, vocab)."""
    var r = w.unsafe_offset(HEADER)
    if Int(r[unsafe_offset=0]) != OP_EMBEDDING:
        return
    var vocab = Int(r[unsafe_offset=6])
    var ids = I32P(unsafe_from_address=x)
    for i in range(n):
        var v = Int(ids[unsafe_offset=i])
        if v < 0 or v >= vocab:
            raise Error("ValueError: ", E, ": x[", i, "] = ", v, " is not a token id in [0, ",
                        vocab, ")")


def model_step(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """A whole step (or k training steps) of a model's program; see the module header."""
    comptime E = MODEL_STEP.name
    var args = Args(MODEL_STEP, addrs, params)
    var rows = args.int(0, "rows", 1, _MAX_ROWS)
    var mode = args.int(1, "mode", 0, 3)
    var k = args.int(2, "k", 1, _MAX_ROWS)
    var t = args.int(3, "t", 1, _MAX_STEP)
    var total = args.int(9, "total", 1, _MAX_TOTAL)
    if mode != MODE_TRAIN and k != 1:
        raise Error("ValueError: ", E, ": k must be 1 outside mode train (2), got ", k)
    if t + k - 1 > _MAX_STEP:
        raise Error("ValueError: ", E, ": steps t..t+k-1 pass the step limit 2**31-1")
    var lr = args.f64param(4)
    var b1 = args.f64param(5)
    var b2 = args.f64param(6)
    var eps = args.f64param(7)
    var wd = args.f64param(8)
    if not (lr >= 0 and lr < _F32_OVERFLOW and eps > 0 and eps < _F32_OVERFLOW and wd >= 0
            and wd < _F32_OVERFLOW and b1 >= 0 and b1 < 1 and b2 >= 0 and b2 < 1):
        raise Error("ValueError: ", E, ": need lr >= 0, eps > 0, weight_decay >= 0 (finite) ",
                    "and betas in [0, 1)")
    var words = I64P(unsafe_from_address=args.addrs[0])
    var arena = _check_program(E, words, total)
    if arena > (1 << 40) // rows:
        raise Error("ValueError: ", E, ": rows × arena = ", rows, " × ", arena,
                    " exceeds 2^40 floats")
    var outs = Int(words[unsafe_offset=6])
    var classes = Int(words[unsafe_offset=8])
    var first_row = args.int(10, "first_row", 0, 1 << 40)
    if first_row > (1 << 62) // arena:  # Dropout's element indices stay exact in 64 bits
        raise Error("ValueError: ", E, ": first_row × arena = ", first_row, " × ", arena,
                    " exceeds 2^62")
    var divide_by = args.int(11, "divide_by", 0, 1 << 40)
    var counted = rows * (outs // classes if classes > 0 else outs)  # the loss's own count
    if divide_by != 0 and divide_by < counted:
        raise Error("ValueError: ", E, ": divide_by ", divide_by, " is below this batch's ",
                    counted, " loss terms (0: its own count)")
    if mode != MODE_FORWARD and classes > 0:
        var y = args.i32(2)
        for i in range(k * rows * (outs // classes)):
            var label = Int(y[unsafe_offset=i])
            if label < 0 or label >= classes:
                raise Error("ValueError: ", E, ": targets[", i, "] = ", label,
                            " is not a class in [0, ", classes, ")")
    _check_ids(E, words, args.addrs[1], k * rows * Int(words[unsafe_offset=4]))
    var pool = args.int(12, "pool", 0, 1 << 52)
    if pool != 0 and not is_pool(pool):
        raise Error("ValueError: ", E, ": pool is not an open worker pool")
    var losses = args.f32(9)
    var outputs = args.f32(10)
    var grads = args.f32(11)
    var ts = external_call["PyEval_SaveThread", Int]()
    var checked = model_steps(words, args.f32(1), args.i32(2), args.f32(2), args.f32(3), args.f32(4),
                args.f32(5), args.f32(6), args.f32(7), args.f32(8), losses, outputs, grads,
                args.f32(12), rows, mode, k, t, lr, b1, b2, eps, wd, total, first_row, divide_by,
                pool)
    external_call["PyEval_RestoreThread", NoneType](ts)
    refuse_nonfinite(E, "outputs", outputs, rows * outs)
    if mode != MODE_FORWARD:
        refuse_nonfinite(E, "losses", losses, k)
    # A training run's AdamW checked its gradients and the new state as it wrote them.
    if mode != MODE_FORWARD and mode != MODE_EVAL and not checked:
        refuse_nonfinite(E, "grads", grads, total)
    if mode == MODE_TRAIN and not checked:
        refuse_nonfinite(E, "new_params", args.f32(6), total)
        refuse_nonfinite(E, "new_m", args.f32(7), total)
        refuse_nonfinite(E, "new_v", args.f32(8), total)
    return PythonObject(rows * outs)
