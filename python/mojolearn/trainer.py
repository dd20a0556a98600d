"""`SmallMLPTrainer`: Linear(8, 16) → ReLU → Linear(16, 3), mean cross-entropy, AdamW.

The Python shell validates, copies and packs; the binding computes. A step runs as ONE binding
call (`mlp_train_step`), or, with MOJOLEARN_MLP_FUSED=0, as the per-operation calls it fuses
(GEMMs, bias/activation, cross-entropy, ReLU backward, row sums, AdamW): same kernels, same
order, same bits (`tools/mlp_step_check.py` is the A/B).

State = flat float32 parameters (195: weight1, bias1, weight2, bias2), flat AdamW moments m, v
(195 each), the step count t and flags (int32 (4,), always 0 for AdamW: kept for the v1
checkpoint layout). The state lives in one immutable `_State`; a step computes into fresh
buffers and publishes a new `_State` by one assignment under the trainer's lock, so a failed
step changes nothing and concurrent calls are serialized.
"""
import os
import threading

from . import _backend
from . import _mlp_state as S
from . import checkpoint as _ckpt
from ._array import Array
from ._buffer import all_finite, as_f32_c, as_i32_c, empty, zeros
from ._bufcheck import dtype_name, is_integer, is_native_f32, probe

_MODE_FORWARD, _MODE_GRADS, _MODE_TRAIN = 0, 1, 2
_IN, _HID, _OUT = S.ARCHITECTURE
_MAX_ROWS = 256


class _State:
    """One published, never-mutated trainer state."""

    __slots__ = ("params", "m", "v", "flags", "step")

    def __init__(self, params, m, v, flags, step):
        self.params, self.m, self.v, self.flags, self.step = params, m, v, flags, step


def _fused_enabled():
    return os.environ.get("MOJOLEARN_MLP_FUSED", "1") != "0"


def _binding():
    return _backend.binding()


def _batch(X, name="X", stacked=False):
    """X as an owned float32 (rows, 8) Array with 1 to 256 rows (`stacked`: the caller checks
    the row count of k stacked batches)."""
    try:
        pb = probe(X)
    except TypeError:
        raise TypeError(f"SmallMLPTrainer: {name} must be a float32 buffer of shape (batch, 8) "
                        f"(NumPy array, array.array, memoryview or mojolearn.Array), got "
                        f"{type(X).__name__}") from None
    if not is_native_f32(pb.format, pb.itemsize):
        raise TypeError(f"SmallMLPTrainer: {name} must be float32, got "
                        f"{dtype_name(pb.format, pb.itemsize)}")
    if pb.ndim != 2 or pb.shape[1] != _IN:
        raise ValueError(f"SmallMLPTrainer: {name} must have shape (batch, {_IN}), got {pb.shape}")
    rows = pb.shape[0]
    if not stacked and not 1 <= rows <= _MAX_ROWS:
        raise ValueError(f"SmallMLPTrainer: {name} must have 1 to {_MAX_ROWS} rows, got {rows}")
    return _copy_f32(X, name)


def _copy_f32(X, name):
    arr, copied = as_f32_c(X, name=name)
    if not copied:
        arr = arr.copy()
    if arr._size and not all_finite(arr, name):
        raise ValueError(f"SmallMLPTrainer: {name} must be finite")
    return arr


def _targets(targets, rows):
    """targets as an owned int32 (rows,) Array of classes 0..2 (any integer dtype accepted)."""
    try:
        pb = probe(targets)
    except TypeError:
        raise TypeError(f"SmallMLPTrainer: targets must be an integer buffer of shape ({rows},), "
                        f"got {type(targets).__name__}") from None
    if not is_integer(pb.format):
        raise TypeError(f"SmallMLPTrainer: targets must hold integers, got "
                        f"{dtype_name(pb.format, pb.itemsize)}")
    if tuple(pb.shape) != (rows,):
        raise ValueError(f"SmallMLPTrainer: targets must have shape ({rows},) to match X, got "
                         f"{tuple(pb.shape)}")
    try:
        y, copied = as_i32_c(targets, name="targets")
    except ValueError:
        raise ValueError(f"SmallMLPTrainer: targets must be classes 0..{_OUT - 1}") from None
    if not copied:
        y = y.copy()
    values = y._mv.tolist()
    bad = next((i for i, c in enumerate(values) if not 0 <= c < _OUT), None)
    if bad is not None:
        raise ValueError(f"SmallMLPTrainer: targets must be classes 0..{_OUT - 1}; "
                         f"targets[{bad}] = {values[bad]}")
    return y


