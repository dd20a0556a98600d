"""The version is written once, in pyproject.toml; everything that reports it agrees with it.

`mojolearn.__version__` (the installed metadata when there is some, which must not be stale),
`mojolearn info` and `info --json`; without metadata, the source tree's pyproject.toml, the
copy beside a carried build (tools/build_device_package.sh), the Python 3.10 reader (no
tomllib), and "0+unknown" when there is nothing to read. Reading it costs `import mojolearn`
nothing: importlib.metadata is imported on first access to `__version__`.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import mojolearn
import pytest

from tests.helpers import PKG_PARENT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPROJECT = os.path.join(ROOT, "pyproject.toml")
SOURCE = os.path.join(ROOT, "python")


def _pyproject_version():
    """Read independently of mojolearn._runtime.version: tomllib, else the [project] table by hand."""
    with open(PYPROJECT, "rb") as f:
        data = f.read()
    try:
        import tomllib
    except ImportError:
        table = data.decode().split("\n[project]\n", 1)[1].split("\n[", 1)[0]
        return re.search(r'^version\s*=\s*"([^"]+)"', table, re.M).group(1)
    return tomllib.loads(data.decode())["project"]["version"]


VERSION = _pyproject_version()

NO_METADATA = """
import importlib.metadata as m
def _missing(name):
    raise m.PackageNotFoundError(name)
m.version = _missing
"""
NO_TOMLLIB = "import sys\nsys.modules['tomllib'] = None\n"
PRINT = """
import sys, mojolearn
v = mojolearn.__version__
assert not any(n in sys.modules for n in ("numpy", "torch")), "a heavy import"
print(v)
"""


def _run(code, path, args=("-c",), cwd="/"):
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    proc = subprocess.run(
        [sys.executable, *args, code], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_pyproject_version_is_a_version():
    assert re.fullmatch(r"\d+(\.\d+)*([ab]|rc)?\d*(\.post\d+)?(\.dev\d+)?", VERSION), VERSION


def test_version_is_pyproject_version():
    assert mojolearn.__version__ == VERSION
    from mojolearn import __version__

    assert __version__ == VERSION


def test_installed_metadata_is_not_stale():
    import importlib.metadata

    try:
        installed = importlib.metadata.version("mojolearn")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("no installed mojolearn metadata (a source tree or a carried build)")
    assert installed == VERSION, (
        f"the installed metadata says {installed}, pyproject.toml {VERSION}: reinstall"
    )


def test_subprocess_package_reports_pyproject_version():
    assert _run(PRINT, PKG_PARENT).strip() == VERSION


def test_info_prints_version(tmp_path):
    out = _run("info", PKG_PARENT, args=("-m", "mojolearn"), cwd=tmp_path)
    assert f"version            {VERSION}\n" in out, out
    line = [l for l in out.splitlines() if l.startswith("version")]
    assert line == [f"version            {VERSION}"], out


def test_info_json_prints_version(tmp_path):
    out = _run("--json", PKG_PARENT, args=("-m", "mojolearn", "info"), cwd=tmp_path)
    assert json.loads(out)["version"] == VERSION


def test_import_does_not_look_the_version_up():
    code = (
        "import sys\nbefore = 'importlib.metadata' in sys.modules\nimport mojolearn\n"
        "print('mojolearn._runtime.version' in sys.modules,"
        " 'importlib.metadata' in sys.modules and not before)\n"
        "mojolearn.__version__\nprint('mojolearn._runtime.version' in sys.modules)\n"
    )
    assert _run(code, PKG_PARENT).split() == ["False", "False", "True"]


@pytest.mark.parametrize(
    "prefix", [NO_METADATA, NO_METADATA + NO_TOMLLIB], ids=["tomllib", "no-tomllib"]
)
def test_source_tree_without_metadata_reads_pyproject(prefix):
    assert _run(prefix + PRINT, SOURCE).strip() == VERSION


def _carried(tmp_path, pyproject):
    """A carried build's layout (build/device/mojolearn), the Python files alone."""
    pkg = tmp_path / "device" / "mojolearn"
    shutil.copytree(
        os.path.join(SOURCE, "mojolearn"),
        pkg,
        ignore=lambda d, names: (
            [n for n in names if not (n.endswith(".py") or os.path.isdir(os.path.join(d, n)))]
            + ["data", "_mojo_libs", "__pycache__"]
        ),
    )
    if pyproject is not None:
        (tmp_path / "device" / "pyproject.toml").write_text(pyproject)
    return str(tmp_path / "device")


@pytest.mark.parametrize(
    "prefix", [NO_METADATA, NO_METADATA + NO_TOMLLIB], ids=["tomllib", "no-tomllib"]
)
def test_carried_build_reads_its_pyproject_copy(tmp_path, prefix):
    with open(PYPROJECT) as f:
        path = _carried(tmp_path, f.read())
    assert _run(prefix + PRINT, path).strip() == VERSION


@pytest.mark.parametrize(
    "prefix", [NO_METADATA, NO_METADATA + NO_TOMLLIB], ids=["tomllib", "no-tomllib"]
)
@pytest.mark.parametrize(
    "pyproject",
    [None, '[project]\nname = "other"\nversion = "9.9"\n', "not = [toml"],
    ids=["none", "other", "broken"],
)
def test_nothing_to_read_is_unknown(tmp_path, prefix, pyproject):
    path = _carried(tmp_path, pyproject)
    assert _run(prefix + PRINT, path).strip() == "0+unknown"


def test_device_package_script_copies_pyproject():
    with open(os.path.join(ROOT, "tools", "build_device_package.sh")) as f:
        script = f.read()
    assert "cp pyproject.toml build/device/" in script
