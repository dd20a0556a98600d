#!/usr/bin/env bash
# GPU checks beyond tools/device_check.sh, with the same carried package (build/device/): the
# cost of a session's first GPU step, the pytest suite under MOJOLEARN_VENDOR=cuda (minus
# tests/test_build.py, which needs the Mojo toolchain), and README's main job on cuda and on
# cpu, whose final state hashes must be equal. Exit 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/build/device" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
status=0

echo "=== first-step cost, MOJOLEARN_VENDOR=cuda"
MOJOLEARN_VENDOR=cuda timeout 60 "$PY" - <<'PY' || status=1
import time
t0 = time.perf_counter()
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
t1 = time.perf_counter()
raw = ml._runtime.backend._import(ml.vendor_used(), ml.numeric_mode_used())
print(f"import {t1 - t0:.3f} s; vendor {ml.vendor_used()}; devices {raw.device_count()}")
X, y = next(iter(_rng.batches(2, 32, 1)))
for i in range(3):
    t = ml.SmallMLPTrainer(*_spec.init_small_mlp(1), data_schedule={"v": 1})
    a = time.perf_counter(); t.train_step(X, y); b = time.perf_counter()
    for _ in range(20):
        t.train_step(X, y)
    c = time.perf_counter()
    del t
    d = time.perf_counter()
    print(f"session {i}: first step {1e3 * (b - a):.1f} ms, next {1e6 * (c - b) / 20:.1f} us/step, close {1e3 * (d - c):.1f} ms")
PY

echo "=== pytest, MOJOLEARN_VENDOR=cuda"
par=()
"$PY" -c "import xdist" 2>/dev/null && par=(-n 8)
"$PY" -c "import pytest_timeout" 2>/dev/null && par+=(--timeout 60)  # one hang must not eat the lease
MOJOLEARN_VENDOR=cuda timeout 200 "$PY" -m pytest -q -p no:cacheprovider "${par[@]}" -rfE \
  --durations=8 tests --ignore=tests/test_build.py || status=1

echo "=== main job (mojolearn train): state hash per vendor"
hashes=()
for vendor in cuda cpu; do
  dir=$(mktemp -d)
  h=$(cd "$dir" && MOJOLEARN_VENDOR=$vendor timeout 90 "$PY" -m mojolearn train 2>&1 \
      | awk '/state hash/ {print $3}')
  echo "$vendor: ${h:-(no hash: the run failed)}"
  hashes+=("${h:-none-$vendor}")
done
[ "${hashes[0]}" = "${hashes[1]}" ] && [ "${hashes[0]#none}" = "${hashes[0]}" ] && echo "main job: same state hash on cuda and cpu" \
  || { echo "main job: STATE HASH DIFFERS"; status=1; }
exit $status
