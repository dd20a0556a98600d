"""The binding reproduces tests/golden/kernels_identical.json bit for bit (identical mode):
GEMM (four transposes), cross-entropy (mean; sum with smoothing; extreme, equal and ignored
rows), Adam and AdamW (three steps), exp and log. The file comes from the pure-Python reference
(`python tools/make_golden.py`); a difference means the arithmetic changed."""

import array
import hashlib
import json
import os
import sys

import mojolearn
import pytest
from mojolearn._runtime import backend as _backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import golden_kernels as G  # noqa: E402

with open(os.path.join(ROOT, "tests", "golden", "kernels_identical.json")) as _f:
    DOC = json.load(_f)
CASES = {c["name"]: c for c in DOC["cases"]}

pytestmark = pytest.mark.skipif(
    mojolearn.numeric_mode_used() != "identical", reason="goldens pin identical mode only"
)


def _arr(hexes, shape):
    return mojolearn.Array.from_list(G.unhex(hexes), "<f4").reshape(shape)


def _check(case, outputs):
    hint = f"golden case {case['name']} differs; regenerate with {DOC['regenerate']}"
    assert DOC["format"] == G.FORMAT and DOC["profile"] == "mojolearn.portable-fp32.v2"
    assert outputs == case["outputs"], hint
    assert hashlib.sha256(G.canonical(outputs)).hexdigest() == case["outputs_sha256"], hint


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("gemm_")])
def test_gemm_golden(name):
    case = CASES[name]
    m, n, k = case["shape"]
    ta, tb = name[-2] == "T", name[-1] == "T"
    a = _arr(case["inputs"]["a"], (k, m) if ta else (m, k))
    b = _arr(case["inputs"]["b"], (n, k) if tb else (k, n))
    c = mojolearn.matmul(a, b, transpose_a=ta, transpose_b=tb)
    _check(case, {"c": G.hexs(sum(c.tolist(), []))})


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("cross_entropy_")])
def test_cross_entropy_golden(name):
    case = CASES[name]
    rows, classes = case["shape"]
    loss, grad = mojolearn.cross_entropy(
        _arr(case["inputs"]["logits"], (rows, classes)),
        array.array("i", case["targets"]),
        reduction=case["reduction"],
        label_smoothing=case["label_smoothing"],
        return_grad=True,
    )
    _check(case, {"loss": G.hexs([loss]), "dlogits": G.hexs(sum(grad.tolist(), []))})


@pytest.mark.parametrize("name", ["Adam_3_steps", "AdamW_3_steps"])
def test_optimizer_golden(name):
    case = CASES[name]
    sizes = case["sizes"]
    flat = G.unhex(case["inputs"]["params"])
    params = [
        mojolearn.Array.from_list(flat[: sizes[0]]),
        mojolearn.Array.from_list(flat[sizes[0] :]),
    ]
    cls = mojolearn.Adam if name.startswith("Adam_") else mojolearn.AdamW
    opt = cls(params, lr=case["lr"], weight_decay=case["weight_decay"])
    for g in case["inputs"]["grads"]:
        gf = G.unhex(g)
        opt.step(
            [mojolearn.Array.from_list(gf[: sizes[0]]), mojolearn.Array.from_list(gf[sizes[0] :])]
        )
    _check(
        case,
        {
            "params": G.hexs(params[0].tolist() + params[1].tolist()),
            "exp_avg": G.hexs(opt.exp_avg.tolist()),
            "exp_avg_sq": G.hexs(opt.exp_avg_sq.tolist()),
        },
    )


@pytest.mark.parametrize("name,function", [("exp32", 1), ("log32", 3)])
def test_portable_math_golden(name, function):
    case = CASES[name]
    x = _arr(case["inputs"]["x"], (16,))
    y = mojolearn.zeros((16,))
    _backend.binding().portable_math_eval([x._addr, y._addr], [16, function])
    _check(case, {"y": G.hexs(y.tolist())})
