"""Binding entries of the optimizer family.

Tensor tables: a variable number of tensors travels as ONE address, that of an int64 array
the caller owns. `optim_step` reads [p0, g0, n0, p1, g1, n1, ...] (parameter address,
gradient address, element count per tensor, parameter order); `optim_clip_grad_norm` reads
[g0, n0, g1, n1, ...]; `optim_tree_sum` reads `count` source addresses. An address may be 0
only for a tensor of 0 elements.

`optim_step` is transactional: it checks every gradient, computes the global norm and the clip
coefficient (when clipping), writes the new parameters and moments into the caller's scratch
(3 · n_total floats: p', m', v'), checks them, and only then commits (copies p', m', v' over
the live buffers, scales the caller's gradients by the coefficient, flips `buf_initialized`).
On any refusal nothing the caller passed has changed.

Resident memory (the device-resident API on cpu): `optim_resident_alloc` returns the address
of zero-filled binding-owned float32 memory, `optim_resident_free` releases it and
`optim_copy` moves floats between any two buffers.
"""
from std.ffi import external_call
from std.python import Python, PythonObject
from std.utils.numerics import inf

from entries.args import Args, Layout
from training.checks import first_nonfinite, is_finite32
from training.config import F32P, I32P, I64P
from training.copy import copy_floats
from training.optim import (GradNorm, adam_scalars, adam_update_into,
                            clip_coefficient, scale_inplace, sgd_scalars, sgd_update_into,
                            tree_sum)

comptime OPTIM_STEP = Layout(
    "optim_step", "table,exp_avg,exp_avg_sq,buf_initialized,scratch,step",
    "kind,n_tensors,n_total,t,lr,beta1,beta2,eps,weight_decay,momentum,dampening,nesterov,maximize,clip,max_norm")
comptime OPTIM_CLIP_GRAD_NORM = Layout("optim_clip_grad_norm", "table",
                                       "n_tensors,max_norm,error_if_nonfinite,norm_type")
comptime OPTIM_TREE_SUM = Layout("optim_tree_sum", "srcs,dst", "count,n")
comptime OPTIM_RESIDENT_ALLOC = Layout("optim_resident_alloc", "", "n")
comptime OPTIM_RESIDENT_FREE = Layout("optim_resident_free", "buf", "")
comptime OPTIM_COPY = Layout("optim_copy", "dst,src", "n")

comptime KIND_ADAM = 0
comptime KIND_ADAMW = 1
comptime KIND_SGD = 2
comptime MAX_TENSORS = 1 << 24
comptime MAX_COUNT = 1 << 16

# Outcome codes of the GIL-free part of a step (raised as Python errors afterwards).
comptime OK = 0
comptime BAD_GRAD = 1
comptime BAD_NORM = 2
comptime BAD_PARAM = 3
comptime BAD_MOMENT = 4


def _f32_at(table: I64P, k: Int) -> F32P:
    return F32P(unsafe_from_address=Int(table[unsafe_offset=k]))


def _read_sizes(entry: StaticString, table: I64P, n_tensors: Int, stride: Int,
                addr_slots: Int) raises -> List[Int]:
    """Element counts from a tensor table; refuses negative counts and null addresses."""
    var sizes = List[Int](capacity=n_tensors)
    for j in range(n_tensors):
        var n = Int(table[unsafe_offset=j * stride + stride - 1])
        if n < 0:
            raise Error("ValueError: ", entry, ": tensor ", j, " has a negative size ", n)
        for a in range(addr_slots):
            if n > 0 and table[unsafe_offset=j * stride + a] == 0:
                raise Error("ValueError: ", entry, ": tensor ", j, " address ", a, " is null")
        sizes.append(n)
    return sizes^


def _hyper[T: DType](entry: StaticString, name: StaticString, x: Scalar[T], lo: Float32,
                     hi: Float32, lo_open: Bool = False, hi_open: Bool = False) raises:
    var ok = x.cast[DType.float64]() >= Float64(lo) and x.cast[DType.float64]() <= Float64(hi)
    if lo_open and x.cast[DType.float64]() == Float64(lo):
        ok = False
    if hi_open and x.cast[DType.float64]() == Float64(hi):
        ok = False
    if not ok:  # NaN fails every comparison
        raise Error("ValueError: ", entry, ": ", name, " ", x, " is outside ", "(" if lo_open
                    else "[", lo, ", ", hi, ")" if hi_open else "]")


