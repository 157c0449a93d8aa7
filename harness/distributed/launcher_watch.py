"""A rank stops when its launcher dies: ``torchrun`` or ``accelerate launch`` killed with SIGKILL cannot stop its
children, which would keep generating and race a rerun on the same store shards.

Two guards: on Linux the kernel sends SIGTERM when the parent exits (``prctl(PR_SET_PDEATHSIG)``), and a daemon
thread notices the rank being re-parented (its parent pid changes) and ends the process even while the main thread
is blocked inside a collective or a forward, where a Python signal handler cannot run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
POLL_SECONDS = 0.5


def set_parent_death_signal(signum: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``signum`` when the parent dies (Linux only); False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parent_changed(parent: int) -> bool:
    """The launcher that started this process is gone: the process was re-parented (to init or a subreaper)."""
    return os.getppid() != parent


def watch_launcher(rank: int, parent: int | None = None, poll: float = POLL_SECONDS) -> threading.Thread:
    """Set the parent-death signal and start the re-parenting watch for a rank whose launcher is ``parent``."""
    parent = os.getppid() if parent is None else parent
    set_parent_death_signal()
    if parent_changed(parent):  # the launcher died before the signal was set
        _stop(rank)

    def watch() -> None:
        while not parent_changed(parent):
            time.sleep(poll)
        _stop(rank)

    thread = threading.Thread(target=watch, name="launcher-watch", daemon=True)
    thread.start()
    return thread


def _stop(rank: int) -> None:
    print(f"rank {rank}: its launcher is gone, stopping; finished samples are kept in the store, rerun the same "
          f"command to resume", file=sys.stderr, flush=True)
    os._exit(1)
