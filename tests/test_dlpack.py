"""DLPack both ways (issue 17): `Array.__dlpack__` / `__dlpack_device__` and
`mojolearn.from_dlpack`, against NumPy and torch when installed: shared memory (writes visible
both ways, also after the last name of the producer is deleted), every refusal named, and the
producer's memory released once the last view goes."""

import gc
import weakref

import mojolearn as ml
import pytest


def _np():
    return pytest.importorskip("numpy")


def _torch():
    return pytest.importorskip("torch")


def test_numpy_from_dlpack_shares_an_arrays_memory_and_outlives_it():
    np = _np()
    a = ml.Array.from_list([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    n = np.from_dlpack(a)
    assert n.shape == (2, 3) and n.dtype == np.float32
    n[0, 1] = 9.0
    assert a[0, 1] == 9.0
    a[1, 2] = -7.5
    assert n[1, 2] == -7.5
    del a
    gc.collect()
    n[1, 0] = 11.0  # the exported memory stays alive with its consumer
    assert n.tolist() == [[1.0, 9.0, 3.0], [11.0, 5.0, -7.5]]
    ints = ml.Array.from_list([5, 6, 7], "<i8")
    assert np.from_dlpack(ints).dtype == np.int64 and np.from_dlpack(ints).tolist() == [5, 6, 7]


def test_torch_from_dlpack_shares_an_arrays_memory_and_outlives_it():
    torch = _torch()
    a = ml.Array.from_list([0.5, 1.5, 2.5, 3.5], "<f4").reshape((2, 2))
    t = torch.from_dlpack(a)
    assert t.dtype == torch.float32 and tuple(t.shape) == (2, 2)
    t[1, 1] = 42.0
    assert a[1, 1] == 42.0
    a[0, 0] = -1.0
    assert t[0, 0].item() == -1.0
    del a
    gc.collect()
    t += 1
    assert t.tolist() == [[0.0, 2.5], [3.5, 43.0]]


def test_from_dlpack_shares_numpy_and_torch_memory_and_keeps_it_alive():
    np, torch = _np(), _torch()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = ml.from_dlpack(x)
    assert a.shape == (2, 3) and a.dtype == "<f4"
    x[0, 0] = 100.0
    assert a[0, 0] == 100.0
    a[1, 1] = -3.0
    assert x[1, 1] == -3.0
    del x
    gc.collect()
    assert a.tolist() == [[100.0, 1.0, 2.0], [3.0, -3.0, 5.0]]
    t = torch.arange(5, dtype=torch.int32)
    b = ml.from_dlpack(t)
    t[4] = 77
    assert b.dtype == "<i4" and b.tolist() == [0, 1, 2, 3, 77]
    del t
    gc.collect()
    assert b.tolist() == [0, 1, 2, 3, 77]
    # Kernels read it like any Array.
    assert ml.matmul(a, ml.from_dlpack(np.ones((3, 1), np.float32))).tolist() == [[103.0], [5.0]]


def test_the_producer_is_released_when_the_last_view_goes():
    np = _np()

    class Tracked(np.ndarray):
        pass

    x = np.ones(4, np.float32).view(Tracked)
    gone = weakref.ref(x)
    a = ml.from_dlpack(x)
    v = a.reshape(2, 2)
    del x, a
    gc.collect()
    assert gone() is not None, "released while a view still reads it"
    del v
    gc.collect()
    assert gone() is None, "the producer's deleter never ran"


def test_read_only_buffers_stay_read_only():
    np = _np()
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    a = ml.from_dlpack(ro)
    assert a.readonly
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 2.0
    import array

    r = ml.Array.from_buffer(memoryview(array.array("f", [1.0, 2.0])).toreadonly())
    assert r.readonly
    with pytest.raises(BufferError, match="read-only Array can only be exported"):
        r.__dlpack__()  # a legacy consumer could not know it must not write
    assert np.from_dlpack(r).flags.writeable is False  # DLPack 1.0 carries the flag


def test_copy_true_exports_an_independent_copy():
    np = _np()
    a = ml.Array.from_list([1.0, 2.0])
    c = np.from_dlpack(a, copy=True)
    c[0] = 50.0
    assert a[0] == 1.0


@pytest.mark.parametrize(
    "what,make,message",
    [
        (
            "strided",
            lambda np, torch: np.ones((4, 4), np.float32)[:, ::2],
            r"not C-contiguous \(shape \(4, 2\), strides \(4, 2\)",
        ),
        ("float16", lambda np, torch: np.ones(3, np.float16), r"dtype float16 is not supported"),
        ("uint8", lambda np, torch: np.ones(3, np.uint8), r"dtype uint8 is not supported"),
        (
            "bool",
            lambda np, torch: torch.ones(2, dtype=torch.bool),
            r"dtype bool8 is not supported",
        ),
        ("transposed torch", lambda np, torch: torch.ones(3, 2).t(), r"not C-contiguous"),
    ],
)
def test_from_dlpack_refusals_say_which(what, make, message):
    np, torch = _np(), _torch()
    with pytest.raises(ValueError, match=message):
        ml.from_dlpack(make(np, torch))


def test_non_cpu_and_non_dlpack_objects_are_refused_by_name():
    class OnGpu:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):  # never reached
            raise AssertionError

    with pytest.raises(
        ValueError,
        match=r"lives on CUDA device 0; mojolearn.from_dlpack takes "
        r"CPU memory only",
    ):
        ml.from_dlpack(OnGpu())
    with pytest.raises(TypeError, match=r"from_dlpack: list does not export DLPack"):
        ml.from_dlpack([1.0, 2.0])


def test_export_refusals():
    a = ml.Array.from_list([1.0])
    assert a.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match="stream must be None"):
        a.__dlpack__(stream=1)
    with pytest.raises(BufferError, match=r"live on the CPU"):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="copy must be None, True or False"):
        a.__dlpack__(copy="yes")
    # An unconsumed capsule frees its export: nothing is kept once it goes.
    from mojolearn._buffers import dlpack as _dlpack

    before = len(_dlpack._LIVE)
    capsule = a.__dlpack__()
    assert len(_dlpack._LIVE) == before + 1
    del capsule
    gc.collect()
    assert len(_dlpack._LIVE) == before
