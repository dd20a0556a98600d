"""Shared pieces of the reliability suites: random valid states built without the binding,
the size knobs (CI vs `MOJOLEARN_LONG_TESTS=1`) and the figures each suite records for
`tools/reliability_report.py`."""

import array
import json
import os
import struct
import time

from mojolearn._buffers.array import Array
from mojolearn._mlp import state as S

LONG = os.environ.get("MOJOLEARN_LONG_TESTS") == "1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def new_seed():
    return int.from_bytes(os.urandom(8), "little")


def record(suite, **figures):
    """Print a suite's figures and, when MOJOLEARN_RELIABILITY_OUT names a folder, write them
    there as `<suite>.json` (the report tool reads them)."""
    print(f"[{suite}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    out = os.environ.get("MOJOLEARN_RELIABILITY_OUT")
    if out:
        with open(os.path.join(out, f"{suite}.json"), "w") as f:
            json.dump({"suite": suite, **figures}, f, sort_keys=True)


def f32_bits(rng, n, nonneg=False):
    """n random finite float32 values (uniform over bit patterns, so every exponent, -0.0,
    subnormals), as an owned Array."""
    out = array.array("I")
    while len(out) < n:
        b = rng.getrandbits(32)
        if nonneg:
            b &= 0x7FFFFFFF
        if (b >> 23) & 0xFF != 0xFF:
            out.append(b)
    return Array._wrap(array.array("f", out.tobytes()), (n,), "<f4")


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def random_json(rng, depth=0):
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-(1 << 63), 1 << 63)
    if kind == 2:
        return rng.choice([0.0, -0.0, 1.5, rng.uniform(-1e300, 1e300), rng.random()])
    if kind == 3:
        return "".join(rng.choice('abc\u00e9\u2603 "\\\n\t') for _ in range(rng.randrange(12)))
    if kind in (4, 5):
        return {
            f"k{rng.randrange(1000)}": random_json(rng, depth + 1) for _ in range(rng.randrange(4))
        }
    return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]


def random_state(rng, mode="identical"):
    """A random state that the trainer accepts (`state_dict()` form)."""
    weights = {}
    for name, shape in zip(S.NAMES, S.SHAPES):
        n = 1
        for d in shape:
            n *= d
        weights[name] = f32_bits(rng, n).reshape(*shape)
    while True:
        config = {
            "lr": _f32(rng.uniform(1e-6, 1.0)),
            "beta1": _f32(rng.uniform(0, 0.999)),
            "beta2": _f32(rng.uniform(0, 0.9999)),
            "eps": _f32(rng.uniform(1e-12, 1e-3)),
            "weight_decay": _f32(rng.choice([0.0, rng.uniform(0, 1)])),
        }
        if config["lr"] > 0 and config["eps"] > 0 and config["beta1"] < 1 and config["beta2"] < 1:
            break
    schedule = {"seed": rng.getrandbits(63), "cursor": rng.randrange(1000)}
    for _ in range(rng.randrange(3)):
        schedule[f"x{rng.randrange(100)}"] = random_json(rng, 2)
    flags = Array._wrap(array.array("i", [0, 0, 0, 0]), (4,), "<i4")
    return {
        "schema": S.SCHEMA,
        "architecture": list(S.ARCHITECTURE),
        "numeric_mode": mode,
        "parameter_order": list(S.NAMES),
        "weights": weights,
        "optimizer": {
            "kind": S.OPTIMIZER,
            "step": rng.choice([0, 1, rng.randrange(S.STEP_INT32_MAX + 1)]),
            "m": f32_bits(rng, S.TOTAL),
            "v": f32_bits(rng, S.TOTAL, nonneg=True),
            "flags": flags,
        },
        "config": config,
        "data_schedule": schedule,
    }


class Stopwatch:
    """Worst single duration of a loop, with the input that took it."""

    def __init__(self):
        self.worst, self.worst_what = 0.0, None

    def time(self, fn, *args, what=None):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            dt = time.perf_counter() - t0
            if dt > self.worst:
                self.worst, self.worst_what = dt, what
