"""Execution sandbox for model-written code (HumanEval, MBPP). See docs/sandbox.md."""

from harness.sandbox.canary import check_canary
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.pool import default_workers, run_programs
from harness.sandbox.result import STATUSES, ExecutionResult, Isolation, SandboxError
from harness.sandbox.runner import probe_isolation, run_program

__all__ = [
    "STATUSES",
    "ExecutionResult",
    "Isolation",
    "SandboxError",
    "SandboxLimits",
    "check_canary",
    "default_workers",
    "probe_isolation",
    "run_program",
    "run_programs",
]
