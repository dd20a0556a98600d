"""A resident MLP session: the trainer's parameters, AdamW moments and step count living in
binding-owned memory between calls (host memory in cpu builds; device memory in GPU builds
from the session's first step on, DEVIATIONS.md 29).

The handle is the address of the session block the binding allocated (`mlp_resident_open`);
the binding checks its magic word on every call, and this class makes sure it is closed
exactly once: by `close()`, or by `weakref.finalize` when the Session is collected (an
exception between open and publish cannot leak it either: the finalizer is armed right
after the open). Callers serialize their use (the trainer holds its lock around every call).

The hot entries (`mlp_resident_step`, `_steps`) take the handle and their other arguments
as plain ints; the trainer calls them directly.
"""

import weakref

from .._buffers.alloc import zeros
from .._runtime import backend as _backend
from .._runtime import threads as _threads
from . import state as S
from .spec import SMALL

CAPACITY_ROWS = 256  # rows per step the session's scratch holds (SmallMLPTrainer's batch limit)
MAX_CAPACITY_ROWS = 1 << 20  # the most rows a session's scratch can hold (the binding's bound)


def _raw():
    # Plumbing (open, download, rollback, close) goes to the loaded module directly: it must
    # work even while a caller has wrapped or replaced the computing entries.
    return _backend.binding().raw


def _call(entry, *args):
    try:
        return entry(*args)
    except Exception as exc:
        raise _backend.translate(exc) from None


def _close(raw, handle):
    try:
        raw.mlp_resident_close([handle], [])
    except Exception:  # already refused as closed: nothing to free
        pass


class Session:
    """An open resident session holding (params, m, v, t) and the step's scratch."""

    def __init__(self, params, m, v, t, config, spec=SMALL, capacity=CAPACITY_ROWS):
        raw = _raw()
        hyper = [config[k] for k in S.CONFIG_KEYS]
        self.spec = spec
        self.capacity = capacity
        self.handle = _call(
            raw.mlp_resident_open,
            [params._addr, m._addr, v._addr, spec.sizes_addr],
            [spec.layers, capacity, t, *hyper],
        )
        self._finalizer = weakref.finalize(self, _close, raw, self.handle)
        self._set_lr = raw.mlp_resident_set_lr  # once per scheduled step: looked up here
        pool = _threads.pool()
        if pool:
            _call(raw.mlp_resident_use_pool, [self.handle, pool], [])

    def __reduce_ex__(self, protocol):
        # A copy would share the handle, and use it after the original's finalizer closed it.
        raise TypeError("a resident session cannot be copied or pickled")

    def download(self):
        """(params, m, v, t): fresh owned flat Arrays and the step count."""
        n = self.spec.total
        p, m, v = zeros((n,)), zeros((n,)), zeros((n,))
        t = _call(_raw().mlp_resident_download, [self.handle, p._addr, m._addr, v._addr], [])
        return p, m, v, int(t)

    def set_lr(self, lr):
        """The learning rate (a float, finite and >= 0) of the session's next steps: a
        schedule's rate of the next step."""
        _call(self._set_lr, self.handle, lr)

    def rollback(self, t_before):
        """Undo the last training run if it started at `t_before` and was applied; returns the
        session's step count."""
        return int(_call(_raw().mlp_resident_rollback, [self.handle], [t_before]))

    def close(self):
        self._finalizer()

    @property
    def closed(self):
        return not self._finalizer.alive