@fieldwise_init
struct StepPlan(ImplicitlyCopyable):
    """The validated scalars of one `optim_step` call."""

    var kind: Int
    var t: Int
    var lr: Float64
    var beta1: Float64
    var beta2: Float64
    var eps: Float64
    var weight_decay: Float64
    var momentum: Float64
    var dampening: Float64
    var nesterov: Bool
    var maximize: Bool
    var clip: Bool
    var max_norm: Float32


@fieldwise_init
struct StepOutcome(ImplicitlyCopyable):
    var code: Int
    var tensor: Int
    var index: Int
    var norm: Float32
    var coef: Float32


def _run_step(table: I64P, sizes: List[Int], m: F32P, v: F32P, flags: I32P, scratch: F32P,
              n_total: Int, plan: StepPlan) -> StepOutcome:
    """Everything after argument checks; touches no Python object (runs without the GIL)."""
    var n_tensors = len(sizes)
    for j in range(n_tensors):
        var bad = first_nonfinite(_f32_at(table, 3 * j + 1), sizes[j])
        if bad >= 0:
            return StepOutcome(BAD_GRAD, j, bad, 0, 1)
    var norm = Float32(0.0)
    var coef = Float32(1.0)
    if plan.clip:
        var acc = GradNorm(Float32(2.0))
        for j in range(n_tensors):
            acc.add(_f32_at(table, 3 * j + 1), sizes[j])
        norm = acc.value()
        if not is_finite32(norm):
            return StepOutcome(BAD_NORM, -1, -1, norm, 1)
        coef = clip_coefficient(plan.max_norm, norm)
    var p_new = scratch
    var m_new = scratch.unsafe_offset(n_total)
    var v_new = scratch.unsafe_offset(2 * n_total)
    var off = 0
    if plan.kind == KIND_SGD:
        var s = sgd_scalars(plan.lr, plan.momentum, plan.dampening, plan.weight_decay,
                            plan.nesterov, plan.maximize, plan.clip, coef)
        for j in range(n_tensors):
            sgd_update_into(_f32_at(table, 3 * j), _f32_at(table, 3 * j + 1), m.unsafe_offset(off),
                            p_new.unsafe_offset(off), m_new.unsafe_offset(off), sizes[j], s,
                            flags[unsafe_offset=j] != 0)
            off += sizes[j]
    else:
        var s = adam_scalars(plan.lr, plan.beta1, plan.beta2, plan.eps, plan.weight_decay,
                             plan.kind == KIND_ADAMW, plan.maximize, plan.t, plan.clip, coef)
        for j in range(n_tensors):
            _ = adam_update_into(_f32_at(table, 3 * j), _f32_at(table, 3 * j + 1),
                             m.unsafe_offset(off), v.unsafe_offset(off), p_new.unsafe_offset(off),
                             m_new.unsafe_offset(off), v_new.unsafe_offset(off), sizes[j], s)
            off += sizes[j]
    var uses_m = plan.kind != KIND_SGD or plan.momentum != Float64(0.0)
    var uses_v = plan.kind != KIND_SGD
    off = 0
    for j in range(n_tensors):
        var bad = first_nonfinite(p_new.unsafe_offset(off), sizes[j])
        if bad >= 0:
            return StepOutcome(BAD_PARAM, j, bad, norm, coef)
        if uses_m:
            bad = first_nonfinite(m_new.unsafe_offset(off), sizes[j])
            if bad >= 0:
                return StepOutcome(BAD_MOMENT, j, bad, norm, coef)
        if uses_v:
            bad = first_nonfinite(v_new.unsafe_offset(off), sizes[j])
            if bad >= 0:
                return StepOutcome(BAD_MOMENT, j, bad, norm, coef)
        off += sizes[j]
    # Commit: nothing below can fail.
    off = 0
    for j in range(n_tensors):
        var n = sizes[j]
        copy_floats(p_new.unsafe_offset(off), _f32_at(table, 3 * j), n)
        if plan.clip:
            scale_inplace(_f32_at(table, 3 * j + 1), n, coef)
        off += n
    if uses_m:
        copy_floats(m_new, m, n_total)
    if uses_v:
        copy_floats(v_new, v, n_total)
    if plan.kind == KIND_SGD and plan.momentum != Float64(0.0):
        for j in range(n_tensors):
            flags[unsafe_offset=j] = 1
    return StepOutcome(OK, -1, -1, norm, coef)


