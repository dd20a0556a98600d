"""`SmallMLPTrainer`: Linear(8, 16) → ReLU → Linear(16, 3), mean cross-entropy, AdamW.

State = flat float32 parameters (195: weight1, bias1, weight2, bias2), flat AdamW moments m, v
(195 each), the step count t and flags (int32 (4,), always 0 for AdamW: kept for the v1
checkpoint layout).

The state lives in a resident session (`_mlp_resident.Session`): binding-owned memory that
every step updates in place, so a step is ONE binding call with no state copies; the
binding checks the batch (finite X, labels in range), writes the results into one fresh
buffer and either completes or restores the pre-step state itself. `state_dict`,
checkpoints and `weights_` download from it; `load_state_dict` and `apply_gradients` open a
new session and swap it in; the session closes itself when the trainer goes. Calls are
serialized by the trainer's lock.

With MOJOLEARN_MLP_FUSED=0 a step runs instead as the per-operation calls the fused step
fuses (GEMMs, bias/activation, cross-entropy, ReLU backward, row sums, AdamW) on a host copy
of the state, then publishes it as a new session: same kernels, same order, same bits
(`tools/mlp_step_check.py` is the A/B).
"""
import array as _pyarray
import os
import threading

from . import _backend, _batches
from . import _mlp_state as S
from . import checkpoint as _ckpt
from ._array import Array, _new_object, _result_view
from ._buffer import empty, zeros
from ._layers import SMALL
from ._mlp_resident import Session

_MODE_FORWARD, _MODE_GRADS, _MODE_TRAIN = 0, 1, 2
_IN, _HID, _OUT = S.ARCHITECTURE
_MAX_ROWS = 256
_API = "SmallMLPTrainer"
_MAX_STEP = S.MAX_STEP
_TOTAL = S.TOTAL
_ZERO = _pyarray.array("f", (0.0,))  # repeated: the fastest zeroed float32 allocation
_W1_SHAPE, _B1_SHAPE, _W2_SHAPE, _B2_SHAPE = S.SHAPES
# `train_step` and `_results` spell the flat gradient layout out (offsets 0, 128, 144, 192).
assert S.OFFSETS == (0, 128, 144, 192) and S.TOTAL == 195 and S.ARCHITECTURE == [8, 16, 3]
_LOGITS_SHAPES = [(rows, _OUT) for rows in range(_MAX_ROWS + 1)]  # shared, not rebuilt per step
# array.array typecodes of signed 4- and 8-byte integers: labels the binding reads directly.
_SIGNED_CODES = frozenset(c for c in "ilq" if _pyarray.array(c).itemsize in (4, 8))
_NDARRAY = [None]  # numpy.ndarray once one has been seen (numpy itself is never imported)


class _State:
    """A host copy of the trainer state (the per-operation path and `tools/`)."""

    __slots__ = ("params", "m", "v", "flags", "step")

    def __init__(self, params, m, v, flags, step):
        self.params, self.m, self.v, self.flags, self.step = params, m, v, flags, step


# os.environ is re-read on every step (tests and tools flip the path between steps), so read
# its backing dict directly: os.environ.get costs ~0.3 µs, more than a batch-1 step.
try:
    _env_get = os.environ._data.get
    _FUSED_KEY = os.environ.encodekey("MOJOLEARN_MLP_FUSED")
    _OFF = os.environ.encodevalue("0")
except AttributeError:  # not CPython's os.environ: take the slow, portable way
    _env_get, _FUSED_KEY, _OFF = os.environ.get, "MOJOLEARN_MLP_FUSED", "0"


def _fused_enabled():
    return _env_get(_FUSED_KEY) != _OFF


_binding = _backend.binding  # a module global: tests wrap it to inject binding failures

def _is_ndarray(obj):
    t = type(obj)
    if t is _NDARRAY[0]:
        return True
    if _NDARRAY[0] is None and t.__name__ == "ndarray" and t.__module__ == "numpy":
        _NDARRAY[0] = t
        return True
    return False


