"""predict, predict_proba and evaluate on both trainers (mojolearn/_mlp/infer.py), on trained
weights and fresh random data: predict is the argmax of predict_logits (ties to the lowest
class); predict_proba is a softmax within 1e-6 of binary64 and, in identical mode, the
pure-Python reference's bits; evaluate's loss is the loss a step reports and its metrics are
the textbook (and scikit-learn's, when installed) definitions; more rows than `max_rows` give
each chunk's results; any input kind; every refusal names its argument and changes nothing;
no state changes; the trainer's lock is held. The core tests need no NumPy."""

import array
import copy
import math
import random
import struct
import threading

import mojolearn as ml
import pytest
from mojolearn._runtime import backend as _backend

from tests.helpers import run_python
from tests.reference import loss as R
from tests.reference.f32 import f32

identical_only = pytest.mark.skipif(
    ml.numeric_mode_used() != "identical",
    reason="bit equality with the reference is identical mode's",
)

SIZES = {"small": [8, 16, 3], "mlp": [6, 12, 9, 5]}


def hexes(values):
    return [struct.pack("<f", v).hex() for v in values]


def make(kind, seed):
    """A trainer of `kind` with weights trained a few steps on random data."""
    if kind == "small":
        t = ml.SmallMLPTrainer(*ml.init_small_mlp(seed), data_schedule={"seed": 1}, lr=0.05)
    else:
        t = ml.MLPTrainer(SIZES[kind], seed=seed, data_schedule={"seed": 1}, lr=0.05)
    rng = random.Random(seed)
    for _ in range(5):
        t.train_step(*batch(rng, 32, t.layer_sizes))
    return t


def batch(rng, rows, sizes):
    X = ml.Array.from_list(
        [[f32(rng.uniform(-3, 3)) for _ in range(sizes[0])] for _ in range(rows)]
    )
    y = ml.Array.from_list([rng.randrange(sizes[-1]) for _ in range(rows)], "<i4")
    return X, y


def first_argmax(row):
    best = 0
    for j, v in enumerate(row):
        if v > row[best]:
            best = j
    return best


def both(f):
    return pytest.mark.parametrize("kind", ["small", "mlp"])(f)


@both
def test_predict_is_the_argmax_of_predict_logits(seed, kind):
    t = make(kind, seed % 1000)
    X, _ = batch(random.Random(seed), 50, t.layer_sizes)
    got = t.predict(X)
    assert got.dtype == "<i4" and got.shape == (50,)
    assert got.tolist() == [first_argmax(r) for r in t.predict_logits(X).tolist()], seed


def test_ties_go_to_the_lowest_class():
    # W = 0: every logit is its bias, so the classes tie exactly where the biases do.
    X = ml.Array.from_list([[1.0, -2.0, 3.0], [0.5, 0.25, 0.0]])
    for bias, want in [([0.0, 1.0, 1.0], 1), ([2.0, 2.0, 2.0, 2.0], 0), ([-0.0, 0.0], 0)]:
        weights = [ml.zeros((len(bias), 3)), ml.Array.from_list(bias)]
        t = ml.MLPTrainer([3, len(bias)], weights, data_schedule={"a": 1})
        assert t.predict(X).tolist() == [want, want]


def test_ties_agree_with_torch_argmax():
    torch = pytest.importorskip("torch")
    t = ml.MLPTrainer(
        [3, 4], [ml.zeros((4, 3)), ml.Array.from_list([0.5, 3.0, 3.0, 3.0])], data_schedule={"a": 1}
    )
    X = ml.Array.from_list([[1.0, 2.0, 3.0]] * 3)
    logits = torch.tensor(t.predict_logits(X).tolist())
    assert t.predict(X).tolist() == torch.argmax(logits, dim=1).tolist() == [1, 1, 1]


@both
def test_predict_proba_is_a_softmax_within_1e6_of_binary64(seed, kind):
    t = make(kind, seed % 1000)
    X, _ = batch(random.Random(seed), 40, t.layer_sizes)
    p = t.predict_proba(X)
    classes = t.layer_sizes[-1]
    assert p.dtype == "<f4" and p.shape == (40, classes)
    for z, row in zip(t.predict_logits(X).tolist(), p.tolist()):
        mx = max(z)
        e = [math.exp(v - mx) for v in z]
        ref = [v / math.fsum(e) for v in e]
        assert all(abs(a - b) <= 1e-6 for a, b in zip(row, ref)), (seed, row, ref)
        assert abs(math.fsum(row) - 1.0) <= 1e-6, seed
        assert all(0.0 <= v <= 1.0 for v in row)


