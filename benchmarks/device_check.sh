#!/usr/bin/env bash
# What a GPU box checks, as one command: the device tests (tests/cuda), the speed benchmarks in bf16 (rows in flight
# among them) and the step op counts.
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
# Budget (s): tests 110 + refusion 155 + step_ops 50 + decoders 160 + fastdllm_step_cost 65 + rows_in_flight 50 = 590
# of limits, about ten minutes. refusion.py runs all four sections, section 2 at the two canvases its target reads
# (128 and 1024; about 4 min for 128/512/1024 in fp32 on a loaded two-core VM, most of it section 2). step_ops.py
# counts ops and host reads per forward; the counts are the same on any device, so it runs as it is, on the CPU (25 s
# on that VM). rows_in_flight.py times SDAR's block diffusion and plain LLaDA with 32 and 64 rows in flight against
# static batches of as many (2N GSM8K fixture prompts, canvas 64): tokens/s and the share of wall time outside the
# network's calls, where each op outside a forward is a kernel launch (its counts are the CPU run's: --no-counts).
echo "# budget: tests 110 s + refusion 155 s + step_ops 50 s + decoders 160 s + fastdllm_step_cost 65 s" \
  "+ rows_in_flight 50 s = 590 s of limits (about ten minutes)"
step tests 110 "$py" -m pytest tests/cuda -p no:cacheprovider -o addopts="--import-mode=importlib" -q -rs
step refusion 155 "$py" benchmarks/refusion.py --device "$device" --dtype bfloat16 --sections 1 2 3 4 --rounds 3 \
  --canvas 128 1024
step step_ops 50 "$py" benchmarks/step_ops.py --batches 1 8 16
step decoders 160 "$py" benchmarks/decoders.py --device "$device" --dtype bfloat16 --rounds 3
step fastdllm_step_cost 65 "$py" benchmarks/fastdllm_step_cost.py --device "$device" --dtype bfloat16
step rows_in_flight 50 "$py" benchmarks/rows_in_flight.py --device "$device" --dtype bfloat16 --decoders sdar llada \
  --rows 32 64 --canvas 64 --rounds 3 --no-counts
