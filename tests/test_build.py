"""Build-time refusals and properties of the installed binding files."""
import os
import subprocess
import sys

import pytest

import mojolearn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python_without_max_core():
    for exe in ("python3", sys.executable):
        probe = subprocess.run([exe, "-c", "import importlib.metadata as m, setuptools\n"
                                "try:\n    m.distribution('max-core'); print('has')\n"
                                "except m.PackageNotFoundError:\n    print('lacks')"],
                               capture_output=True, text=True)
        if probe.stdout.strip() == "lacks":
            return exe
    return None


def test_gpu_vendor_without_max_core_is_a_clear_build_error(tmp_path):
    exe = _python_without_max_core()
    if exe is None:
        pytest.skip("every interpreter here has max-core installed")
    env = dict(os.environ, MOJOLEARN_VENDORS="cpu,cuda")
    proc = subprocess.run([exe, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs max-core==26.7.0" in proc.stderr + proc.stdout
    assert not list(tmp_path.rglob("*.so"))


def test_unknown_vendor_is_a_clear_build_error(tmp_path):
    env = dict(os.environ, MOJOLEARN_VENDORS="cpu,tpu")
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib",
                           str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "unknown vendor 'tpu'" in proc.stderr + proc.stdout


def test_extension_files_carry_no_cpython_tag_and_an_origin_runpath():
    pkg = os.path.dirname(mojolearn.__file__)
    names = sorted(f for f in os.listdir(pkg) if f.startswith("_mojolearn_training_"))
    assert "_mojolearn_training_cpu_identical.so" in names
    assert "_mojolearn_training_cpu_fast.so" in names
    for name in names:
        data = open(os.path.join(pkg, name), "rb").read()
        assert b"$ORIGIN/_mojo_libs\0" in data
        assert b"/modular/lib\0" not in data  # no dangling path into a build environment
    libs = os.listdir(os.path.join(pkg, "_mojo_libs"))
    assert {"libKGENCompilerRTShared.so", "libMSupportGlobals.so",
            "libAsyncRTRuntimeGlobals.so"} <= set(libs)
