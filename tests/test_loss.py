"""`mojolearn.cross_entropy` and the binding's `cross_entropy` entry.

- identical mode == the pure-Python reference (tests/reference/loss.py), bit for bit (hex), on
  1,000 fresh random cases: extreme logits (±80), equal logits, one-hot logits, subnormal
  differences, ignore_index, label smoothing, every reduction, with and without the gradient;
- both modes within a stated bound of a binary64 reference; fast mode the same bits twice;
- torch parity within the same bound when torch is installed;
- every refusal (Python API and raw entry) with a message naming the argument, outputs
  untouched by refused calls, guard words around outputs, non-finite results refused.
"""

import array
import math
import random

import mojolearn
import pytest
from mojolearn import Array
from mojolearn._runtime import backend as _backend
from mojolearn.loss import cross_entropy

from tests.helpers import run_python
from tests.reference import loss as ref
from tests.reference.f32 import f32, hexf

# Stated bound for both modes against binary64 (docs/ARITHMETIC.md): |loss − ref| and
# |dlogit − ref| at most ABS + REL·|ref|, for the sizes tested here (C <= 16, n <= 64).
ABS, REL = 2e-6, 2e-6
REDUCTIONS = ("mean", "sum", "none")


# ---------------------------------------------------------------- random cases


def _row(rng, classes):
    kind = rng.randrange(7)
    if kind == 0:  # extreme logits
        return [rng.choice((80.0, -80.0)) for _ in range(classes)]
    if kind == 1:  # equal logits
        v = f32(rng.uniform(-50, 50))
        return [v] * classes
    if kind == 2:  # one-hot logits
        hot = rng.randrange(classes)
        return [1.0 if j == hot else 0.0 for j in range(classes)]
    if kind == 3:  # subnormal logits: differences are subnormal, exp(d) rounds to 1
        return [f32(rng.uniform(-1, 1) * 2.0**-140) for _ in range(classes)]
    if kind == 4:  # exp(z - mx) underflows into the subnormal range
        return [f32(rng.uniform(-103, -87)) if j else 0.0 for j in range(classes)]
    if kind == 5:
        return [f32(rng.uniform(-80, 80)) for _ in range(classes)]
    return [f32(rng.gauss(0, 3)) for _ in range(classes)]


def _case(rng):
    rows, classes = rng.randint(1, 12), rng.choice((rng.randint(1, 10), rng.randint(8, 24)))
    logits = [_row(rng, classes) for _ in range(rows)]
    ignore = rng.choice((-100, -1, rng.randrange(classes)))
    targets = [ignore if rng.random() < 0.2 else rng.randrange(classes) for _ in range(rows)]
    smoothing = rng.choice((0.0, 0.0, rng.random(), 1.0, 0.1))
    return logits, targets, ignore, rng.choice(REDUCTIONS), smoothing, rng.random() < 0.7


def _arrays(logits, targets):
    rows, classes = len(logits), len(logits[0])
    z = Array.from_list([v for row in logits for v in row], "<f4").reshape((rows, classes))
    t = array.array("q", targets)
    return z, t


def _flat_hex(values):
    out = []
    for v in values:
        out.extend(_flat_hex(v) if isinstance(v, list) else [hexf(v)])
    return out


def test_identical_matches_reference_bit_for_bit(seed):
    if _backend.binding().mode != "identical":
        pytest.skip("this process runs fast mode")
    rng = random.Random(seed)
    for case in range(1000):
        logits, targets, ignore, reduction, eps, want_grad = _case(rng)
        z, t = _arrays(logits, targets)
        what = (
            f"seed={seed} case={case} reduction={reduction} eps={eps} ignore={ignore} "
            f"targets={targets}"
        )
        if all(y == ignore for y in targets):
            with pytest.raises(ValueError, match="every row is ignored"):
                mojolearn.cross_entropy(z, t, ignore, reduction, eps, want_grad)
            continue
        got = mojolearn.cross_entropy(z, t, ignore, reduction, eps, want_grad)
        loss, grad = got if want_grad else (got, None)
        reduced, losses, dlogits = ref.cross_entropy(logits, targets, ignore, reduction, eps)
        if reduction == "none":
            assert _flat_hex(loss.tolist()) == _flat_hex(losses), what
        else:
            assert type(loss) is float
            assert hexf(loss) == hexf(reduced), what
        if want_grad:
            assert grad.shape == (len(logits), len(logits[0]))
            assert _flat_hex(grad.tolist()) == _flat_hex(dlogits), what


