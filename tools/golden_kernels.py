"""Kernel golden cases (identical mode): fixed inputs, outputs from the pure-Python reference.

`tools/make_golden.py` writes them to tests/golden/kernels_identical.json (canonical JSON:
hex float32 inputs and outputs, the SHA-256 of each case's canonical outputs, a format
version); `tests/test_golden_kernels.py` recomputes every case with the binding and compares
the hex. Inputs come from the project's SplitMix64 (mojolearn._mlp.rng) so the file is
reproducible; they include ±0, subnormals, large and tiny magnitudes.
"""

import hashlib
import json
import struct

FORMAT = "mojolearn.kernel-golden.v1"
REGENERATE = (
    "python tools/make_golden.py (only when the arithmetic profile changes on "
    "purpose: new profile version, new goldens)"
)
SPECIALS = (0.0, -0.0, 1e-45, -3e-42, 1e-30, 3.0e15, -7.5e-20)


def hexs(values):
    return "".join(struct.pack("<f", v).hex() for v in values)


def unhex(text):
    return [struct.unpack("<f", bytes.fromhex(text[i : i + 8]))[0] for i in range(0, len(text), 8)]


def canonical(value):
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _values(rng, n, scale=4.0):
    """float32 values in (-scale, scale) with the specials mixed in."""
    out = [(2.0 * rng.uniform() - 1.0) * scale for _ in range(n)]
    for i, special in enumerate(SPECIALS):
        if i * 3 < n:
            out[i * 3] = special
    return [struct.unpack("<f", struct.pack("<f", v))[0] for v in out]


def _gemm_cases(rng):
    from tests.reference.gemm import gemm

    m, n, k = 5, 7, 9
    cases = []
    for ta in (False, True):
        for tb in (False, True):
            a, b = _values(rng, m * k), _values(rng, k * n)
            c = gemm(a, b, m, n, k, ta, tb)
            cases.append(
                {
                    "name": f"gemm_{'T' if ta else 'N'}{'T' if tb else 'N'}",
                    "shape": [m, n, k],
                    "inputs": {"a": hexs(a), "b": hexs(b)},
                    "outputs": {"c": hexs(c)},
                }
            )
    return cases


def _loss_cases(rng):
    from tests.reference.loss import cross_entropy

    rows, classes = 6, 3
    z = _values(rng, rows * classes, 6.0)
    z[3:6] = [80.0, -80.0, 0.5]  # extreme logits
    z[6:9] = [1.25, 1.25, 1.25]  # equal logits
    targets = [int(rng.randbelow(classes)) for _ in range(rows)]
    targets[4] = -100  # ignored row
    cases = []
    for reduction, smoothing in (("mean", 0.0), ("sum", 0.1)):
        logits = [z[r * classes : (r + 1) * classes] for r in range(rows)]
        loss, _, grad = cross_entropy(logits, targets, -100, reduction, smoothing)
        cases.append(
            {
                "name": f"cross_entropy_{reduction}_smoothing{smoothing}",
                "shape": [rows, classes],
                "targets": targets,
                "reduction": reduction,
                "label_smoothing": smoothing,
                "inputs": {"logits": hexs(z)},
                "outputs": {
                    "loss": hexs([loss]),
                    "dlogits": hexs([g for row in grad for g in row]),
                },
            }
        )
    return cases


def _optim_cases(rng):
    from tests.reference import optim as ref

    sizes = (5, 3)
    p0 = [_values(rng, n, 1.0) for n in sizes]
    grads = [[_values(rng, n, 2.0) for n in sizes] for _ in range(3)]
    cases = []
    for kind, decoupled, wd in (("Adam", False, 0.01), ("AdamW", True, 0.01)):
        p, m, v = [list(x) for x in p0], [[0.0] * n for n in sizes], [[0.0] * n for n in sizes]
        for t, g in enumerate(grads, start=1):
            p, _, m, v, _, _ = ref.adam_step(
                p,
                g,
                m,
                v,
                t,
                1e-2,  # as given: profile v2 forms the scalars in binary64
                0.9,
                0.999,
                1e-8,
                wd,
                decoupled,
                False,
            )
        cases.append(
            {
                "name": f"{kind}_3_steps",
                "sizes": list(sizes),
                "lr": 1e-2,
                "weight_decay": wd,
                "inputs": {"params": hexs(sum(p0, [])), "grads": [hexs(sum(g, [])) for g in grads]},
                "outputs": {
                    "params": hexs(sum(p, [])),
                    "exp_avg": hexs(sum(m, [])),
                    "exp_avg_sq": hexs(sum(v, [])),
                },
            }
        )
    return cases


def _math_cases(rng):
    from tests.reference.portable_math import exp32, log32

    xs = _values(rng, 16, 80.0)
    pos = [abs(x) or 1e-45 for x in _values(rng, 16, 1e6)]
    return [
        {
            "name": "exp32",
            "inputs": {"x": hexs(xs)},
            "outputs": {"y": hexs([exp32(x) for x in xs])},
        },
        {
            "name": "log32",
            "inputs": {"x": hexs(pos)},
            "outputs": {"y": hexs([log32(x) for x in pos])},
        },
    ]


def build(profile):
    """The golden document (bytes) from the pure-Python reference."""
    from mojolearn._mlp.rng import SplitMix64

    rng = SplitMix64(20261129)
    cases = _gemm_cases(rng) + _loss_cases(rng) + _optim_cases(rng) + _math_cases(rng)
    for case in cases:
        case["outputs_sha256"] = hashlib.sha256(canonical(case["outputs"])).hexdigest()
    doc = {
        "format": FORMAT,
        "profile": profile,
        "numeric_mode": "identical",
        "regenerate": REGENERATE,
        "cases": cases,
    }
    return canonical(doc) + b"\n"
