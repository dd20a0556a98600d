"""Shared test setup.

MOJOLEARN_BLOCK_NUMPY=1 makes `import numpy` fail for the whole run (the NumPy-free pass of
the test command): tests that use NumPy as a reference skip through `pytest.importorskip`, and
everything else must pass without it.
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # `tests.reference` importable as a package


class _BlockNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError("numpy is blocked for the NumPy-free pass", name=name)
        return None


if os.environ.get("MOJOLEARN_BLOCK_NUMPY") == "1":
    sys.meta_path.insert(0, _BlockNumpy())
    for _name in [m for m in sys.modules if m == "numpy" or m.startswith("numpy.")]:
        del sys.modules[_name]


@pytest.fixture
def seed():
    """A fresh random seed per test run, printed when the test fails."""
    value = int.from_bytes(os.urandom(8), "little")
    print(f"random seed: {value}")
    return value