# ---------------------------------------------------------------- binary64 bound


def _ref64(logits, targets, ignore, reduction, eps):
    """Loss and gradient in binary64 with math.exp/log (the bound's reference)."""
    kept = sum(1 for y in targets if y != ignore)
    total, losses, grads = 0.0, [], []
    for z, y in zip(logits, targets):
        c = len(z)
        if y == ignore:
            losses.append(0.0)
            grads.append([0.0] * c)
            continue
        mx = max(z)
        s = math.fsum(math.exp(v - mx) for v in z)
        lse = mx + math.log(s)
        loss = (1 - eps) * (lse - z[y]) + eps / c * math.fsum(lse - v for v in z)
        g = [math.exp(v - mx) / s - ((1 - eps) * (j == y) + eps / c) for j, v in enumerate(z)]
        if reduction == "mean":
            g = [v / kept for v in g]
        losses.append(loss)
        grads.append(g)
        total += loss
    reduced = total / kept if reduction == "mean" else total
    return reduced, losses, grads


def _close(a, b):
    return abs(a - b) <= ABS + REL * abs(b)


def _bound_cases(seed, count):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        rows, classes = rng.randint(1, 64), rng.randint(1, 16)
        logits = [[f32(rng.gauss(0, 4)) for _ in range(classes)] for _ in range(rows)]
        targets = [rng.randrange(classes) for _ in range(rows)]
        if rows > 1:
            targets[0] = -100
        cases.append((logits, targets, -100, rng.choice(REDUCTIONS), rng.choice((0.0, 0.1, 0.5))))
    return cases


def _check_bound(case, loss, grad, what):
    reduced, losses, grads = _ref64(*case)
    if case[3] == "none":
        for a, b in zip(loss, losses):
            assert _close(a, b), f"{what}: loss {a!r} vs binary64 {b!r}"
    else:
        assert _close(loss, reduced), f"{what}: loss {loss!r} vs binary64 {reduced!r}"
    for row, want in zip(grad, grads):
        for a, b in zip(row, want):
            assert _close(a, b), f"{what}: dlogit {a!r} vs binary64 {b!r}"


def test_identical_within_bound_of_binary64(seed):
    for k, case in enumerate(_bound_cases(seed, 60)):
        logits, targets, ignore, reduction, eps = case
        z, t = _arrays(logits, targets)
        loss, grad = mojolearn.cross_entropy(z, t, ignore, reduction, eps, True)
        loss = loss.tolist() if reduction == "none" else loss
        _check_bound(case, loss, grad.tolist(), f"seed={seed} case={k}")


_FAST_SCRIPT = """
import array, json
import mojolearn
from mojolearn import Array
from mojolearn._runtime import backend as _backend
from mojolearn.loss import cross_entropy
assert _backend.binding().mode == "fast"
with open({path!r}) as fh:
    cases = json.load(fh)
out = []
for logits, targets, ignore, reduction, eps in cases:
    z = Array.from_list([v for row in logits for v in row], "<f4").reshape(len(logits), -1)
    loss, grad = mojolearn.cross_entropy(z, array.array("q", targets), ignore, reduction, eps,
                                         True)
    loss = loss.tolist() if reduction == "none" else loss
    out.append([loss, grad.tolist(), grad.tobytes().hex()])
print(json.dumps(out))
"""


def test_fast_mode_within_bound_and_repeatable(seed, tmp_path):
    import json

    cases = _bound_cases(seed, 40)
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    code = _FAST_SCRIPT.format(path=str(path))
    env = {"MOJOLEARN_NUMERIC_MODE": "fast"}
    first = run_python(code, env=env)
    assert run_python(code, env=env) == first, "fast mode changed bits between runs"
    for k, (case, (loss, grad, _)) in enumerate(zip(cases, json.loads(first))):
        _check_bound(case, loss, grad, f"fast seed={seed} case={k}")


