"""`MLPTrainer`: any layer sizes [inputs, hidden..., classes], ReLU between layers, mean
cross-entropy, AdamW, with SmallMLPTrainer's API and promises.

State = flat float32 parameters in the order weight1, bias1, ..., weightL, biasL (torch
`nn.Linear` shapes), flat AdamW moments m, v in the same order, and the step count t. Every
step runs the per-operation kernels (`_mlp_ops`: the build's GEMM, bias/ReLU, cross-entropy,
ReLU backward, row sums, AdamW; identical mode is docs/ARITHMETIC.md "The MLP step" for L
layers and equals `tests/reference/mlp.py` bit for bit) on a working copy of the state, which
is published by one assignment only when the whole step succeeded, so a refused or
interrupted step changes nothing. Calls are serialized by the trainer's lock.

`MLPTrainer([8, 16, 3], weights=w)` gives SmallMLPTrainer's bits from the same `w`.
"""
import os
import threading

from . import _backend, _batches
from . import _mlp_state as S
from . import checkpoint as _ckpt
from ._array import Array
from ._buffer import empty, zeros
from ._layers import LayerSizes

_API = "MLPTrainer"
_FORWARD, _GRADS, _TRAIN = 0, 1, 2


class _State:
    """One whole state (the unit a step publishes): flat params, m, v and the step count."""

    __slots__ = ("params", "m", "v", "step")

    def __init__(self, params, m, v, step):
        self.params, self.m, self.v, self.step = params, m, v, step


def _binding():
    return _backend.binding()


def _translate(exc):
    if isinstance(exc, RuntimeError) and "not finite" in str(exc):
        return RuntimeError(f"{_API}: the step produced a non-finite result and was not "
                            f"applied ({exc})")
    return exc


