"""The resident MLP session entries (`mlp_resident_open / _step / _steps / _download /
_rollback / _close`) and the trainer on top of them: same bits as the non-resident fused entry
(`mlp_train_step`) and the per-operation path, all-or-nothing refusals inside the binding,
rollback, automatic closing, and independent sessions in parallel threads."""

import array
import contextlib
import gc
import math
import os
import threading

import mojolearn as ml
import pytest
from mojolearn._buffers.alloc import zeros
from mojolearn._buffers.array import Array
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import session as _mlp_resident
from mojolearn._mlp import spec as _spec
from mojolearn._mlp import state as S
from mojolearn._mlp import steps as _mlp_core
from mojolearn._mlp.spec import SMALL
from mojolearn._runtime import backend as _backend

HYPER = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
CAPACITY = _mlp_resident.CAPACITY_ROWS


def raw():
    return _backend.binding().raw


def b():
    return _backend.binding()


def rand_state(seed):
    p = S.flat(_spec.init_small_mlp(seed % (1 << 64)))
    return p, zeros((S.TOTAL,)), zeros((S.TOTAL,))


class Packed:
    """The positional arguments of mlp_resident_step / _steps (session, x, targets, out, then
    the params in layout order); the caller keeps the buffers alive. These entries raise plain
    Exception("<Type>: ..."): `call` translates it as the trainer does."""

    def __init__(self, handle, x, y, out, params):
        self.args = [handle, x, y, out, *params]

    def call(self, entry):
        try:
            return entry(*self.args)
        except Exception as exc:
            raise _backend.translate(exc) from None


def open_session(p, m, v, t=0, capacity=CAPACITY):
    return b().mlp_resident_open(
        [p._addr, m._addr, v._addr, SMALL.sizes_addr], [2, capacity, t, *HYPER.values()]
    )


@contextlib.contextmanager
def session(p, m, v, t=0, capacity=CAPACITY):
    """An open session handle, closed however the block ends."""
    h = open_session(p, m, v, t, capacity)
    try:
        yield h
    finally:
        b().mlp_resident_close([h], [])


def download(handle):
    p, m, v = zeros((S.TOTAL,)), zeros((S.TOTAL,)), zeros((S.TOTAL,))
    t = b().mlp_resident_download([handle, p._addr, m._addr, v._addr], [])
    return t, p.tobytes() + m.tobytes() + v.tobytes()


def fused_step(p, m, v, X, y, rows, t, k=1, want_dx=False):
    """The non-resident fused entry on host buffers: (new p, m, v, losses, logits, grads, dx)."""
    out = [zeros((S.TOTAL,)) for _ in range(3)]
    losses, logits, grads = zeros((k,)), zeros((rows, 3)), zeros((S.TOTAL,))
    dx = zeros((rows, 8))
    b().mlp_train_step(
        [
            X._addr,
            y._addr,
            p._addr,
            m._addr,
            v._addr,
            *(o._addr for o in out),
            losses._addr,
            logits._addr,
            grads._addr,
            dx._addr,
            SMALL.sizes_addr,
        ],
        [2, rows, 2, k, t + 1, *HYPER.values(), int(want_dx)],
    )
    return out, losses, logits, grads, dx


def test_resident_steps_match_the_fused_entry(seed):
    p, m, v = rand_state(seed)
    with session(p, m, v) as h:
        t = 0
        for rows, k in ((5, 1), (1, 3), (32, 2), (256, 1)):
            batches = _rng.batches((seed + rows) % (1 << 64), rows, k)
            X = (
                Array.from_buffer(memoryview(b"".join(x.tobytes() for x, _ in batches)).cast("f"))
                .copy()
                .reshape((k * rows, 8))
            )
            y32 = Array.from_list([c for _, yy in batches for c in yy.tolist()], "<i4")
            y64 = array.array("q", y32.tolist())
            (p, m, v), losses, logits, grads, dx = fused_step(
                p, m, v, X, y32, rows, t, k, want_dx=k == 1
            )
            n = k + rows * 3 + S.TOTAL + (rows * 8 if k == 1 else 0)
            out = array.array("f", bytes(4 * n))
            ya, itemsize = (y64.buffer_info()[0], 8) if rows % 2 else (y32._addr, 4)
            if k == 1:
                pk = Packed(h, X._addr, ya, out.buffer_info()[0], [2, rows, itemsize, 1, t])
                t_new = pk.call(b().mlp_resident_step)
            else:
                # lrs 0 (the last address, before the params): the session's own lr
                pk = Packed(h, X._addr, ya, out.buffer_info()[0], [0, rows, k, itemsize, t])
                t_new = pk.call(b().mlp_resident_steps)
            assert t_new == t + k, f"seed {seed}"
            t = t_new
            want = (
                losses.tobytes()
                + logits.tobytes()
                + grads.tobytes()
                + (dx.tobytes() if k == 1 else b"")
            )
            assert out.tobytes() == want, f"seed {seed}, rows {rows}, k {k}"
            assert download(h) == (t, p.tobytes() + m.tobytes() + v.tobytes()), f"seed {seed}"


