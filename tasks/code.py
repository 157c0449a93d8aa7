"""What the two code tasks share: the fork's python-fence rule, and scoring programs in the sandbox (tasks/execution).

The ReFusion wrapper replaced every answer that contains a python block by the first block's body. The harness
applies that rule to the code tasks only (docs/tasks.md): on math answers it throws away the reasoning.
"""

from __future__ import annotations

import re
from typing import Sequence

from tasks.execution import ExecutionResult, SandboxLimits, run_programs

PYTHON_BLOCK = re.compile(r"```python\n(.*?)\n```", re.DOTALL)

# code_eval's per-program timeout in the fork was 3.0 s.
LIMITS = SandboxLimits(cpu_seconds=3.0)
NO_CODE = ExecutionResult(status="no_code", output_tail="", duration_s=0.0)


def first_python_block(text: str) -> str:
    """The body of the first python block if there is one, else the text unchanged (the wrapper's rule)."""
    match = PYTHON_BLOCK.search(text)
    return match.group(1) if match else text


def execute(programs: Sequence[str | None], limits: SandboxLimits = LIMITS) -> list[ExecutionResult]:
    """Run every program in the sandbox, in parallel; ``None`` (no code to run) becomes a ``no_code`` result."""
    ran = iter(run_programs([p for p in programs if p is not None], limits))
    return [next(ran) if p is not None else NO_CODE for p in programs]


def diagnostics(output: str, result: ExecutionResult) -> dict[str, object]:
    return {
        "empty": not output.strip(),
        "invalid": result.status == "no_code",
        "exec_status": result.status,
        "exec_output_tail": result.output_tail,
    }
