"""Round 3 (issue 30), rows 1-4 and 14-16 and the strided-copy note: inputs freed or resized by
another thread during a step (R14, per kind and per path), per-type state never poisoned by a
refused object (R15), torch labels of other dtypes, DLPack argument and null-pointer refusals,
a user's int never read as an address, and a declined X costing one copy. Each test failed at
f4f8d88; the crash rows run in a child process, so a SIGSEGV is a failed test, not a dead
pytest.

This file is also the children's program: `python -m tests.reliability.test_round3_intake
r14` prints one JSON line per R14 cell; `... r15 MODE` one per R15 sequence.
"""

import json
import os
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import mojolearn as ml
import pytest
from mojolearn._mlp import spec as _spec

from ..helpers import PKG_PARENT
from ._util import ROOT, record

API = "MLPTrainer"


def _child(*args, timeout=120):
    """Run this file as a child (`python -m`); the proc, never raising on its exit status."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG_PARENT, ROOT]))
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    return subprocess.run(
        [sys.executable, "-m", "tests.reliability.test_round3_intake", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def _lines(proc):
    """The JSON lines a child printed; AssertionError naming the exit status (a negative one
    is the signal that killed it) and its last words when it did not end with 0."""
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (
        f"child exited {proc.returncode} after {len(out)} results "
        f"(last: {out[-1] if out else None}):\n{proc.stderr[-3000:]}"
    )
    return out


# -- R14 (rows 1 and 2): inputs freed or resized during a step ---------------------------------
#
# Each cell steps a trainer on inputs of one kind while another thread tries to free or resize
# one of them, exactly while the step runs with the GIL released (the switch interval is long,
# so the other thread runs only when the step lets go of the GIL). The step must then give the
# bits of the same step on Arrays of the values as they were, and the other thread must be
# refused (BufferError: the input's export is held) or find its change harmless (the step
# reads a copy). Paths: "fast" (a warm session: the binding reads the objects), "declined"
# (a first batch larger than a fresh session's 256 rows: the binding declines and `_intake`
# reads them) and "strided X" (X must be copied: declined too).

ROWS = 1 << 16  # two batches of 32768 rows: X 2 MiB, labels 256 KiB (freed, they are unmapped)
K = 2
SIZES = [8, 32, 3]
KINDS = ("array.array", "memoryview", "NumPy", "torch", "Array", "bytearray", "__dlpack__")
PATHS = ("fast", "declined", "strided X")
MUTATION = {
    "array.array": "del y[:]  (int32 labels)",
    "memoryview": "X.release(), then del on its array.array",
    "NumPy": "X.resize(...)  (refcheck, NumPy's default)",
    "torch": "X.resize_(2x rows) and X.fill_(7)",
    "Array": "del on the bytearray an Array of labels borrows",
    "bytearray": "del y[:]  (uint8 labels: converted)",
    "__dlpack__": "the producer drops its memory (X.free())",
}
# What the other thread must meet: refused while the export is held, or a harmless change.
EXPECTED = {
    "array.array": "BufferError",
    "memoryview": "BufferError",
    "NumPy": "ValueError",
    "torch": "done",
    "Array": "BufferError",
    "bytearray": "done",
    "__dlpack__": "done",
}


class _Producer:
    """A DLPack-only producer (JAX-like: no buffer protocol) over a NumPy array, which can
    drop its memory: the capsule a consumer holds must keep it alive."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._a.__dlpack__(max_version=max_version) if max_version else self._a.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)

    def free(self):
        self._a = None