def _translate(exc):
    """A binding refusal of a non-finite result as the trainer's RuntimeError."""
    if isinstance(exc, RuntimeError) and "not finite" in str(exc):
        return RuntimeError(f"SmallMLPTrainer: the step produced a non-finite result and was "
                            f"not applied ({exc})")
    return exc


class SmallMLPTrainer:
    """Trainer for the fixed 8→16→3 ReLU network with mean cross-entropy and AdamW.

    Args:
        weight1, bias1, weight2, bias2: float32 buffers of shapes (16, 8), (16,), (3, 16), (3,)
            (NumPy arrays, array.array, memoryview or mojolearn.Array; lists are refused).
            Copied, never aliased.
        data_schedule: a non-empty, bounded JSON object describing the data order (dataset
            hash, seed, cursor ...). Stored with the state and in checkpoints; never compared
            with the batches passed.
        lr, betas, eps, weight_decay: AdamW hyperparameters, rounded once to float32, then
            checked (lr > 0, eps > 0, weight_decay >= 0, betas in [0, 1)).

    Raises:
        TypeError: a parameter is not a float32 buffer. ValueError: wrong shape, non-finite
            value, bad hyperparameter or data_schedule.

    A step either completes or changes nothing; calls from several threads are serialized.
    """

    def __init__(self, weight1, bias1, weight2, bias2, *, data_schedule, lr=1e-3,
                 betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        weights = [S.tensor(w, s, n) for w, s, n in
                   zip((weight1, bias1, weight2, bias2), S.SHAPES, S.NAMES)]
        self._config = S.check_config(lr, betas, eps, weight_decay)
        self._schedule = S.check_schedule(data_schedule)
        self._mode = _binding().mode
        self._lock = threading.RLock()
        self._st = _State(S.flat(weights), zeros((S.TOTAL,)), zeros((S.TOTAL,)),
                          zeros((4,), "<i4"), 0)

    # ------------------------------------------------------------ introspection

    @property
    def step_(self):
        """Number of optimizer steps taken."""
        return self._st.step

    @property
    def weights_(self):
        """The current parameters: a dict of fresh Arrays weight1, bias1, weight2, bias2."""
        return S.split(self._st.params)

    def numeric_mode_used(self):
        """'identical' or 'fast', read from the loaded binding."""
        return _binding().mode

    def vendor_used(self):
        """'cpu', 'cuda' or 'hip', read from the loaded binding."""
        return _binding().vendor

    # ------------------------------------------------------------ state

    def state_dict(self):
        """An independent snapshot of the whole resumable state (fresh Arrays)."""
        with self._lock:
            return self._snapshot(self._st)

    def _snapshot(self, st):
        return {
            "schema": S.SCHEMA, "architecture": list(S.ARCHITECTURE),
            "numeric_mode": self._mode, "parameter_order": list(S.NAMES),
            "weights": S.split(st.params),
            "optimizer": {"kind": S.OPTIMIZER, "step": st.step, "m": st.m.copy(),
                          "v": st.v.copy(), "flags": st.flags.copy()},
            "config": dict(self._config),
            "data_schedule": S.check_schedule(self._schedule),
        }

    def load_state_dict(self, state):
        """Restore a `state_dict()` snapshot; validated and copied before anything changes.

        The state must come from the same numeric mode. Returns self."""
        params, m, v, flags, step, config, schedule, _ = S.validate_state(state, self._mode)
        with self._lock:
            self._config, self._schedule = config, schedule
            self._st = _State(params, m, v, flags, step)
        return self

    def state_hash(self):
        """SHA-256 (hex) of the canonical JSON of the checkpoint payload of this state."""
        return _ckpt.state_hash(_ckpt.encode_state(self.state_dict()))

    def save_checkpoint(self, path):
        """Write the state to `path` atomically (see `mojolearn.checkpoint`)."""
        with self._lock:
            data = _ckpt.dumps(self.state_dict())
        _ckpt.write_atomic(path, data)

    @classmethod
    def from_checkpoint(cls, path, *, allow_profile_change=False):
        """A trainer restored from `save_checkpoint` output, after checking size, schema,
        hash, arithmetic profile and every field. `allow_profile_change=True` migrates a file
        written under another arithmetic profile (bits then follow ours)."""
        state = _ckpt.load(path, allow_profile_change)
        w = state["weights"]
        cfg = state["config"]
        trainer = cls(w["weight1"], w["bias1"], w["weight2"], w["bias2"],
                      data_schedule=state["data_schedule"], lr=cfg["lr"],
                      betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                      weight_decay=cfg["weight_decay"])
        return trainer.load_state_dict(state)

    # ------------------------------------------------------------ steps

    def _hyper(self):
        c = self._config
        return [c["lr"], c["beta1"], c["beta2"], c["eps"], c["weight_decay"]]

    def _check_room(self, k):
        if self._st.step + k > S.MAX_STEP:
            raise ValueError(f"SmallMLPTrainer: the step counter is exhausted (step "
                             f"{self._st.step} + {k} would pass 2**31-1)")

    def _run(self, x, y, rows, mode, k=1, want_dx=False):
        """One binding call (fused) or the per-operation calls; returns
        (new _State or None, losses Array (k,), logits, flat grads, dx)."""
        st = self._st
        losses = zeros((k,))
        logits = empty((rows, _OUT))
        grads = zeros((S.TOTAL,))
        dx = empty((rows, _IN)) if want_dx else zeros((1,))
        train = mode == _MODE_TRAIN
        new = _State(empty((S.TOTAL,)), empty((S.TOTAL,)), empty((S.TOTAL,)), st.flags,
                     st.step + k) if train else None
        try:
            if _fused_enabled():
                outs = new if train else st
                addrs = [x._addr, y._addr, st.params._addr, st.m._addr, st.v._addr,
                         outs.params._addr, outs.m._addr, outs.v._addr, losses._addr,
                         logits._addr, grads._addr, dx._addr]
                params = [rows, _IN, _HID, _OUT, mode, k, st.step + 1 if train else 1, *self._hyper(),
                          1 if want_dx else 0]
                _binding().mlp_train_step(addrs, params)
            else:
                from . import _mlp_ops

                _mlp_ops.steps(_binding(), x, y, rows, mode, k, st, new, losses, logits, grads,
                               dx, want_dx, self._hyper())
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc) from None
        return new, losses, logits, grads, (dx if want_dx else None)

    def train_step(self, X, targets, *, return_input_grad=False):
        """One AdamW step on a batch.

        Args:
            X: float32 (n, 8), 1 <= n <= 256. targets: integer (n,), classes 0..2.
            return_input_grad: also return d(loss)/dX.

        Returns:
            dict: `step` (new count), `loss` (float, before the update), `logits` (n, 3)
            before the update, `gradients` (dict of the four Arrays), and `input_grad` (n, 8)
            when asked.
        """
        if type(return_input_grad) is not bool:
            raise TypeError(f"SmallMLPTrainer: return_input_grad must be a bool, got "
                            f"{type(return_input_grad).__name__}")
        x = _batch(X)
        y = _targets(targets, x.shape[0])
        with self._lock:
            self._check_room(1)
            new, losses, logits, grads, dx = self._run(x, y, x.shape[0], _MODE_TRAIN, 1,
                                                       return_input_grad)
            result = {"step": new.step, "loss": losses._mv[0], "logits": logits,
                      "gradients": S.split(grads)}
            if return_input_grad:
                result["input_grad"] = dx
            self._st = new
        return result

    def train_steps(self, X, targets, k):
        """`k` steps in ONE binding call over k equal batches stacked in X (k * batch, 8),
        targets (k * batch,); bit-equal to k `train_step` calls. Returns dict `step`,
        `losses` (k floats), `loss` (the last), `logits` and `gradients` of the last step."""
        if isinstance(k, bool) or type(k) is not int or k < 1:
            raise ValueError(f"SmallMLPTrainer: k must be a positive int, got {k!r}")
        try:
            pb = probe(X)
        except TypeError:
            pb = None
        if pb is not None and pb.ndim == 2 and (pb.shape[0] % k or
                                               not 1 <= pb.shape[0] // k <= _MAX_ROWS):
            raise ValueError(f"SmallMLPTrainer: X must stack k={k} equal batches of 1 to "
                             f"{_MAX_ROWS} rows, got {pb.shape[0]} rows")
        x = _batch(X, stacked=True)
        y = _targets(targets, x.shape[0])
        rows = x.shape[0] // k
        with self._lock:
            self._check_room(k)
            new, losses, logits, grads, _ = self._run(x, y, rows, _MODE_TRAIN, k)
            values = losses._mv.tolist()
            result = {"step": new.step, "losses": values, "loss": values[-1], "logits": logits,
                      "gradients": S.split(grads)}
            self._st = new
        return result

    def loss_and_grads(self, X, targets):
        """(loss, [dweight1, dbias1, dweight2, dbias2]) of a batch, without a step."""
        x = _batch(X)
        y = _targets(targets, x.shape[0])
        with self._lock:
            _, losses, _, grads, _ = self._run(x, y, x.shape[0], _MODE_GRADS)
        g = S.split(grads)
        return losses._mv[0], [g[n] for n in S.NAMES]

    def apply_gradients(self, gradients):
        """One AdamW step with already-combined gradients (weight1, bias1, weight2, bias2
        order, float32, exact shapes); returns the new step count. All or nothing."""
        if isinstance(gradients, dict):
            raise TypeError("SmallMLPTrainer: gradients must be a sequence of four buffers in "
                            "the order weight1, bias1, weight2, bias2 (not a dict)")
        try:
            gradients = list(gradients)
        except TypeError:
            raise TypeError(f"SmallMLPTrainer: gradients must be a sequence of four buffers, "
                            f"got {type(gradients).__name__}") from None
        if len(gradients) != len(S.NAMES):
            raise ValueError(f"SmallMLPTrainer: gradients must hold exactly 4 buffers "
                             f"(weight1, bias1, weight2, bias2), got {len(gradients)}")
        g = S.flat([S.tensor(v, s, n + " gradient")
                    for v, s, n in zip(gradients, S.SHAPES, S.NAMES)])
        with self._lock:
            self._check_room(1)
            st = self._st
            new = _State(st.params.copy(), st.m.copy(), st.v.copy(), st.flags, st.step + 1)
            try:
                _binding().mlp_adamw([new.params._addr, g._addr, new.m._addr, new.v._addr],
                                     [S.TOTAL, new.step, *self._hyper()])
            except (RuntimeError, ValueError) as exc:
                raise _translate(exc) from None
            self._st = new
            return new.step

    def predict_logits(self, X):
        """Logits (n, 3) of X (n, 8) with the current weights."""
        x = _batch(X)
        with self._lock:
            return self._forward(x)

    def predict_logits_sessions(self, inputs):
        """Logits of several batches (a list of float32 (n_i, 8) buffers), concatenated in
        the order given: shape (sum n_i, 3)."""
        if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__iter__"):
            raise TypeError(f"SmallMLPTrainer: inputs must be a list of float32 (n, 8) buffers, "
                            f"got {type(inputs).__name__}")
        batches = [_batch(X, name=f"inputs[{i}]") for i, X in enumerate(list(inputs))]
        if not batches:
            raise ValueError("SmallMLPTrainer: inputs must hold at least one batch")
        # Rows are independent, so one forward over the stacked batches gives each batch's bits.
        raw = b"".join(b.tobytes() for b in batches)
        x = Array(memoryview(raw).cast("f"), "<f4", (len(raw) // (4 * _IN), _IN))
        with self._lock:
            return self._forward(x)

    def _forward(self, x):
        rows = x.shape[0]
        y = zeros((rows,), "<i4")
        return self._run(x, y, rows, _MODE_FORWARD)[2]

    def __repr__(self):
        return (f"SmallMLPTrainer(step={self._st.step}, lr={self._config['lr']}, "
                f"mode={self._mode!r})")
