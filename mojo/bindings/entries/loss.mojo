"""Binding entries of the loss family: cross-entropy, and the portable-math evaluator (exp, log,
tanh, sigmoid, erf) their tests use.

cross_entropy
    addresses: logits (rows×classes float32), targets (rows int32), losses (rows float32, out:
               per-row losses, +0.0 for ignored rows), dlogits (rows×classes float32, out, only
               written when want_grad = 1; pass any non-null address otherwise)
    params:    rows >= 1, classes >= 1, ignore_index (an int32, or -2^31-1 for "none"),
               label_smoothing in [0, 1] (rounded once to float32), reduction (0 none, 1 sum,
               2 mean), want_grad (0/1)
    returns:   the mean (reduction 2) or the sum of the per-row losses, as a Python float
    refuses:   targets outside [0, classes) that are not ignore_index, every row ignored
               (ValueError, before writing anything); non-finite losses/dlogits/result
               (RuntimeError naming the output).
softmax
    addresses: logits (rows×classes float32), probs (rows×classes float32, out)
    params:    rows >= 1, classes >= 1
    returns:   rows
    refuses:   a non-finite logit (ValueError naming its flat index, before writing anything).
               Finite logits give probabilities in [0, 1] (s >= e_max = exp32(0) = 1), so
               the outputs need no check.
argmax
    addresses: logits (rows×classes float32), labels (rows int32, out)
    params:    rows >= 1, 1 <= classes <= 2^31 - 1
    returns:   rows
    refuses:   a non-finite logit (ValueError naming its flat index, before writing anything).
portable_math_eval  (diagnostic: the measured ulp error and the bit-exact mirror tests)
    addresses: x (n float32), y (n float32, out);  params: n, function (0 exp32 SIMD,
    1 exp32_scalar, 2 log32 SIMD, 3 log32_scalar, 4 tanh32 SIMD, 5 tanh32_scalar,
    6 sigmoid32 SIMD, 7 sigmoid32_scalar, 8 erf32 SIMD, 9 erf32_scalar; the SIMD forms run at
    width 8 with a width-1 tail). ±inf/NaN are legitimate outputs of exp/log (and NaN of every
    function for a NaN input), so this entry alone does not refuse non-finite results.
"""
from std.ffi import external_call
from std.python import PythonObject

from entries.args import Args, Layout, refuse_nonfinite
from training.checks import first_nonfinite, is_finite32
from training.loss import (argmax_rows, count_kept, cross_entropy, first_bad_target,
                           softmax_rows)
from training.portable_math import (erf32, erf32_scalar, exp32, exp32_scalar, log32,
                                    log32_scalar, sigmoid32, sigmoid32_scalar, tanh32,
                                    tanh32_scalar)

comptime CROSS_ENTROPY = Layout("cross_entropy", "logits,targets,losses,dlogits",
                                "rows,classes,ignore_index,label_smoothing,reduction,want_grad")
comptime SOFTMAX = Layout("softmax", "logits,probs", "rows,classes")
comptime ARGMAX = Layout("argmax", "logits,labels", "rows,classes")
comptime PORTABLE_MATH_EVAL = Layout("portable_math_eval", "x,y", "n,function")

comptime _MAX_ELEMENTS = 1 << 40
comptime _I32_MIN = -(1 << 31)
comptime _I32_MAX = (1 << 31) - 1
# Below this many logits the GIL round trip costs more than it frees.
comptime _GIL_THRESHOLD = 4096