def _inputs(kind, path, X0, y0):
    """(X, y, mutate) of `kind` over the values X0 (float32 (ROWS, 8)) and y0 (int32)."""
    import array

    import numpy as np

    strided = path == "strided X"
    Xs = np.zeros((ROWS, 16), np.float32)
    Xs[:, ::2] = X0
    Xs = Xs[:, ::2]  # the same values, strided: the binding declines it, `_intake` copies it
    base = array.array("f", X0.tobytes())
    X = Xs if strided else memoryview(base).cast("B").cast("f", (ROWS, 8))
    y = y0
    if kind == "array.array":
        y = array.array("i", y0.tobytes())

        def mutate():
            del y[:]
    elif kind == "memoryview":

        def mutate():
            X.release()
            del base[:]
    elif kind == "NumPy":
        X = Xs if strided else X0.copy()

        def mutate():
            X.resize((1, 8))
    elif kind == "torch":
        import torch

        X = torch.from_numpy(X0.copy()).t().contiguous().t() if strided else torch.tensor(X0)
        if strided:
            assert not X.is_contiguous()

        def mutate():
            X.resize_(2 * ROWS, 8)
            X.fill_(7.0)
    elif kind == "Array":
        raw = bytearray(y0.tobytes())
        y = ml.Array.from_buffer(memoryview(raw).cast("i"))

        def mutate():
            del raw[:]
    elif kind == "bytearray":
        y = bytearray(y0.astype(np.uint8).tobytes())

        def mutate():
            del y[:]
    else:
        X = _Producer(Xs if strided else X0.copy())
        mutate = X.free
    return X, y, mutate


def _race(step, mutate):
    """Run `step` while another thread runs `mutate` the moment the step releases the GIL:
    (step's result or error text, what mutate met, whether it ran during the step)."""
    go, phase, seen = threading.Event(), ["before"], {}

    def other():
        go.wait()
        seen["during"] = phase[0] == "in"
        try:
            mutate()
            seen["mutation"] = "done"
        except (BufferError, ValueError) as exc:
            seen["mutation"] = type(exc).__name__

    th = threading.Thread(target=other)
    th.start()
    phase[0] = "in"
    go.set()
    try:
        out = step()
    except Exception as exc:  # a torn read may well be refused (a class out of range)
        out = f"{type(exc).__name__}: {exc}"
    phase[0] = "out"
    th.join(60)
    return out, seen.get("mutation"), seen.get("during", False)


def _r14_cell(kind, path, rng):
    import numpy as np

    X0 = rng.random((ROWS, 8), dtype=np.float32)
    y0 = rng.integers(0, 3, ROWS).astype(np.int32)
    for _ in range(3):  # a try where the other thread came too late decides nothing: again
        net, ref = (ml.MLPTrainer(SIZES, data_schedule={"r14": 1}, seed=0) for _ in range(2))
        Xa, ya = ml.Array.from_buffer(X0).copy(), ml.Array.from_buffer(y0).copy()
        if path == "fast":  # sessions grown to the batch: the binding reads the objects
            net.train_steps(Xa, ya, K)
            ref.train_steps(Xa, ya, K)
        X, y, mutate = _inputs(kind, path, X0, y0)
        out, mutation, during = _race(lambda: net.train_steps(X, y, K), mutate)
        if during:
            break
    want = ref.train_steps(Xa, ya, K)
    same = isinstance(out, dict) and out["losses"] == want["losses"]
    return {
        "kind": kind,
        "path": path,
        "mutation": mutation,
        "during_step": during,
        "same_bits": same and net.state_hash() == ref.state_hash(),
        "error": None if isinstance(out, dict) else out,
    }


def _r14_main():
    import numpy as np

    sys.setswitchinterval(5.0)  # the other thread runs only when the step releases the GIL
    rng = np.random.default_rng(14)
    for path in PATHS:
        for kind in KINDS:
            if path == "strided X" and kind == "memoryview":
                continue  # a memoryview cannot be sliced in two dimensions
            print(json.dumps(_r14_cell(kind, path, rng)), flush=True)


@pytest.fixture(scope="module")
def r14():
    pytest.importorskip("numpy")
    pytest.importorskip("torch")
    t0 = time.perf_counter()
    cells = _lines(_child("r14", timeout=300))
    return cells, time.perf_counter() - t0


def _cells(r14, kinds, paths=PATHS):
    found = [c for c in r14[0] if c["kind"] in kinds and c["path"] in paths]
    assert found
    return found


def _assert_held(cell):
    assert cell["during_step"], f"the other thread never ran during the step: {cell}"
    assert cell["mutation"] == EXPECTED[cell["kind"]], cell
    assert cell["same_bits"] and cell["error"] is None, cell