def optim_step(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """One transactional Adam / AdamW / SGD step over all tensors; returns [norm, coef]
    (0.0 and 1.0 when `clip` is 0)."""
    var args = Args(OPTIM_STEP, addrs, params)
    comptime E = OPTIM_STEP.name
    var kind = args.int(0, "kind", 0, 2)
    var n_tensors = args.int(1, "n_tensors", 1, MAX_TENSORS)
    var n_total = args.int(2, "n_total")
    var t = args.int(3, "t", 1, (1 << 53) - 1)  # exact in the float64 params
    var plan = StepPlan(kind, t, args.f64param(4), args.f64param(5), args.f64param(6),
                        args.f64param(7), args.f64param(8), args.f64param(9),
                        args.f64param(10), args.flag(11, "nesterov"), args.flag(12, "maximize"),
                        args.flag(13, "clip"), args.f32param(14))
    var inf = Float32.MAX_FINITE
    _hyper(E, "lr", plan.lr, 0, inf)
    _hyper(E, "weight_decay", plan.weight_decay, 0, inf)
    if kind == KIND_SGD:
        _hyper(E, "momentum", plan.momentum, 0, inf)
        _hyper(E, "dampening", plan.dampening, -inf, inf)
        if plan.nesterov and (plan.momentum <= 0 or plan.dampening != 0):
            raise Error("ValueError: ", E, ": nesterov needs momentum > 0 and dampening 0")
    else:
        _hyper(E, "beta1", plan.beta1, 0, 1, hi_open=True)
        _hyper(E, "beta2", plan.beta2, 0, 1, hi_open=True)
        _hyper(E, "eps", plan.eps, 0, inf, lo_open=True)
    if plan.clip:
        _hyper(E, "max_norm", plan.max_norm, 0, inf)
    var table = I64P(unsafe_from_address=args.addrs[0])
    var sizes = _read_sizes(E, table, n_tensors, 3, 2)
    var total = 0
    for j in range(n_tensors):
        total += sizes[j]
    if total != n_total:
        raise Error("ValueError: ", E, ": tensor sizes add up to ", total, ", not n_total ",
                    n_total)
    var ts = external_call["PyEval_SaveThread", Int]()
    var out = _run_step(table, sizes, args.f32(1), args.f32(2), args.i32(3), args.f32(4),
                        n_total, plan)
    if out.code == OK:
        # The step count is committed with the parameters and moments, before control is
        # back in Python: an interrupt arriving after this call cannot tear the state.
        I64P(unsafe_from_address=args.addrs[5])[unsafe_offset=0] = Int64(t)
    external_call["PyEval_RestoreThread", NoneType](ts)
    if out.code == BAD_GRAD:
        raise Error("ValueError: ", E, ": gradient ", out.tensor, " is not finite at index ",
                    out.index)
    if out.code == BAD_NORM:
        raise Error("ValueError: ", E, ": the global gradient norm is not finite (", out.norm,
                    "): the sum of squares overflows float32")
    if out.code == BAD_PARAM:
        raise Error("RuntimeError: ", E, ": output 'param' of tensor ", out.tensor,
                    " is not finite at index ", out.index)
    if out.code == BAD_MOMENT:
        raise Error("RuntimeError: ", E, ": output 'moment' of tensor ", out.tensor,
                    " is not finite at index ", out.index)
    return Python.list(PythonObject(Float64(out.norm)), PythonObject(Float64(out.coef)))


def _overflow_of(p: Float32) -> StaticString:
    """What overflowed when a finite gradient's p-norm is not finite."""
    if p == Float32(1.0):
        return "the sum of |g|"
    if p == Float32(2.0):
        return "the sum of squares"
    return "the sum of |g|^p"


def optim_clip_grad_norm(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """clip_grad_norm_: the global p-norm (`GradNorm`: p = +inf or a finite p >= 1, already
    rounded to float32), clamped coefficient, gradients scaled in place; returns [norm, coef].
    With error_if_nonfinite a non-finite gradient or norm is refused before anything is
    written; without, non-finite values flow through as torch's do."""
    var args = Args(OPTIM_CLIP_GRAD_NORM, addrs, params)
    comptime E = OPTIM_CLIP_GRAD_NORM.name
    var n_tensors = args.int(0, "n_tensors", 0, MAX_TENSORS)
    var max_norm = args.f32param(1)
    var strict = args.flag(2, "error_if_nonfinite")
    var p = args.f32param(3)
    _hyper(E, "max_norm", max_norm, 0, Float32.MAX_FINITE)
    if p != inf[DType.float32]():
        _hyper(E, "norm_type", p, 1, Float32.MAX_FINITE)
    var table = I64P(unsafe_from_address=args.addrs[0])
    var sizes = _read_sizes(E, table, n_tensors, 2, 1)
    if strict:
        for j in range(n_tensors):
            var bad = first_nonfinite(_f32_at(table, 2 * j), sizes[j])
            if bad >= 0:
                raise Error("ValueError: ", E, ": gradient ", j, " is not finite at index ", bad)
    var acc = GradNorm(p)
    for j in range(n_tensors):
        acc.add(_f32_at(table, 2 * j), sizes[j])
    var norm = acc.value()
    if strict and not is_finite32(norm):
        raise Error("ValueError: ", E, ": the global gradient norm is not finite (", norm,
                    "): ", _overflow_of(p), " overflows float32")
    var coef = clip_coefficient(max_norm, norm)
    for j in range(n_tensors):
        scale_inplace(_f32_at(table, 2 * j), sizes[j], coef)
    return Python.list(PythonObject(Float64(norm)), PythonObject(Float64(coef)))


def optim_tree_sum(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """dst[0:n] = the balanced-tree sum of `count` (a power of two) float32 sources; refuses
    non-finite sources and a non-finite sum (dst is scratch: its contents are then undefined)."""
    var args = Args(OPTIM_TREE_SUM, addrs, params)
    comptime E = OPTIM_TREE_SUM.name
    var count = args.int(0, "count", 1, MAX_COUNT)
    var n = args.int(1, "n")
    if count & (count - 1) != 0:
        raise Error("ValueError: ", E, ": count must be a power of two, got ", count)
    var srcs = I64P(unsafe_from_address=args.addrs[0])
    for k in range(count):
        if n > 0 and srcs[unsafe_offset=k] == 0:
            raise Error("ValueError: ", E, ": source ", k, " is null")
        var bad = first_nonfinite(_f32_at(srcs, k), n)
        if bad >= 0:
            raise Error("ValueError: ", E, ": microbatch ", k, " is not finite at index ", bad)
    var dst = args.f32(1)
    tree_sum(srcs, count, dst, n)
    var bad = first_nonfinite(dst, n)
    if bad >= 0:
        raise Error("ValueError: ", E, ": the microbatch sum overflows float32 at index ", bad)
    return PythonObject(n)


def optim_resident_alloc(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Address of n zero-filled float32 of binding-owned memory (at least one float)."""
    var args = Args(OPTIM_RESIDENT_ALLOC, addrs, params)
    var n = args.int(0, "n", 0, 1 << 36)
    var a = external_call["calloc", Int](max(n, 1), 4)
    if a == 0:
        raise Error("MemoryError: optim_resident_alloc: cannot allocate ", n, " floats")
    return PythonObject(a)


def optim_resident_free(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """Release memory from `optim_resident_alloc` (each address exactly once)."""
    var args = Args(OPTIM_RESIDENT_FREE, addrs, params)
    external_call["free", NoneType](args.addrs[0])
    return PythonObject(None)


def optim_copy(addrs: PythonObject, params: PythonObject) raises -> PythonObject:
    """dst[0:n] = src[0:n] (float32; the buffers must not overlap)."""
    var args = Args(OPTIM_COPY, addrs, params)
    var n = args.int(0, "n")
    copy_floats(args.f32(1), args.f32(0), n)
    return PythonObject(n)
