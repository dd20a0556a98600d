"""Adam, AdamW and SGD over float32 buffers, with torch.optim semantics; `clip_grad_norm_`.

Python validates and packs; every float operation that lands in a result runs in the binding
(`optim_step`, one transactional call over all tensors), in the order docs/ARITHMETIC.md fixes:

    t = t + 1;  lr = lr_schedule.lr_at(t) if a schedule is set
    if max_norm: norm = sqrt(sum of g*g over all tensors, in order); coef = min(max_norm /
                 (norm + 1e-6), 1); g = g * coef (the caller's arrays, as clip_grad_norm_)
    g = -g if maximize
    Adam:  g = g + wd*p          AdamW: p = p * (1 - lr*wd)          (both skipped at wd = 0)
           m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
           p = p - (lr / (1 - b1^t)) * (m / (sqrt(v) / sqrt(1 - b2^t) + eps))
    SGD:   g = g + wd*p (skipped at 0); momentum: buf = g on a tensor's first step, else
           buf = mu*buf + (1-dampening)*g; g = g + mu*buf (nesterov) or buf;  p = p - lr*g

Hyperparameters are kept as given (binary64); each step forms its float32 scalars from them
as torch does (docs/ARITHMETIC.md, profile v2). A step either completes or changes nothing:
every argument is checked first, and the binding computes into scratch, checks the results
and only then commits.

Device-resident state: with `resident=None` (default) or True the moments live in
binding-owned memory (on cpu, memory the binding allocated; on a GPU vendor, the same host-side
buffers: the optimizer math runs on the host in every build). `params_to_device()` moves the
parameters there too; `step_device()` then updates them with no host copy of parameters or
moments.

Example:
    >>> w = mojolearn.zeros((3, 2))
    >>> g = mojolearn.Array.from_list([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    >>> opt = mojolearn.AdamW([w], lr=1e-2)
    >>> opt.step([g])  # w is updated in place
    >>> opt.t
    1
"""

from __future__ import annotations

import array as _pyarray
import math
import sys
import threading
from collections.abc import Iterator as _Iterator

from ._buffers import reader as _reader
from ._buffers.alloc import zeros
from ._buffers.array import Array
from ._buffers.intake import f32_tensor, f32_view, is_buffer, leaf_view, tensor_list
from ._optim.base import (
    _ADAM,
    _ADAMW,
    _SGD,
    STEP_F64_EXACT,
    Hyper,
    _accumulation_steps,
    _addresses,
    _betas,
    _binding,
    _bool,
    _Buf,
    _copy,
    _f32_hyper,
    _locked,
    _lr_schedule,
    _norm_type,
    _refuse_kwargs,
    _resident_flag,
)
from ._optim.resident import DeviceArray as DeviceArray  # public here and in mojolearn.training
from ._optim.resident import _Resident
from ._optim.state import _StateDict
from ._runtime import backend as _backend
from ._runtime.portable import round_f32

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, NoReturn, TypeVar

    from ._buffers.types import Buffers, LRSchedule

    _Opt = TypeVar("_Opt", bound="_Optimizer")


# -- the optimizers -----------------------------------------------------------------------------