def test_1_the_slow_path_holds_a_buffer_export_for_the_step(r14):
    """Row 1: the binding declines (a first batch over 256 rows, a strided X) and `_intake`
    reads the inputs: `del y[:]` on array.array targets during the step was a SIGSEGV; now
    BufferError, as on the warm path."""
    for cell in _cells(r14, ("array.array", "memoryview", "Array"), ("declined", "strided X")):
        _assert_held(cell)


def test_2_a_torch_input_resized_during_a_step_is_harmless(r14):
    """Row 2: `X.resize_()` on a torch X during `train_steps` (GIL released) was a SIGSEGV on
    both paths: nothing pins a tensor's storage. The step now reads a copy made with the GIL
    held, so the resize succeeds and the step gives the bits of the values as they were."""
    for cell in _cells(r14, ("torch",)):
        _assert_held(cell)


def test_2_torch_inputs_read_for_reading_are_copied_and_optimizer_tensors_are_not():
    """The rule behind row 2's fix, per entry: the trainers' X and targets, `matmul` and
    `cross_entropy` operands are copied (with the GIL held); an optimizer reads its
    parameters and gradients in place, so its aliasing check still sees their memory."""
    torch = pytest.importorskip("torch")
    from mojolearn._buffers import intake as _intake

    t = torch.arange(12.0).reshape(3, 4)
    keep, address, shape = _intake.borrowed_f32(t, pin=True)
    assert type(keep) is bytearray and address != t.data_ptr() and shape == (3, 4)
    assert bytes(keep) == struct.pack("<12f", *t.flatten().tolist())  # NumPy-free (the pass)
    assert _intake.borrowed_f32(t)[:2] == (t, t.data_ptr())
    assert _intake.borrowed_f32(t, writable=True, pin=True)[:2] == (t, t.data_ptr())
    keep, address, _ = _intake.labels(torch.tensor([0, 1, 2]), 3, "y")
    assert type(keep) is bytearray
    p = torch.ones(4)
    with pytest.raises(ValueError, match=r"grads\[0\] and params\[0\] share memory"):
        ml.SGD([p], lr=0.1).step([p])


def test_r14_every_kind_and_path(r14):
    cells, seconds = r14
    for cell in cells:
        _assert_held(cell)
    assert len(cells) == len(KINDS) * len(PATHS) - 1
    record(
        "R14_inputs_mutated",
        cells=len(cells),
        kinds=len(KINDS),
        paths=len(PATHS),
        refused=sum(c["mutation"] in ("BufferError", "ValueError") for c in cells),
        harmless=sum(c["mutation"] == "done" for c in cells),
        crashes=0,
        same_bits=sum(c["same_bits"] for c in cells),
        seconds=round(seconds, 1),
    )


# -- R15 (row 3): per-type state never poisoned ------------------------------------------------
#
# A sequence is a refused object, then an accepted one of the same type. In one child each
# runs on an empty type cache ("first": the refused object is the first of its type seen), in
# another in the other order ("after": accepted first). The accepted outcome must equal what
# a process that never saw the refusal gives, and the refusal must read the same in both
# orders: what a type's first object was decides nothing.


def _fake_jax():
    """A JAX-like type: a read-only buffer-protocol array whose `__dlpack__`, like jax.Array's,
    carries no read-only flag; a 'deleted' one exports neither a buffer nor DLPack."""
    import numpy as np

    class FakeJax(np.ndarray):
        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            return np.ndarray.__dlpack__(self._alias)  # the writable memory, unflagged

    def live():
        base = np.ones(4, np.float32)
        a = base.view(FakeJax)
        a._alias, a.flags.writeable = base, False
        return a

    def dead():
        base = np.array(["2020-01-01"], "M8[D]")
        a = base.view(FakeJax)
        a._alias = base
        return a

    return live, dead


def _net():
    return ml.MLPTrainer([8, 3], data_schedule={"r15": 1}, seed=0)


def _sgd_outcome(param, grad):
    opt = ml.SGD([param], lr=0.5)
    opt.step([grad])
    return ml.Array.from_buffer(param).tobytes().hex()


def _read_only(a):
    a.flags.writeable = False
    return a