class MLPTrainer:
    """Trainer for an MLP of any layer sizes with mean cross-entropy and AdamW.

    Args:
        layer_sizes: [inputs, hidden..., classes], at least 2 ints (2 is softmax regression),
            every width in [1, 65536], classes >= 2, at most 16 layers and 2**26 parameters.
        weights: None, or 2L float32 buffers weight1, bias1, ..., weightL, biasL with torch
            `nn.Linear` shapes (out, in) and (out,), finite; copied, never aliased.
        seed: with weights None, the seed of the initial weights (SplitMix64, torch's default
            `nn.Linear` bounds, layer by layer, weight then bias; the same bits everywhere).
        data_schedule: a non-empty, bounded JSON object describing the data order.
        lr, betas, eps, weight_decay: AdamW hyperparameters, rounded once to float32, then
            checked (lr > 0, eps > 0, weight_decay >= 0, betas in [0, 1)).

    Raises:
        TypeError: a width that is not an int, a weight that is not a float32 buffer.
        ValueError: bad sizes or bounds, wrong shapes, non-finite values, bad hyperparameters
            or data_schedule. Nothing is allocated for the network before the sizes pass.

    A step either completes or changes nothing; calls from several threads are serialized.
    """

    def __init__(self, layer_sizes, weights=None, *, seed=0, data_schedule, lr=1e-3,
                 betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        spec = LayerSizes(layer_sizes, _API)
        config = S.check_config(lr, betas, eps, weight_decay, _API)
        schedule = S.check_schedule(data_schedule, _API)
        if weights is None:
            tensors = spec.init(seed)
        else:
            if isinstance(weights, dict) or not isinstance(weights, (list, tuple)):
                raise TypeError(f"{_API}: weights must be None or a list of {2 * spec.layers} "
                                f"buffers (weight1, bias1, ...), got {type(weights).__name__}")
            if len(weights) != 2 * spec.layers:
                raise ValueError(f"{_API}: weights must hold {2 * spec.layers} buffers "
                                 f"(weight1, bias1, ..., weight{spec.layers}, "
                                 f"bias{spec.layers}), got {len(weights)}")
            tensors = [S.tensor(w, shape, name, api=_API)
                       for w, shape, name in zip(weights, spec.shapes, spec.names)]
        self._setup(spec, config, schedule,
                    _State(S.flat(tensors), zeros((spec.total,)), zeros((spec.total,)), 0))

    def _setup(self, spec, config, schedule, state):
        self._spec = spec
        self._config = config
        self._schedule = schedule
        self._mode = _binding().mode
        self._lock = threading.RLock()
        self._state = state

    # ------------------------------------------------------------ introspection

    @property
    def layer_sizes(self):
        """[inputs, hidden..., classes] (a fresh list)."""
        return list(self._spec.sizes)

    @property
    def step_(self):
        """Number of optimizer steps taken."""
        return self._state.step

    @property
    def weights_(self):
        """The current parameters: a dict of fresh Arrays weight1, bias1, ..., biasL."""
        return S.split(self._state.params, self._spec)

    @property
    def max_rows(self):
        """The most rows one batch may have (a bound on the step's working memory)."""
        return self._spec.max_rows()

    def numeric_mode_used(self):
        """'identical' or 'fast', read from the loaded binding."""
        return _binding().mode

    def vendor_used(self):
        """'cpu', 'cuda' or 'hip', read from the loaded binding."""
        return _binding().vendor

    # ------------------------------------------------------------ state

    @property
    def data_schedule(self):
        """The stored data-order description (a fresh copy); assignable (validated)."""
        with self._lock:
            return S.check_schedule(self._schedule, _API)

    @data_schedule.setter
    def data_schedule(self, value):
        schedule = S.check_schedule(value, _API)
        with self._lock:
            self._schedule = schedule

    def state_dict(self):
        """An independent snapshot of the whole resumable state (fresh Arrays)."""
        with self._lock:
            st = self._state
            return {
                "schema": S.MLP_SCHEMA, "architecture": list(self._spec.sizes),
                "numeric_mode": self._mode, "parameter_order": list(self._spec.names),
                "weights": S.split(st.params, self._spec),
                "optimizer": {"kind": S.OPTIMIZER, "step": st.step, "m": st.m.copy(),
                              "v": st.v.copy()},
                "config": dict(self._config),
                "data_schedule": S.check_schedule(self._schedule, _API),
            }

    def load_state_dict(self, state):
        """Restore a `state_dict()` snapshot of a trainer with the same layer sizes; validated
        and copied before anything changes. Returns self."""
        params, m, v, _, step, config, schedule, _ = S.validate_state(
            state, self._mode, self._spec, _API)
        with self._lock:
            self._state, self._config, self._schedule = _State(params, m, v, step), config, \
                schedule
        return self

    @classmethod
    def _from_state(cls, state):
        """A trainer holding a `state_dict()` (any layer sizes), validated as
        `load_state_dict` validates it."""
        if type(state) is not dict or type(state.get("architecture")) is not list:
            raise ValueError(f"{_API}: state must be a state_dict() with an architecture list")
        spec = LayerSizes(state["architecture"], _API)
        params, m, v, _, step, config, schedule, _ = S.validate_state(
            state, _binding().mode, spec, _API)
        trainer = cls.__new__(cls)
        trainer._setup(spec, config, schedule, _State(params, m, v, step))
        return trainer

    def state_hash(self):
        """SHA-256 (hex) of the canonical JSON of this state's payload (tensors as hex)."""
        return _ckpt.state_hash(_ckpt.encode_state(self.state_dict()))

    def save_checkpoint(self, path):
        """Write the state to `path` atomically as a `mojolearn.mlp-checkpoint.v1` file (see
        `mojolearn.checkpoint`)."""
        data = _ckpt.dumps(self.state_dict())
        _ckpt.write_atomic(path, data)

    @classmethod
    def from_checkpoint(cls, path, *, allow_profile_change=False, max_bytes=None):
        """A trainer restored from `save_checkpoint` output (any layer sizes), after checking
        the size bound (`max_bytes`, default `checkpoint.MLP_MAX_BYTES`, from the largest
        admissible model) before parsing, then schema, hash, arithmetic profile, every field
        and every tensor's length against the declared architecture."""
        return cls._from_state(_ckpt.load(path, allow_profile_change, _ckpt.MLP_FILE_SCHEMA,
                                          max_bytes))

    def load_checkpoint(self, path, *, allow_profile_change=False, max_bytes=None):
        """Restore this trainer from a checkpoint of the same layer sizes; the file is checked
        whole before anything changes. Returns self."""
        return self.load_state_dict(_ckpt.load(path, allow_profile_change,
                                               _ckpt.MLP_FILE_SCHEMA, max_bytes))

    def __copy__(self):
        return type(self)._from_state(self.state_dict())

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        return type(self)._from_state, (self.state_dict(),)

    # ------------------------------------------------------------ steps

    def _hyper(self):
        c = self._config
        return [c["lr"], c["beta1"], c["beta2"], c["eps"], c["weight_decay"]]

    def _x(self, X, name="X", stacked=False):
        spec = self._spec
        return _batches.owned_batch(X, _API, spec.inputs, spec.max_rows(), name, stacked)

    def _run(self, x, y, rows, mode, k=1, want_dx=False):
        """One step (or k, or a forward / gradient pass) on the current state: ONE fused
        binding call (`mlp_layers_step`), or with MOJOLEARN_MLP_FUSED=0 the per-operation
        calls (`_mlp_ops`), same bits. Returns (new _State or None, losses (k,), logits, flat
        grads, dx); the trainer's state is never written. Caller holds the lock."""
        spec, st = self._spec, self._state
        if mode == _TRAIN and st.step + k > S.MAX_STEP:
            raise ValueError(f"{_API}: the step counter is exhausted (step {st.step} + {k} "
                             f"would pass 2**31-1)")
        losses = zeros((k,))
        logits = empty((rows, spec.classes))
        grads = zeros((spec.total,))
        dx = empty((rows, spec.inputs)) if want_dx else None
        new = _State(empty((spec.total,)), empty((spec.total,)), empty((spec.total,)),
                     st.step + k) if mode == _TRAIN else None
        try:
            if os.environ.get("MOJOLEARN_MLP_FUSED") == "0":
                from . import _mlp_ops
                _mlp_ops.steps(_binding(), spec, x, y, rows, mode, k, st, new, losses, logits,
                               grads, dx, want_dx, self._hyper())
            else:
                out = new or st
                _binding().mlp_layers_step(
                    [x._addr, y._addr, st.params._addr, st.m._addr, st.v._addr,
                     out.params._addr, out.m._addr, out.v._addr, losses._addr, logits._addr,
                     grads._addr, (dx or logits)._addr, spec.sizes_addr],
                    [spec.layers, rows, mode, k, st.step + 1, *self._hyper(), int(want_dx)])
        except (RuntimeError, ValueError) as exc:
            raise _translate(_backend.translate(exc)) from None
        return new, losses, logits, grads, dx

    def _gradient_views(self, grads):
        return S.split(grads, self._spec)

    def train_step(self, X, targets, *, return_input_grad=False):
        """One AdamW step on a batch.

        Args:
            X: float32 (n, inputs), 1 <= n <= `max_rows`. targets: integer (n,), classes
                0..classes-1.
            return_input_grad: also return d(loss)/dX.

        Returns:
            dict: `step` (new count), `loss` (float, before the update), `logits` (n,
            classes) before the update, `gradients` ({"weight1": ..., "bias1": ..., ...}),
            and `input_grad` (n, inputs) when asked.
        """
        if return_input_grad is not False and return_input_grad is not True:
            raise TypeError(f"{_API}: return_input_grad must be a bool, got "
                            f"{type(return_input_grad).__name__}")
        x = self._x(X)
        rows = x.shape[0]
        y = _batches.targets(targets, rows, self._spec.classes, _API)
        with self._lock:
            new, losses, logits, grads, dx = self._run(x, y, rows, _TRAIN, 1, return_input_grad)
            self._state = new
        result = {"step": new.step, "loss": losses._mv[0], "logits": logits,
                  "gradients": self._gradient_views(grads)}
        if return_input_grad:
            result["input_grad"] = dx
        return result

    def train_steps(self, X, targets, k):
        """`k` steps over k equal batches stacked in X (k * batch, inputs), targets
        (k * batch,); bit-equal to k `train_step` calls. Returns dict `step`, `losses` (k
        floats), `loss` (the last), `logits` and `gradients` of the last step."""
        if isinstance(k, bool) or type(k) is not int or k < 1:
            raise ValueError(f"{_API}: k must be a positive int, got {k!r}")
        x = self._x(X, stacked=True)
        total = x.shape[0]
        if total % k or not 1 <= total // k <= self._spec.max_rows():
            raise ValueError(f"{_API}: X must stack k={k} equal batches of 1 to "
                             f"{self._spec.max_rows()} rows, got {total} rows")
        y = _batches.targets(targets, total, self._spec.classes, _API)
        with self._lock:
            new, losses, logits, grads, _ = self._run(x, y, total // k, _TRAIN, k)
            self._state = new
        values = losses._mv.tolist()
        return {"step": new.step, "losses": values, "loss": values[-1], "logits": logits,
                "gradients": self._gradient_views(grads)}

    def loss_and_grads(self, X, targets):
        """(loss, [dweight1, dbias1, ..., dbiasL]) of a batch, without a step."""
        x = self._x(X)
        rows = x.shape[0]
        y = _batches.targets(targets, rows, self._spec.classes, _API)
        with self._lock:
            _, losses, _, grads, _ = self._run(x, y, rows, _GRADS)
        views = self._gradient_views(grads)
        return losses._mv[0], [views[n] for n in self._spec.names]

    def apply_gradients(self, gradients):
        """One AdamW step with already-combined gradients (parameter order, float32, exact
        shapes); returns the new step count. All or nothing."""
        spec = self._spec
        if isinstance(gradients, dict):
            raise TypeError(f"{_API}: gradients must be a sequence of {2 * spec.layers} buffers "
                            f"in parameter order (not a dict)")
        try:
            gradients = list(gradients)
        except TypeError:
            raise TypeError(f"{_API}: gradients must be a sequence of buffers, got "
                            f"{type(gradients).__name__}") from None
        if len(gradients) != 2 * spec.layers:
            raise ValueError(f"{_API}: gradients must hold exactly {2 * spec.layers} buffers "
                             f"({', '.join(spec.names)}), got {len(gradients)}"[:300])
        g = S.flat([S.tensor(v, s, n + " gradient", api=_API)
                    for v, s, n in zip(gradients, spec.shapes, spec.names)])
        with self._lock:
            st = self._state
            if st.step + 1 > S.MAX_STEP:
                raise ValueError(f"{_API}: the step counter is exhausted (step {st.step} + 1 "
                                 f"would pass 2**31-1)")
            p, m, v = st.params.copy(), st.m.copy(), st.v.copy()
            try:
                _binding().mlp_adamw([p._addr, g._addr, m._addr, v._addr],
                                     [spec.total, st.step + 1, *self._hyper()])
            except (RuntimeError, ValueError) as exc:
                raise _translate(_backend.translate(exc)) from None
            self._state = _State(p, m, v, st.step + 1)
            return st.step + 1

    def predict_logits(self, X):
        """Logits (n, classes) of X (n, inputs) with the current weights."""
        x = self._x(X)
        rows = x.shape[0]
        with self._lock:
            return self._run(x, zeros((rows,), "<i4"), rows, _FORWARD)[2]

    def predict_logits_sessions(self, inputs):
        """Logits of several batches (a list of float32 (n_i, inputs) buffers), concatenated
        in the order given: shape (sum n_i, classes)."""
        if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__iter__"):
            raise TypeError(f"{_API}: inputs must be a list of float32 (n, "
                            f"{self._spec.inputs}) buffers, got {type(inputs).__name__}")
        batches = [self._x(X, name=f"inputs[{i}]") for i, X in enumerate(list(inputs))]
        if not batches:
            raise ValueError(f"{_API}: inputs must hold at least one batch")
        # Rows are independent, so forwards over any grouping of the rows give each row's bits.
        with self._lock:
            raw = b"".join(self.predict_logits(x).tobytes() for x in batches)
        classes = self._spec.classes
        return Array(memoryview(raw).cast("f"), "<f4", (len(raw) // (4 * classes), classes))

    def __repr__(self):
        return (f"MLPTrainer({list(self._spec.sizes)}, step={self._state.step}, "
                f"lr={self._config['lr']}, mode={self._mode!r})")