def test_forward_and_grads_modes_leave_the_session_alone(seed):
    p, m, v = rand_state(seed)
    with session(p, m, v, t=7) as h:
        ((X, y),) = _rng.batches(seed % (1 << 64), 9, 1)
        before = download(h)
        out = array.array("f", bytes(4 * (1 + 27 + S.TOTAL + 72)))
        Packed(h, X._addr, y._addr, out.buffer_info()[0], [1, 9, 4, 1, 7]).call(
            b().mlp_resident_step
        )
        assert download(h) == before
        _, losses, logits, grads, dx = fused_step(p, m, v, X, y, 9, 7, want_dx=True)
        assert (
            out.tobytes() == losses.tobytes() + logits.tobytes() + grads.tobytes() + dx.tobytes()
        ), f"seed {seed}"
        fwd = array.array("f", bytes(4 * (1 + 27 + S.TOTAL)))
        Packed(h, X._addr, X._addr, fwd.buffer_info()[0], [0, 9, 4, 0, 7]).call(
            b().mlp_resident_step
        )
        assert fwd[1:28].tobytes() == logits.tobytes() and download(h) == before


def _refusal_cases(h, X, y, out):
    """(exception, message, packed-arguments) of refused calls on an open session."""
    bad32 = Array.from_list([0, 1, 3, 0], "<i4")
    bad64 = array.array("q", [0, 1 << 40, 0, 0])
    nan_x = Array.from_list(X.tolist(), "<f4")
    nan_x[2, 5] = math.nan
    o = out.buffer_info()[0]
    return [
        (
            ValueError,
            r"targets must be classes 0..2; targets\[2\] = 3",
            Packed(h, X._addr, bad32._addr, o, [2, 4, 4, 0, 1]),
            (bad32,),
        ),
        (
            ValueError,
            r"targets\[1\] = 1099511627776",
            Packed(h, X._addr, bad64.buffer_info()[0], o, [2, 4, 8, 0, 1]),
            (bad64,),
        ),
        (
            ValueError,
            r"X must be finite \(flat index 21 is nan\)",
            Packed(h, nan_x._addr, y._addr, o, [2, 4, 4, 0, 1]),
            (nan_x,),
        ),
        (
            ValueError,
            "exceeds the session's capacity",
            Packed(h, X._addr, y._addr, o, [2, CAPACITY + 1, 4, 0, 1]),
            (),
        ),
        (
            ValueError,
            r"target_itemsize must be an integer in \[4, 8\]",
            Packed(h, X._addr, y._addr, o, [2, 4, 2, 0, 1]),
            (),
        ),
        (
            RuntimeError,
            "expects step 0 but the session is at step 1",
            Packed(h, X._addr, y._addr, o, [2, 4, 4, 0, 0]),
            (),
        ),
        (
            ValueError,
            "mode must be an integer in",
            Packed(h, X._addr, y._addr, o, [3, 4, 4, 0, 1]),
            (),
        ),
        (
            TypeError,
            "missing 1 required positional argument",
            Packed(h, X._addr, y._addr, o, [2, 4, 4, 0]),
            (),
        ),
        (ValueError, "address 'x' is null", Packed(h, 0, y._addr, o, [2, 4, 4, 0, 1]), ()),
        (TypeError, "mode must be an int", Packed(h, X._addr, y._addr, o, [2.0, 4, 4, 0, 1]), ()),
        (TypeError, "rows must be an int", Packed(h, X._addr, y._addr, o, [2, "4", 4, 0, 1]), ()),
        (
            ValueError,
            "target_itemsize must be 4 or 8",
            Packed(h, X._addr, y._addr, o, [2, 4, 5, 0, 1]),
            (),
        ),
        # A live buffer that is not a session (its first word is not the magic word).
        (
            ValueError,
            "not an open session",
            Packed(out.buffer_info()[0], X._addr, y._addr, o, [2, 4, 4, 0, 1]),
            (),
        ),
    ]