def _x_input(X, name="X", stacked=False):
    """(object to keep alive, address, rows) of a float32 C-contiguous (rows, 8) batch.

    mojolearn.Array and NumPy arrays are checked by type and attributes (cheaper than a
    memoryview); anything else goes through `_batch`. Finiteness is checked by the binding."""
    if type(X) is Array:
        shape = X._shape
        if (X._dtype == "<f4" and len(shape) == 2 and shape[1] == _IN and shape[0] > 0
                and (stacked or shape[0] <= _MAX_ROWS)):
            return X, X._addr, shape[0]
    elif _is_ndarray(X):
        shape = X.shape
        dt = X.dtype
        if (dt.char == "f" and dt.isnative and len(shape) == 2 and shape[1] == _IN
                and shape[0] > 0 and (stacked or shape[0] <= _MAX_ROWS)
                and X.flags.c_contiguous):
            return X, X.__array_interface__["data"][0], shape[0]
    x = _batch(X, name, stacked)
    return x, x._addr, x._shape[0]


def _y_input(targets, rows):
    """(object to keep alive, address, itemsize 4 or 8) of `rows` integer labels. Signed
    int32 / int64 buffers go to the binding as they are (it checks the class range); other
    integer dtypes are converted to int32 first."""
    t = type(targets)
    if t is Array:
        if targets._shape == (rows,):
            dt = targets._dtype
            if dt == "<i4":
                return targets, targets._addr, 4
            if dt == "<i8":
                return targets, targets._addr, 8
    elif t is _pyarray.array:
        if targets.typecode in _SIGNED_CODES:
            addr, n = targets.buffer_info()
            if n == rows:
                return targets, addr, targets.itemsize
    elif _is_ndarray(targets):
        dt = targets.dtype
        if (dt.kind == "i" and dt.itemsize in (4, 8) and dt.isnative
                and targets.shape == (rows,) and targets.flags.c_contiguous):
            return targets, targets.__array_interface__["data"][0], dt.itemsize
    y = _targets(targets, rows, check_range=False)
    return y, y._addr, 4


def _batch(X, name="X", stacked=False):
    return _batches.batch(X, _API, _IN, _MAX_ROWS, name, stacked)


def _owned_batch(X, name="X", stacked=False):
    return _batches.owned_batch(X, _API, _IN, _MAX_ROWS, name, stacked)


def _targets(targets, rows, check_range=True):
    return _batches.targets(targets, rows, _OUT, _API, check_range)


def _translate(exc):
    """A binding refusal as the trainer's error: a non-finite result as RuntimeError, a
    refused input (the resident entries check X and targets) as ValueError naming it."""
    if isinstance(exc, RuntimeError) and "not finite" in str(exc):
        return RuntimeError(f"SmallMLPTrainer: the step produced a non-finite result and was "
                            f"not applied ({exc})")
    if type(exc) is ValueError and str(exc).startswith("mlp_resident_"):
        return ValueError("SmallMLPTrainer: " + str(exc).partition(": ")[2])
    return exc


