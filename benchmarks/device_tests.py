"""The device tests (tests/cuda) as the first step of the GPU subset, in a subprocess of their own: decoders and
networks on the accelerator against the CPU, which no CPU machine can check. Without CUDA they skip.

    python -m benchmarks device_tests [--device cuda] [--tests tests/cuda]

``--device cpu`` runs them on the CPU as the device under test (which checks the tests themselves; the quick run
takes one file).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common.verdict import Report

REPO = Path(__file__).resolve().parents[1]
IMPORTS = ("", "tests/common", "tests/models/decoders")  # what the device tests import from


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda", help="the device the tests put their models on")
    parser.add_argument("--tests", nargs="+", default=["tests/cuda"], help="test files or folders (default: all)")


def run(args: argparse.Namespace, report: Report) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DLLM_TEST_DEVICE": args.device,
           "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in IMPORTS)}
    done = subprocess.run([sys.executable, "-m", "pytest", *args.tests, "-p", "no:cacheprovider", "-o",
                           "addopts=--import-mode=importlib", "-q", "-rs"], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(done.stdout, end="")
    last = [line for line in done.stdout.splitlines() if line.strip()][-1:] or [f"exit {done.returncode}"]
    # pytest exits 5 when every test was deselected or none was collected; skips alone exit 0
    report.add(f"device tests ({' '.join(args.tests)}) pass", "exit 0", done.returncode, done.returncode == 0,
               f"{'PASS' if done.returncode == 0 else 'FAIL'} device tests: {last[0].strip()}")
