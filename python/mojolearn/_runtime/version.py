"""The package version, from ONE place: the `version` of pyproject.toml's [project] table.

Edit only pyproject.toml. An installed package reports what pip recorded from it (the
distribution's metadata); a package run without metadata reads the pyproject.toml it came
with: the source tree's (python/../pyproject.toml, when python/ is on PYTHONPATH) or the copy
tools/build_device_package.sh puts beside a carried build (build/device/pyproject.toml).
Copying the file, rather than generating a _runtime/version.py from it, keeps a single reader and
nothing that could go stale in the source tree. tests/test_version.py checks that all of these
agree with pyproject.toml.

`mojolearn.__version__` calls `version()` on first access only: importlib.metadata costs
tens of milliseconds to import, and `import mojolearn` pays none of it.
"""

from __future__ import annotations

import os
import re

UNKNOWN = "0+unknown"

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package root
# The carried build's copy first (the folder on sys.path), then the source tree's.
CANDIDATES = (
    os.path.join(os.path.dirname(_HERE), "pyproject.toml"),
    os.path.join(os.path.dirname(os.path.dirname(_HERE)), "pyproject.toml"),
)


def version() -> str:
    """The installed distribution's version, else the adjoining pyproject.toml's, else
    "0+unknown"."""
    import importlib.metadata

    try:
        return importlib.metadata.version("mojolearn")
    except importlib.metadata.PackageNotFoundError:
        pass
    for path in CANDIDATES:
        found = pyproject_version(path)
        if found is not None:
            return found
    return UNKNOWN


def pyproject_version(path: str) -> str | None:
    """[project] version of the pyproject.toml at `path` if its [project] name is mojolearn,
    else None (no file, another project's, or unreadable)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        import tomllib  # type: ignore[import-not-found, unused-ignore]  # Python 3.11+
    except ImportError:
        return _scan(data.decode("utf-8", "replace"))
    try:
        project = tomllib.loads(data.decode("utf-8")).get("project", {})
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    value = project.get("version")
    return value if project.get("name") == "mojolearn" and isinstance(value, str) else None


def _scan(text: str) -> str | None:
    """Python 3.10 (no tomllib): the [project] table's `name` and `version` lines, written as
    plain basic strings (`version = "0.1.0"`), which is how this project's file writes them."""
    table = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if table is None:
        return None
    fields = dict(re.findall(r'^(name|version)[ \t]*=[ \t]*"([^"\\\n]*)"', table.group(1), re.M))
    return fields.get("version") if fields.get("name") == "mojolearn" else None