def test_refusals_change_nothing_in_the_session(seed):
    p, m, v = rand_state(seed)
    with session(p, m, v) as h:
        ((X, y),) = _rng.batches(seed % (1 << 64), 4, 1)
        out = array.array("f", bytes(4 * (1 + 12 + S.TOTAL)))
        Packed(h, X._addr, y._addr, out.buffer_info()[0], [2, 4, 4, 0, 0]).call(
            b().mlp_resident_step
        )
        before = download(h)
        for exc, match, pk, _keep in _refusal_cases(h, X, y, out):
            with pytest.raises(exc, match=match):
                pk.call(b().mlp_resident_step)
            assert download(h) == before, match
        with pytest.raises(ValueError, match="pass the step limit"):
            Packed(h, X._addr, y._addr, out.buffer_info()[0], [0, 4, (1 << 31) - 1, 4, 1]).call(
                b().mlp_resident_steps
            )
        with pytest.raises(ValueError, match="address 'session' is null"):
            Packed(0, X._addr, y._addr, out.buffer_info()[0], [2, 4, 4, 0, 1]).call(
                b().mlp_resident_step
            )
        assert download(h) == before


def test_nonfinite_result_restores_the_session():
    big = Array.from_list([3.0e38] * S.TOTAL, "<f4")
    with session(big, zeros((S.TOTAL,)), zeros((S.TOTAL,)), t=3) as h:
        before = download(h)
        X = Array.from_list([1.0] * 24, "<f4").reshape((3, 8))
        y = Array.from_list([0, 1, 2], "<i4")
        out = array.array("f", bytes(4 * (2 + 9 + S.TOTAL)))
        with pytest.raises(RuntimeError, match="is not finite at index"):
            Packed(h, X._addr, y._addr, out.buffer_info()[0], [0, 1, 2, 4, 3]).call(
                b().mlp_resident_steps
            )
        assert download(h) == before


def _state_arrays(downloaded):
    """(p, m, v) Arrays of a `download` result's bytes."""
    raw_bytes = downloaded[1]
    n = 4 * S.TOTAL
    return [
        Array.from_buffer(memoryview(raw_bytes[i * n : (i + 1) * n]).cast("f")).copy()
        for i in range(3)
    ]


def test_a_refused_run_leaves_the_last_completed_state_to_train_on(seed):
    """The run after a completed one writes the other state bank: when it is refused (here at
    the last of three steps), the completed state stays current, the rollback to before the
    completed run is gone, and the next run gives the bits of a fresh session holding that
    state."""
    p, m, v = rand_state(seed)
    # weight1 all 1.0: the third batch's 3e38 inputs then sum to +inf in every hidden unit, so
    # that step is non-finite whatever the seed (with random weights its logits could stay
    # finite: about one seed in 200).
    p = Array.from_list([1.0] * 128 + p.tolist()[128:], "<f4")
    batches = _rng.batches(seed % (1 << 64), 4, 3)
    X3 = Array.from_list(
        [v for X, _ in batches[:2] for v in X._mv.tolist()] + [3.0e38] * 32, "<f4"
    ).reshape(12, 8)
    y3 = Array.from_list([c for _, y in batches for c in y.tolist()], "<i4")
    X, y = batches[0]
    out = array.array("f", bytes(4 * (3 + 12 + S.TOTAL)))
    with session(p, m, v) as h:
        Packed(h, X._addr, y._addr, out.buffer_info()[0], [2, 4, 4, 0, 0]).call(
            b().mlp_resident_step
        )
        completed = download(h)
        with pytest.raises(RuntimeError, match="is not finite"):
            Packed(h, X3._addr, y3._addr, out.buffer_info()[0], [0, 4, 3, 4, 1]).call(
                b().mlp_resident_steps
            )
        assert download(h) == completed
        assert b().mlp_resident_rollback([h], [0]) == 1 and download(h) == completed
        (X2, y2) = batches[1]
        Packed(h, X2._addr, y2._addr, out.buffer_info()[0], [2, 4, 4, 0, 1]).call(
            b().mlp_resident_step
        )
        continued = download(h)
    with session(*_state_arrays(completed), t=1) as fresh:
        Packed(fresh, X2._addr, y2._addr, out.buffer_info()[0], [2, 4, 4, 0, 1]).call(
            b().mlp_resident_step
        )
        assert download(fresh) == continued