@identical_only
@both
def test_predict_proba_equals_the_reference_bit_for_bit(seed, kind):
    t = make(kind, seed % 1000)
    X, _ = batch(random.Random(seed), 40, t.layer_sizes)
    got = t.predict_proba(X).tolist()
    for z, row in zip(t.predict_logits(X).tolist(), got):
        assert hexes(row) == hexes(R.softmax_row(z)), seed


@identical_only
def test_softmax_entry_has_the_cross_entropy_gradients_bits(seed):
    # Off the target, d(sum of row losses)/dz_j = p_j - 0: the probabilities' bits.
    rng = random.Random(seed)
    rows, classes = 30, 11
    z = ml.Array.from_list([[rng.gauss(0, 4) for _ in range(classes)] for _ in range(rows)])
    y = ml.Array.from_list([rng.randrange(classes) for _ in range(rows)], "<i4")
    p = ml.zeros((rows, classes))
    _backend.binding().softmax([z._addr, p._addr], [rows, classes])
    _, g = ml.cross_entropy(z, y, reduction="sum", return_grad=True)
    for r, (pr, gr) in enumerate(zip(p.tolist(), g.tolist())):
        off = [j for j in range(classes) if j != y[r]]
        assert hexes([pr[j] for j in off]) == hexes([gr[j] for j in off]), seed


def reference_metrics(truth, pred, classes):
    """Textbook definitions from the pairs: precision = tp/(tp+fp), recall = tp/(tp+fn),
    f1 = their harmonic mean; 0.0 for 0/0."""
    out = {"precision": [], "recall": [], "f1": [], "support": []}
    confusion = [[sum(1 for t, p in zip(truth, pred) if (t, p) == (i, j)) for j in range(classes)]
                 for i in range(classes)]  # fmt: skip
    for c in range(classes):
        tp = sum(1 for t, p in zip(truth, pred) if t == p == c)
        fp = sum(1 for t, p in zip(truth, pred) if p == c != t)
        fn = sum(1 for t, p in zip(truth, pred) if t == c != p)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out["precision"].append(precision)
        out["recall"].append(recall)
        out["f1"].append(f1)
        out["support"].append(tp + fn)
    accuracy = sum(1 for t, p in zip(truth, pred) if t == p) / len(truth)
    return accuracy, out, confusion


def assert_close_lists(a, b, what):
    assert len(a) == len(b) and all(math.isclose(u, v, rel_tol=1e-12) for u, v in zip(a, b)), (
        what,
        a,
        b,
    )


def skewed(rng, rows, sizes):
    """X and labels that leave the last class without rows (support 0, recall 0/0)."""
    X, _ = batch(rng, rows, sizes)
    y = ml.Array.from_list([rng.randrange(sizes[-1] - 1) for _ in range(rows)], "<i4")
    return X, y


@both
def test_evaluate_matches_the_pure_python_reference(seed, kind):
    t = make(kind, seed % 1000)
    X, y = skewed(random.Random(seed), 60, t.layer_sizes)
    out = t.evaluate(X, y)
    classes = t.layer_sizes[-1]
    pred = t.predict(X).tolist()
    accuracy, per_class, confusion = reference_metrics(y.tolist(), pred, classes)
    assert set(out) == {"loss", "accuracy", "per_class", "confusion"}
    assert math.isclose(out["accuracy"], accuracy, rel_tol=1e-15)
    assert out["confusion"] == confusion
    assert out["per_class"]["support"] == per_class["support"]
    assert all(type(v) is int for v in out["per_class"]["support"] + sum(confusion, []))
    for key in ("precision", "recall", "f1"):
        assert_close_lists(out["per_class"][key], per_class[key], key)
    assert out["per_class"]["recall"][-1] == 0.0 and out["per_class"]["support"][-1] == 0
    want = ml.cross_entropy(t.predict_logits(X), y)
    assert out["loss"] == want, seed


def test_evaluate_zero_divisions_give_zero():
    # Biases 0, 5, 0 with W = 0: class 1 is always predicted, classes 0 and 2 never.
    t = ml.MLPTrainer(
        [2, 3], [ml.zeros((3, 2)), ml.Array.from_list([0.0, 5.0, 0.0])], data_schedule={"a": 1}
    )
    out = t.evaluate(ml.zeros((4, 2)), ml.Array.from_list([0, 0, 1, 0], "<i4"))
    assert out["per_class"] == {
        "precision": [0.0, 0.25, 0.0],
        "recall": [0.0, 1.0, 0.0],
        "f1": [0.0, 0.4, 0.0],
        "support": [3, 1, 0],
    }
    assert out["confusion"] == [[0, 3, 0], [0, 1, 0], [0, 0, 0]] and out["accuracy"] == 0.25