def cross_entropy_entry(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Cross-entropy with torch's ignore_index and label smoothing; see the module header."""
    comptime name = CROSS_ENTROPY.name
    var args = Args(CROSS_ENTROPY, addrs, params)
    var rows = args.int(0, "rows", 1, _MAX_ELEMENTS)
    var classes = args.int(1, "classes", 1, _MAX_ELEMENTS)
    if classes > _MAX_ELEMENTS // rows:  # rows × classes without overflowing Int
        raise Error("ValueError: ", name, ": rows × classes = ", rows, " × ", classes,
                    " exceeds 2^40 elements")
    var ignore_index = args.int(2, "ignore_index", _I32_MIN - 1, _I32_MAX)
    var eps = args.params[3]
    if not (eps >= 0.0 and eps <= 1.0):
        raise Error("ValueError: ", name, ": label_smoothing must be in [0, 1], got ", eps)
    var reduction = args.int(4, "reduction", 0, 2)
    var want_grad = args.flag(5, "want_grad")
    var logits = args.f32(0)
    var targets = args.i32(1)
    var losses = args.f32(2)
    var dlogits = args.f32(3)
    var bad = first_bad_target(targets, rows, classes, ignore_index)
    if bad >= 0:
        raise Error("ValueError: ", name, ": targets[", bad, "] = ", targets[unsafe_offset=bad],
                    " is outside [0, ", classes, ") and is not ignore_index (", ignore_index, ")")
    var kept = count_kept(targets, rows, ignore_index)
    if kept == 0:
        raise Error("ValueError: ", name, ": every row is ignored (all ", rows,
                    " targets equal ignore_index = ", ignore_index, "); the loss is undefined")
    var result: Float32
    if rows * classes >= _GIL_THRESHOLD:
        var ts = external_call["PyEval_SaveThread", Int]()
        result = cross_entropy(logits, targets, rows, classes, ignore_index, Float32(eps),
                               reduction, losses, dlogits, want_grad, kept)
        external_call["PyEval_RestoreThread", NoneType](ts)
    else:
        result = cross_entropy(logits, targets, rows, classes, ignore_index, Float32(eps),
                               reduction, losses, dlogits, want_grad, kept)
    refuse_nonfinite(name, "losses", losses, rows)
    if want_grad:
        refuse_nonfinite(name, "dlogits", dlogits, rows * classes)
    # 'none' returns only the per-row losses: their (unused) sum may overflow harmlessly.
    if reduction != 0 and not is_finite32(result):
        raise Error("RuntimeError: ", name, ": output 'loss' is not finite (", result, ")")
    return PythonObject(Float64(result))


def _logits_shape(args: Args, name: StaticString, max_classes: Int) raises -> Int:
    """Rows of the (rows, classes) logits of `args` (classes is param 1, at most
    `max_classes`), refused unless every logit is finite."""
    var rows = args.int(0, "rows", 1, _MAX_ELEMENTS)
    var classes = args.int(1, "classes", 1, max_classes)
    if classes > _MAX_ELEMENTS // rows:  # rows × classes without overflowing Int
        raise Error("ValueError: ", name, ": rows × classes = ", rows, " × ", classes,
                    " exceeds 2^40 elements")
    var logits = args.f32(0)
    var bad = first_nonfinite(logits, rows * classes)
    if bad >= 0:
        raise Error("ValueError: ", name, ": logits must be finite (flat index ", bad, " is ",
                    logits[unsafe_offset=bad], ")")
    return rows


def softmax_entry(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Row-wise softmax of finite logits (the p_j of cross-entropy); see the module header."""
    var args = Args(SOFTMAX, addrs, params)
    var rows = _logits_shape(args, SOFTMAX.name, _MAX_ELEMENTS)
    var classes = Int(args.params[1])
    var logits = args.f32(0)
    var probs = args.f32(1)
    if rows * classes >= _GIL_THRESHOLD:
        var ts = external_call["PyEval_SaveThread", Int]()
        softmax_rows(logits, rows, classes, probs)
        external_call["PyEval_RestoreThread", NoneType](ts)
    else:
        softmax_rows(logits, rows, classes, probs)
    return PythonObject(rows)


def argmax_entry(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Each row's first index of its maximum, as int32; see the module header."""
    var args = Args(ARGMAX, addrs, params)
    var rows = _logits_shape(args, ARGMAX.name, _I32_MAX)
    var classes = Int(args.params[1])
    var logits = args.f32(0)
    var labels = args.i32(1)
    if rows * classes >= _GIL_THRESHOLD:
        var ts = external_call["PyEval_SaveThread", Int]()
        argmax_rows(logits, rows, classes, labels)
        external_call["PyEval_RestoreThread", NoneType](ts)
    else:
        argmax_rows(logits, rows, classes, labels)
    return PythonObject(rows)


@always_inline
def _simd_form[w: Int](function: Int, v: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """The SIMD form of an even function code (0 exp, 2 log, 4 tanh, 6 sigmoid, 8 erf)."""
    if function == 0:
        return exp32[w](v)
    if function == 2:
        return log32[w](v)
    if function == 4:
        return tanh32[w](v)
    if function == 6:
        return sigmoid32[w](v)
    return erf32[w](v)


@always_inline
def _scalar_form(function: Int, v: Float32) -> Float32:
    """The scalar form of an odd function code (1 exp, 3 log, 5 tanh, 7 sigmoid, 9 erf)."""
    if function == 1:
        return exp32_scalar(v)
    if function == 3:
        return log32_scalar(v)
    if function == 5:
        return tanh32_scalar(v)
    if function == 7:
        return sigmoid32_scalar(v)
    return erf32_scalar(v)


def portable_math_eval(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """y[i] = f(x[i]) for the function code; returns n."""
    var args = Args(PORTABLE_MATH_EVAL, addrs, params)
    var n = args.int(0, "n", 0, _MAX_ELEMENTS)
    var function = args.int(1, "function", 0, 9)
    var x = args.f32(0)
    var y = args.f32(1)
    comptime W = 8
    var ts = external_call["PyEval_SaveThread", Int]()
    if function % 2 == 1:
        for i in range(n):
            y[unsafe_offset=i] = _scalar_form(function, x[unsafe_offset=i])
    else:
        var i = 0
        while i + W <= n:
            y.unsafe_offset(i).unsafe_store(_simd_form[W](function, x.unsafe_load[width=W](i)))
            i += W
        while i < n:  # the tail through the width-1 SIMD form
            y[unsafe_offset=i] = _simd_form[1](function, x[unsafe_offset=i])[0]
            i += 1
    external_call["PyEval_RestoreThread", NoneType](ts)
    return PythonObject(n)
