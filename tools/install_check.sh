#!/usr/bin/env bash
# `pip install .` into a NEW venv (toolchain only in pip's isolated build env), then import
# mojolearn from / with LD_LIBRARY_PATH unset: it must load the binding, report cpu and the
# selected mode, never import NumPy, and have no Mojo package installed at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
t0=$SECONDS
"$tmp/venv/bin/pip" install -q --disable-pip-version-check . 2>&1 | sed '/is ignored/d' 
echo "pip install . took $((SECONDS - t0)) s"
if "$tmp/venv/bin/pip" show -q mojo-compiler >/dev/null 2>&1; then
  echo "FAIL: mojo-compiler leaked into the run-time environment"; exit 1
fi
check='import mojolearn, sys; print(mojolearn.vendor_used(), mojolearn.numeric_mode_used()); assert "numpy" not in sys.modules'
out=$(cd / && env -u LD_LIBRARY_PATH -u MOJOLEARN_NUMERIC_MODE "$tmp/venv/bin/python" -c "$check")
echo "default: $out"; [ "$out" = "cpu identical" ]
out=$(cd / && env -u LD_LIBRARY_PATH MOJOLEARN_NUMERIC_MODE=fast "$tmp/venv/bin/python" -c "$check")
echo "MOJOLEARN_NUMERIC_MODE=fast: $out"; [ "$out" = "cpu fast" ]
size=$(du -sk "$tmp/venv/lib/"python3*/site-packages/mojolearn | cut -f1)
echo "installed package size: ${size} KiB"
echo "install check OK"
