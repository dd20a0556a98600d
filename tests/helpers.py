"""Helpers shared by test files."""

import os
import sys

import mojolearn

# The folder holding the mojolearn under test (an install, the source tree, or a carried
# build): subprocesses put it first on PYTHONPATH so they run the same package.
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(mojolearn.__file__)))

NUMPY_BLOCKER = """
import sys
class _B:
    def find_spec(self, name, path=None, target=None):
        if name == 'numpy' or name.startswith('numpy.'):
            raise ModuleNotFoundError('numpy blocked', name=name)
sys.meta_path.insert(0, _B())
"""


def run_python(code, env=None, block_numpy=False, timeout=120):
    """Run `code` in a fresh interpreter (the numeric mode is per process); returns stdout."""
    import subprocess

    full_env = dict(os.environ)
    full_env.update(env or {})
    prefix = NUMPY_BLOCKER if block_numpy else ""
    proc = subprocess.run(
        [sys.executable, "-c", prefix + code],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd="/",
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout


def data_parallel_runner(script):
    """`run(mpi, mode, alone=False)`: `script` (a child reading its mode from argv[1]) run alone
    (`mpi` False; `alone` sets DP_ALONE=1) or under `mpiexec -n 2`, its stdout; the calling
    test is skipped when mpi4py or mpiexec is missing. The two ranks share one stdout pipe, so
    a child writes each line in one call (`print` writes its pieces one by one when Python's
    output is unbuffered: CI's ranks interleaved "refused" and the rank mid-line)."""
    import shutil
    import subprocess

    import pytest

    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (the 'mpi' extra; CI installs it)")
    mpiexec = shutil.which(
        "mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )
    if mpiexec is None:
        pytest.skip("mpiexec is not on PATH (the mpich wheel provides it)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, PKG_PARENT]))

    def run(mpi, mode, alone=False):
        prefix = [mpiexec, "-n", "2"] if mpi else []
        cmd = [*prefix, sys.executable, "-c", script, mode]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(env, DP_ALONE="1") if alone else env,
            cwd=root,
        )
        assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    return run