def _sequences():
    """name -> (refused, accepted): two thunks over objects of one type (torch imported only
    by the thunks that use it)."""
    import array
    import importlib.util

    import numpy as np

    rng = np.random.default_rng(15)
    X = rng.random((5, 8), dtype=np.float32)
    y = np.array([0, 1, 2, 1, 0])
    step = lambda X_, y_: _net().train_step(X_, y_)["loss"]  # noqa: E731
    live, dead = _fake_jax()
    seqs = {
        "NumPy datetime64 X, then F-order float32 X and uint8 labels": (
            lambda: step(np.array(["2020-01-01"] * 40, "M8[D]").reshape(5, 8), y),
            lambda: step(np.asfortranarray(X), y.astype(np.uint8)),
        ),
        # The live one is refused too, as read-only: as in a process that never saw the first.
        "deleted JAX-like param, then a live (read-only) one": (
            lambda: _sgd_outcome(dead(), np.ones(1, np.float32)),
            lambda: _sgd_outcome(live(), np.ones(4, np.float32)),
        ),
        "NumPy read-only param, then a writable one": (
            lambda: _sgd_outcome(_read_only(np.ones(3, np.float32)), np.ones(3, np.float32)),
            lambda: _sgd_outcome(np.ones(3, np.float32), np.ones(3, np.float32)),
        ),
        "NumPy 9-dimensional operand, then a 2-dimensional one": (
            lambda: ml.matmul(np.zeros((1,) * 9, np.float32), np.zeros((1, 1), np.float32)),
            lambda: ml.matmul(X, X.T).tobytes().hex(),
        ),
        "array.array float64 labels, then int64 ones": (
            lambda: step(X, array.array("d", [0.0, 1, 2, 1, 0])),
            lambda: step(X, array.array("q", [0, 1, 2, 1, 0])),
        ),
        "memoryview read-only param, then a writable one": (
            lambda: _sgd_outcome(
                memoryview(bytearray(12)).cast("f").toreadonly(), array.array("f", [1] * 3)
            ),
            lambda: _sgd_outcome(memoryview(bytearray(12)).cast("f"), array.array("f", [1] * 3)),
        ),
        "Array int64 X, then a float32 one": (
            lambda: step(ml.Array.from_list(list(range(40)), "<i8").reshape((5, 8)), y),
            lambda: step(ml.Array.from_buffer(X).copy(), y),
        ),
    }
    if importlib.util.find_spec("torch") is None:
        return seqs

    def tensor(values, **kw):
        import torch

        return torch.tensor(values, **kw)

    def gone():
        t = tensor(X)
        t.untyped_storage().resize_(0)
        return t

    def int8():
        import torch

        return torch.int8

    seqs.update(
        {
            "torch tensor that requires grad, then a detached one": (
                lambda: step(tensor(X, requires_grad=True), tensor(y)),
                lambda: step(tensor(X), tensor(y)),
            ),
            "torch tensor whose storage is gone, then a live strided one": (
                lambda: step(gone(), tensor(y)),
                lambda: step(tensor(X).t().contiguous().t(), tensor(y, dtype=int8())),
            ),
        }
    )
    return seqs


def _outcome(thunk):
    try:
        return ["ok", thunk()]
    except Exception as exc:
        return ["refused", type(exc).__name__, str(exc)]


def _r15_main(mode):
    """mode "first": each sequence with the refused object first, on a type cache emptied
    before it (as a fresh process has it: `_reader._kinds` is the per-type state); "after":
    each with the accepted object first, then the refused one."""
    from mojolearn._buffers import reader as _reader

    for seq, (refused, accepted) in _sequences().items():
        if mode == "first":
            _reader._kinds.clear()
            r, a = _outcome(refused), _outcome(accepted)
        else:
            a = _outcome(accepted)
            r = _outcome(refused)
        print(json.dumps({"sequence": seq, "refused": r, "accepted": a}), flush=True)


