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
