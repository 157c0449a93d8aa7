"""How many CPU threads torch uses for a run (``--threads``).

torch's default is one thread per physical core, which oversubscribes a CPU that other work shares: every op's
threads wait for each other's time slices, so CPU time itself grows and a run slows several-fold. The tiny models and
the small ops of a decoder's own work gain nothing from a second thread even on an idle two-core machine
(docs/measurement.md, "Threads": 1 thread gave 1.3-4x the tokens/s of 2), so on the CPU ``auto`` is one thread; a
large model on a many-core CPU asks for more with ``--threads N``. On an accelerator the host threads only feed
the device, and ``auto`` keeps torch's default, capped at the cores this process may run on.
"""

from __future__ import annotations

import os

import torch

from harness.errors import UsageError

AUTO = "auto"
CPU_AUTO_THREADS = 1


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and taskset narrow), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_threads(value: str) -> int | None:
    """``auto`` (None: decided by the device) or a positive count; anything else is a one-line UsageError."""
    if value == AUTO:
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise UsageError(f"--threads must be auto or a whole number of at least 1, got {value!r}")
    return count


def default_threads(device: torch.device) -> int:
    """``auto``: $OMP_NUM_THREADS when the user set it; one thread on the CPU (measured best there); on an
    accelerator torch's default capped at the usable cores."""
    from_env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if from_env.isdigit() and int(from_env) > 0:
        return int(from_env)
    if device.type == "cpu":
        return CPU_AUTO_THREADS
    return max(1, min(torch.get_num_threads(), usable_cores()))


def resolve_threads(value: str, device: torch.device) -> int:
    """The thread count a ``--threads`` value means on ``device``."""
    count = parse_threads(value)
    return default_threads(device) if count is None else count


def apply_threads(count: int | None) -> None:
    """Set torch's intra-op threads (None leaves torch's setting alone, as library callers expect)."""
    if count is not None and torch.get_num_threads() != count:
        torch.set_num_threads(count)