@both
def test_evaluate_matches_scikit_learn(seed, kind):
    metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is not installed")
    t = make(kind, seed % 1000)
    X, y = skewed(random.Random(seed), 80, t.layer_sizes)
    out = t.evaluate(X, y)
    labels = list(range(t.layer_sizes[-1]))
    truth, pred = y.tolist(), t.predict(X).tolist()
    p, r, f, s = metrics.precision_recall_fscore_support(
        truth, pred, labels=labels, zero_division=0
    )
    assert_close_lists(out["per_class"]["precision"], list(p), "precision")
    assert_close_lists(out["per_class"]["recall"], list(r), "recall")
    assert_close_lists(out["per_class"]["f1"], list(f), "f1")
    assert out["per_class"]["support"] == [int(v) for v in s]
    assert out["confusion"] == metrics.confusion_matrix(truth, pred, labels=labels).tolist()
    assert math.isclose(out["accuracy"], metrics.accuracy_score(truth, pred), rel_tol=1e-15)


@identical_only
@both
def test_evaluate_loss_is_the_loss_a_step_reports(seed, kind):
    t = make(kind, seed % 1000)
    X, y = batch(random.Random(seed), 37, t.layer_sizes)
    loss = t.evaluate(X, y)["loss"]
    reference = R.cross_entropy(t.predict_logits(X).tolist(), y.tolist())[0]
    assert hexes([loss]) == hexes([reference]), seed
    assert hexes([loss]) == hexes([copy.copy(t).train_step(X, y)["loss"]]), seed


def chunked(t, n):
    """(X, y) of n rows and the logits of X computed chunk by chunk of `max_rows` rows."""
    rng = random.Random(n)
    X, y = batch(rng, n, t.layer_sizes)
    rows, step = X.tolist(), t.max_rows
    logits = []
    for i in range(0, n, step):
        logits += t.predict_logits(ml.Array.from_list(rows[i : i + step])).tolist()
    return X, y, logits


@both
def test_more_rows_than_max_rows_give_each_chunks_results(seed, kind):
    t = make(kind, seed % 1000)
    if kind == "mlp":
        # MLPTrainer's bound is ~10**6 rows for so small a network: lower it to test chunking.
        t._max_rows = 7
    n = 2 * t.max_rows + 41
    X, y, logits = chunked(t, n)
    assert t.predict(X).tolist() == [first_argmax(r) for r in logits]
    z, probs = ml.Array.from_list(logits), ml.zeros((n, t.layer_sizes[-1]))
    _backend.binding().softmax([z._addr, probs._addr], list(probs.shape))
    assert hexes(t.predict_proba(X)._mv.tolist()) == hexes(probs._mv.tolist())
    out = t.evaluate(X, y)
    assert out["loss"] == ml.cross_entropy(z, y)
    assert sum(out["per_class"]["support"]) == n
    # Each row alone has the same bits.
    rows = X.tolist()
    for i in random.Random(seed).sample(range(n), 5):
        assert hexes(t.predict_logits(ml.Array.from_list([rows[i]])).tolist()[0]) == hexes(
            logits[i]
        )


def test_any_input_kind_gives_the_same_results(seed):
    t = make("mlp", seed % 1000)
    X, y = batch(random.Random(seed), 9, t.layer_sizes)
    want = (t.predict(X).tolist(), t.predict_proba(X).tolist(), t.evaluate(X, y))
    raw = array.array("f", X._mv.tolist())
    kinds = [
        (memoryview(raw).cast("B").cast("f", X.shape), array.array("q", y.tolist())),
        (ml.Array.from_buffer(raw).reshape(X.shape), memoryview(array.array("b", y.tolist()))),
    ]
    for x_in, y_in in kinds:
        assert t.predict(x_in).tolist() == want[0]
        assert t.predict_proba(x_in).tolist() == want[1]
        assert t.evaluate(x_in, y_in) == want[2]


