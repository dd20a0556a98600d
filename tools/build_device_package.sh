#!/usr/bin/env bash
# Build, HERE (toolchain + max-core in .venv), the package a GPU machine without Mojo can run:
# the pure-Python package plus the cpu and cuda bindings (no CPython tag) and the vendored
# runtime libraries, into build/device/ (a few MB; carried by the device tool).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -rf build/device
MOJOLEARN_VENDORS=cpu,cuda "$PY" setup.py -q build_ext --build-lib build/device --build-temp build/device-tmp
cp -r python/mojolearn/*.py python/mojolearn/data build/device/mojolearn/
rm -rf build/device-tmp
du -sh build/device
