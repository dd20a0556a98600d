"""A user's type checker sees the annotations (issue #19), and they cost nothing at run time.

mypy checks two small scripts as a user's `mypy --strict` would see mojolearn installed with
its py.typed marker (the package's own errors silenced): a wrong call must be reported on
exactly the lines marked `# E`, a correct script on none (and calls with NumPy arrays and torch
tensors, where both are installed). Skipped when mypy is not installed (a CI-only extra:
.ci/run installs it). `tools/test.sh`'s types suite checks the package itself with
`mypy --strict`.
"""

import importlib.util
import os
import re
import subprocess
import sys

import mojolearn
import pytest

from tests.helpers import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRONG = """
import mojolearn
from mojolearn.training import WarmupCosineLR

w = mojolearn.zeros((3, 2))
mojolearn.MLPTrainer("8,16,3", data_schedule={})  # E: a str is a Sequence[str]
mojolearn.MLPTrainer([8, 16, 3], data_schedule=[1])  # E: a dict or None (None: a default)
mojolearn.AdamW([w], lr="0.1")  # E
mojolearn.AdamW([w], foreach=True)  # E: refused options are not parameters
WarmupCosineLR(0.1, warmup_steps="1", total_steps=10)  # E
mojolearn.zeros((2, 3), "float32")  # E: dtypes are '<f4', '<i4', '<f8', '<i8'
mojolearn.set_numeric_mode("exact")  # E
loss: mojolearn.Array = mojolearn.cross_entropy(w, w)  # E: 'mean' gives a float
mojolearn.Array.from_list([1.0]).reshape("2")  # E
small = mojolearn.SmallMLPTrainer(w, w, w, w, data_schedule={"seed": 0})
small.train_step(w, w, return_input_grad="yes")  # E: a bool
name: str = small.train_step(w, w)["loss"]  # E: the loss is a float
mojolearn.matmul(w, w, transpose_a=1)  # E: a bool, not an int
"""

RIGHT = """
import array

import mojolearn
from mojolearn.distributed import DataParallel
from mojolearn.training import AdamW, WarmupCosineLR


def main() -> float:
    trainer = mojolearn.MLPTrainer([8, 16, 3], seed=0, data_schedule={"seed": 0})
    DataParallel(trainer, microbatches=2)
    w = mojolearn.zeros((3, 2))
    schedule = WarmupCosineLR(1e-3, warmup_steps=10, total_steps=100)
    opt = AdamW([w], lr=1e-3, lr_schedule=schedule)
    norm = opt.step([mojolearn.zeros((3, 2))], max_norm=1.0)
    y = mojolearn.zeros((4,), "<i4")
    loss: float = mojolearn.cross_entropy(mojolearn.zeros((4, 3)), y)
    per_row: mojolearn.Array = mojolearn.cross_entropy(mojolearn.zeros((4, 3)), y, reduction="none")
    _, grad = mojolearn.cross_entropy(mojolearn.zeros((4, 3)), y, return_grad=True)
    a = mojolearn.Array.from_list([[1.0, 2.0]], "<f4").reshape(2, 1)
    mojolearn.SGD([array.array("f", [0.0]), memoryview(bytearray(4)).cast("f"), a], lr=0.1)
    w1, b1, w2, b2 = (mojolearn.zeros(s) for s in [(16, 8), (16,), (3, 16), (3,)])
    small = mojolearn.SmallMLPTrainer(w1, b1, w2, b2, data_schedule={"seed": 0}, lr=1e-2)
    X, y4 = mojolearn.zeros((4, 8)), mojolearn.zeros((4,), "<i4")
    out = small.train_step(X, y4, return_input_grad=True)
    dx: mojolearn.Array = out["input_grad"]
    steps = small.train_steps(mojolearn.zeros((8, 8)), mojolearn.zeros((8,), "<i4"), 2)
    same: mojolearn.SmallMLPTrainer = small.load_state_dict(small.state_dict())
    lag, grads = same.loss_and_grads(X, y4)
    step: int = small.apply_gradients(grads)
    step += trainer.apply_gradients(trainer.loss_and_grads(X, y4)[1])
    c = mojolearn.matmul(w1, X, transpose_a=False, transpose_b=True)
    return (
        loss + per_row.sum() + grad.max() + a.sum() + (norm or 0.0) + opt.lr + opt.t
        + out["loss"] + dx.sum() + sum(steps["losses"]) + lag + step + c.sum()
        + small.predict_logits(X).sum() + small.max_rows + len(small.state_hash())
    )
"""