class _Optimizer(_StateDict, _Resident):
    """Setup, gradients and the step; the state_dict (`_optim.state`) and device residency
    (`_optim.resident`) are mixed in."""

    _KIND: int  # the update rule, `_ADAM`, `_ADAMW` or `_SGD`
    _lr: float
    _lr_schedule: LRSchedule | None
    _acc: _Buf | None
    total_norm_: float | None
    """The pre-clip global gradient norm of the last step that clipped (`max_norm`), else
    None."""
    clip_coef_: float | None
    """The clipping coefficient of that step, else None."""

    def _setup(self, ctor: dict[str, Any], hyper: Hyper, lr: float) -> None:
        """Read the parameters and allocate the state; the constructor checked `hyper` and
        `lr`, this checks the rest of `ctor` (its arguments, as given)."""
        self._ctor = ctor
        params = ctor["params"]
        tensors = tensor_list(params, "params")
        if isinstance(params, _Iterator):
            # model.parameters() is a generator: keep the list it gave, so that get_params()
            # and set_params() see the tensors, not an exhausted generator.
            ctor["params"] = tensors
        if not tensors:
            raise ValueError("params is an empty list; the optimizer needs at least one tensor")
        self._params, self._shapes, self._sizes, self._offsets = [], [], [], []
        off = 0
        for j, obj in enumerate(tensors):
            arr, shape = f32_tensor(leaf_view(obj, f"params[{j}]"), f"params[{j}]", True)
            self._params.append(arr)
            self._shapes.append(shape)
            self._sizes.append(arr._size)
            self._offsets.append(off)
            off += arr._size
        self._check_no_overlap()
        self._param_spans = [
            (a._addr, a._addr + 4 * a._size, "params", j)
            for j, a in enumerate(self._params)
            if a._size
        ]
        # The one lock of this object: `set_params` keeps it (see there).
        self._lock = getattr(self, "_lock", None) or threading.RLock()
        self._objects = tensors
        # torch tensors this optimizer writes in place, whose version counters it then bumps.
        self._torch_params = [t for t in tensors if _reader.is_torch(t)]
        self._n_total = off
        self._hyper = hyper
        self._lr = lr
        self._lr_schedule = _lr_schedule(ctor["lr_schedule"])
        self._accumulation = _accumulation_steps(ctor["accumulation_steps"])
        self._resident = _resident_flag(ctor["resident"])
        # The step count lives in memory the binding writes when it commits a step.
        self._step = Array._wrap(_pyarray.array("q", [0]), (1,), "<i8")
        n = self._n_total
        self._m = _Buf(n, self._resident)
        self._v = _Buf(n, self._resident)
        self._scratch = _Buf(3 * max(n, 1), self._resident)
        self._flags = Array._wrap(
            _pyarray.array("i", bytes(4 * len(tensors))), (len(tensors),), "<i4"
        )
        self._acc = None  # combined microbatch gradient (step_accumulated)
        self._pdev = None  # device-resident parameters (params_to_device)
        self._gdev = None  # device gradient (grads_to_device)
        self._zeros: Array | None = None  # zero_grad's source of +0.0
        self.total_norm_ = None
        self.clip_coef_ = None

    def _check_no_overlap(self) -> None:
        spans = sorted(
            (a._addr, a._addr + 4 * a._size, j) for j, a in enumerate(self._params) if a._size
        )
        for (_, end, i), (start, _, j) in zip(spans, spans[1:]):
            if start < end:
                raise ValueError(
                    f"params[{min(i, j)}] and params[{max(i, j)}] share memory; "
                    f"each parameter must be its own buffer"
                )

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be copied or pickled (it owns binding "
            f"memory); use state_dict() / load_state_dict() and get_params()"
        )

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items() if k != "params")
        return f"{type(self).__name__}({len(self._params)} tensors, {args})"

    # -- hyperparameters ----------------------------------------------------------------------

    @property
    def lr(self) -> float:
        """The float32 learning rate of the next step (a schedule overwrites it each step)."""
        return self._lr

    @lr.setter
    @_locked
    def lr(self, value: float) -> None:
        self._lr = _f32_hyper("learning rate", value)
        self._ctor["lr"] = value

    @property
    def t(self) -> int:
        """Steps taken. ONE-BASED: the first step runs with t = 1."""
        return self._step._mv[0]  # type: ignore[no-any-return]  # an int64 Array

    @property
    def accumulation_steps(self) -> int:
        """The number of microbatch gradients `step_accumulated` combines."""
        return self._accumulation

    @_locked
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor arguments (scikit-learn style).

        Args:
            deep: ignored (scikit-learn's signature; there are no nested estimators).

        Returns:
            A new dict of the arguments, as given (not rounded).
        """
        return dict(self._ctor)

    @_locked
    def set_params(self: _Opt, **params: Any) -> _Opt:
        """Rebuild through the constructor with these arguments changed; state is dropped.

        Args:
            **params: constructor arguments by name (`params` included).

        Returns:
            self, rebuilt.

        Raises:
            ValueError: a name that is not a constructor argument, or what the constructor
                raises for the new values (the optimizer is unchanged then).
        """
        for key in params:
            if key not in self._ctor:
                raise ValueError(
                    f"Invalid parameter {key!r} for {type(self).__name__}; valid "
                    f"parameters: {sorted(self._ctor)}"
                )
        fresh = type(self)(**{**self._ctor, **params})
        # One update, keeping THIS lock: a thread already waiting on it then runs on the new
        # state, never beside a later call that frees the buffers it writes. (The dict is never
        # empty meanwhile, so a reader never misses an attribute.)
        fresh.__dict__["_lock"] = self._lock
        self.__dict__.update(fresh.__dict__)
        return self

    def numeric_mode_used(self) -> str:
        """The numeric mode of the binding the steps run in.

        Returns:
            'identical' or 'fast', read from the loaded binary.
        """
        return _backend.numeric_mode_used()

    def vendor_used(self) -> str:
        """The vendor of the binding the steps run in.

        Returns:
            'cpu', 'cuda' or 'hip', read from the loaded binary.
        """
        return _backend.vendor_used()

    # -- gradients ----------------------------------------------------------------------------

    def _grads(self, grads: Buffers, name: str, writable: bool) -> tuple[list[Any], list[int]]:
        """(keep-alives, addresses) of one float32, C-contiguous gradient per parameter, of its
        shape, apart from the parameters and from each other; refused by name otherwise.
        Each is read as `f32_view` reads it."""
        tensors = tensor_list(grads, name)
        if len(tensors) != len(self._params):
            raise ValueError(
                f"{name}: expected {len(self._params)} gradients (one per "
                f"parameter, same order), got {len(tensors)}"
            )
        keeps: list[Any] = []
        addrs: list[int] = []
        for j, obj in enumerate(tensors):
            keep, addr, shape = f32_view(obj, f"{name}[{j}]", writable)
            if shape != self._shapes[j]:
                raise ValueError(
                    f"{name}[{j}] has shape {shape}, but params[{j}] has shape {self._shapes[j]}"
                )
            keeps.append(keep)
            addrs.append(addr)
        self._check_apart(addrs, name)
        return keeps, addrs

    def _check_apart(self, grads: list[int], name: str) -> None:
        """A gradient sharing memory with a parameter or with another gradient would be
        scaled twice (clipping) or read mid-update: refused. One sweep over the sorted spans
        (each gradient's span is its parameter's size), keeping the furthest end seen so far,
        finds every overlap."""
        spans = sorted(
            self._param_spans
            + [(a, a + 4 * n, name, j) for j, (a, n) in enumerate(zip(grads, self._sizes)) if n]
        )
        far: Any  # None, then (kind, index) of the span reaching furthest
        far_end, far = 0, None
        for start, end, kind, j in spans:
            if start < far_end:
                raise ValueError(
                    f"{far[0]}[{far[1]}] and {kind}[{j}] share memory; each "
                    f"gradient must be its own buffer, apart from the parameters"
                )
            if end > far_end:
                far_end, far = end, (kind, j)

    def _max_norm(self, max_norm: float | None) -> float | None:
        # 0 is refused, as the reference does (torch would silently zero every gradient).
        return (
            None if max_norm is None else round_f32(_f32_hyper("max_norm", max_norm, lo_open=True))
        )

    def _next_lr(self, t: int) -> float:
        if self._lr_schedule is None:
            return self._lr
        value = self._lr_schedule.lr_at(t)
        return _f32_hyper(f"lr_schedule.lr_at({t})", value)

    def _run(self, g_addrs: list[int], max_norm: float | None) -> float | None:
        """One transactional binding step with gradients at `g_addrs`; commits host state."""
        t = self._step._mv[0] + 1
        if t > STEP_F64_EXACT:
            raise ValueError(f"the step counter is exhausted (t would pass {STEP_F64_EXACT})")
        lr = self._next_lr(t)
        clip = max_norm is not None
        if self._pdev is not None:
            p_addrs = [self._pdev.at(o) for o in self._offsets]
        else:
            p_addrs = [a._addr for a in self._params]
        table: Any  # the list, then the int64 array of it
        table = []
        for p, g, n in zip(p_addrs, g_addrs, self._sizes):
            table += (p, g, n)
        table = _addresses(table)
        h = self._hyper
        norm, coef = _binding().optim_step(  # in `_abi.LAYOUT`'s order
            [
                table.buffer_info()[0],
                self._m.addr,
                self._v.addr,
                self._flags._addr,
                self._scratch.addr,
                self._step._addr,
            ],
            [
                h.kind,
                len(self._sizes),
                self._n_total,
                t,
                lr,
                h.beta1,
                h.beta2,
                h.eps,
                h.weight_decay,
                h.momentum,
                h.dampening,
                int(h.nesterov),
                int(h.maximize),
                int(clip),
                0.0 if max_norm is None else max_norm,
            ],
        )
        self._lr = lr
        self._wrote_params()
        self.total_norm_ = norm if clip else None
        self.clip_coef_ = coef if clip else None
        return norm if clip else None

    def _wrote_params(self) -> None:
        """Bump the torch parameters' version counters, as a torch in-place op would (torch's
        `increment_version` is for exactly this: memory written through a data pointer): a
        graph that saved a parameter before the step then refuses a second backward pass
        instead of silently using the new values."""
        if self._torch_params:
            sys.modules["torch"].autograd.graph.increment_version(self._torch_params)

    @_locked
    def step(self, grads: Buffers, max_norm: float | None = None) -> float | None:
        """One step: the parameters are updated in place.

        Args:
            grads: float32 buffers matching `params` in count, shape and order.
            max_norm: clip the global L2 norm to this first (> 0), scaling the caller's
                gradient arrays in place; None: the gradients are untouched.

        Returns:
            The pre-clip norm with `max_norm`, else None.

        Raises:
            TypeError: a gradient that is not a float32 buffer.
            ValueError: a count or shape mismatch, shared memory, a non-finite gradient
                (named), an exhausted step counter; nothing changes then.
        """
        max_norm = self._max_norm(max_norm)
        # `keeps` pins the gradients' memory until the step returns (exports, capsules).
        keeps, addrs = self._grads(grads, "grads", writable=max_norm is not None)
        result = self._run(addrs, max_norm)
        del keeps
        if self._pdev is not None:
            self._sync_params_to_host()
        return result

    @_locked
    def step_accumulated(
        self, microbatch_grads: Iterable[Buffers], tokens: int, max_norm: float | None = None
    ) -> float | None:
        """One step from exactly `accumulation_steps` gradient lists.

        They are combined by a balanced binary tree in ascending microbatch index
        ((g0+g1)+(g2+g3))... into their SUM, as torch's `.grad` accumulation.

        Args:
            microbatch_grads: `accumulation_steps` gradient lists, each as `step` takes.
            tokens: the full step's token count, the number each microbatch loss was
                normalized by (so the sum is the full-step mean): a positive int divisible by
                `accumulation_steps`.
            max_norm: as in `step`, applied to the combined gradient (the microbatch arrays
                are never written).

        Returns:
            What `step` returns.

        Raises:
            TypeError: `microbatch_grads` is not a list of gradient lists.
            ValueError: a wrong count, `tokens`, shape or value, as in `step`.
        """
        a = self._accumulation
        max_norm = self._max_norm(max_norm)
        if isinstance(microbatch_grads, dict) or is_buffer(microbatch_grads):
            raise TypeError("microbatch_grads must be a list of gradient lists")
        batches = list(microbatch_grads)
        if len(batches) != a:
            raise ValueError(
                f"microbatch_grads: expected accumulation_steps={a} gradient "
                f"lists, got {len(batches)}"
            )
        if type(tokens) is not int or tokens < 1 or tokens % a:
            raise ValueError(
                f"Invalid tokens: {tokens!r}; expected a positive int divisible by "
                f"accumulation_steps={a} (the full step's token count)"
            )
        read = [  # (keep-alives, addresses), held until the sums are done
            self._grads(g, f"microbatch_grads[{k}]", writable=False) for k, g in enumerate(batches)
        ]
        if self._acc is None:
            self._acc = _Buf(self._n_total, self._resident)
        b = _binding()
        for j, (off, n) in enumerate(zip(self._offsets, self._sizes)):
            srcs = _addresses([read[k][1][j] for k in range(a)])
            try:
                b.optim_tree_sum([srcs.buffer_info()[0], self._acc.at(off)], [a, n])
            except ValueError as exc:
                raise ValueError(f"step_accumulated: tensor {j}: {exc}") from None
        result = self._run([self._acc.at(o) for o in self._offsets], max_norm)
        if self._pdev is not None:
            self._sync_params_to_host()
        return result

    @_locked
    def zero_grad(self, grads: Buffers) -> None:
        """torch's `zero_grad` over arrays the caller owns: writes +0.0 (all-zero bytes).

        Args:
            grads: writable float32 buffers matching `params`.
        """
        keeps, addrs = self._grads(grads, "grads", writable=True)
        if self._zeros is None:
            self._zeros = zeros((max(self._sizes, default=0),))
        for addr, n in zip(addrs, self._sizes):
            _copy(addr, self._zeros._addr, n)


# Constructor arguments shared by all three, for the docstrings.
_PARAMS_DOC = """params: the float32 parameter buffers (one, a list, or any iterable such as
                a torch `model.parameters()`, read once), updated in place; each its own
                memory. A torch leaf tensor that requires grad is written through
                `p.detach()` (the same memory), and its version counter is bumped, as a torch
                in-place update does."""
_RAISES_DOC = """Raises:
            TypeError: a parameter that is not a float32 buffer, a wrongly typed argument.
            ValueError: an argument out of range (named as torch names it), empty or
                overlapping `params`, a torch tensor that requires grad and is not a leaf."""


def _adam_doc(decay: str) -> str:
    """The constructor docstring of Adam and AdamW, which differ in their weight decay."""
    return f"""Check the arguments and allocate the moments (zeros).

        Args:
            {_PARAMS_DOC}
            lr: the learning rate, >= 0 (float32); a schedule replaces it every step.
            betas: (beta1, beta2), each in [0, 1).
            eps: > 0, added to the denominator.
            weight_decay: >= 0; {decay}
            lr_schedule: a schedule (`lr_at(t)`) giving every step's rate, or None.
            accumulation_steps: the microbatches `step_accumulated` combines, a power of two.
            maximize: ascend instead of descend.
            resident: None or True: the moments live in binding-owned memory; False: host
                Arrays.
            **kwargs: none are accepted; torch's `foreach`, `fused`, `capturable`,
                `differentiable` and `amsgrad` are refused by name (TypeError).

        {_RAISES_DOC}
        """


class Adam(_Optimizer):
    """Adam as `torch.optim.Adam`, over float32 buffers; weight decay is coupled (added to
    the gradient). Bias corrections are float32 (`1 - beta^t` by squaring), so results are
    close to torch's but not bit-equal. See the module docstring for the exact order."""

    _KIND = _ADAM

    def __init__(
        self,
        params: Buffers,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        lr_schedule: LRSchedule | None = None,
        accumulation_steps: int = 1,
        maximize: bool = False,
        resident: bool | None = None,
        **kwargs: NoReturn,
    ) -> None:
        _refuse_kwargs(type(self).__name__, kwargs)
        ctor = dict(
            params=params,
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            lr_schedule=lr_schedule,
            accumulation_steps=accumulation_steps,
            maximize=maximize,
            resident=resident,
        )
        beta1, beta2 = _betas(betas)
        rate = _f32_hyper("learning rate", lr)
        hyper = Hyper(
            self._KIND,
            beta1=_f32_hyper("beta parameter at index 0", beta1, hi=1.0),
            beta2=_f32_hyper("beta parameter at index 1", beta2, hi=1.0),
            eps=_f32_hyper("epsilon value", eps, lo_open=True),
            weight_decay=_f32_hyper("weight_decay value", weight_decay),
            momentum=0.0,
            dampening=0.0,
            nesterov=False,
            maximize=_bool("maximize", maximize),
        )
        self._setup(ctor, hyper, rate)

    __init__.__doc__ = _adam_doc("coupled: added to the gradient (`g + wd*p`).")


