"""A known-correct and a known-wrong program, run before scoring any code task.

If the sandbox is broken on a machine (missing interpreter access, a limit too tight to start
Python, a kernel that refuses something), every sample would score zero without a word; the
canary turns that into one clear error instead.
"""

from __future__ import annotations

from tasks.execution.limits import SandboxLimits
from tasks.execution.pool import run_programs
from tasks.execution.result import SandboxError

KNOWN_GOOD = """\
def add(a, b):
    return a + b


def check(candidate):
    assert candidate(2, 3) == 5
    assert candidate(-1, 1) == 0


check(add)
"""

KNOWN_BAD = KNOWN_GOOD.replace("return a + b", "return a - b")


def check_canary(limits: SandboxLimits = SandboxLimits()) -> None:
    """Raise SandboxError unless the known-good program passes and the known-bad one fails."""
    good, bad = run_programs([KNOWN_GOOD, KNOWN_BAD], limits, workers=2)
    for name, result, expected in (("known-correct", good, "passed"), ("known-wrong", bad, "failed")):
        if result.status != expected:
            lines = result.output_tail.strip().splitlines()
            detail = lines[-1] if lines else "no output"
            raise SandboxError(
                f"sandbox canary: the {name} program gave {result.status!r} instead of "
                f"{expected!r} ({detail}); code scores would be wrong, stopping"
            )