def _results(buf, addr, rows, k, want_dx):
    """(logits, gradients dict, input_grad or None): Arrays viewing the flat result buffer at
    `addr`, [losses (k) | logits (rows × 3) | grads (195) | input_grad (rows × 8)] (each keeps
    it alive). `train_step` builds the same views inline."""
    g = k + rows * _OUT
    a = addr + 4 * g
    logits = _result_view(buf, _LOGITS_SHAPES[rows], addr + 4 * k, rows * _OUT)
    grads = {"weight1": _result_view(buf, _W1_SHAPE, a, 128),
             "bias1": _result_view(buf, _B1_SHAPE, a + 512, 16),
             "weight2": _result_view(buf, _W2_SHAPE, a + 576, 48),
             "bias2": _result_view(buf, _B2_SHAPE, a + 768, 3)}
    dx = None
    if want_dx:
        at = g + _TOTAL
        dx = _result_view(buf, (rows, _IN), addr + 4 * at, rows * _IN)
    return logits, grads, dx


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
        self._run_step = _binding().mlp_resident_step  # train_step's entry, looked up once
        self._lock = threading.RLock()
        self._flags = zeros((4,), "<i4")
        self._step = 0
        self._session = Session(S.flat(weights), zeros((S.TOTAL,)), zeros((S.TOTAL,)), 0,
                                self._config)

    # ------------------------------------------------------------ introspection

    @property
    def layer_sizes(self):
        """[8, 16, 3] (MLPTrainer's attribute, for code that serves both)."""
        return list(S.ARCHITECTURE)

    @property
    def max_rows(self):
        """The most rows one batch may have (256)."""
        return _MAX_ROWS

    @property
    def step_(self):
        """Number of optimizer steps taken."""
        return self._step

    @property
    def weights_(self):
        """The current parameters: a dict of fresh Arrays weight1, bias1, weight2, bias2."""
        with self._lock:
            return S.split(self._session.download()[0])

    def numeric_mode_used(self):
        """'identical' or 'fast', read from the loaded binding."""
        return _binding().mode

    def vendor_used(self):
        """'cpu', 'cuda' or 'hip', read from the loaded binding."""
        return _binding().vendor

    # ------------------------------------------------------------ state

    @property
    def data_schedule(self):
        """The stored data-order description (a fresh copy). Assigning a new one (validated
        like the constructor's) records where the data stream stands, e.g. before a save."""
        with self._lock:
            return S.check_schedule(self._schedule)

    @data_schedule.setter
    def data_schedule(self, value):
        schedule = S.check_schedule(value)
        with self._lock:
            self._schedule = schedule

    @property
    def _st(self):
        """The whole state as a host `_State` of fresh Arrays (synced from the session)."""
        with self._lock:
            p, m, v, t = self._session.download()
            return _State(p, m, v, self._flags.copy(), t)

    def _publish(self, params, m, v, step, config=None, schedule=None, flags=None):
        """Replace the session by one holding (params, m, v, step) — opened before anything
        changes, so a failure to open leaves the trainer as it was — and, when given, the
        config, schedule and flags, all in ONE assignment. Caller holds the lock."""
        config = self._config if config is None else config
        new = Session(params, m, v, step, config)
        old = self._session
        (self._session, self._step, self._config, self._schedule, self._flags) = (
            new, step, config, self._schedule if schedule is None else schedule,
            self._flags if flags is None else flags)
        old.close()

    def state_dict(self):
        """An independent snapshot of the whole resumable state (fresh Arrays)."""
        with self._lock:
            return self._snapshot(self._st)

    def _snapshot(self, st):
        return {
            "schema": S.SCHEMA, "architecture": list(S.ARCHITECTURE),
            "numeric_mode": self._mode, "parameter_order": list(S.NAMES),
            "weights": S.split(st.params),
            "optimizer": {"kind": S.OPTIMIZER, "step": st.step, "m": st.m, "v": st.v,
                          "flags": st.flags},
            "config": dict(self._config),
            "data_schedule": S.check_schedule(self._schedule),
        }

    def load_state_dict(self, state):
        """Restore a `state_dict()` snapshot; validated and copied before anything changes.

        The state must come from the same numeric mode. Returns self."""
        params, m, v, flags, step, config, schedule, _ = S.validate_state(state, self._mode)
        with self._lock:
            self._publish(params, m, v, step, config, schedule, flags)
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
        return cls._from_state(_ckpt.load(path, allow_profile_change))

    def load_checkpoint(self, path, *, allow_profile_change=False):
        """Restore this trainer from a `save_checkpoint` file, checked whole before anything
        changes. Returns self."""
        return self.load_state_dict(_ckpt.load(path, allow_profile_change))

    @classmethod
    def _from_state(cls, state):
        w = state["weights"]
        cfg = state["config"]
        trainer = cls(w["weight1"], w["bias1"], w["weight2"], w["bias2"],
                      data_schedule=state["data_schedule"], lr=cfg["lr"],
                      betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                      weight_decay=cfg["weight_decay"])
        return trainer.load_state_dict(state)

    # A copy is a trainer of its own: same state bits, its own session and lock (a shallow
    # copy would share the session, and each would then step the other's state).
    def __copy__(self):
        return type(self)._from_state(self.state_dict())

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        return _ckpt.trainer_from_bytes, (type(self), _ckpt.dumps(self.state_dict()))

    # ------------------------------------------------------------ steps
    #
    # The fused path (default) is ONE resident-session call per public call: the session
    # holds the state, the binding checks X's finiteness and the label range, runs the step
    # and writes loss, logits, gradients and input gradient into one fresh result buffer.
    # A refused step changes nothing inside the binding; anything failing after the binding
    # returned is undone by `_recover` (the session keeps the pre-step state until the next
    # step). MOJOLEARN_MLP_FUSED=0 runs the per-operation path on a host copy instead.

    def _hyper(self):
        c = self._config
        return [c["lr"], c["beta1"], c["beta2"], c["eps"], c["weight_decay"]]

    def _check_room(self, k):
        if self._step + k > S.MAX_STEP:
            raise ValueError(f"SmallMLPTrainer: the step counter is exhausted (step "
                             f"{self._step} + {k} would pass 2**31-1)")

    def _recover(self, t_before):
        """After a failure: roll the session back to step `t_before` if the step was applied."""
        try:
            self._step = self._session.rollback(t_before)
        except Exception:  # the session refused: it was never changed
            pass

    def _pass(self, xa, ya, itemsize, rows, mode, want_dx, k=1):
        """One resident pass (forward / grads / one train step), or k train steps in one call;
        returns the result buffer [losses (k) | logits | grads | input_grad] and the
        `_results` views of it (logits only in forward mode). A failure after the binding
        applied a training run (e.g. a MemoryError making the views) rolls it back. Caller
        holds the lock."""
        step = self._step
        buf = _ZERO * (k + rows * _OUT + S.TOTAL + (rows * _IN if want_dx else 0))
        out = buf.buffer_info()[0]
        try:
            if k == 1:
                self._step = _binding().mlp_resident_step(self._session.handle, xa, ya, out,
                                                          mode, rows, itemsize, want_dx, step)
            else:
                self._step = _binding().mlp_resident_steps(self._session.handle, xa, ya, out,
                                                           rows, k, itemsize, step)
            if mode == _MODE_FORWARD:  # logits only: no gradient views to build
                logits, grads, dx = _result_view(buf, _LOGITS_SHAPES[rows], out + 4 * k,
                                                 rows * _OUT), None, None
            else:
                logits, grads, dx = _results(buf, out, rows, k, want_dx)
        except BaseException as exc:
            if mode == _MODE_TRAIN:
                self._recover(step)
            new = _translate(_backend.translate(exc))
            if new is exc:
                raise
            raise new from None
        return buf, logits, grads, dx

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
        if return_input_grad is not False and return_input_grad is not True:
            raise TypeError(f"SmallMLPTrainer: return_input_grad must be a bool, got "
                            f"{type(return_input_grad).__name__}")
        # The common case (float32 / int32 Arrays) checked inline; `_x_input` / `_y_input`
        # handle (and refuse) everything else. At batch 1 each saved call is ~3 % of a step.
        if (type(X) is Array and X._dtype == "<f4" and len(shape := X._shape) == 2
                and shape[1] == _IN and 0 < (rows := shape[0]) <= _MAX_ROWS):
            xa = X._addr
        else:
            x_kept, xa, rows = _x_input(X)  # a converted copy lives as long as this frame
        if type(targets) is Array and targets._dtype == "<i4" and targets._shape == (rows,):
            ya, itemsize = targets._addr, 4
        else:
            y_kept, ya, itemsize = _y_input(targets, rows)
        lock = self._lock
        lock.acquire()  # explicit: `with` costs ~0.05 µs more
        try:
            step = self._step
            if step >= _MAX_STEP:
                self._check_room(1)
            if _env_get(_FUSED_KEY) == _OFF:
                return self._train_step_ops(X, targets, return_input_grad)
            # `_pass` and `_results`, inlined and unrolled for this hottest call: at batch 1
            # their calls cost ~5 % of a step.
            g = 1 + (n_logits := rows * _OUT)  # [loss | logits | grads | input_grad]
            buf = _ZERO * (g + _TOTAL + rows * _IN if return_input_grad else g + _TOTAL)
            addr = buf.buffer_info()[0]
            try:
                self._step = self._run_step(self._session.handle, xa, ya, addr, _MODE_TRAIN,
                                            rows, itemsize, return_input_grad, step)
                make = _new_object
                A = Array
                a = addr + 4 * g
                logits = make(A)
                logits._owner = buf
                logits._shape = _LOGITS_SHAPES[rows]
                logits._size = n_logits
                logits._addr = addr + 4
                w1 = make(A)
                w1._owner = buf
                w1._shape = _W1_SHAPE
                w1._size = 128
                w1._addr = a
                b1 = make(A)
                b1._owner = buf
                b1._shape = _B1_SHAPE
                b1._size = 16
                b1._addr = a + 512
                w2 = make(A)
                w2._owner = buf
                w2._shape = _W2_SHAPE
                w2._size = 48
                w2._addr = a + 576
                b2 = make(A)
                b2._owner = buf
                b2._shape = _B2_SHAPE
                b2._size = 3
                b2._addr = a + 768
                logits._dtype = w1._dtype = b1._dtype = w2._dtype = b2._dtype = "<f4"
                logits._readonly = w1._readonly = b1._readonly = w2._readonly = b2._readonly = False
                result = {"step": self._step, "loss": buf[0], "logits": logits,
                          "gradients": {"weight1": w1, "bias1": b1, "weight2": w2,
                                        "bias2": b2}}
                if return_input_grad:
                    at = g + _TOTAL
                    result["input_grad"] = _result_view(buf, (rows, _IN), addr + 4 * at,
                                                        rows * _IN)
            except BaseException as exc:  # refused, or e.g. a KeyboardInterrupt after it ran
                self._recover(step)
                new = _translate(_backend.translate(exc))
                if new is exc:
                    raise
                raise new from None
        finally:
            lock.release()
        return result

    def train_steps(self, X, targets, k):
        """`k` steps in ONE binding call over k equal batches stacked in X (k * batch, 8),
        targets (k * batch,); bit-equal to k `train_step` calls. Returns dict `step`,
        `losses` (k floats), `loss` (the last), `logits` and `gradients` of the last step."""
        if isinstance(k, bool) or type(k) is not int or k < 1:
            raise ValueError(f"SmallMLPTrainer: k must be a positive int, got {k!r}")
        x, xa, total = _x_input(X, stacked=True)
        if total % k or not 1 <= total // k <= _MAX_ROWS:
            raise ValueError(f"SmallMLPTrainer: X must stack k={k} equal batches of 1 to "
                             f"{_MAX_ROWS} rows, got {total} rows")
        y, ya, itemsize = _y_input(targets, total)
        rows = total // k
        with self._lock:
            self._check_room(k)
            if not _fused_enabled():
                return self._train_steps_ops(X, targets, k)
            step = self._step
            buf, logits, grads, _ = self._pass(xa, ya, itemsize, rows, _MODE_TRAIN, False, k)
            try:
                values = buf[:k].tolist()
            except BaseException:  # e.g. MemoryError, KeyboardInterrupt: undo the steps
                self._recover(step)
                raise
            return {"step": self._step, "losses": values, "loss": values[-1], "logits": logits,
                    "gradients": grads}

    def loss_and_grads(self, X, targets):
        """(loss, [dweight1, dbias1, dweight2, dbias2]) of a batch, without a step."""
        x, xa, rows = _x_input(X)
        y, ya, itemsize = _y_input(targets, rows)
        with self._lock:
            if not _fused_enabled():
                x, y = _owned_batch(X), _targets(targets, rows)
                _, losses, _, grads, _ = self._run_ops(x, y, rows, _MODE_GRADS)
                g = S.split(grads)
                return losses._mv[0], [g[n] for n in S.NAMES]
            buf, _, grads, _ = self._pass(xa, ya, itemsize, rows, _MODE_GRADS, False)
        return buf[0], [grads[n] for n in S.NAMES]

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
            p, m, v, t = self._session.download()  # fresh copies: the update runs on them
            try:
                _binding().mlp_adamw([p._addr, g._addr, m._addr, v._addr],
                                     [S.TOTAL, t + 1, *self._hyper()])
            except (RuntimeError, ValueError) as exc:
                raise _translate(exc) from None
            self._publish(p, m, v, t + 1)
            return t + 1

    def predict_logits(self, X):
        """Logits (n, 3) of X (n, 8) with the current weights."""
        x, xa, rows = _x_input(X)
        with self._lock:
            if not _fused_enabled():
                return self._forward_ops(_owned_batch(X))
            return self._pass(xa, xa, 4, rows, _MODE_FORWARD, False)[1]

    def predict_logits_sessions(self, inputs):
        """Logits of several batches (a list of float32 (n_i, 8) buffers), concatenated in
        the order given: shape (sum n_i, 3)."""
        if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__iter__"):
            raise TypeError(f"SmallMLPTrainer: inputs must be a list of float32 (n, 8) buffers, "
                            f"got {type(inputs).__name__}")
        batches = [_owned_batch(X, name=f"inputs[{i}]") for i, X in enumerate(list(inputs))]
        if not batches:
            raise ValueError("SmallMLPTrainer: inputs must hold at least one batch")
        # Rows are independent, so forwards over any grouping of the rows give each row's bits.
        parts = []
        with self._lock:
            for x in batches:
                parts.append(self.predict_logits(x).tobytes())
        raw = b"".join(parts)
        return Array(memoryview(raw).cast("f"), "<f4", (len(raw) // (4 * _OUT), _OUT))

    # ------------------------------------------------------------ per-operation path

    def _run_ops(self, x, y, rows, mode, k=1, want_dx=False):
        """The per-operation calls on a host copy of the state; returns
        (new _State or None, losses Array (k,), logits, flat grads, dx). Caller holds the lock."""
        from . import _mlp_ops

        st = self._st
        losses = zeros((k,))
        logits = empty((rows, _OUT))
        grads = zeros((S.TOTAL,))
        dx = empty((rows, _IN)) if want_dx else zeros((1,))
        train = mode == _MODE_TRAIN
        new = _State(empty((S.TOTAL,)), empty((S.TOTAL,)), empty((S.TOTAL,)), st.flags,
                     st.step + k) if train else None
        try:
            _mlp_ops.steps(_binding(), SMALL, x, y, rows, mode, k, st, new, losses, logits, grads,
                           dx, want_dx, self._hyper())
        except (RuntimeError, ValueError) as exc:
            raise _translate(exc) from None
        return new, losses, logits, grads, (dx if want_dx else None)

    def _train_step_ops(self, X, targets, want_dx):
        x = _owned_batch(X)
        y = _targets(targets, x.shape[0])
        new, losses, logits, grads, dx = self._run_ops(x, y, x.shape[0], _MODE_TRAIN, 1, want_dx)
        self._publish(new.params, new.m, new.v, new.step)
        result = {"step": new.step, "loss": losses._mv[0], "logits": logits,
                  "gradients": S.split(grads)}
        if want_dx:
            result["input_grad"] = dx
        return result

    def _train_steps_ops(self, X, targets, k):
        x = _owned_batch(X, stacked=True)
        y = _targets(targets, x.shape[0])
        rows = x.shape[0] // k
        new, losses, logits, grads, _ = self._run_ops(x, y, rows, _MODE_TRAIN, k)
        self._publish(new.params, new.m, new.v, new.step)
        values = losses._mv.tolist()
        return {"step": new.step, "losses": values, "loss": values[-1], "logits": logits,
                "gradients": S.split(grads)}

    def _forward_ops(self, x):
        rows = x.shape[0]
        y = zeros((rows,), "<i4")
        return self._run_ops(x, y, rows, _MODE_FORWARD)[2]

    def __repr__(self):
        return (f"SmallMLPTrainer(step={self._step}, lr={self._config['lr']}, "
                f"mode={self._mode!r})")
