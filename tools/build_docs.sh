#!/usr/bin/env bash
# The API reference: HTML built with pdoc from the docstrings of the public modules
# (mojolearn, mojolearn.training, mojolearn.distributed) into OUTDIR (default build/docs, not
# committed). Fails when a public name lacks a docstring or annotations
# (tests/test_public_surface.py, run first) and on any pdoc warning.
#   bash tools/build_docs.sh [OUTDIR]
# Env: PY, the Python that has mojolearn and pdoc (default: $MOJOLEARN_VENV/bin/python, else
# .venv/bin/python, else python3).
set -euo pipefail
OUT=${1:-}
case $OUT in ""|/*) ;; *) OUT="$PWD/$OUT" ;; esac  # relative to where it is called from
cd "$(dirname "$0")/.."
OUT=${OUT:-build/docs}
VENV=${MOJOLEARN_VENV:-.venv}
if [ -z "${PY:-}" ]; then
  if [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; else PY=python3; fi
fi

"$PY" -m pytest -q -p no:cacheprovider tests/test_public_surface.py

# pdoc reports problems (an annotation it cannot evaluate, a bad link) as warnings: any fails.
"$PY" tools/build_docs.py "$OUT"