def test_3_and_r15_a_refused_first_object_decides_nothing_for_its_type():
    """Row 3: `_reader._kind` cached how a type is read from its first object, so a refused
    datetime64 array made NumPy arrays DLPack-only (F-order X and uint8 labels then refused)
    and a deleted JAX-like array made live ones writable (SGD wrote into them). Now the type
    alone decides."""
    pytest.importorskip("numpy")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        first, after = (
            {d["sequence"]: d for d in _lines(proc)}
            for proc in pool.map(lambda mode: _child("r15", mode), ("first", "after"))
        )
    assert list(first) == list(after) == list(_sequences())
    for name, f in first.items():
        a = after[name]
        assert f["refused"][0] == "refused", (name, f)
        assert f["accepted"][0] == ("refused" if "read-only) one" in name else "ok"), (name, f)
        assert f["accepted"] == a["accepted"], (name, f, a)  # as a process that never refused
        assert f["refused"] == a["refused"], (name, f, a)  # the refusal reads the same
    record(
        "R15_type_state",
        sequences=len(first),
        poisoned=0,
        seconds=round(time.perf_counter() - t0, 1),
    )


# -- row 4: torch labels of any integer dtype, strided ones too --------------------------------


def test_4_torch_labels_of_any_integer_dtype_are_accepted_like_numpy():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    X = torch.rand(6, 8, generator=torch.Generator().manual_seed(4))
    labels = [0, 1, 2, 0, 1, 2]

    def step(y):
        t = _net()
        return t.train_step(X, y)["loss"], t.state_hash()

    want = step(ml.Array.from_list(labels, "<i4"))
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        assert step(torch.tensor(labels, dtype=dtype)) == want, dtype
    wide = torch.tensor([v for c in labels for v in (c, 9)])
    assert step(wide[::2]) == want  # a strided int64 view, copied as NumPy's twin is
    assert step(np.array([v for c in labels for v in (c, 9)])[::2]) == want
    # Values out of range are still refused by name, never silently wrapped.
    with pytest.raises(ValueError, match=r"targets must be classes 0\.\.2; targets\[1\] = 200"):
        _net().train_step(X, torch.tensor([0, 200, 1, 2, 0, 1], dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"targets must be classes 0\.\.2"):
        _net().train_step(X, torch.tensor([0, 1 << 40, 1, 2, 0, 1]))


# -- row 14: DLPack export arguments -----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"max_version": ()}, "max_version"),
        ({"max_version": "x"}, "max_version"),
        ({"max_version": 1}, "max_version"),
        ({"max_version": (1, 0, 0)}, "max_version"),
        ({"max_version": (1.0, 0)}, "max_version"),
        ({"dl_device": 5}, "dl_device"),
        ({"dl_device": "cpu"}, "dl_device"),
        ({"dl_device": (1,)}, "dl_device"),
    ],
)
def test_14_dlpack_export_arguments_are_refused_by_name(kwargs, name):
    with pytest.raises(TypeError, match=rf"Array.__dlpack__: {name} must be None or a tuple"):
        ml.zeros((2, 2)).__dlpack__(**kwargs)


def test_14_valid_dlpack_export_arguments_still_work():
    np = pytest.importorskip("numpy")
    a = ml.Array.from_list([[1.0, 2.0]])
    for kwargs in ({"max_version": (1, 0)}, {"max_version": [1, 2]}, {"dl_device": (1, 0)}):
        assert a.__dlpack__(**kwargs) is not None
    assert np.from_dlpack(a).tolist() == [[1.0, 2.0]]
    with pytest.raises(BufferError, match=r"dl_device=\(2, 0\) would need a copy"):
        a.__dlpack__(dl_device=(2, 0))


# -- row 15: a null data pointer ---------------------------------------------------------------


def test_15_a_tensor_whose_storage_is_gone_is_refused_by_name():
    torch = pytest.importorskip("torch")
    t = torch.zeros(32, 8)
    t.untyped_storage().resize_(0)
    assert t.data_ptr() == 0
    with pytest.raises(ValueError, match=r"from_dlpack: the tensor has 256 elements .* null data"):
        ml.from_dlpack(t)
    with pytest.raises(ValueError, match=r"from_dlpack: .*null data"):
        ml.Array.from_buffer(t)
    small = ml.SmallMLPTrainer(*_spec.init_small_mlp(0), data_schedule={"a": 1})
    for net in (_net(), small):
        with pytest.raises(ValueError, match=r"X: the tensor's memory is gone .*null data"):
            net.train_step(t, torch.zeros(32, dtype=torch.int64))
        assert net.step_ == 0
    with pytest.raises(ValueError, match=r"a: the tensor's memory is gone"):
        ml.matmul(t, torch.ones(8, 2))


