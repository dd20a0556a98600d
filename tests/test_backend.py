"""Backend: mode/vendor selection read from the binary, the ABI check, typed errors."""

import os

import pytest
from mojolearn._runtime import abi as _abi
from mojolearn._runtime import backend as _backend

from tests.helpers import run_python


def _devices(vendor):
    try:
        return int(_backend._import(vendor, "identical").device_count())
    except Exception:  # not built, no driver: the selection skips it the same way
        return 0


def test_default_is_identical_numpy_free_and_cpu_without_a_gpu():
    out = run_python(
        "import mojolearn, sys; print(mojolearn.vendor_used(), "
        "mojolearn.numeric_mode_used(), 'numpy' in sys.modules)",
        env={"MOJOLEARN_NUMERIC_MODE": "", "MOJOLEARN_VENDOR": ""},
    )
    vendor, mode, numpy_loaded = out.split()
    assert (mode, numpy_loaded) == ("identical", "False")
    gpus = [v for v in _backend._GPU_ORDER if _devices(v) > 0]
    assert vendor == (gpus[0] if gpus else "cpu")


def test_env_selects_fast():
    out = run_python(
        "import mojolearn; print(mojolearn.numeric_mode_used())",
        env={"MOJOLEARN_NUMERIC_MODE": "fast"},
    )
    assert out.strip() == "fast"


def test_set_numeric_mode_before_use_and_refused_after():
    out = run_python(
        "import mojolearn\n"
        "mojolearn.set_numeric_mode('fast')\n"
        "print(mojolearn.numeric_mode_used())\n"
        "mojolearn.set_numeric_mode('fast')  # the same mode again is fine\n"
        "try:\n"
        "    mojolearn.set_numeric_mode('identical')\n"
        "except RuntimeError as e:\n"
        "    print('refused:', e)\n"
    )
    first, second = out.strip().splitlines()
    assert first == "fast" and second.startswith("refused:") and "'fast' already" in second


def test_bad_mode_names_refused():
    with pytest.raises(ValueError, match="mode must be 'identical' or 'fast', got 'quick'"):
        _backend.set_numeric_mode("quick")
    out = run_python(
        "import mojolearn\ntry:\n    mojolearn.numeric_mode_used()\n"
        "except ValueError as e:\n    print(e)",
        env={"MOJOLEARN_NUMERIC_MODE": "exact"},
    )
    assert "MOJOLEARN_NUMERIC_MODE must be 'identical' or 'fast', got 'exact'" in out


def test_missing_vendor_binding_named():
    out = run_python(
        "import mojolearn\ntry:\n    mojolearn.vendor_used()\n"
        "except ImportError as e:\n    print(e)",
        env={"MOJOLEARN_VENDOR": "hip"},
    )
    assert "MOJOLEARN_VENDOR=hip" in out and "no hip binding" in out


# Swaps neural_gemm's first two address names in the Python declaration, then loads.
_REORDERED_ABI = (
    "from mojolearn._runtime import abi as _abi\nfrom mojolearn._runtime import backend as _backend\n"
    "addrs, params = _abi.LAYOUT['neural_gemm']\n"
    "_abi.LAYOUT['neural_gemm'] = ((addrs[1], addrs[0]) + addrs[2:], params)\n"
    "try:\n"
    "    _backend.binding()\n"
    "except ImportError as e:\n"
    "    print(e)\n"
)


def test_reordered_abi_declaration_fails_the_import_naming_the_entry():
    out = run_python(_REORDERED_ABI)
    assert (
        "entry 'neural_gemm': address 0 is 'a' in the binding but 'b' in mojolearn._runtime.abi"
        in out
    )


def test_abi_tables_agree_and_differences_are_named():
    binding = _backend.binding()
    table = _abi.parse(binding.raw.abi_layout())
    assert _abi.first_difference(table) is None
    declared = dict(table)
    name = sorted(declared)[0]
    addrs, params = declared[name]
    declared[name] = (addrs, params + ("extra",))
    assert f"entry {name!r}: param {len(params)}" in _abi.first_difference(table, declared)
    declared = dict(table)
    del declared[name]
    assert "in the binding but not declared" in _abi.first_difference(table, declared)
    assert "missing from the binding" in _abi.first_difference(declared, table)