def test_torch_parity(seed):
    torch = pytest.importorskip("torch")
    for k, (logits, targets, ignore, reduction, eps) in enumerate(_bound_cases(seed, 30)):
        z, t = _arrays(logits, targets)
        loss, grad = mojolearn.cross_entropy(z, t, ignore, reduction, eps, True)
        zt = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
        lt = torch.nn.functional.cross_entropy(
            zt, torch.tensor(targets), ignore_index=ignore, reduction=reduction, label_smoothing=eps
        )
        lt.sum().backward()
        want = lt.tolist()
        got = loss.tolist() if reduction == "none" else loss
        for a, b in zip(
            got if reduction == "none" else [got], want if reduction == "none" else [want]
        ):
            assert _close(a, b), f"seed={seed} case={k}: {a!r} vs torch {b!r}"
        for row, trow in zip(grad.tolist(), zt.grad.tolist()):
            for a, b in zip(row, trow):
                assert _close(a, b), f"seed={seed} case={k}: dlogit {a!r} vs torch {b!r}"


# ---------------------------------------------------------------- API shape and types


def test_return_types_and_integer_targets():
    z = Array.from_list([0.5, -1.0, 2.0, 0.0, 0.0, 0.0], "<f4").reshape((2, 3))
    mean = mojolearn.cross_entropy(z, array.array("b", [2, 0]))
    assert type(mean) is float
    total = mojolearn.cross_entropy(z, Array.from_list([2, 0], "<i4"), reduction="sum")
    assert hexf(mean) == hexf(f32(total / 2.0))
    per_row = mojolearn.cross_entropy(z, array.array("Q", [2, 0]), reduction="none")
    assert type(per_row) is Array and per_row.shape == (2,)
    assert hexf(f32(per_row[0] + per_row[1])) == hexf(total)
    loss, grad = mojolearn.cross_entropy(z, array.array("h", [2, 0]), return_grad=True)
    assert hexf(loss) == hexf(mean) and grad.shape == (2, 3)
    # The gradient of a row sums to ~0 (softmax minus a distribution).
    assert abs(sum(grad.tolist()[0])) < 1e-6


def test_ignore_index_rows_and_out_of_int32_ignore_index():
    z = Array.from_list([1.0, 2.0, 3.0, 4.0], "<f4").reshape((2, 2))
    per_row, grad = mojolearn.cross_entropy(
        z, array.array("i", [1, 7]), ignore_index=7, reduction="none", return_grad=True
    )
    assert per_row[1] == 0.0 and grad.tolist()[1] == [0.0, 0.0]
    mean = mojolearn.cross_entropy(z, array.array("i", [1, 7]), ignore_index=7)
    assert hexf(mean) == hexf(per_row[0])  # divided by the one kept row
    # An ignore_index no int32 target can equal: nothing is ignored, targets are checked.
    both = mojolearn.cross_entropy(z, array.array("i", [1, 0]), ignore_index=1 << 40)
    assert both > 0
    with pytest.raises(ValueError, match="targets"):
        mojolearn.cross_entropy(z, array.array("i", [1, -100]), ignore_index=1 << 40)


# ---------------------------------------------------------------- refusals


def _valid():
    z = Array.from_list([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "<f4").reshape((2, 3))
    return z, Array.from_list([0, 2], "<i4")


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"reduction": "avg"}, ValueError, "reduction"),
        ({"reduction": None}, TypeError, "reduction"),
        ({"label_smoothing": -0.1}, ValueError, "label_smoothing"),
        ({"label_smoothing": 1.5}, ValueError, "label_smoothing"),
        ({"label_smoothing": math.nan}, ValueError, "label_smoothing"),
        ({"label_smoothing": "0.1"}, TypeError, "label_smoothing"),
        ({"label_smoothing": True}, TypeError, "label_smoothing"),
        ({"ignore_index": 1.0}, TypeError, "ignore_index"),
        ({"ignore_index": True}, TypeError, "ignore_index"),
        ({"return_grad": 1}, TypeError, "return_grad"),
    ],
)
def test_refuses_bad_options(kwargs, exc, match):
    z, t = _valid()
    with pytest.raises(exc, match=match):
        mojolearn.cross_entropy(z, t, **kwargs)


