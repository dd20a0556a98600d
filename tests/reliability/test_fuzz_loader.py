"""R1: fuzz the checkpoint loader through its bytes-level entry point (`checkpoint.loads`, no
file per input) and the trainer's `load_state_dict`.

Oracle: every input is either refused with ValueError (TypeError for a tensor that is not a
buffer, as documented by `load_state_dict`) or accepted, and an accepted file is exactly the
file the writer makes of the state it decodes to (`dumps(loads(f)) == f`), so nothing the
writer could not have written gets in. No input may take over 1 s; memory stays bounded.
CI: >= 100,000 inputs within a 3-minute budget; MOJOLEARN_LONG_TESTS=1: >= 1,000,000.
"""

import array
import copy
import json
import math
import random
import resource
import time

import pytest
from mojolearn import checkpoint
from mojolearn._buffers.array import Array

from . import _mutate
from ._util import LONG, Stopwatch, new_seed, random_state, record

N_LOADS = 1_000_000 if LONG else 100_000
N_STATES = 100_000 if LONG else 12_000
BUDGET_S = 3600 if LONG else 180


def _maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _seeds(rng, k=6):
    states = [random_state(rng) for _ in range(k)]
    files = [checkpoint.dumps(s) for s in states]
    files.append(checkpoint.dumps(states[0], profile=checkpoint.REFERENCE_PROFILE))
    return files


def _one(data, allow):
    """'refused' or 'accepted'; raises AssertionError for any other outcome."""
    try:
        state = checkpoint.loads(data, allow)
    except ValueError:
        return "refused"
    env = json.loads(data)
    profile = env.get("arithmetic_profile", checkpoint.REFERENCE_PROFILE)
    # A deleted envelope_sha256 is the earlier layout, still read: of the same state.
    assert _mutate.written(state, profile, data), "accepted a file the writer would not write"
    return "accepted"


def test_fuzz_loads():
    seed = new_seed()
    rng = random.Random(seed)
    files = _seeds(rng)
    envelopes = [json.loads(f) for f in files]
    watch = Stopwatch()
    counts = {"refused": 0, "accepted": 0}
    kinds = {"blind": 0, "structured": 0, "random": 0}
    rss0 = _maxrss_mb()
    t0 = time.perf_counter()
    for i in range(N_LOADS):
        r = rng.random()
        if r < 0.45:
            data, what = _mutate.blind(rng, rng.choice(files), files)
            kinds["blind"] += 1
        elif r < 0.9:
            data, what = _mutate.structured(rng, copy.deepcopy(rng.choice(envelopes)))
            kinds["structured"] += 1
        else:
            data, what = _mutate.random_bytes(rng)
            kinds["random"] += 1
        allow = rng.random() < 0.2
        try:
            outcome = watch.time(_one, data, allow, what=what)
        except Exception as exc:  # noqa: BLE001 - the point is to catch anything
            pytest.fail(
                f"seed {seed}, input {i} ({what}): {type(exc).__name__}: {exc}\n"
                f"input: {data[:300]!r}..."
            )
        counts[outcome] += 1
        if watch.worst_what == what and watch.worst >= 1.0:  # re-time: a hiccup, or slow?
            t1 = time.perf_counter()
            _one(data, allow)
            watch.worst = min(watch.worst, time.perf_counter() - t1)
        assert time.perf_counter() - t0 < BUDGET_S, f"seed {seed}: over the budget at input {i}"
    elapsed = time.perf_counter() - t0
    growth = _maxrss_mb() - rss0
    record(
        "R1_loads",
        inputs=N_LOADS,
        **counts,
        **kinds,
        worst_ms=round(watch.worst * 1e3, 2),
        worst_input=watch.worst_what,
        seconds=round(elapsed, 1),
        rss_growth_mb=round(growth, 1),
        seed=seed,
    )
    assert watch.worst < 1.0, f"seed {seed}: {watch.worst_what} took {watch.worst:.3f} s"
    assert growth < 256, f"seed {seed}: peak memory grew by {growth:.0f} MB"
    assert counts["refused"] > 0.9 * N_LOADS


def _bad_values(rng, n=195):
    """Values no state field may hold, many sized like the flat parameters (n floats)."""
    f64 = array.array("d", [0.0] * n)
    ro = memoryview(array.array("f", [0.0] * n)).toreadonly()
    nan = array.array("f", [0.0] * n)
    nan[rng.randrange(n)] = rng.choice([math.nan, math.inf, -math.inf])
    return [
        None,
        True,
        0,
        -1,
        1 << 31,
        1 << 200,
        1e308,
        math.nan,
        math.inf,
        "x",
        b"\x00" * 780,
        [],
        {},
        [0.0] * n,
        {"a": 1},
        f64,
        ro,
        nan,
        array.array("f", [0.0] * (n - 1)),
        array.array("i", [0] * n),
        Array.from_list([0.0] * 195).reshape(5, 39),
        Array.from_list([0.0] * n).reshape(n, 1),
        "identical",
        "fast",
        "AdamW",
        [8, 16, 3],
        (8, 16, 3),
        object(),
        "\ud800",
        "y" * 5000,
    ]