# NumPy arrays and torch tensors are BufferLike through their __dlpack__ (SupportsDLPack).
INPUTS = """
import numpy as np
import torch

import mojolearn

t = torch.zeros(4, 3)
mojolearn.cross_entropy(t, torch.zeros(4, dtype=torch.int64))
mojolearn.cross_entropy(np.zeros((4, 3), dtype=np.float32), np.zeros(4, dtype=np.int64))
mojolearn.AdamW([t, np.zeros(3, dtype=np.float32)])
mojolearn.MLPTrainer([8, 3], [np.zeros((3, 8), np.float32), t[0]], data_schedule={"a": 1})
mojolearn.from_dlpack(t).reshape(-1)
mojolearn.matmul(np.zeros((2, 3), dtype=np.float32), t, transpose_b=True)
"""

# mojolearn found on mypy's path, its own errors silenced as for an installed package.
USER_CONFIG = """
[mypy]
strict = True
mypy_path = {path}

[mypy-mojolearn.*]
follow_imports = silent
"""


def _mypy(tmp_path, sources):
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("mypy is not installed (a CI-only extra: .ci/run installs it)")
    config = tmp_path / "mypy.ini"
    config.write_text(USER_CONFIG.format(path=os.path.join(ROOT, "python")))
    files = []
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
        files.append(str(tmp_path / name))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
         os.path.join(ROOT, ".mypy_cache", "test_typing"), "--no-error-summary", *files],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    errors = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"(\w+\.py):(\d+): error: (.*)", line)
        if m:
            errors.setdefault(m.group(1), {})[int(m.group(2))] = m.group(3)
    assert proc.returncode in (0, 1) and not proc.stderr, proc.stdout + proc.stderr
    return errors, proc.stdout


def _marked(text):
    return {i for i, line in enumerate(text.splitlines(), 1) if re.search(r"# E\b", line)}


def _importable(*names):
    try:
        return all(importlib.util.find_spec(n) is not None for n in names)
    except ImportError:  # the NumPy-free pass blocks numpy
        return False


def test_mypy_flags_wrong_calls_and_passes_a_correct_script(tmp_path):
    sources = {"wrong.py": WRONG, "right.py": RIGHT}
    if _importable("numpy", "torch"):
        sources["inputs.py"] = INPUTS
    errors, out = _mypy(tmp_path, sources)
    assert set(errors.get("wrong.py", {})) == _marked(WRONG), out
    assert "right.py" not in errors and "inputs.py" not in errors, out


def test_the_package_is_marked_typed():
    # PEP 561: without the marker, a user's type checker ignores the installed annotations.
    assert os.path.isfile(os.path.join(os.path.dirname(mojolearn.__file__), "py.typed"))


def test_annotations_import_nothing_at_run_time():
    # `from __future__ import annotations` and TYPE_CHECKING-only imports: neither `typing`
    # nor `mojolearn._buffers.types` is loaded by importing the public modules or by training.
    out = run_python(
        "import sys, mojolearn, mojolearn.training, mojolearn.distributed\n"
        "t = mojolearn.MLPTrainer([8, 16, 3], seed=0, data_schedule={'seed': 0})\n"
        "t.train_step(mojolearn.zeros((4, 8)), mojolearn.zeros((4,), '<i4'))\n"
        "w = mojolearn.zeros((2,))\n"
        "mojolearn.AdamW([w], lr_schedule=mojolearn.ConstantLR(0.1)).step([w.copy()])\n"
        "print(sorted(m for m in ('typing', 'mojolearn._buffers.types') if m in sys.modules))\n"
    )
    assert out.strip() == "[]"