# -- row 16: a user's int is not an address ----------------------------------------------------


def _trainers():
    return [_net(), ml.SmallMLPTrainer(*_spec.init_small_mlp(0), data_schedule={"a": 1})]


def test_16_an_int_for_x_or_targets_is_a_type_error_naming_it():
    import array

    X = memoryview(array.array("f", [0.5] * 32)).cast("B").cast("f", (4, 8))
    y = array.array("i", [0, 1, 2, 0])
    for net in _trainers():
        api = type(net).__name__
        x_msg = rf"{api}: X must be a float32 buffer of shape \(batch, 8\).*got int"
        for call in (
            lambda: net.train_step(12345, y),
            lambda: net.predict_logits(5),
            lambda: net.loss_and_grads(5, y),
        ):
            with pytest.raises(TypeError, match=x_msg):
                call()
        for X_ in (
            X,
            ml.Array.from_list([0.5] * 32, "<f4").reshape((4, 8)),
        ):  # an object X, or an Array's address
            for bad, kind in ((678, "int"), (True, "bool")):
                with pytest.raises(
                    TypeError, match=rf"{api}: targets must be an integer buffer .*got {kind}"
                ):
                    net.train_step(X_, bad)
        if api == API:
            with pytest.raises(TypeError, match=x_msg):
                net.train_steps(12345, y, 2)
        assert net.step_ == 0


# -- also seen: a strided X costs one copy -----------------------------------------------------


def test_a_strided_x_is_copied_in_the_binding_with_the_bits_of_c_order():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(16)
    X = rng.random((64, 8), dtype=np.float32)
    y = rng.integers(0, 3, 64)
    wide = np.zeros((64, 24), np.float32)
    wide[:, 5::2][:, :8] = X

    def step(X_, y_=y):
        t = _net()
        return t.train_step(X_, y_)["loss"], t.state_hash()

    want = step(X)
    reversed_rows = np.ascontiguousarray(X[::-1])[::-1]  # negative strides
    for strided in (
        np.asfortranarray(X),
        wide[:, 5::2][:, :8],
        reversed_rows,
        torch.from_numpy(np.asfortranarray(X)),  # a strided tensor: copied as NumPy's is
        ml.from_dlpack(X).reshape(64, 8),
    ):
        assert step(strided) == want
    assert step(X, y.astype(np.uint16)[::1]) == want
    # matmul and cross_entropy copy the same way.
    assert ml.matmul(np.asfortranarray(X), X.T).tobytes() == ml.matmul(X, X.T).tobytes()
    assert ml.cross_entropy(torch.from_numpy(X).t().contiguous().t(), torch.tensor(y)) == (
        ml.cross_entropy(X, y.astype(np.int32))
    )


def test_a_declined_x_costs_a_copy_and_no_more():
    """At f4f8d88 an F-order X was copied value by value in Python: ~100x a step at [784, 16,
    10] batch 256. Now one copy in the binding: well under 3x (best of 5, interleaved)."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(17)
    X = rng.random((256, 784), dtype=np.float32)
    XF = np.asfortranarray(X)
    y = rng.integers(0, 10, 256).astype(np.int32)
    net = ml.MLPTrainer([784, 16, 10], data_schedule={"a": 1}, seed=0)
    best = {"C": float("inf"), "F": float("inf")}
    for _ in range(5):
        for key, X_ in (("C", X), ("F", XF)):
            t0 = time.perf_counter()
            net.train_step(X_, y)
            best[key] = min(best[key], time.perf_counter() - t0)
    assert best["F"] < 3 * best["C"] + 0.002, best


if __name__ == "__main__":
    if sys.argv[1] == "r14":
        _r14_main()
    else:
        _r15_main(*sys.argv[2:])
