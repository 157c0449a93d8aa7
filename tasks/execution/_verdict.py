"""From what the supervisor saw to one status. Runs in the sandbox's template process (standard library only).

Only the token line, which the program's own process writes after `exec` returned, can say `passed`; everything
else (exit codes, signals, CPU used, the output tail) can only make a verdict worse.
"""

import os
import signal

STATUSES = ("passed", "failed", "error", "memory")


def find_token_line(data: bytes, token: bytes) -> bytes | None:
    """What follows the last occurrence of the token; everything else on that pipe is noise."""
    at = data.rfind(token + b" ")
    if at < 0:
        return None
    return data[at + len(token) + 1:].split(b"\n", 1)[0]


def exit_outcome(wait_status: int | None) -> tuple[int | None, int | None]:
    """(exit code, killing signal) of the program."""
    if wait_status is None:
        return None, None
    code = os.waitstatus_to_exitcode(wait_status)
    return (None, -code) if code < 0 else (code, None)


def classify(token_status: bytes | None, exit_code: int | None, killed_by: int | None,
             cpu: float, timed_out: bool, req: dict, tail: bytes) -> str:
    """Map what the supervisor saw to one status; only the token line can say `passed`."""
    if token_status is not None and token_status.decode(errors="replace") in STATUSES:
        status = token_status.decode()
        if status == "passed" and exit_code != 0:
            return "error"
        if status == "passed" and cpu > float(req["cpu_seconds"]):
            return "timeout"
        return status
    if timed_out or killed_by == signal.SIGXCPU:
        return "timeout"
    # SIGKILL at the hard CPU limit (budget + 1 s): rusage, sampled on ticks, can read 15% low.
    if killed_by == signal.SIGKILL and cpu >= 0.8 * int(req["cpu_rlimit"]):
        return "timeout"
    if b"MemoryError" in tail:
        return "memory"
    return "error"
