"""The harness's handle on the sandbox template process (see `_zygote.py` for the other side).

The template is a fresh `python -I -S` started with exec (subprocess uses vfork, so the harness,
which may hold a model, is never copied), with a scrubbed environment and no inherited files.
Each program gets its own supervisor forked from that pristine template: a new process whose
interpreter has never run or seen other code, at a fraction of the cost of a new interpreter.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings
from pathlib import Path
from types import TracebackType

from tasks.execution.cgroup import BatchCgroups, open_batch
from tasks.execution.result import SandboxError

_ENTRY = Path(__file__).with_name("_child.py")


def import_paths() -> tuple[str, ...]:
    """Site-packages of this interpreter: programs may import what the harness could.

    The template starts with -S (no site processing, several times faster), so these are added
    explicitly; .pth hooks such as editable installs are deliberately not run.
    """
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(p for p in (paths["purelib"], paths["platlib"]) if p))


def scrubbed_environment(home: str) -> dict[str, str]:
    """A fresh environment: nothing of the harness's variables (tokens, keys) reaches a program."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _batch_cgroups() -> BatchCgroups | None:
    """This batch's cgroup folder; without one, a warning (shown once per process by Python's filter)."""
    if not sys.platform.startswith("linux"):
        return None
    batch, why = open_batch()
    if batch is None:
        warnings.warn(f"code sandbox: {why}; memory and processes are bounded per process only "
                      "(RLIMIT_AS, RLIMIT_NPROC), see docs/sandbox.md", RuntimeWarning, stacklevel=2)
    return batch


class Zygote:
    """A running template process; thread-safe. Use as a context manager."""

    def __init__(self) -> None:
        if os.name != "posix":
            raise SandboxError("the code sandbox needs a POSIX system (Linux or macOS); use WSL on Windows")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_ENTRY), str(theirs.fileno()), *import_paths()],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd="/",
                env=scrubbed_environment(tempfile.gettempdir()),
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            raise SandboxError(f"could not start the sandbox ({sys.executable}): {exc}") from exc
        finally:
            theirs.close()
        self._socket = ours
        self._lock = threading.Lock()
        self._death: str | None = None
        self.cgroups = _batch_cgroups()

    def spawn(self, workdir: str, stdin: int, stdout: int, stderr: int) -> None:
        """Ask for a supervisor working in `workdir` on the given pipe ends.

        The descriptors are duplicated into the template; the caller still owns (and closes)
        them. There is no reply to wait for: the supervisor announces itself on its stderr.
        """
        message = os.fsencode(workdir) + b"\n"
        with self._lock:
            try:
                socket.send_fds(self._socket, [message], [stdin, stdout, stderr])
            except OSError as exc:
                raise SandboxError(self._death_notice()) from exc

    def check(self) -> None:
        """Raise SandboxError if the template process has died (a supervisor then never starts)."""
        if self._process.poll() is not None:
            with self._lock:
                raise SandboxError(self._death_notice())

    def _death_notice(self) -> str:
        if self._death is None:
            self._process.kill()
            _, err = self._process.communicate()
            last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            self._death = f"the sandbox template process died ({last[0]})"
        return self._death

    def close(self) -> None:
        """Let running supervisors finish; the template exits when the socket closes."""
        self._socket.close()
        try:
            if self._death is None:
                self._process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
        finally:
            if self.cgroups is not None:
                self.cgroups.close()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
