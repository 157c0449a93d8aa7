"""Run one program in the sandbox: hand a request to a forked supervisor, read its one-line report."""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import tempfile
import time
from dataclasses import dataclass, replace

from tasks.execution.limits import SandboxLimits, encode_request
from tasks.execution.result import STATUSES, ExecutionResult, Isolation, SandboxError
from tasks.execution.zygote import Zygote

SETUP_FAILED = "sandbox setup failed: "  # these two must match _supervisor's
SUPERVISOR_PID = "supervisor pid "
_SUPERVISOR_GRACE_S = 10.0    # beyond the wall limit, before the harness kills a silent supervisor
_MAX_STDERR = 1 << 16


@dataclass(frozen=True)
class _Pipes:
    """The harness's ends of one supervisor's stdin, stdout and stderr, and the ends it gets."""

    stdin: int
    stdout: int
    stderr: int
    theirs: tuple[int, int, int]

    @classmethod
    def open(cls) -> _Pipes:
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        return cls(in_w, out_r, err_r, (in_r, out_w, err_w))


@dataclass(frozen=True)
class _Streams:
    out: bytes
    err: bytes
    timed_out: bool


def _write_some(fd: int, data: memoryview) -> memoryview:
    """Write what the pipe takes now; return the rest (nothing if the reader is gone)."""
    try:
        return data[os.write(fd, data[: 1 << 16]):]
    except BlockingIOError:
        return data
    except BrokenPipeError:
        return data[:0]


def _exchange(pipes: _Pipes, request: memoryview, timeout: float) -> _Streams:
    """Finish writing the request, then read stdout and stderr until both close or time runs out."""
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        if request:
            selector.register(pipes.stdin, selectors.EVENT_WRITE)
        else:
            os.close(pipes.stdin)
        selector.register(pipes.stdout, selectors.EVENT_READ, out)
        selector.register(pipes.stderr, selectors.EVENT_READ, err)
        try:
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _Streams(bytes(out), bytes(err), timed_out=True)
                for key, _ in selector.select(remaining):
                    if key.fd == pipes.stdin:
                        request = _write_some(key.fd, request)
                        if not request:
                            selector.unregister(key.fd)
                            os.close(key.fd)
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fd)
                        os.close(key.fd)
                    elif key.fd == pipes.stdout or len(err) < _MAX_STDERR:
                        key.data.extend(chunk)
        finally:
            for key in list(selector.get_map().values()):
                os.close(key.fd)
    return _Streams(bytes(out), bytes(err), timed_out=False)


def _stderr_lines(err: bytes) -> list[str]:
    return err.decode("utf-8", "replace").strip().splitlines()


def _kill_supervisor(err: bytes) -> None:
    for line in _stderr_lines(err):
        if line.startswith(SUPERVISOR_PID):
            try:
                os.kill(int(line[len(SUPERVISOR_PID):]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def _parse_report(
    streams: _Streams, token: str, duration: float, zygote: Zygote
) -> tuple[ExecutionResult, frozenset[str]]:
    header, _, tail = streams.out.partition(b"\n")
    fields = header.decode("ascii", "replace").split(" ")
    if len(fields) == 4 and fields[0] == token and fields[1] in STATUSES:
        flags = frozenset(f for f in fields[3].split(",") if f and f != "-")
        return ExecutionResult(fields[1], tail.decode("utf-8", "replace"), duration), flags
    messages = [line for line in _stderr_lines(streams.err) if not line.startswith(SUPERVISOR_PID)]
    for line in messages:
        if line.startswith(SETUP_FAILED):
            raise SandboxError(line)
    zygote.check()  # no report because the template died: the sandbox is broken, not the program
    if streams.timed_out:  # the supervisor itself hung: never seen, but never wait forever
        _kill_supervisor(streams.err)
        return ExecutionResult("timeout", "", duration), frozenset()
    # The supervisor died without a report (e.g. killed by a program that could reach it).
    detail = "\n".join(messages)[-500:] or "no report"
    return ExecutionResult("error", f"sandbox supervisor failed: {detail}", duration), frozenset()


def execute(
    program: str, limits: SandboxLimits, zygote: Zygote, force_userns: bool = False
) -> tuple[ExecutionResult, frozenset[str]]:
    """Run `program` in a supervisor forked from `zygote`; also return the isolation flags it got.

    `force_userns` makes a root harness take the unprivileged (user namespace) path, so tests on
    a root machine can exercise what ordinary users get.
    """
    if not program.strip():
        return ExecutionResult("no_code", "", 0.0), frozenset()
    if zygote.cgroups is None:
        return _execute(program, limits, zygote, force_userns, None)
    try:
        leaf = zygote.cgroups.create(limits.memory_bytes, limits.max_processes)
    except OSError as exc:
        raise SandboxError(f"cannot create the program's cgroup: {exc}") from exc
    try:
        result, flags = _execute(program, limits, zygote, force_userns, leaf.procs_files)
        if leaf.memory_exceeded():  # the kernel killed a process of it: over the limit, whatever it printed
            result = replace(result, status="memory")
        return result, flags
    finally:
        zygote.cgroups.release(leaf)


def _execute(program: str, limits: SandboxLimits, zygote: Zygote, force_userns: bool,
             cgroup_procs: tuple[str, ...] | None) -> tuple[ExecutionResult, frozenset[str]]:
    token = secrets.token_hex(16)
    request = memoryview(encode_request(limits, token, program, force_userns, cgroup_procs or ()))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sandbox-", ignore_cleanup_errors=True) as workdir:
        pipes = _Pipes.open()
        os.set_blocking(pipes.stdin, False)
        request = _write_some(pipes.stdin, request)  # already waiting when the supervisor starts
        try:
            zygote.spawn(workdir, *pipes.theirs)
        except BaseException:
            for fd in (pipes.stdin, pipes.stdout, pipes.stderr):
                os.close(fd)
            raise
        finally:
            for fd in pipes.theirs:
                os.close(fd)
        streams = _exchange(pipes, request, limits.wall_timeout + _SUPERVISOR_GRACE_S)
    return _parse_report(streams, token, time.perf_counter() - start, zygote)


def run_program(program: str, limits: SandboxLimits = SandboxLimits()) -> ExecutionResult:
    """Run one full test program (candidate code + tests) in a fresh, isolated process."""
    if not program.strip():
        return ExecutionResult("no_code", "", 0.0)
    with Zygote() as zygote:
        return execute(program, limits, zygote)[0]


def probe_isolation(limits: SandboxLimits = SandboxLimits()) -> Isolation:
    """Which protections this machine gives the sandbox; raises SandboxError if it cannot run."""
    with Zygote() as zygote:
        result, flags = execute("pass\n", limits, zygote)
    if result.status != "passed":
        raise SandboxError(f"sandbox probe gave {result.status!r}: {result.output_tail[-200:]!r}")
    return Isolation.from_flags(flags)
