#!/usr/bin/env bash
# What a GPU box checks, as one command: the device tests (tests/cuda), then the three speed benchmarks in bf16.
# Each step's output is written to $OUT (default ./device-check) while it runs, and every step has its own time limit,
# so a slow or failing step still leaves the others' results. The whole run is sized for about ten minutes.
#
#   benchmarks/device_check.sh              # python3 on PATH must hold torch with CUDA and transformers
#   PYTHON=.venv/bin/python DEVICE=cpu benchmarks/device_check.sh   # the same steps on the CPU (much slower)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-device-check}"
py="${PYTHON:-python3}"
device="${DEVICE:-cuda}"
mkdir -p "$out"
export PYTHONPATH="$PWD:$PWD/benchmarks:$PWD/tests/common:$PWD/tests/models/decoders" PYTHONUNBUFFERED=1 DLLM_TEST_DEVICE="$device"

step() {  # step NAME SECONDS COMMAND...: run it under a time limit, show and keep its output, report its status
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
  echo "== $name: exit ${PIPESTATUS[0]}" | tee -a "$out/$name.log"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
  "$py" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} | tee "$out/environment.log"
step tests 150 "$py" -m pytest tests/cuda -p no:cacheprovider -o addopts="--import-mode=importlib" -q -rs
step refusion 130 "$py" benchmarks/refusion.py --device "$device" --dtype bfloat16 --sections 1 2 3 --rounds 3
step decoders 200 "$py" benchmarks/decoders.py --device "$device" --dtype bfloat16 --rounds 3
step fastdllm_step_cost 90 "$py" benchmarks/fastdllm_step_cost.py --device "$device" --dtype bfloat16
