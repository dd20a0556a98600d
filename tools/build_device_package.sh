#!/usr/bin/env bash
# Build, HERE (toolchain + max-core in .venv), the package a GPU machine without Mojo can run:
# the pure-Python package plus the cpu and cuda bindings (no CPython tag) and the vendored
# runtime libraries, into build/device/ (a few MB; carried by the device tool).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -rf build/device
MOJOLEARN_VENDORS=cpu,cuda "$PY" setup.py -q build_ext --build-lib build/device --build-temp build/device-tmp
# The Python files of the package and its wings (every folder with an __init__.py), and the data.
(cd python && find mojolearn -name '*.py' -not -path '*/__pycache__/*' -exec cp --parents {} ../build/device/ \;)
cp -r python/mojolearn/data build/device/mojolearn/
# No pip metadata goes with the carried package: mojolearn/_runtime/version.py reads the version from
# this copy of pyproject.toml (the one place it is written), as it was when this build was made.
cp pyproject.toml build/device/
rm -rf build/device-tmp
du -sh build/device
