"""The hot entries read their inputs themselves (issue 17): `train_step`, `train_steps`,
`loss_and_grads`, `predict_logits` and `matmul` hand a NumPy array, memoryview or torch tensor
to the binding as it is, and never through `_intake` when it can be taken zero-copy. What the
binding declines (strided, another dtype, a tensor that requires grad) comes back through the
intake: copied with the same bits, or refused by name with nothing changed."""

import array
import math
import os
import random

import mojolearn as ml
import pytest
from mojolearn._buffers import intake as _intake
from mojolearn._mlp import batches as _batches
from mojolearn._mlp import spec as _spec


def _values(rng, rows, cols):
    return [rng.uniform(-1, 1) for _ in range(rows * cols)], [rng.randrange(3) for _ in range(rows)]


def _memoryview(xs, rows, cols):
    return memoryview(array.array("f", xs)).cast("B").cast("f", (rows, cols))


def _kinds():
    """name -> (X maker, labels maker); those whose extra is missing are left out."""
    kinds = {
        "memoryview": (_memoryview, lambda ys: memoryview(array.array("q", ys))),
    }
    try:
        import numpy as np

        kinds["NumPy"] = (
            lambda xs, r, c: np.array(xs, np.float32).reshape(r, c),
            lambda ys: np.array(ys, np.int32),
        )
    except ImportError:
        pass
    try:
        import torch

        kinds["torch"] = (
            lambda xs, r, c: torch.tensor(xs, dtype=torch.float32).reshape(r, c),
            lambda ys: torch.tensor(ys),
        )
    except ImportError:
        pass
    return kinds


KINDS = _kinds()


@pytest.fixture
def no_intake(monkeypatch):
    """A call that makes any later use of the intake's zero-copy and copying paths fail."""

    def fail(*args, **kwargs):
        raise AssertionError("the intake was used for an input the binding should read")

    def arm():
        import mojolearn.linalg as linalg
        import mojolearn.trainer as trainer

        for name in ("batch", "targets"):
            monkeypatch.setattr(_batches, name, fail)
        for name in ("x", "y", "declined"):
            monkeypatch.setattr(_batches.BatchReader, name, fail)
        for name in ("f32", "borrowed_f32", "c_f32", "c_i32", "as_f32_c", "labels"):
            monkeypatch.setattr(_intake, name, fail)
        monkeypatch.setattr(linalg, "f32", fail)
        monkeypatch.setattr(trainer.SmallMLPTrainer, "_declined", fail)

    return arm


