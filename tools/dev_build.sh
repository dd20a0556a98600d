#!/usr/bin/env bash
# Developer build: compile the bindings into python/mojolearn/ (editable install into .venv).
#   bash tools/dev_build.sh          build + install (serialized with a lock: helpers share a tree)
#   bash tools/dev_build.sh --check  compile the four CPU bindings (identical, fast, each also _v4) into a temp dir only
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MOJOLEARN_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  for variant in identical fast identical_v4 fast_v4; do
    mode=${variant%_v4}
    name=_mojolearn_training_cpu_$variant
    sed "s/{stem}/_mojolearn_training/; s/{name}/$name/g" > "$out/$name.mojo" <<'W'
from std.os import abort
from std.python import PythonObject
from {stem} import build_module

@export
def PyInit_{name}() abi("C") -> PythonObject:
    try:
        return build_module("{name}")
    except e:
        abort(String("cannot create module: ", e))
W
    target=x86-64-v3; [ "$variant" != "$mode" ] && target=x86-64-v4
    flags=(-I mojo -I mojo/bindings -D MOJOLEARN_MODE=$mode --target-cpu $target)
    [ $mode = identical ] && flags+=(--fp-mode contract=off)
    mojo build "$out/$name.mojo" "${flags[@]}" --emit shared-lib -o "$out/$name.so"
  done
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
