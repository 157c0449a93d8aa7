"""Killing a run at a chosen moment, as a crash or an impatient user would."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable


def kill_when(process: subprocess.Popen, ready: Callable[[], bool], seconds: float = 300) -> None:
    """SIGKILL ``process`` as soon as ``ready()`` holds (or ``seconds`` pass), and check it had not finished."""
    deadline = time.time() + seconds
    while time.time() < deadline and not ready() and process.poll() is None:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