def test_refuses_bad_buffers():
    z, t = _valid()
    with pytest.raises(TypeError, match="logits must be float32"):
        mojolearn.cross_entropy(array.array("d", [0.0] * 6), t)
    with pytest.raises(TypeError, match="logits"):
        mojolearn.cross_entropy([[0.0, 1.0]], t)
    with pytest.raises(ValueError, match="logits must have 2 dimensions"):
        mojolearn.cross_entropy(Array.from_list([0.0] * 6, "<f4"), t)
    with pytest.raises(ValueError, match="logits must have at least one row"):
        mojolearn.cross_entropy(Array.from_list([], "<f4").reshape((0, 3)), array.array("i"))
    with pytest.raises(ValueError, match="logits must have at least one row and one class"):
        mojolearn.cross_entropy(Array.from_list([], "<f4").reshape((2, 0)), t)
    with pytest.raises(TypeError, match="targets must hold integers"):
        mojolearn.cross_entropy(z, array.array("f", [0.0, 1.0]))
    with pytest.raises(ValueError, match="targets must have 1 dimension"):
        mojolearn.cross_entropy(z, Array.from_list([0, 1], "<i4").reshape((1, 2)))
    with pytest.raises(ValueError, match=r"targets must have shape \(2,\)"):
        mojolearn.cross_entropy(z, array.array("i", [0, 1, 2]))
    with pytest.raises(ValueError, match="targets holds"):
        mojolearn.cross_entropy(z, array.array("q", [0, 1 << 40]))


@pytest.mark.parametrize(
    "targets, match",
    [
        ([0, 3], r"targets\[1\] = 3 is outside \[0, 3\)"),
        ([-1, 0], r"targets\[0\] = -1 is outside \[0, 3\)"),
        ([-100, -100], "every row is ignored"),
    ],
)
def test_refuses_bad_targets_for_every_reduction(targets, match):
    z, _ = _valid()
    before = z.tobytes()
    for reduction in REDUCTIONS:
        with pytest.raises(ValueError, match=match):
            mojolearn.cross_entropy(
                z, array.array("i", targets), reduction=reduction, return_grad=True
            )
    assert z.tobytes() == before


def test_refuses_non_finite_results_naming_entry_and_output():
    # A target logit of -inf (allowed on other classes) gives an infinite loss.
    z = Array.from_list([0.0, -math.inf, 1.0, -math.inf], "<f4").reshape((2, 2))
    ok = mojolearn.cross_entropy(z, array.array("i", [0, 0]), return_grad=True)
    assert math.isfinite(ok[0])
    with pytest.raises(RuntimeError, match="cross_entropy: output 'losses' is not finite"):
        mojolearn.cross_entropy(z, array.array("i", [0, 1]))
    # z − max overflows to -inf: the loss of that row is +inf.
    z = Array.from_list([3e38, -3e38], "<f4").reshape((1, 2))
    with pytest.raises(RuntimeError, match="cross_entropy: output 'losses'"):
        mojolearn.cross_entropy(z, array.array("i", [1]), reduction="none")
    z = Array.from_list([math.nan, 0.0], "<f4").reshape((1, 2))
    with pytest.raises(RuntimeError, match="cross_entropy: output"):
        mojolearn.cross_entropy(z, array.array("i", [1]))


# ---------------------------------------------------------------- the raw entry


def _entry_call(z, t, losses_addr, dlogits_addr, params):
    return _backend.binding().cross_entropy([z._addr, t._addr, losses_addr, dlogits_addr], params)