class AdamW(Adam):
    """AdamW as `torch.optim.AdamW`: decoupled decay `p = p * (1 - lr*wd)` before the moment
    update; default `weight_decay=0.01`."""

    _KIND = _ADAMW

    def __init__(
        self,
        params: Buffers,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        lr_schedule: LRSchedule | None = None,
        accumulation_steps: int = 1,
        maximize: bool = False,
        resident: bool | None = None,
        **kwargs: NoReturn,
    ) -> None:
        super().__init__(
            params,
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            lr_schedule=lr_schedule,
            accumulation_steps=accumulation_steps,
            maximize=maximize,
            resident=resident,
            **kwargs,
        )

    __init__.__doc__ = _adam_doc("decoupled: `p = p * (1 - lr*wd)` before the moment update.")


class SGD(_Optimizer):
    """SGD as `torch.optim.SGD`: weight decay, momentum with dampening, nesterov, maximize.
    A tensor's first step with momentum copies the gradient into its buffer
    (`buf_initialized`). The momentum buffer is `exp_avg`."""

    _KIND = _SGD

    def __init__(
        self,
        params: Buffers,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
        lr_schedule: LRSchedule | None = None,
        accumulation_steps: int = 1,
        resident: bool | None = None,
        **kwargs: NoReturn,
    ) -> None:
        _refuse_kwargs(type(self).__name__, kwargs)
        ctor = dict(
            params=params,
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            lr_schedule=lr_schedule,
            accumulation_steps=accumulation_steps,
            resident=resident,
        )
        rate = _f32_hyper("learning rate", lr)
        hyper = Hyper(
            self._KIND,
            momentum=_f32_hyper("momentum value", momentum),
            dampening=_f32_hyper("dampening value", dampening, lo=-math.inf),
            weight_decay=_f32_hyper("weight_decay value", weight_decay),
            nesterov=_bool("nesterov", nesterov),
            maximize=_bool("maximize", maximize),
            beta1=0.0,
            beta2=0.0,
            eps=1.0,
        )
        if hyper.nesterov and (hyper.momentum <= 0 or hyper.dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum > 0 and zero dampening")
        self._setup(ctor, hyper, rate)

    __init__.__doc__ = f"""Check the arguments and allocate the momentum buffers (zeros).

        Args:
            {_PARAMS_DOC}
            lr: the learning rate, >= 0 (float32); a schedule replaces it every step.
            momentum: >= 0 (0: plain SGD).
            dampening: scales the gradient's share of the momentum update.
            weight_decay: >= 0, added to the gradient (`g + wd*p`).
            nesterov: Nesterov momentum (needs momentum > 0 and dampening 0).
            maximize: ascend instead of descend.
            lr_schedule: a schedule (`lr_at(t)`) giving every step's rate, or None.
            accumulation_steps: the microbatches `step_accumulated` combines, a power of two.
            resident: None or True: the buffers live in binding-owned memory; False: host
                Arrays.
            **kwargs: none are accepted; torch's `foreach`, `fused`, `capturable`,
                `differentiable` are refused by name (TypeError).

        {_RAISES_DOC}
        """


def clip_grad_norm_(
    grads: Buffers, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = True
) -> float:
    """`torch.nn.utils.clip_grad_norm_` over float32 buffers, in place.

    The global p-norm over all gradients, as torch's (the p-norm of the per-tensor p-norms, in
    exact arithmetic), in a fixed order (docs/ARITHMETIC.md): p = 2 (the default) per tensor a
    sequential sum of g*g, then a sequential sum over tensors, then sqrt; p = 1 the same with
    |g|; another finite p with |g|^p = exp32(p * log32(|g|)) and the root exp32(log32(total) /
    p), the project's own float32 exp and log; p = inf the max |g|. Then
    `coef = min(max_norm / (norm + 1e-6), 1)` and every gradient is multiplied by `coef` in
    place. In identical mode the result is the same bits on every machine.

    Args:
        grads: writable float32 buffers (one, or a list).
        max_norm: > 0 (0 is a ValueError, as in the reference; torch would scale every
            gradient to zero).
        norm_type: the order p of the norm: a real number >= 1 (rounded to float32), or
            `float('inf')` for the max-abs norm.
        error_if_nonfinite: True (our default; torch's is False) refuses a non-finite
            gradient or norm with ValueError before anything is written. False behaves as
            torch: the norm is computed as is (inf or NaN) and the gradients are scaled by the
            resulting coefficient.

    Returns:
        The pre-clip norm (0.0 for no gradients).

    Raises:
        TypeError: a gradient that is not a writable float32 buffer, a `norm_type` that is
            not a real number.
        ValueError: a bad `max_norm` or `norm_type` (below 1, NaN, -inf), a non-finite norm
            (see `error_if_nonfinite`).

    Example:
        >>> g = [mojolearn.Array.from_list([3.0, -4.0]), mojolearn.Array.from_list([1.0])]
        >>> mojolearn.clip_grad_norm_(g, 1.0, norm_type=float("inf"))
        4.0
    """
    max_norm = _f32_hyper("max_norm", max_norm, lo_open=True)
    p = _norm_type(norm_type)
    _bool("error_if_nonfinite", error_if_nonfinite)
    tensors = tensor_list(grads, "grads")
    views = [f32_view(g, f"grads[{j}]", writable=True) for j, g in enumerate(tensors)]
    if not views:
        return 0.0
    table: Any = []  # the list, then the int64 array of it
    for _, addr, shape in views:
        table += (addr, math.prod(shape))
    table = _addresses(table)
    norm: float
    norm, _ = _binding().optim_clip_grad_norm(
        [table.buffer_info()[0]], [len(views), max_norm, int(error_if_nonfinite), p]
    )
    return norm
