#!/usr/bin/env bash
# Developer build: compile the bindings into python/mojolearn/ (editable install into .venv).
#   bash tools/dev_build.sh          build + install (serialized with a lock: helpers share a tree)
#   bash tools/dev_build.sh --check  compile the four CPU bindings (identical, fast, each also _v4) into a temp dir only
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MOJOLEARN_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
if [ "${1:-}" = "--check" ]; then
  # setup.py's own build (its wrapper template and flags) into a temporary folder.
  out=$(mktemp -d)
  if ! MOJOLEARN_VENDORS=cpu "$VENV/bin/python" setup.py -q build_ext --build-lib "$out" \
      --build-temp "$out/tmp" >"$out/log" 2>&1; then
    grep -vE "Deprecat|^ *$|\*\*\*|!!" "$out/log" | tail -60; echo "dev_build: BUILD FAILED"; exit 1
  fi
  grep "mojolearn build" "$out/log"
  echo "compiled OK into $out"
  exit 0
fi
exec 9>/tmp/mojolearn-dev-build.lock
flock 9
log=$(mktemp)
if ! "$VENV/bin/pip" install -q --no-build-isolation --no-deps -e . >"$log" 2>&1; then
  grep -vE "is ignored" "$log" | tail -60; echo "dev_build: BUILD FAILED"; exit 1
fi
ls python/mojolearn/_mojolearn_training_cpu_*.so
