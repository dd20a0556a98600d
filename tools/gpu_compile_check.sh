#!/usr/bin/env bash
# Cross-compile the binding for the GPU vendors (cuda sm_90, hip gfx942) in both numeric modes,
# without a GPU, and read the generated code: an identical-mode cuda build must contain no fused
# or approximate float instruction (fma., .approx, .ftz) in its PTX. Needs max-core==26.7.0.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PY=${PYTHON:-.venv/bin/python}
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; esac  # absolute: later commands run from /
MOJOLEARN_VENDORS=cpu,cuda,hip "$PY" setup.py -q build_ext --build-lib "$out" --build-temp "$out/tmp" \
  2>&1 | grep -E "mojolearn build|error|Error" || true
status=0
for vendor in cuda hip; do
  for mode in identical fast; do
    so="$out/mojolearn/_mojolearn_training_${vendor}_${mode}.so"
    [ -f "$so" ] || { echo "FAIL: $so was not built"; status=1; continue; }
    echo "built $(basename "$so") ($(du -k "$so" | cut -f1) KiB)"
  done
done
ptx_ops() { strings "$1" | grep -oE '\b(fma|mul|add|sub|div|sqrt|ex2|lg2|rcp)\.[a-z0-9.]*' | sort | uniq -c; }
so="$out/mojolearn/_mojolearn_training_cuda_identical.so"
if [ -f "$so" ]; then
  echo "float instructions in the identical cuda build's PTX:"; ptx_ops "$so" || true
  bad=$(strings "$so" | grep -cE '\bfma\.rn\.f32|\.approx\.|\.ftz\.' || true)
  if [ "$bad" != 0 ]; then echo "FAIL: $bad fused/approximate/flush-to-zero instructions"; status=1
  else echo "identical cuda PTX: no fma/approx/ftz instructions"; fi
fi
# On this GPU-less host: the cuda binding imports, vendor auto-selection falls back to cpu, and a
# forced cuda step fails with a RuntimeError that changes nothing.
cp python/mojolearn/*.py "$out/mojolearn/"
check=$(cd / && PYTHONPATH="$out" timeout 120 "$PY" -c "
import mojolearn
assert mojolearn.vendor_used() == 'cpu', mojolearn.vendor_used()
print('auto-selected vendor without a GPU: cpu')" 2>&1) || status=1
echo "$check"
check=$(cd / && PYTHONPATH="$out" MOJOLEARN_VENDOR=cuda timeout 120 "$PY" -c "
import mojolearn
t = mojolearn.SmallMLPTrainer(*mojolearn.init_small_mlp(0), data_schedule={'check': 1})
before = t.state_hash()
try:
    t.train_step(mojolearn.zeros((4, 8)), mojolearn.Array([0, 1, 2, 0], dtype='<i4'))
    raise SystemExit('a cuda step ran on a host without a GPU?')
except RuntimeError as e:
    assert t.state_hash() == before and t.step_ == 0
    print('forced cuda without a GPU:', e)" 2>&1) || status=1
echo "$check"
exit $status
