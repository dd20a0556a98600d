#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, no network and no Mojo toolchain (Python 3.10+): run the
# identical-mode golden-hash check (SmallMLPTrainer's and MLPTrainer's goldens through the
# trainers' device-resident sessions, and on cuda the stateless mlp_train_step against the cpu
# binding: tools/device_golden.py), the training benchmark, and MLPTrainer at [784,256,10]
# batch 256 beside torch eager on the GPU (tools/device_bench_mlp.py), with the package built
# here by tools/build_device_package.sh (carried as build/device/). Prints the tables.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/build/device"
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
status=0
for vendor in cuda cpu; do
  echo "=== golden hashes, vendor $vendor"
  MOJOLEARN_VENDOR=$vendor MOJOLEARN_NUMERIC_MODE=identical "$PY" tools/device_golden.py || status=1
done
echo "=== benchmark (MOJOLEARN_VENDOR=cuda)"
MOJOLEARN_VENDOR=cuda "$PY" tools/bench_train.py --quick 2>&1 | tail -40 || status=1
echo "=== MLPTrainer [784,256,10] batch 256: cuda, cpu and torch eager on the GPU"
"$PY" tools/device_bench_mlp.py 2>&1 | tail -12 || status=1
exit $status