def test_open_refusals():
    p, m, v = rand_state(1)
    nan = Array.from_list([math.nan] * S.TOTAL, "<f4")
    with pytest.raises(ValueError, match=r"mlp_resident_open: m must be finite \(index 0 is nan\)"):
        b().mlp_resident_open(
            [p._addr, nan._addr, v._addr, SMALL.sizes_addr], [2, 4, 0, *HYPER.values()]
        )
    with pytest.raises(ValueError, match="capacity_rows must be an integer"):
        b().mlp_resident_open(
            [p._addr, m._addr, v._addr, SMALL.sizes_addr], [2, 0, 0, *HYPER.values()]
        )
    with pytest.raises(ValueError, match="need lr >= 0"):
        b().mlp_resident_open(
            [p._addr, m._addr, v._addr, SMALL.sizes_addr], [2, 4, 0, -1.0, 0.9, 0.999, 1e-8, 0.0]
        )


def test_rollback_undoes_only_the_last_run(seed):
    p, m, v = rand_state(seed)
    with session(p, m, v) as h:
        ((X, y),) = _rng.batches(seed % (1 << 64), 6, 1)
        out = array.array("f", bytes(4 * (1 + 18 + S.TOTAL)))
        pk = Packed(h, X._addr, y._addr, out.buffer_info()[0], [2, 6, 4, 0, 0])
        pk.call(b().mlp_resident_step)
        after_one = download(h)
        pk.args[-1] = 1
        pk.call(b().mlp_resident_step)
        assert b().mlp_resident_rollback([h], [0]) == 2  # not the last run's start: no-op
        assert b().mlp_resident_rollback([h], [1]) == 1
        assert download(h) == after_one
        assert b().mlp_resident_rollback([h], [1]) == 1  # nothing left to undo
    not_a_session = zeros((64,))
    for entry, params in ((b().mlp_resident_rollback, [0]), (b().mlp_resident_close, [])):
        with pytest.raises(ValueError, match="not an open session"):
            entry([not_a_session._addr], params)


def test_session_closes_automatically():
    p, m, v = rand_state(2)
    s = _mlp_resident.Session(p, m, v, 0, dict(zip(S.CONFIG_KEYS, HYPER.values())))
    fin = s._finalizer
    assert fin.alive and not s.closed
    del s
    gc.collect()
    assert not fin.alive
    t = ml.SmallMLPTrainer(*_spec.init_small_mlp(3), data_schedule={"s": 1})
    fin = t._session._finalizer
    old = t._session._finalizer
    t.load_state_dict(t.state_dict())  # reopens: the old session is closed at once
    assert not old.alive and t._session._finalizer.alive
    fin = t._session._finalizer
    del t
    gc.collect()
    assert not fin.alive


def test_close_twice_is_harmless():
    p, m, v = rand_state(4)
    s = _mlp_resident.Session(p, m, v, 0, dict(zip(S.CONFIG_KEYS, HYPER.values())))
    s.close()
    s.close()
    assert s.closed


