"""Build-time refusals and properties of the installed binding files."""

import os
import platform
import subprocess
import sys

import mojolearn
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python_without_max_core():
    # The venv has max-core in CI; the interpreter it was made from usually has not.
    for exe in (getattr(sys, "_base_executable", None), "python3", sys.executable):
        if not exe:
            continue
        probe = subprocess.run(
            [
                exe,
                "-c",
                "import importlib.metadata as m, setuptools\n"
                "try:\n    m.distribution('max-core'); print('has')\n"
                "except m.PackageNotFoundError:\n    print('lacks')",
            ],
            capture_output=True,
            text=True,
        )
        if probe.stdout.strip() == "lacks":
            return exe
    return None


def test_gpu_vendor_without_max_core_is_a_clear_build_error(tmp_path):
    exe = _python_without_max_core()
    if exe is None:
        pytest.skip("every interpreter here has max-core installed")
    env = dict(os.environ, MOJOLEARN_VENDORS="cpu,cuda")
    proc = subprocess.run(
        [exe, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "needs max-core==26.7.0" in proc.stderr + proc.stdout
    assert not list(tmp_path.rglob("*.so"))


def test_unknown_vendor_is_a_clear_build_error(tmp_path):
    env = dict(os.environ, MOJOLEARN_VENDORS="cpu,tpu")
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "unknown vendor 'tpu'" in proc.stderr + proc.stdout


def test_extension_files_carry_no_cpython_tag_and_an_origin_runpath():
    pkg = os.path.dirname(mojolearn.__file__)
    names = sorted(f for f in os.listdir(pkg) if f.startswith("_mojolearn_training_"))
    assert "_mojolearn_training_cpu_identical.so" in names
    assert "_mojolearn_training_cpu_fast.so" in names
    if platform.machine() in ("x86_64", "AMD64") and not _v4_switched_off(os.environ):
        assert "_mojolearn_training_cpu_fast_v4.so" in names  # the AVX-512 builds
        assert "_mojolearn_training_cpu_identical_v4.so" in names
    for name in names:
        data = open(os.path.join(pkg, name), "rb").read()
        assert b"$ORIGIN/_mojo_libs\0" in data
        assert b"/modular/lib\0" not in data  # no dangling path into a build environment
    libs = os.listdir(os.path.join(pkg, "_mojo_libs"))
    assert {
        "libKGENCompilerRTShared.so",
        "libMSupportGlobals.so",
        "libAsyncRTRuntimeGlobals.so",
    } <= set(libs)


# ---------------------------------------------------------------- the extra x86-64-v4 builds

_LIST_EXTENSIONS = """
import json, runpy, setuptools
captured = {}
setuptools.setup = lambda **kw: captured.update(kw)
runpy.run_path("setup.py")
print(json.dumps([[e.module, e.target] for e in captured["ext_modules"]]))
"""


def _v4_switched_off(env):
    return env.get("MOJOLEARN_BUILD_V4") == "0" or "MOJOLEARN_TARGET_CPU" in env


def _planned(**overrides):
    import json

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MOJOLEARN_BUILD_V4", "MOJOLEARN_TARGET_CPU", "MOJOLEARN_VENDORS")
    }
    env.update(overrides)
    proc = subprocess.run(
        [sys.executable, "-c", _LIST_EXTENSIONS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        return proc.stdout + proc.stderr
    return {module: target for module, target in json.loads(proc.stdout)}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86_64 only")
def test_x86_64_builds_the_v4_modules_unless_told_not_to():
    assert _planned() == {
        "_mojolearn_training_cpu_identical": "x86-64-v3",
        "_mojolearn_training_cpu_fast": "x86-64-v3",
        "_mojolearn_training_cpu_identical_v4": "x86-64-v4",
        "_mojolearn_training_cpu_fast_v4": "x86-64-v4",
    }
    portable = {
        "_mojolearn_training_cpu_identical": "x86-64-v3",
        "_mojolearn_training_cpu_fast": "x86-64-v3",
    }
    assert _planned(MOJOLEARN_BUILD_V4="0") == portable
    assert _planned(MOJOLEARN_TARGET_CPU="native") == {
        "_mojolearn_training_cpu_identical": "native",
        "_mojolearn_training_cpu_fast": "native",
    }


def test_bad_build_v4_flag_is_a_clear_build_error():
    out = _planned(MOJOLEARN_BUILD_V4="yes")
    assert isinstance(out, str) and "MOJOLEARN_BUILD_V4: expected 0 or 1, got 'yes'" in out


_STALE = """
import runpy, setuptools, sys
from setuptools import Distribution
setuptools.setup = lambda **kw: None
g = runpy.run_path("setup.py")
exts = [g["MojoExtension"]("_mojolearn_training", "cpu", m) for m in ("identical", "fast")]
cmd = g["MojoBuildExt"](Distribution({"ext_modules": exts}))
cmd.initialize_options()
cmd.build_lib = sys.argv[1]
cmd.finalize_options()
{action}
"""


def test_a_build_without_v4_removes_a_stale_v4_module(tmp_path):
    pkg = tmp_path / "mojolearn"
    pkg.mkdir()
    stale = pkg / "_mojolearn_training_cpu_fast_v4.so"
    stale_identical = pkg / "_mojolearn_training_cpu_identical_v4.so"
    keep = pkg / "_mojolearn_training_cpu_fast.so"
    stale.write_bytes(b"old")
    stale_identical.write_bytes(b"old")
    keep.write_bytes(b"new")
    code = _STALE.replace("{action}", "cmd.remove_stale_v4(exts)")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "removed the stale _mojolearn_training_cpu_fast_v4.so" in proc.stdout
    assert "removed the stale _mojolearn_training_cpu_identical_v4.so" in proc.stdout
    assert not stale.exists() and not stale_identical.exists()
    assert keep.read_bytes() == b"new"
    # A build that makes the v4 module keeps it.
    stale.write_bytes(b"old")
    code = _STALE.replace(
        "{action}",
        'cmd.remove_stale_v4(exts + [g["MojoExtension"]('
        '"_mojolearn_training", "cpu", "fast", "x86-64-v4", "_v4")])',
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert stale.exists()