def test_numpy_and_torch_inputs_give_the_same_results(seed):
    np = pytest.importorskip("numpy")
    t = make("small", seed % 1000)
    X, y = batch(random.Random(seed), 300, t.layer_sizes)  # more than max_rows
    want = (t.predict(X).tolist(), t.predict_proba(X).tolist(), t.evaluate(X, y))
    xn = np.asarray(X)
    strided = np.asfortranarray(xn)  # copied into C order by the intake
    inputs = [(xn, np.asarray(y).astype(np.int64)), (strided, np.asarray(y))]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        inputs.append((torch.from_numpy(xn.copy()), torch.from_numpy(np.asarray(y).copy())))
    for x_in, y_in in inputs:
        assert t.predict(x_in).tolist() == want[0]
        assert t.predict_proba(x_in).tolist() == want[1]
        assert t.evaluate(x_in, y_in) == want[2]


REFUSALS = [
    # (call, X, y, exception, message after "<API>: ")
    ("predict", lambda i: ml.zeros((3, i), "<i4"), None, TypeError, "X must be float32, got int32"),
    ("predict", lambda i: [[0.0] * i], None, TypeError, "X must be a float32 buffer of shape",
     "small"),
    ("predict_proba", lambda i: ml.zeros((3, i + 1)), None, ValueError,
     "X must have shape (batch, {i}), got (3, {j})"),
    ("predict_proba", lambda i: ml.zeros((i,)), None, ValueError, "X must have shape (batch, {i})"),
    ("predict", lambda i: ml.zeros((0, i)), None, ValueError, "X must have at least 1 row, got 0"),
    ("evaluate", lambda i: ml.zeros((3, i)), ml.zeros((3,)), TypeError,
     "y must hold integers, got float32"),
    ("evaluate", lambda i: ml.zeros((3, i)), [0, 1, 2], TypeError,
     "y must be an integer buffer of shape (3,), got list", "small"),
    ("evaluate", lambda i: ml.zeros((3, i)), [0, 1.0, 2], TypeError,
     "y must hold integers (class ids), got float 1.0", "mlp"),
    ("predict", lambda i: [[0.0] * i, [1e39] * i], None, ValueError,
     "X must fit in float32: example 1, element 0 is 1e+39", "mlp"),
    ("evaluate", lambda i: ml.zeros((3, i)), ml.zeros((4,), "<i4"), ValueError,
     "y must have shape (3,) to match X, got (4,)"),
    ("evaluate", lambda i: ml.zeros((3, i)), ml.Array.from_list([0, -1, 0], "<i4"), ValueError,
     "y must be classes 0..{c}; y[1] = -1"),
    ("evaluate", lambda i: ml.zeros((3, i)), ml.Array.from_list([0, 0, 99], "<i4"), ValueError,
     "y must be classes 0..{c}; y[2] = 99"),
    ("evaluate", lambda i: ml.zeros((3, i), "<f8"), ml.zeros((3,), "<i4"), TypeError,
     "X must be float32, got float64", "small"),
]  # fmt: skip


@both
@pytest.mark.parametrize("case", range(len(REFUSALS)))
def test_refusals_name_the_argument_and_change_nothing(kind, case):
    call, make_x, y, exc, message, *only = REFUSALS[case]
    if only and only[0] != kind:
        pytest.skip(f"a case of {only[0]} only (MLPTrainer rounds float64 and lists once)")
    t = make(kind, 3)
    i, c = t.layer_sizes[0], t.layer_sizes[-1] - 1
    before = t.state_hash()
    args = (make_x(i),) if y is None else (make_x(i), y)
    with pytest.raises(exc) as info:
        getattr(t, call)(*args)
    assert str(info.value).startswith(f"{type(t).__name__}: " + message.format(i=i, j=i + 1, c=c))
    assert t.state_hash() == before


@both
@pytest.mark.parametrize("rows", ["one batch", "chunks"])
def test_a_non_finite_x_is_refused_naming_its_flat_index(kind, rows):
    t = make(kind, 4)
    if rows == "chunks":
        t._max_rows = 5  # the refusal of a chunked X names the index in X, not in a chunk
    i = t.layer_sizes[0]
    X = ml.zeros((12, i))
    X[11, 1] = float("inf")
    before = t.state_hash()
    for call, args in [("predict", (X,)), ("predict_proba", (X,)),
                       ("evaluate", (X, ml.zeros((12,), "<i4")))]:  # fmt: skip
        with pytest.raises(ValueError) as info:
            getattr(t, call)(*args)
        want = f"{type(t).__name__}: X must be finite (flat index {11 * i + 1} is inf)"
        assert str(info.value) == want
    assert t.state_hash() == before