@pytest.mark.parametrize(
    "params, match",
    [
        ([-1, 3, -100, 0.0, 2, 1], "cross_entropy: rows must be an integer in"),
        ([0, 3, -100, 0.0, 2, 1], "cross_entropy: rows must be an integer in"),
        ([2, -3, -100, 0.0, 2, 1], "cross_entropy: classes must be an integer in"),
        ([2, 3, 1 << 40, 0.0, 2, 1], "cross_entropy: ignore_index must be an integer in"),
        ([2, 3, -100, 1.5, 2, 1], "cross_entropy: label_smoothing must be in"),
        ([2, 3, -100, math.nan, 2, 1], "cross_entropy: label_smoothing must be in"),
        ([2, 3, -100, 0.0, 3, 1], "cross_entropy: reduction must be an integer in"),
        ([2, 3, -100, 0.0, 2, 2], "cross_entropy: want_grad must be an integer in"),
        ([2.5, 3, -100, 0.0, 2, 1], "cross_entropy: rows must be an integer in"),
        ([1 << 21, 1 << 20, -100, 0.0, 2, 1], "exceeds 2\\^40"),
        ([1 << 40, 1 << 40, -100, 0.0, 2, 1], "exceeds 2\\^40"),
        ([2, 3, -100, 0.0, 2], "cross_entropy: expected 6 params, got 5"),
    ],
)
def test_entry_refuses_bad_params_and_writes_nothing(params, match):
    z, t = _valid()
    out = Array.from_list([7.0] * 8, "<f4")
    with pytest.raises(ValueError, match=match):
        _entry_call(z, t, out._addr, out._addr, params)
    assert out.tolist() == [7.0] * 8


def test_entry_refuses_bad_addresses():
    z, t = _valid()
    b = _backend.binding()
    out = Array.from_list([0.0] * 8, "<f4")
    with pytest.raises(ValueError, match="cross_entropy: expected 4 addresses, got 3"):
        b.cross_entropy([z._addr, t._addr, out._addr], [2, 3, -100, 0.0, 2, 0])
    with pytest.raises(ValueError, match="cross_entropy: address 3 is null"):
        b.cross_entropy([z._addr, t._addr, out._addr, 0], [2, 3, -100, 0.0, 2, 0])


def test_entry_writes_only_inside_its_outputs(seed):
    """Guard words around losses and dlogits: only the interior is written."""
    rng = random.Random(seed)
    guard = f32(-12345.5)
    for reduction in range(3):
        rows, classes = rng.randint(1, 40), rng.randint(1, 12)
        z = Array.from_list([f32(rng.gauss(0, 5)) for _ in range(rows * classes)], "<f4").reshape(
            (rows, classes)
        )
        t = Array.from_list([rng.randrange(classes) for _ in range(rows)], "<i4")
        pad = 16
        losses = Array.from_list([guard] * (rows + 2 * pad), "<f4")
        dlogits = Array.from_list([guard] * (rows * classes + 2 * pad), "<f4")
        _entry_call(
            z,
            t,
            losses._addr + 4 * pad,
            dlogits._addr + 4 * pad,
            [rows, classes, -100, 0.25, reduction, 1],
        )
        lv, dv = losses.tolist(), dlogits.tolist()
        assert lv[:pad] == [guard] * pad and lv[pad + rows :] == [guard] * pad, f"seed={seed}"
        assert dv[:pad] == [guard] * pad and dv[pad + rows * classes :] == [guard] * pad
        assert guard not in lv[pad : pad + rows] and guard not in dv[pad : pad + rows * classes]
        # Without the gradient, dlogits is not touched at all.
        _entry_call(
            z, t, losses._addr + 4 * pad, dlogits._addr, [rows, classes, -100, 0.25, reduction, 0]
        )
        assert dlogits.tolist()[:pad] == [guard] * pad


def test_none_reduction_is_not_refused_when_only_the_sum_overflows():
    # Two rows whose finite losses (~3.4e38 each) add up past float32's range: 'none' returns
    # them; 'sum' and 'mean' refuse the overflowing sum.
    logits = Array.from_list([[1.7e38, -1.7e38], [1.7e38, -1.7e38]])
    targets = array.array("i", [1, 1])
    per_row = cross_entropy(logits, targets, reduction="none")
    assert all(math.isfinite(v) and v > 1e38 for v in per_row.tolist())
    with pytest.raises(RuntimeError, match="not finite"):
        cross_entropy(logits, targets, reduction="sum")