def test_trainer_paths_agree(seed, monkeypatch):
    """train_step == train_steps == loss_and_grads + apply_gradients == per-operation path,
    on one stream of batches (the resident session under all but the last)."""
    k, rows = 3, 7
    batches = _rng.batches(seed % (1 << 64), rows, k)
    init = _spec.init_small_mlp(seed % (1 << 64))
    mk = lambda: ml.SmallMLPTrainer(*init, data_schedule={"s": 1}, lr=1e-2)  # noqa: E731
    a, c, d = mk(), mk(), mk()
    ra = [a.train_step(X, y) for X, y in batches]
    for X, y in batches:
        loss, grads = d.loss_and_grads(X, y)
        d.apply_gradients(grads)
    Xs = (
        Array.from_buffer(memoryview(b"".join(X.tobytes() for X, _ in batches)).cast("f"))
        .copy()
        .reshape((k * rows, 8))
    )
    ys = array.array("q", [c_ for _, y in batches for c_ in y.tolist()])  # int64, read as is
    rc = c.train_steps(Xs, ys, k)
    monkeypatch.setenv("MOJOLEARN_MLP_FUSED", "0")
    e = mk()
    re = [e.train_step(X, y) for X, y in batches]
    assert rc["losses"] == [r["loss"] for r in ra] == [r["loss"] for r in re], f"seed {seed}"
    assert rc["logits"].tobytes() == ra[-1]["logits"].tobytes() == re[-1]["logits"].tobytes()
    assert [g.tobytes() for g in rc["gradients"].values()] == [
        g.tobytes() for g in ra[-1]["gradients"].values()
    ]
    assert a.state_hash() == c.state_hash() == d.state_hash() == e.state_hash(), f"seed {seed}"


def test_failure_after_the_binding_returned_is_rolled_back(monkeypatch):
    t = ml.SmallMLPTrainer(*_spec.init_small_mlp(5), data_schedule={"s": 1})
    ((X, y),) = _rng.batches(6, 4, 1)
    t.train_step(X, y)
    before = t.state_hash(), t.step_
    from mojolearn import trainer as trainer_mod

    def broken(*args):
        raise MemoryError("injected after the step")

    monkeypatch.setattr(trainer_mod, "_new_object", broken)  # train_step's unrolled views
    monkeypatch.setattr(_mlp_core, "_results", broken)  # train_steps' views
    with pytest.raises(MemoryError, match="injected"):
        t.train_step(X, y)
    with pytest.raises(MemoryError, match="injected"):
        t.train_steps(X, y, 2)
    assert (t.state_hash(), t.step_) == before


def test_parallel_trainers_match_serial(seed):
    """Independent trainers in two threads (the binding releases the GIL during big steps)
    give the bits of the same trainers run one after the other."""
    init = _spec.init_small_mlp(seed % (1 << 64))
    batches = _rng.batches((seed + 1) % (1 << 64), 64, 6)
    Xs = (
        Array.from_buffer(memoryview(b"".join(X.tobytes() for X, _ in batches)).cast("f"))
        .copy()
        .reshape((384, 8))
    )
    ys = Array.from_list([c for _, y in batches for c in y.tolist()], "<i4")

    def run(tr, out):
        for _ in range(5):
            for X, y in batches:
                tr.train_step(X, y)
            tr.train_steps(Xs, ys, 6)
        out.append(tr.state_hash())

    serial = []
    for _ in range(2):
        run(ml.SmallMLPTrainer(*init, data_schedule={"s": 1}), serial)
    par = []
    threads = [
        threading.Thread(target=run, args=(ml.SmallMLPTrainer(*init, data_schedule={"s": 1}), par))
        for _ in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert par == serial and serial[0] == serial[1], f"seed {seed}"


FAST_SAME_BITS = """
import sys
sys.path.insert(0, {root!r})
import mojolearn as ml
from tests import test_resident as T
assert ml.numeric_mode_used() == 'fast'
T.test_resident_steps_match_the_fused_entry({seed})
T.test_forward_and_grads_modes_leave_the_session_alone({seed})
print('ok')
"""


def test_fast_mode_resident_matches_the_fused_entry(seed):
    """In fast mode too, the resident step (FMA chains of training/mlp_lanes.mojo) has the
    bits of the non-resident fused entry (training/mlp.mojo + the fast GEMM)."""
    from tests.helpers import run_python

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = run_python(
        FAST_SAME_BITS.format(root=root, seed=seed), env={"MOJOLEARN_NUMERIC_MODE": "fast"}
    )
    assert out.split()[-1] == "ok", f"seed {seed}"