TRAINERS = {
    "small": lambda: ml.SmallMLPTrainer(*_spec.init_small_mlp(5), data_schedule={"a": 1}),
    "mlp": lambda: ml.MLPTrainer([8, 10, 7, 3], seed=5, data_schedule={"a": 1}),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("which", sorted(TRAINERS))
def test_steps_read_the_objects_in_the_binding_with_the_bits_of_arrays(
    seed, kind, which, no_intake
):
    make_x, make_y = KINDS[kind]
    rng = random.Random(seed)
    a, b = TRAINERS[which](), TRAINERS[which]()
    no_intake()
    for rows in (1, 5, 64):  # 64 rows: the step runs with the GIL released
        xs, ys = _values(rng, rows, 8)
        ra = a.train_step(make_x(xs, rows, 8), make_y(ys), return_input_grad=True)
        rb = b.train_step(
            ml.Array.from_list(xs, "<f4").reshape((rows, 8)),
            ml.Array.from_list(ys, "<i4"),
            return_input_grad=True,
        )
        assert ra["loss"] == rb["loss"]
        assert ra["input_grad"].tobytes() == rb["input_grad"].tobytes()
        assert ra["logits"].tobytes() == rb["logits"].tobytes()
    xs, ys = _values(rng, 12, 8)
    ra = a.train_steps(make_x(xs, 12, 8), make_y(ys), 3)
    rb = b.train_steps(
        ml.Array.from_list(xs, "<f4").reshape((12, 8)), ml.Array.from_list(ys, "<i4"), 3
    )
    assert ra["losses"] == rb["losses"]
    la, ga = a.loss_and_grads(make_x(xs, 12, 8), make_y(ys))
    lb, gb = b.loss_and_grads(
        ml.Array.from_list(xs, "<f4").reshape((12, 8)), ml.Array.from_list(ys, "<i4")
    )
    assert la == lb and [g.tobytes() for g in ga] == [g.tobytes() for g in gb]
    pa = a.predict_logits(make_x(xs, 12, 8))
    assert (
        pa.tobytes() == b.predict_logits(ml.Array.from_list(xs, "<f4").reshape((12, 8))).tobytes()
    )
    assert a.state_hash() == b.state_hash()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_reads_the_objects_in_the_binding_with_the_bits_of_arrays(
    seed, kind, ta, tb, no_intake
):
    make_x = KINDS[kind][0]
    rng = random.Random(seed)
    m, n, k = 6, 9, 11
    ash, bsh = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    av = [rng.uniform(-2, 2) for _ in range(m * k)]
    bv = [rng.uniform(-2, 2) for _ in range(k * n)]
    no_intake()
    got = ml.matmul(make_x(av, *ash), make_x(bv, *bsh), transpose_a=ta, transpose_b=tb)
    want = ml.matmul(
        ml.Array.from_list(av, "<f4").reshape(ash),
        ml.Array.from_list(bv, "<f4").reshape(bsh),
        transpose_a=ta,
        transpose_b=tb,
    )
    assert got.shape == (m, n) and got.tobytes() == want.tobytes()


def _declined_inputs(rng):
    """(name, X, targets, the Array X, the Array targets): inputs the binding declines and the
    intake copies or converts."""
    xs, ys = _values(rng, 4, 8)
    ax, ay = ml.Array.from_list(xs, "<f4").reshape((4, 8)), ml.Array.from_list(ys, "<i4")
    cases = [
        ("int8 targets", ax, array.array("b", ys), ax, ay),
        ("uint16 targets", _memoryview(xs, 4, 8), array.array("H", ys), ax, ay),
        ("int64 Array targets", _memoryview(xs, 4, 8), ml.Array.from_list(ys, "<i8"), ax, ay),
    ]
    try:
        import numpy as np

        wide = np.full((4, 16), 9.0, np.float32)
        wide[:, :8] = np.array(xs, np.float32).reshape(4, 8)
        cases.append(("strided NumPy X", wide[:, :8], np.array(ys, np.int64), ax, ay))
        fortran = np.asfortranarray(np.array(xs, np.float32).reshape(4, 8))
        cases.append(("Fortran-order NumPy X", fortran, ay, ax, ay))
    except ImportError:
        pass
    return cases


def test_declined_inputs_come_back_through_the_intake_with_the_same_bits(seed):
    rng = random.Random(seed)
    for name, X, y, ax, ay in _declined_inputs(rng):
        for make in TRAINERS.values():
            a, b = make(), make()
            ra, rb = a.train_step(X, y), b.train_step(ax, ay)
            assert ra["loss"] == rb["loss"] and a.state_hash() == b.state_hash(), name


def test_refused_inputs_change_nothing_and_name_the_problem():
    rng = random.Random(7)
    xs, ys = _values(rng, 3, 8)
    doubles = memoryview(array.array("d", xs)).cast("B").cast("d", (3, 8))
    for which, make in TRAINERS.items():
        t = make()
        before = t.state_hash()
        if which == "small":  # the reference's refusal; MLPTrainer rounds float64 once
            with pytest.raises(TypeError, match="X must be float32, got float64"):
                t.train_step(doubles, array.array("i", ys))
        with pytest.raises(ValueError, match=r"targets must have shape \(3,\)"):
            t.train_step(_memoryview(xs, 3, 8), array.array("i", ys[:2]))
        with pytest.raises(ValueError, match=r"targets must be classes 0\.\.2"):
            t.train_step(_memoryview(xs, 3, 8), array.array("i", [0, 1, 3]))
        with pytest.raises(ValueError, match=r"X must have shape \(batch, 8\)"):
            t.train_step(_memoryview(xs, 4, 6), array.array("i", ys + [0]))
        with pytest.raises(ValueError, match="X must be finite"):
            t.train_step(_memoryview([float("nan")] + xs[1:], 3, 8), array.array("i", ys))
        assert t.state_hash() == before and t.step_ == 0
    with pytest.raises(TypeError, match="a must be float32, got float64"):
        ml.matmul(doubles, ml.zeros((8, 2)))
    with pytest.raises(ValueError, match="contracted dimensions disagree"):
        ml.matmul(_memoryview(xs, 3, 8), ml.zeros((3, 2)))


def test_a_tensor_that_requires_grad_is_refused_by_name_everywhere():
    torch = pytest.importorskip("torch")
    X = torch.rand(2, 8, requires_grad=True)
    y = torch.tensor([0, 1])
    for make in TRAINERS.values():
        t = make()
        with pytest.raises(TypeError, match=r"X: from_dlpack: .*detach"):
            t.train_step(X, y)
        assert t.step_ == 0
        t.train_step(X.detach(), y)  # the same memory, detached, is read
    with pytest.raises(TypeError, match=r"a: from_dlpack: .*detach"):
        ml.matmul(X, torch.ones(8, 2))


@pytest.mark.parametrize("which", sorted(TRAINERS))
def test_a_declined_x_walks_down_the_intake_once(which):
    """The way of an X the binding declines (issue 28): the step's first try, then the reader,
    the intake and the buffer reader, each entered once (no room left and come back to), with
    one read of X in the binding (its copy) and the bits of the same batch as an Array."""
    np = pytest.importorskip("numpy")
    import sys

    from mojolearn._buffers import reader as _reader

    rng = np.random.default_rng(3)
    X = np.asfortranarray(rng.random((6, 8), dtype=np.float32))
    y = rng.integers(0, 3, 6)  # int64: read in place
    a, b = TRAINERS[which](), TRAINERS[which]()
    raw, reads = _reader._raw or _reader._entry(), []
    _reader._kind(X)  # how NumPy arrays export is learnt once per type, by a read of its own

    def counted(obj, spec):
        reads.append(obj is X)
        return raw(obj, spec)

    rooms = []
    # The package's own folder, not any path with "mojolearn" in it: a clone named mojolearn
    # holds this test file too (issue 34).
    package = os.path.dirname(os.path.abspath(ml.__file__)) + os.sep

    def watch(frame, event, arg):
        if event == "call" and any(v is X for v in frame.f_locals.values()):
            name = frame.f_code.co_filename
            if name.startswith(package) and (not rooms or rooms[-1] != name):
                rooms.append(name)

    _reader._raw = counted
    sys.setprofile(watch)
    try:
        got = a.train_step(X, y)
    finally:
        sys.setprofile(None)
        _reader._raw = raw
    walk = ["/" + name[len(package) :].replace(os.sep, "/") for name in rooms]
    assert len(set(walk)) == len(walk), walk
    assert walk[-3:] == ["/_mlp/batches.py", "/_buffers/intake.py", "/_buffers/reader.py"], walk
    assert reads.count(True) == 1, reads
    want = b.train_step(ml.Array.from_list(X.ravel().tolist(), "<f4").reshape((6, 8)), y)
    assert got["loss"] == want["loss"] and a.state_hash() == b.state_hash()


def test_a_buffer_is_held_only_while_its_step_runs():
    # bytearray-backed memory can be resized again once the step returns (the binding
    # released its view), and the trainer read the values it held during the step.
    owner = array.array("f", [0.25] * 8)
    X = memoryview(owner).cast("B").cast("f", (1, 8))
    t = TRAINERS["small"]()
    t.train_step(X, array.array("i", [1]))
    X.release()
    owner.append(1.0)  # BufferError if a view were still exported
    assert len(owner) == 9


def test_a_negative_view_is_read_as_its_memory_as_numpy_from_dlpack_reads_it():
    # DEVIATIONS 41: torch's DLPack exports the memory of a tensor with its negative bit set
    # as it is; we read what numpy.from_dlpack reads (and Tensor.numpy() would refuse).
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    neg = torch._neg_view(torch.full((2, 2), 3.0))
    assert neg.is_neg() and neg[0, 0].item() == -3.0
    seen = ml.matmul(neg, ml.Array.from_list([1.0, 0.0, 0.0, 1.0], "<f4").reshape((2, 2)))
    assert seen.tolist() == np.from_dlpack(neg).tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_a_batch_bigger_than_the_session_grows_it_through_the_checked_way(seed):
    # The binding declines rows its session cannot hold; the trainer then reads the rows,
    # reopens the session larger, and steps: the bits of the same batch as an Array.
    rng = random.Random(seed)
    a = ml.MLPTrainer([8, 6, 3], seed=2, data_schedule={"a": 1})
    b = ml.MLPTrainer([8, 6, 3], seed=2, data_schedule={"a": 1})
    assert a._session.capacity < 300 <= a.max_rows
    xs, ys = _values(rng, 300, 8)
    ra = a.train_step(_memoryview(xs, 300, 8), array.array("i", ys))
    rb = b.train_step(
        ml.Array.from_list(xs, "<f4").reshape((300, 8)), ml.Array.from_list(ys, "<i4")
    )
    assert ra["loss"] == rb["loss"] and a.state_hash() == b.state_hash()
    assert a._session.capacity >= 300


def test_results_of_object_steps_hold_their_own_references():
    # The binding builds the (step, buffer, ...) result itself: a reference too few frees a
    # step count above 256 (not a cached small int) or the buffer while a result uses it,
    # and the process crashes within these 300 steps.
    import gc
    import sys

    t = TRAINERS["small"]()
    X, y = _memoryview([0.5] * 8, 1, 8), memoryview(array.array("i", [2]))
    for i in range(1, 301):
        r = t.train_step(X, y)
        assert r["step"] == i
    logits, step = r["logits"], r["step"]
    del r
    gc.collect()
    assert step == t.step_ == 300 and sys.getrefcount(step) >= 2
    assert len(logits.tolist()[0]) == 3 and sys.getrefcount(logits._owner) >= 2


SHAPES = [(4, 3), (4,), (2, 4), (2,)]


def _as_kind(values, shape, kind):
    """float32 `values` of `shape` as a writable buffer of this kind."""
    if kind == "memoryview":
        return memoryview(array.array("f", values)).cast("B").cast("f", shape)
    if kind == "NumPy":
        import numpy as np

        return np.array(values, np.float32).reshape(shape)
    import torch

    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def _flat(buf, kind):
    if kind == "memoryview":
        return list(buf.cast("B").cast("f"))
    return [float(x) for x in (buf.ravel() if kind == "NumPy" else buf.flatten()).tolist()]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("opt", ["AdamW", "Adam", "SGD"])
def test_optimizers_read_gradients_in_the_binding_with_the_bits_of_arrays(
    seed, kind, opt, monkeypatch
):
    # Gradients of every kind are read zero-copy in one binding call each (never an Array
    # built per step), clipped in place where asked, as Array gradients are.
    rng = random.Random(seed)

    def values():
        return [[rng.uniform(-1, 1) for _ in range(math.prod(s))] for s in SHAPES]

    p0 = values()
    a = [ml.Array.from_list(v, "<f4").reshape(s) for v, s in zip(p0, SHAPES)]
    b = [ml.Array.from_list(v, "<f4").reshape(s) for v, s in zip(p0, SHAPES)]
    oa, ob = getattr(ml, opt)(a, lr=0.05), getattr(ml, opt)(b, lr=0.05)
    steps = [values() for _ in range(3)]

    def fail(*args, **kwargs):
        raise AssertionError("an Array was built for a gradient the binding should read")

    monkeypatch.setattr(_intake, "f32_tensor", fail)  # f32_view's way for what it declines
    for k, g in enumerate(steps):
        theirs = [_as_kind(v, s, kind) for v, s in zip(g, SHAPES)]
        arrays = [ml.Array.from_list(v, "<f4").reshape(s) for v, s in zip(g, SHAPES)]
        max_norm = 0.5 if k % 2 else None
        assert oa.step(theirs, max_norm=max_norm) == ob.step(arrays, max_norm=max_norm)
        assert [_flat(t, kind) for t in theirs] == [
            x.tolist() if x.ndim == 1 else sum(x.tolist(), []) for x in arrays
        ]
    assert [x.tobytes() for x in a] == [x.tobytes() for x in b]
    theirs = [_as_kind(v, s, kind) for v, s in zip(steps[0], SHAPES)]
    arrays = [ml.Array.from_list(v, "<f4").reshape(s) for v, s in zip(steps[0], SHAPES)]
    assert ml.clip_grad_norm_(theirs, 0.25) == ml.clip_grad_norm_(arrays, 0.25)
    assert [_flat(t, kind) for t in theirs] == [
        sum(x.tolist(), []) if x.ndim == 2 else x.tolist() for x in arrays
    ]
    oa.zero_grad(theirs)
    assert all(v == 0.0 for t in theirs for v in _flat(t, kind))


def test_the_step_entries_refuse_inconsistent_calls_by_name():
    # rows 0 (take them from X) needs X as an object and a result template; the template must
    # be a one-item float32 array.array. Nothing runs: the session stays at step 0.
    from mojolearn._runtime import backend as _backend

    binding = _backend.binding().raw

    class Translated:  # the binding's entries, their errors as the Python exceptions they name
        def __getattr__(self, name):
            def call(*args):
                try:
                    return getattr(binding, name)(*args)
                except Exception as exc:
                    raise _backend.translate(exc) from None

            return call

    raw = Translated()
    t = TRAINERS["mlp"]()
    h = t._session.handle
    X, y = ml.Array.from_list([0.5] * 16, "<f4").reshape((2, 8)), ml.Array.from_list([0, 1], "<i4")
    out = array.array("f", bytes(4 * 4096))
    # An int without the rows (X) or the itemsize (targets) that say what it holds is a user's
    # int, not an address: declined (nothing done), saying which, for the Python side to refuse.
    at = out.buffer_info()[0]
    bx, by, room = _batches.DECLINED_X, _batches.DECLINED_TARGETS, _batches.DECLINED_CAPACITY
    assert raw.mlp_resident_step(h, X._addr, y._addr, at, 2, 0, 4, False, 0) == bx
    assert raw.mlp_resident_step(h, X._addr, y._addr, at, 2, 2, 0, False, 0) == by
    mv = _memoryview([0.5] * 16, 2, 8)
    assert raw.mlp_resident_step(h, mv, y._addr, at, 2, 0, 4, False, 0) == bx
    assert raw.mlp_resident_step(h, mv, y._addr, array.array("f", [0.0]), 2, 0, 0, False, 0) == by
    # Layouts the binding does not take in place, and rows past the session's scratch.
    doubles = memoryview(array.array("d", [0.5] * 16)).cast("B").cast("d", (2, 8))
    template = array.array("f", [0.0])
    assert raw.mlp_resident_step(h, doubles, y, template, 2, 0, 0, False, 0) == bx
    assert raw.mlp_resident_step(h, mv, array.array("H", [0, 1]), template, 2, 0, 0, False, 0) == by
    big = t._session.capacity + 1
    tall = _memoryview([0.5] * (8 * big), big, 8)
    labels = array.array("i", [0] * big)
    assert raw.mlp_resident_step(h, tall, labels, template, 2, 0, 0, False, 0) == room
    assert raw.mlp_resident_steps(h, tall, labels, template, 0, 0, 1, 0, 0) == room
    assert raw.mlp_resident_steps(h, doubles, y, template, 0, 0, 1, 0, 0) == bx
    with pytest.raises(ValueError, match="the output template must be a one-item float32"):
        raw.mlp_resident_step(h, mv, y._addr, array.array("d", [0.0]), 2, 0, 4, False, 0)
    with pytest.raises(ValueError, match="the output template must be a one-item float32"):
        raw.mlp_resident_steps(h, mv, y._addr, array.array("f", [0.0, 0.0]), 0, 0, 1, 4, 0)
    assert t.step_ == 0 and t._session.download()[3] == 0