def test_binding_errors_arrive_typed():
    b = _backend.binding()
    with pytest.raises(ValueError, match="neural_gemm: expected 3 addresses, got 2"):
        b.neural_gemm([1, 2], [0] * 8)
    with pytest.raises(ValueError, match="all_finite: expected 1 params, got 0"):
        b.all_finite([1], [])
    with pytest.raises(ValueError, match="address 0 is null"):
        b.all_finite([0], [1])
    assert isinstance(_backend.translate(Exception("RuntimeError: x")), RuntimeError)
    assert isinstance(_backend.translate(Exception("odd")), RuntimeError)
    err = KeyError("k")
    assert _backend.translate(err) is err


def test_import_is_lazy_and_fast():
    out = run_python(
        "import time; t = time.perf_counter(); import mojolearn; "
        "d = time.perf_counter() - t; import sys; "
        "print(d, any(m.startswith('mojolearn._mojolearn_training') for m in sys.modules))"
    )
    seconds, loaded = out.split()
    assert loaded == "False"  # the binding loads on first use, not at import
    print(f"import mojolearn took {float(seconds) * 1000:.1f} ms")


def test_the_v4_fast_binding_gets_the_same_abi_check():
    if not (_backend._available("cpu", "fast", "_v4") and _backend.cpu_has_v4()):
        pytest.skip("no runnable x86-64-v4 fast binding here (not installed, or no AVX-512)")
    out = run_python(
        _REORDERED_ABI,
        env={
            "MOJOLEARN_NUMERIC_MODE": "fast",
            "MOJOLEARN_CPU_LEVEL": "auto",
            "MOJOLEARN_VENDOR": "cpu",
        },
    )
    assert "mojolearn binding _mojolearn_training_cpu_fast_v4 does not match" in out
    assert "entry 'neural_gemm': address 0 is 'a' in the binding but 'b'" in out


_ENV_CHILD = """
import subprocess, sys
import mojolearn
before = subprocess.run(["env", "-0"], capture_output=True).stdout
mojolearn.matmul(mojolearn.zeros((2, 3)), mojolearn.zeros((3, 4)))  # loads the binding
mojolearn.SmallMLPTrainer(*mojolearn.init_small_mlp(0), data_schedule={"a": 1})
after = subprocess.run(["env", "-0"], capture_output=True).stdout
print("same" if before == after else "CHANGED: " + repr(sorted(set(after.split(b"\\0")) ^ set(before.split(b"\\0")))))
"""


def test_loading_the_binding_leaves_the_environment_as_it_was():
    """The Mojo runtime's Python initialization calls setenv (PYTHONEXECUTABLE, PYTHONPATH,
    MOJO_PYTHON_LIBRARY) behind Python's back; children started afterwards inherited them and
    ran outside the user's virtualenv. `env` in a child before and after loading: identical."""
    import subprocess
    import sys

    from tests.helpers import PKG_PARENT

    env = {k: v for k, v in os.environ.items() if not k.startswith("MOJO_PYTHON")}
    env.pop("PYTHONEXECUTABLE", None)
    env["PYTHONPATH"] = PKG_PARENT
    proc = subprocess.run(
        [sys.executable, "-c", _ENV_CHILD], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "same", proc.stdout


def test_an_x86_cpu_without_fma_is_refused_by_name(monkeypatch):
    # Profile v2 computes dot products as hardware fma chains: an x86-64-v2 CPU is refused
    # before a binding built for x86-64-v3 could run an instruction it lacks.
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    v2 = frozenset({"sse2", "sse4_2", "popcnt", "ssse3", "avx"})
    with pytest.raises(ImportError, match=r"lacks avx2, fma \(x86-64-v3\)"):
        _backend.check_cpu_has_fma(v2)
    _backend.check_cpu_has_fma(v2 | _backend._V3_FLAGS)  # a v3 CPU passes
    _backend.check_cpu_has_fma(frozenset())  # no /proc/cpuinfo: nothing to go on
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    _backend.check_cpu_has_fma(v2)  # every aarch64 core has fma
