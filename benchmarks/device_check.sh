#!/usr/bin/env bash
# The GPU subset as one command, kept at this path for the device tests' skip message and old notes:
# `python -m benchmarks --device cuda` (docs/benchmarks.md). PYTHON picks the interpreter, DEVICE the device (cpu checks
# the path); the one JSON goes to $OUT/benchmarks.json when OUT is set.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m benchmarks --device "${DEVICE:-cuda}" "$@"
