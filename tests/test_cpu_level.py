"""The runtime choice between the portable (x86-64-v3) and the AVX-512 (x86-64-v4) cpu binding
of each numeric mode.

Each case runs in a subprocess (the binding is fixed per process). Where this CPU or install has
no AVX-512 module the v4 cases skip with the reason. Both fast modules are checked against an
exact (math.fsum) sum within FAST_BOUND on fresh random inputs, and against each other: every
output is the same FMA chain under every tile, so the two builds must give the same bits. Both
identical modules must reproduce the golden state hashes and kernel goldens.
"""

import math
import os
import platform
import random
import struct
import subprocess
import sys

import pytest
from mojolearn._runtime import backend as _backend

from tests.helpers import run_python
from tests.test_gemm import FAST_BOUND, matrix

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V4_NAME = "_mojolearn_training_cpu_fast_v4"


def _has_v4_module(mode="fast"):
    return _backend._available("cpu", mode, "_v4")


def _skip_unless_v4(mode="fast"):
    if not _has_v4_module(mode):
        pytest.skip(
            f"this install has no x86-64-v4 {mode} binding (not x86_64, or built with "
            f"MOJOLEARN_TARGET_CPU / MOJOLEARN_BUILD_V4=0)"
        )
    if not _backend.cpu_has_v4():
        missing = sorted(_backend._V4_FLAGS - _backend.cpu_flags())
        pytest.skip(f"this CPU lacks {', '.join(missing)}: the v4 binding cannot run here")


_LOAD = """
from mojolearn._runtime import abi as _abi
from mojolearn._runtime import backend as _backend
{patch}
b = _backend.binding()
assert _abi.first_difference(_abi.parse(b.raw.abi_layout())) is None
print(b.name, b.target_cpu, b.mode)
"""


def loaded(level, mode="fast", patch=""):
    out = run_python(
        _LOAD.format(patch=patch),
        env={
            "MOJOLEARN_NUMERIC_MODE": mode,
            "MOJOLEARN_CPU_LEVEL": level,
            "MOJOLEARN_VENDOR": "cpu",
        },
    )
    return out.split()


def test_auto_prefers_v4_where_supported():
    _skip_unless_v4()
    for level in ("", "auto", "v4", "V4"):
        assert loaded(level) == [V4_NAME, "x86-64-v4", "fast"], level


def test_v3_forces_the_portable_binding():
    name, target, mode = loaded("v3")
    assert (name, mode) == ("_mojolearn_training_cpu_fast", "fast")
    if platform.machine() in ("x86_64", "AMD64") and _has_v4_module():
        assert target == "x86-64-v3"


def test_auto_without_avx512_loads_the_portable_binding():
    # A CPU without AVX-512, simulated: the flags are read once, so presetting them is enough.
    assert (
        loaded("auto", patch="_backend._cpu_flags = frozenset({'avx2', 'fma'})")[0]
        == "_mojolearn_training_cpu_fast"
    )


def test_v4_refused_where_it_cannot_run():
    code = (
        "from mojolearn._runtime import backend as _backend\n{patch}\n"
        "try:\n    _backend.binding()\nexcept ImportError as e:\n    print('refused:', e)\n"
    )
    no_avx512 = run_python(
        code.format(
            patch="_backend._cpu_flags = frozenset({'avx2', 'fma', 'avx512f', 'avx512vl'})"
        ),
        env={
            "MOJOLEARN_NUMERIC_MODE": "fast",
            "MOJOLEARN_CPU_LEVEL": "v4",
            "MOJOLEARN_VENDOR": "cpu",
        },
    )
    if _has_v4_module():
        assert (
            "refused: MOJOLEARN_CPU_LEVEL=v4, but this CPU lacks avx512bw, avx512cd, "
            "avx512dq" in no_avx512
        )
    else:
        assert "refused: MOJOLEARN_CPU_LEVEL=v4, but this install has no x86-64-v4" in no_avx512
    no_module = run_python(
        code.format(patch="_backend._available = lambda v, m, s='': s == ''"),
        env={
            "MOJOLEARN_NUMERIC_MODE": "fast",
            "MOJOLEARN_CPU_LEVEL": "v4",
            "MOJOLEARN_VENDOR": "cpu",
        },
    )
    assert (
        "refused: MOJOLEARN_CPU_LEVEL=v4, but this install has no x86-64-v4 fast binding"
        in no_module
    )


def test_bad_level_refused_naming_the_variable():
    out = run_python(
        "from mojolearn._runtime import backend as _backend\ntry:\n    _backend.binding()\n"
        "except ValueError as e:\n    print(e)",
        env={"MOJOLEARN_NUMERIC_MODE": "fast", "MOJOLEARN_CPU_LEVEL": "avx512"},
    )
    assert "MOJOLEARN_CPU_LEVEL must be one of ('auto', 'v3', 'v4'), got 'avx512'" in out


def test_identical_follows_the_level():
    name, target, mode = loaded("v3", "identical")
    assert (name, mode) == ("_mojolearn_training_cpu_identical", "identical")
    _skip_unless_v4("identical")
    for level in ("auto", "v4"):
        assert loaded(level, "identical") == [
            "_mojolearn_training_cpu_identical_v4",
            "x86-64-v4",
            "identical",
        ], level


