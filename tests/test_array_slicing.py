"""`Array` slicing and `.numpy()` (issue 36): a slice gives a fresh Array holding exactly what
NumPy's slice of the same values holds (any axes, negative indices and steps, empty results);
`.numpy()` shares the memory, and without NumPy says what to install."""

import random

import mojolearn as ml
import pytest

from .helpers import run_python


def _random_key(rng, shape):
    key = []
    for d in shape[: rng.randrange(1, len(shape) + 1)]:
        if rng.random() < 0.25:
            key.append(rng.randrange(-d, d))
        else:
            bound = lambda: rng.choice([None, rng.randrange(-d - 2, d + 3)])  # noqa: E731
            key.append(slice(bound(), bound(), rng.choice([None, 1, 2, -1, -3])))
    if all(type(k) is int for k in key):
        key[-1] = slice(None)
    return tuple(key) if len(key) > 1 or rng.random() < 0.5 else key[0]


@pytest.mark.parametrize("dtype", ["<f4", "<i4", "<f8", "<i8"])
def test_slices_hold_numpys_values(dtype):
    np = pytest.importorskip("numpy")
    rng = random.Random()
    for _ in range(200):
        shape = tuple(rng.randrange(1, 6) for _ in range(rng.randrange(1, 4)))
        ref = np.asarray(np.random.default_rng(rng.randrange(1 << 32)).normal(size=shape) * 100)
        ref = ref.astype(np.dtype(dtype))
        a = ml.Array.from_buffer(ref.copy())
        key = _random_key(rng, shape)
        got, want = a[key], ref[key]
        assert type(got) is ml.Array and got.dtype == dtype, key
        assert got.shape == want.shape, key
        assert got.tobytes() == np.ascontiguousarray(want).tobytes(), key


def test_a_slice_is_a_copy_and_integers_stay_a_view():
    a = ml.Array.from_list([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    head = a[:1]
    head[0, 0] = 9.0
    assert a[0, 0] == 1.0 and head.tolist() == [[9.0, 2.0, 3.0]]
    row = a[1]
    row[2] = 7.0
    assert a[1, 2] == 7.0  # an integer index views, as before
    assert a[1:, ::-1].tolist() == [[7.0, 5.0, 4.0]]
    assert a[:, 1].tolist() == [2.0, 5.0] and a[-1, -2:].tolist() == [5.0, 7.0]
    assert a[:, 1:1].shape == (2, 0) and a[5:].shape == (0, 3)
    preds = ml.MLPTrainer([3, 4, 2], seed=0).predict(a[:, :3])
    assert preds[:1].tolist() == [preds[0]]


def test_bad_slices_are_refused_by_name():
    a = ml.Array((4, 3))
    for key, error, words in (
        ((slice(None), 3), IndexError, "index 3 is out of bounds for axis 1 with size 3"),
        ((slice(None),) * 3, IndexError, "too many indices"),
        ((Ellipsis, slice(1, None)), TypeError, "ints or slices, got ellipsis"),
        ((slice(0, 2), 1.0), TypeError, "ints or slices, got float"),
        (slice(0.5, None), TypeError, "slice indices must be integers"),
    ):
        with pytest.raises(error, match=words):
            a[key]
    with pytest.raises(TypeError, match="Array indices must be ints, got slice"):  # no slice writes
        a[:2] = 1.0


def test_numpy_shares_the_memory():
    np = pytest.importorskip("numpy")
    a = ml.Array.from_list([[1, 2], [3, 4]], "<i8")
    n = a.numpy()
    assert isinstance(n, np.ndarray) and n.dtype == np.int64 and n.shape == (2, 2)
    n[1, 0] = 30
    assert a[1, 0] == 30
    a[0, 1] = 20
    assert n[0, 1] == 20


def test_numpy_without_numpy_names_what_to_install():
    out = run_python(
        "import mojolearn as ml\n"
        "a = ml.Array.from_list([1.0, 2.0])\n"
        "print(a[::-1].tolist())\n"
        "try:\n"
        "    a.numpy()\n"
        "except ImportError as e:\n"
        "    print(e)\n",
        block_numpy=True,
    )
    assert out.splitlines()[0] == "[2.0, 1.0]"
    assert "Array.numpy() needs NumPy" in out and "pip install numpy" in out
