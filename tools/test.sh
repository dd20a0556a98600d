#!/usr/bin/env bash
# The one test command (README): build once, then every suite, each under a time budget.
#   bash tools/test.sh
# Suites: pytest (with NumPy as a reference where installed) | Mojo kernel tests | the NumPy-free
# pytest pass | a fresh-venv `pip install .` check | ruff lint and format check (only when ruff is
# installed) | types: mypy --strict on the package ([tool.mypy] in pyproject.toml; only when mypy
# is installed) | docs: the API reference built with pdoc, failing on a warning or an
# undocumented public name (tools/build_docs.sh; only when pdoc is installed) | GPU cross-compile
# checks (only when max-core is installed in the venv). .ci/run adds ruff, mypy, pdoc and
# max-core; a suite whose tool is missing is skipped with a printed reason.
# It changes the venv it uses (made if absent): its first line of output says what it installs.
# Env: MOJOLEARN_VENV (default .venv), MOJOLEARN_SKIP_INSTALL_CHECK=1 to skip the fresh-venv check.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${MOJOLEARN_VENV:-.venv}
PY="$VENV/bin/python"
echo "tools/test.sh: installs into the venv $VENV (created if absent): setuptools, wheel, numpy," \
  "pytest, hypothesis and the Mojo compiler (mojo-compiler, max-mojo-libs: about 300 MB), then" \
  "mojolearn as an editable install (pip install -e .) in place of any install there; set" \
  "MOJOLEARN_VENV=DIR to use another venv."
case "$VENV" in /*) VBIN="$VENV/bin" ;; *) VBIN="$ROOT/$VENV/bin" ;; esac  # an absolute venv too
export PATH="$VBIN:$PATH"
declare -a NAMES RESULTS TIMES
passed=0; failed=0; skipped=0

suite() {  # suite NAME BUDGET_SECONDS CMD...
  local name=$1 budget=$2; shift 2
  echo; echo "=== $name (budget ${budget}s)"
  local t0=$SECONDS rc
  # Functions run in a child bash (exported below) so that `timeout` can bound them.
  timeout --kill-after=10 "$budget" bash -c '"$@"' _ "$@"; rc=$?
  local dt=$((SECONDS - t0)) result
  if [ $rc -eq 0 ]; then result=passed; passed=$((passed + 1))
  elif [ $rc -eq 77 ]; then result=skipped; skipped=$((skipped + 1))
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then result="FAILED (over budget)"; failed=$((failed + 1))
  else result="FAILED (exit $rc)"; failed=$((failed + 1)); fi
  NAMES+=("$name"); RESULTS+=("$result"); TIMES+=("$dt")
}

setup() {
  set -o pipefail  # a child bash: a failed `pip install | sed` must fail the build suite
  [ -x "$PY" ] || python3 -m venv "$VENV" || return 1
  "$PY" -m pip install -q --disable-pip-version-check "setuptools>=68" wheel \
      mojo-compiler==1.2.0 max-mojo-libs==26.7.0 "pytest>=7" "hypothesis>=6" numpy \
      2>&1 | sed '/is ignored/d' || return 1
  "$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . \
      2>&1 | sed '/is ignored/d' || return 1
  "$PY" -c "import mojolearn; print('built:', mojolearn.vendor_used(), mojolearn.numeric_mode_used())" || return 1
  # A second build of the unchanged sources must come from the Mojo cache (about 1 s a module).
  local again; again=$(mktemp -d)
  "$PY" setup.py -q build_ext --build-lib "$again" --build-temp "$again/tmp" 2>&1 | grep "mojolearn build:"
  rm -rf "$again"
}

pytest_suite() {
  "$PY" -m pytest -q -p no:cacheprovider "$@"; local rc=$?
  [ $rc -eq 5 ] && { echo "pytest collected no tests"; return 1; }
  return $rc
}

mojo_suite() {
  local f rc=0
  for f in mojo/tests/test_*.mojo; do
    echo "--- $f"
    mojo run -I mojo -I mojo/bindings --fp-mode contract=off -D MOJOLEARN_MODE=identical "$f" || rc=1
  done
  # The GEMM file tests both kernels directly, and `gemm` (SharedGemm) in the build's mode.
  echo "--- mojo/tests/test_gemm.mojo (fast build)"
  mojo run -I mojo -I mojo/bindings --fp-mode contract=off -D MOJOLEARN_MODE=fast \
    mojo/tests/test_gemm.mojo || rc=1
  echo "--- tools/bench_adam.mojo (compiles)"
  local out
  out=$(mktemp -d)
  mojo build -I mojo -D MOJOLEARN_MODE=fast -o "$out/bench_adam" tools/bench_adam.mojo || rc=1
  rm -rf "$out"
  return $rc
}

install_check() {
  if [ "${MOJOLEARN_SKIP_INSTALL_CHECK:-0}" = 1 ]; then echo "skipped: MOJOLEARN_SKIP_INSTALL_CHECK=1"; return 77; fi
  bash tools/install_check.sh
}

lint_suite() {
  if ! "$PY" -m ruff --version >/dev/null 2>&1; then
    echo "skipped: ruff is not installed in $VENV (a CI-only extra: .ci/run installs it)"
    return 77
  fi
  "$PY" -m ruff check python tools tests setup.py && "$PY" -m ruff format --check python tools tests setup.py
}

types_suite() {
  if ! "$PY" -m mypy --version >/dev/null 2>&1; then
    echo "skipped: mypy is not installed in $VENV (a CI-only extra: .ci/run installs it)"
    return 77
  fi
  "$PY" -m mypy  # strict, on the package: [tool.mypy] in pyproject.toml
}

docs_suite() {
  if ! "$PY" -c "import pdoc" >/dev/null 2>&1; then
    echo "skipped: pdoc is not installed in $VENV (a CI-only extra: .ci/run installs it)"
    return 77
  fi
  PY="$PY" bash tools/build_docs.sh
}

gpu_suite() {
  if ! "$PY" -m pip show -q max-core >/dev/null 2>&1; then
    echo "skipped: max-core is not installed in $VENV (a CI-only extra: .ci/run installs it)"
    return 77
  fi
  bash tools/gpu_compile_check.sh
}

export ROOT VENV PY
export -f setup pytest_suite mojo_suite install_check lint_suite types_suite docs_suite gpu_suite
suite "build (pip install -e, Mojo cache reused when unchanged)" 900 setup
if [ "${RESULTS[0]}" != passed ]; then echo "build failed: nothing else can run"; exit 1; fi
FIGURES=$(mktemp -d)  # the reliability suites record their counts here (R1..R18)
suite "pytest" 900 env MOJOLEARN_RELIABILITY_OUT="$FIGURES" bash -c 'pytest_suite'
suite "reliability figures (R1-R18, from the pytest run)" 60 "$PY" tools/reliability_report.py --from "$FIGURES"
suite "mojo tests" 600 mojo_suite
suite "pytest without NumPy" 600 env MOJOLEARN_BLOCK_NUMPY=1 "$PY" -m pytest -q -p no:cacheprovider
suite "fresh-venv install check" 600 install_check
suite "lint (ruff check, ruff format --check)" 120 lint_suite
suite "types (mypy --strict)" 300 types_suite
suite "docs (API reference, pdoc)" 300 docs_suite
suite "GPU cross-compile checks" 900 gpu_suite

rm -rf "$FIGURES"
echo; echo "=== summary"
for i in "${!NAMES[@]}"; do printf '%-58s %-22s %5ss\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"; done
echo "suites: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
