"""Execution sandbox for model-written code (HumanEval, MBPP). See docs/sandbox.md."""

from tasks.execution.canary import check_canary
from tasks.execution.limits import SandboxLimits
from tasks.execution.pool import default_workers, run_programs
from tasks.execution.result import STATUSES, ExecutionResult, Isolation, SandboxError
from tasks.execution.execute import probe_isolation, run_program

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
