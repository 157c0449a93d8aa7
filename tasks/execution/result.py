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
    limit), no_code (empty program). output_tail: the last bytes of stdout+stderr, decoded.
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
    process_limit: bool  # RLIMIT_NPROC is enforced (it is not for uid 0)

    @classmethod
    def from_flags(cls, flags: frozenset[str]) -> Isolation:
        return cls(
            network="net" in flags,
            filesystem="fs" in flags,
            processes="pid" in flags,
            unprivileged="uid" in flags or "caps" in flags,
            process_limit="nproc" in flags,
        )
