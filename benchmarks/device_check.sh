#!/usr/bin/env bash
# What a GPU box checks, as one command: the device tests (tests/cuda), the speed benchmarks in bf16 and the step op
# counts.
# Each step's output is written to $OUT (default ./device-check) while it runs, and every step has its own time limit,
# so a slow or failing step still leaves the others' results. The whole run is sized for about ten minutes: the step
# limits add up to 590 s, under the 600 s one command may run on a lent GPU box (the budget is printed before the
# steps).
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
# Budget (s): tests 120 + refusion 170 + step_ops 60 + decoders 170 + fastdllm_step_cost 70 = 590 of limits, about ten
# minutes. refusion.py runs all four sections, section 2 at the two canvases its target reads (128 and 1024; about
# 4 min for 128/512/1024 in fp32 on a loaded two-core VM, most of it section 2). step_ops.py counts ops and host reads
# per forward; the counts are the same on any device, so it runs as it is, on the CPU (25 s on that VM).
echo "# budget: tests 120 s + refusion 170 s + step_ops 60 s + decoders 170 s + fastdllm_step_cost 70 s = 590 s" \
  "of limits (about ten minutes)"
step tests 120 "$py" -m pytest tests/cuda -p no:cacheprovider -o addopts="--import-mode=importlib" -q -rs
step refusion 170 "$py" benchmarks/refusion.py --device "$device" --dtype bfloat16 --sections 1 2 3 4 --rounds 3 \
  --canvas 128 1024
step step_ops 60 "$py" benchmarks/step_ops.py --batches 1 8 16
step decoders 170 "$py" benchmarks/decoders.py --device "$device" --dtype bfloat16 --rounds 3
step fastdllm_step_cost 70 "$py" benchmarks/fastdllm_step_cost.py --device "$device" --dtype bfloat16