def _mutate_state(rng, state, bad):
    nodes = []

    def walk(obj, path):
        if isinstance(obj, dict):
            for k, v in obj.items():
                nodes.append(path + (k,))
                walk(v, path + (k,))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                nodes.append(path + (i,))
                walk(v, path + (i,))

    walk(state, ())
    for _ in range(rng.choice([1, 1, 2, 3])):
        path = rng.choice(nodes)
        parent = state
        try:
            for key in path[:-1]:
                parent = parent[key]
            op = rng.randrange(4)
            if op == 0:
                del parent[path[-1]]
            elif op == 1 and isinstance(parent, dict):
                parent[rng.choice(["extra", "m", "hex", "lr"])] = rng.choice(bad)
            else:
                parent[path[-1]] = rng.choice(bad)
        except Exception:  # noqa: BLE001 - the harness edit failed, not the API
            pass  # the path ran into a value an earlier edit put there (not a dict or list)
    return state


def _fingerprint(t):
    """The whole trainer state as bytes and plain values (public API only)."""

    def plain(obj):
        if isinstance(obj, dict):
            return {k: plain(v) for k, v in obj.items()}
        if isinstance(obj, Array):
            return obj.tobytes().hex()
        return obj

    return json.dumps(plain(t.state_dict()), sort_keys=True)


def _small_trainer(rng):
    import mojolearn as ml

    base = random_state(rng, ml.numeric_mode_used())
    t = ml.SmallMLPTrainer(
        *[base["weights"][n] for n in ("weight1", "bias1", "weight2", "bias2")],
        data_schedule={"seed": 1},
    )
    t.load_state_dict(base)
    return t, base, 195


def _mlp_trainer(rng):
    import mojolearn as ml

    sizes = [3, 5, 4, 2]
    t = ml.MLPTrainer(sizes, seed=rng.randrange(1 << 30), data_schedule={"seed": 1})
    X = Array.from_list([rng.uniform(-1, 1) for _ in range(6 * sizes[0])], "<f4").reshape(
        (6, sizes[0])
    )
    t.train_steps(X, Array.from_list([rng.randrange(sizes[-1]) for _ in range(6)], "<i4"), 2)
    return t, t.state_dict(), sum(sizes[i + 1] * (sizes[i] + 1) for i in range(len(sizes) - 1))


@pytest.mark.parametrize(
    "make,figure",
    [(_small_trainer, "R1_load_state_dict"), (_mlp_trainer, "R1_load_state_dict_mlp")],
)
def test_fuzz_load_state_dict(make, figure):
    seed = new_seed()
    rng = random.Random(seed)
    t, base, n_params = make(rng)
    h0 = t.state_hash()
    bad = _bad_values(rng, n_params)
    watch = Stopwatch()
    counts = {"refused": 0, "accepted": 0}
    for i in range(N_STATES):
        before = _fingerprint(t)
        state = _mutate_state(rng, t.state_dict(), bad)
        t1 = time.perf_counter()
        try:
            t.load_state_dict(state)
        except (ValueError, TypeError):
            counts["refused"] += 1
            assert _fingerprint(t) == before, (
                f"seed {seed}, trial {i}: a refused state changed the trainer"
            )
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"seed {seed}, trial {i}: {type(exc).__name__}: {exc}")
        else:
            counts["accepted"] += 1
            t.load_state_dict(base)
        dt = time.perf_counter() - t1
        if dt > watch.worst:
            watch.worst = dt
        if i % 1000 == 0:
            assert t.state_hash() == h0, f"seed {seed}, trial {i}"
    assert t.state_hash() == h0
    record(
        figure,
        inputs=N_STATES,
        **counts,
        worst_ms=round(watch.worst * 1e3, 2),
        seed=seed,
    )
    assert watch.worst < 1.0
    assert counts["refused"] > 0.5 * N_STATES


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_BASE = json.loads(checkpoint.dumps(random_state(random.Random(7))))
_PATHS = [p for p, _ in _mutate.nodes(_BASE["payload"])][1:]


@settings(
    max_examples=2000 if LONG else 300, deadline=1000, suppress_health_check=[HealthCheck.too_slow]
)
@given(path=st.sampled_from(_PATHS), value=_JSON, rehashed=st.booleans())
def test_structured_hypothesis(path, value, rehashed):
    env = copy.deepcopy(_BASE)
    parent = _mutate._parent(env["payload"], path)
    parent[path[-1]] = value
    if rehashed:
        _mutate.rehash(env)
    data = _mutate.canon(env) + b"\n"
    _one(data, False)