def test_both_identical_modules_reproduce_the_goldens():
    """Identical bits never depend on the SIMD width: the golden state hashes (100 steps at
    batch 1 and 32 through the trainer) and the kernel goldens, under each cpu level."""
    levels = ["v3"] + (["v4"] if _has_v4_module("identical") and _backend.cpu_has_v4() else [])
    if levels == ["v3"]:
        print("v4 identical binding not runnable here: checking the portable one only")
    for level in levels:
        env = dict(
            os.environ,
            MOJOLEARN_NUMERIC_MODE="identical",
            MOJOLEARN_CPU_LEVEL=level,
            MOJOLEARN_VENDOR="cpu",
        )
        golden = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tools", "device_golden.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert golden.returncode == 0 and "golden hashes reproduced" in golden.stdout, (
            f"level {level}:\n{golden.stdout}\n{golden.stderr}"
        )
        kernels = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                os.path.join(ROOT, "tests", "test_golden_kernels.py"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert kernels.returncode == 0, f"level {level}:\n{kernels.stdout[-3000:]}"


def test_cpu_flags_read_from_cpuinfo():
    if not os.path.exists("/proc/cpuinfo") or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("no /proc/cpuinfo on this x86-64 system")
    flags = _backend.cpu_flags()
    assert {"sse2", "avx2", "fma"} <= flags  # the floor our portable x86-64-v3 build needs
    assert _backend.cpu_flags() is flags  # read once


# ---------------------------------------------------------------- both fast modules: the bound

# (m, n, k, transpose_a, transpose_b): the three tiles (n <= 8, n <= W, wider), edge rows and
# columns, a k longer than one k block, n over one packed B block (1024 columns), the MLP shapes.
SHAPES = [
    (37, 41, 300, False, False),
    (256, 16, 8, False, True),
    (256, 8, 16, False, False),
    (7, 3, 16, False, True),
    (16, 8, 64, True, False),
    (3, 1100, 5, False, False),
    (13, 29, 600, True, True),
]

_PRODUCTS = """
import array, sys
import mojolearn
from mojolearn import Array
from mojolearn._runtime import backend as _backend
print(_backend.binding().name)
for path, ashape, bshape, ta, tb in {jobs!r}:
    raw = array.array('f'); raw.frombytes(open(path + '.a', 'rb').read())
    a = Array.from_buffer(raw).reshape(ashape)
    raw = array.array('f'); raw.frombytes(open(path + '.b', 'rb').read())
    b = Array.from_buffer(raw).reshape(bshape)
    for _ in range(2):
        print(mojolearn.matmul(a, b, transpose_a=ta, transpose_b=tb).tobytes().hex())
"""


def _products(tmp_path, operands, level):
    jobs = []
    for i, (a, b, ta, tb) in enumerate(operands):
        path = str(tmp_path / f"case{i}")
        with open(path + ".a", "wb") as f:
            f.write(a.tobytes())
        with open(path + ".b", "wb") as f:
            f.write(b.tobytes())
        jobs.append((path, a.shape, b.shape, ta, tb))
    out = run_python(
        _PRODUCTS.format(jobs=jobs),
        env={
            "MOJOLEARN_NUMERIC_MODE": "fast",
            "MOJOLEARN_CPU_LEVEL": level,
            "MOJOLEARN_VENDOR": "cpu",
        },
    ).split()
    return out[0], [bytes.fromhex(x) for x in out[1:]]


def _check_bound(seed, name, a, b, ta, tb, got_bytes):
    A = a.tolist() if not ta else [list(r) for r in zip(*a.tolist())]
    B = b.tolist() if not tb else [list(r) for r in zip(*b.tolist())]
    m, k, n = len(A), len(B), len(B[0])
    got = struct.unpack(f"<{m * n}f", got_bytes)
    worst = 0.0
    for i in range(m):
        for j in range(n):
            terms = [A[i][p] * B[p][j] for p in range(k)]
            exact = math.fsum(terms)
            bound = (
                FAST_BOUND * (k + 1) * 2.0**-24 * math.fsum(abs(t) for t in terms)
                + (k + 1) * 2.0**-149
            )
            err = abs(got[i * n + j] - exact)
            assert err <= bound, (
                f"seed {seed}, {name}, {m}x{n}x{k}: C[{i},{j}] = "
                f"{got[i * n + j]!r}, exact {exact!r}"
            )
            worst = max(worst, err / bound if bound else 0.0)
    return worst


def test_both_fast_modules_within_bound_and_bit_equal(tmp_path, seed):
    rng = random.Random(seed)
    operands = []
    for m, n, k, ta, tb in SHAPES:
        operands.append(
            (
                matrix(rng, k, m) if ta else matrix(rng, m, k),
                matrix(rng, n, k) if tb else matrix(rng, k, n),
                ta,
                tb,
            )
        )
    levels = ["v3"]
    if _has_v4_module() and _backend.cpu_has_v4():
        levels.append("v4")
    else:
        print("v4 binding not runnable here: checking the portable fast binding only")
    results = {}
    for level in levels:
        name, outs = _products(tmp_path, operands, level)
        assert outs[0::2] == outs[1::2], f"seed {seed}: {name} differs between two runs"
        worst = max(
            _check_bound(seed, name, a, b, ta, tb, got)
            for (a, b, ta, tb), got in zip(operands, outs[0::2])
        )
        print(f"{name}: worst error / bound = {worst:.3g}")
        results[level] = outs[0::2]
    if "v4" in results:
        for (m, n, k, _, _), x, y in zip(SHAPES, results["v3"], results["v4"]):
            assert x == y, f"seed {seed}: v3 and v4 fast bits differ for {m}x{n}x{k}"