@pytest.mark.parametrize("entry,dtype", [("softmax", "<f4"), ("argmax", "<i4")])
def test_the_entries_refuse_bad_calls_before_writing(entry, dtype):
    call = getattr(_backend.binding(), entry)
    z = ml.Array.from_list([[0.0, 1.0], [2.0, float("-inf")]])
    out = ml.zeros((2, 2) if entry == "softmax" else (2,), dtype)
    with pytest.raises(ValueError, match=rf"{entry}: logits must be finite \(flat index 3 is -inf"):
        call([z._addr, out._addr], [2, 2])
    assert set(out._mv.tolist()) == {0}
    with pytest.raises(ValueError, match=f"{entry}: rows must be an integer in"):
        call([z._addr, out._addr], [0, 2])
    with pytest.raises(ValueError, match=f"{entry}: classes must be an integer in"):
        call([z._addr, out._addr], [1, 0])
    with pytest.raises(ValueError, match=f"{entry}: expected 2 params, got 1"):
        call([z._addr, out._addr], [1])


def test_the_entries_on_random_logits(seed):
    # softmax within 1e-6 of binary64 and argmax the first maximum, for 1 to 20 classes.
    rng = random.Random(seed)
    b = _backend.binding()
    for classes in range(1, 21):
        rows = rng.randrange(1, 9)
        values = [[rng.choice([rng.gauss(0, 4), 1.5]) for _ in range(classes)] for _ in range(rows)]
        z, p, labels = (
            ml.Array.from_list(values),
            ml.zeros((rows, classes)),
            ml.zeros((rows,), "<i4"),
        )
        b.softmax([z._addr, p._addr], [rows, classes])
        b.argmax([z._addr, labels._addr], [rows, classes])
        assert labels.tolist() == [first_argmax(r) for r in z.tolist()], seed
        for zr, pr in zip(z.tolist(), p.tolist()):
            e = [math.exp(v - max(zr)) for v in zr]
            assert all(abs(a - v / math.fsum(e)) <= 1e-6 for a, v in zip(pr, e)), seed


@both
def test_inference_changes_no_state(seed, kind):
    t = make(kind, seed % 1000)
    twin = copy.copy(t)
    rng = random.Random(seed)
    X, y = batch(rng, 20, t.layer_sizes)
    before = (t.state_hash(), t.step_, t.state_dict()["data_schedule"])
    t.predict(X)
    t.predict_proba(X)
    t.evaluate(X, y)
    assert (t.state_hash(), t.step_, t.state_dict()["data_schedule"]) == before
    X2, y2 = batch(rng, 20, t.layer_sizes)
    assert t.train_step(X2, y2)["loss"] == twin.train_step(X2, y2)["loss"]
    assert t.state_hash() == twin.state_hash()


@both
def test_inference_takes_the_trainers_lock(kind):
    t = make(kind, 5)
    X, y = batch(random.Random(5), 4, t.layer_sizes)
    for call, args in [("predict", (X,)), ("predict_proba", (X,)), ("evaluate", (X, y))]:
        done = threading.Event()
        worker = threading.Thread(target=lambda: (getattr(t, call)(*args), done.set()))
        with t._lock:
            worker.start()
            assert not done.wait(0.3), f"{call} ran while another thread held the lock"
        worker.join(30)
        assert done.is_set()


def test_the_per_operation_path_gives_the_same_results(seed, monkeypatch):
    t = make("mlp", seed % 1000)
    X, y = batch(random.Random(seed), 15, t.layer_sizes)
    fused = (t.predict(X).tolist(), t.predict_proba(X).tolist(), t.evaluate(X, y))
    monkeypatch.setenv("MOJOLEARN_MLP_FUSED", "0")
    assert (t.predict(X).tolist(), t.predict_proba(X).tolist(), t.evaluate(X, y)) == fused


def test_no_numpy_is_needed():
    out = run_python(
        "import sys, mojolearn as ml\n"
        "t = ml.SmallMLPTrainer(*ml.init_small_mlp(2), data_schedule={'s': 1})\n"
        "X = ml.Array.from_list([[float(i % 7 - 3) / (j + 1) for j in range(8)] for i in range(300)])\n"
        "y = ml.Array.from_list([i % 3 for i in range(300)], '<i4')\n"
        "p = t.predict(X); q = t.predict_proba(X); e = t.evaluate(X, y)\n"
        "print(p.shape, q.shape, sum(e['per_class']['support']), 'numpy' in sys.modules)\n",
        block_numpy=True,
    )
    assert out.split() == ["(300,)", "(300,", "3)", "300", "False"]
