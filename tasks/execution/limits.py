"""Resource limits for one sandboxed program, and their wire format to the supervisor."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class SandboxLimits:
    """What one program may consume before it is stopped.

    `cpu_seconds` is the budget the reference checkers call "timeout" (3 s). The wall-clock limit
    defaults to `2 * cpu_seconds + 2` so a program that sleeps or blocks is stopped too, while a
    CPU-bound one on a busy machine is judged by the CPU it used, not by the machine's load.
    """

    cpu_seconds: float = 3.0
    wall_seconds: float | None = None
    memory_bytes: int = 2 * GiB        # address space (RLIMIT_AS)
    max_processes: int = 64           # RLIMIT_NPROC: processes and threads of the sandbox user
    max_file_bytes: int = 16 * MiB     # largest file the program may write (RLIMIT_FSIZE)
    max_open_files: int = 64          # RLIMIT_NOFILE
    max_output_bytes: int = 2048      # tail of stdout+stderr kept; the rest is read and dropped
    max_disk_bytes: int = 64 * MiB     # size of the private tmpfs work dir (where namespaces exist)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cpu_seconds) and self.cpu_seconds > 0):
            raise ValueError(f"cpu_seconds must be a positive number, got {self.cpu_seconds!r}")
        if self.wall_seconds is not None and not (
            math.isfinite(self.wall_seconds) and self.wall_seconds > 0
        ):
            raise ValueError(f"wall_seconds must be positive or None, got {self.wall_seconds!r}")
        minimums = {
            "memory_bytes": 64 * MiB,   # a bare interpreter needs ~20 MiB of address space
            "max_processes": 1,
            "max_file_bytes": 1,
            "max_open_files": 8,        # the interpreter itself keeps a few open
            "max_output_bytes": 1,
            "max_disk_bytes": 1 * MiB,
        }
        for name, low in minimums.items():
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")

    @property
    def wall_timeout(self) -> float:
        """Seconds of real time before the whole sandbox is killed."""
        if self.wall_seconds is not None:
            return self.wall_seconds
        return 2.0 * self.cpu_seconds + 2.0

    @property
    def cpu_rlimit(self) -> int:
        """RLIMIT_CPU counts whole seconds; the supervisor also compares the CPU it measured."""
        return max(1, math.ceil(self.cpu_seconds))


def encode_request(limits: SandboxLimits, token: str, program: str, force_userns: bool = False,
                   cgroup_procs: tuple[str, ...] = ()) -> bytes:
    """Header lines `key=value`, a blank line, then the program: read by `_supervisor.read_request`."""
    header = {
        "token": token,
        "cpu_seconds": repr(limits.cpu_seconds),
        "cpu_rlimit": limits.cpu_rlimit,
        "wall_seconds": repr(limits.wall_timeout),
        "memory_bytes": limits.memory_bytes,
        "max_processes": limits.max_processes,
        "max_file_bytes": limits.max_file_bytes,
        "max_open_files": limits.max_open_files,
        "max_output_bytes": limits.max_output_bytes,
        "max_disk_bytes": limits.max_disk_bytes,
        "force_userns": int(force_userns),
        "cgroup_procs": os.pathsep.join(cgroup_procs),
    }
    lines = "".join(f"{key}={value}\n" for key, value in header.items())
    return (lines + "\n" + program).encode("utf-8", "surrogatepass")
