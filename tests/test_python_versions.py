"""One build imports and trains under every CPython 3.10+ found on this machine (the binding
has no CPython tag and no libpython dependency), with the same bits; memoryview(Array) works
from 3.12 (PEP 688). Interpreters that are not installed are skipped by name."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import PKG_PARENT

SCRIPT = """
import sys, mojolearn
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
t = mojolearn.SmallMLPTrainer(*_spec.init_small_mlp(3), data_schedule={"v": 1})
for X, y in _rng.batches(4, 8, 5):
    t.train_step(X, y)
a = mojolearn.Array.from_list([[1.0, 2.0], [3.0, 4.0]])
mv = memoryview(a).shape if sys.version_info >= (3, 12) else None
print(mojolearn.numeric_mode_used(), t.state_hash(), mv)
"""


def _run(exe):
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    proc = subprocess.run(
        [exe, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd="/", timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split(maxsplit=2)


def _interpreter(version):
    """python{version} on PATH, else in a pyenv tree (PYENV_ROOT or ~/.pyenv), else None."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(
        glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))
    )
    for exe in candidates:
        if exe and subprocess.run([exe, "-c", "1"], capture_output=True).returncode == 0:
            return exe
    return None


@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_same_build_same_bits_under_other_pythons(version):
    exe = _interpreter(version)
    if exe is None:
        pytest.skip(f"python{version} is not installed here")
    mode, digest, shape = _run(exe)
    here_mode, here_digest, _ = _run(sys.executable)
    assert (mode, digest) == (here_mode, here_digest)
    assert shape.strip() == ("(2, 2)" if version >= "3.12" else "None")
