"""What a sandboxed run returns, and the one error the sandbox raises."""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = ("passed", "failed", "error", "timeout", "memory", "no_code")


class SandboxError(RuntimeError):
    """The sandbox itself is broken or unsafe here; scoring must stop rather than read zero."""


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of one program.

    status: passed (ran to the end), failed (AssertionError), error (any other exception, syntax
    error, early exit, crash), timeout (CPU or wall clock), memory (MemoryError or address-space
    limit, or the kernel killed a process of the program at its memory cgroup's limit), no_code (empty program). output_tail: the last bytes of stdout+stderr, decoded.
    """

    status: str
    output_tail: str
    duration_s: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class Isolation:
    """Which protections the sandbox obtained on this machine (see docs/sandbox.md)."""

    network: bool        # new network namespace: no interface, not even loopback
    filesystem: bool     # host filesystem read-only, private size-capped tmpfs work dir
    processes: bool      # pid namespace: host processes invisible, descendants die with the run
    unprivileged: bool   # runs as uid 65534, or with every capability dropped
    process_limit: bool  # a process limit holds: the pids cgroup, or RLIMIT_NPROC (not enforced for uid 0)
    aggregate_limits: bool = False  # memory and pids cgroup: the program and its descendants bounded in total
    syscall_filter: bool = False    # seccomp: keyrings and other shared kernel state denied

    @classmethod
    def from_flags(cls, flags: frozenset[str]) -> Isolation:
        return cls(
            network="net" in flags,
            filesystem="fs" in flags,
            processes="pid" in flags,
            unprivileged="uid" in flags or "caps" in flags,
            process_limit="nproc" in flags or "cgroup" in flags,
            aggregate_limits="cgroup" in flags,
            syscall_filter="seccomp" in flags,
        )
