"""The sandbox's template process: a pristine `python -I -S` that forks one supervisor per program.

Started once per batch by `zygote.Zygote` in the harness (with exec, never as a fork of the
harness). It never runs, reads or even receives program code or tokens: for each program the
harness sends a work directory and three pipe ends, the fork reads its own request from them, and
this process goes back to waiting. Every supervisor, and so every program process, therefore
starts from the same pristine state. Forking this small warm interpreter instead of exec-ing a
new one saves the interpreter start and the imports almost every program repeats (typing, re,
collections), which are most of a short program's cost.
"""

import os
import socket
import sys

import _supervisor

# Imported once here so programs find them loaded. Modules that seed hidden state at import
# (random, uuid, tempfile) are deliberately absent: each program must seed its own.
WARM_MODULES = ("typing", "re", "collections", "itertools", "functools", "math", "heapq",
                "bisect", "string", "operator", "copy")


def _reap() -> None:
    """Collect finished supervisors so they do not linger as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One request: a work directory ending in a newline, with three descriptors attached."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, new_fds, _, _ = socket.recv_fds(sock, 4096, 3)
        if not chunk:
            return b"", fds
        data, fds = data + chunk, fds + new_fds
    return data[:-1], fds


def _run_supervisor(workdir: str, fds: list[int], libc) -> None:
    """In the forked child: become the supervisor of one program, then exit without teardown."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    os.chdir(workdir)
    os.environ.update(HOME=workdir, TMPDIR=workdir)
    code = 1
    try:
        code = _supervisor.main(libc)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # interpreter teardown would cost milliseconds and clean nothing


def serve(sock: socket.socket) -> None:
    """Fork a supervisor for each request until the harness closes the socket."""
    libc = _supervisor.iso.Libc() if sys.platform.startswith("linux") else None
    for name in WARM_MODULES:
        __import__(name)
    while True:
        workdir, fds = _receive(sock)
        if not workdir:
            break
        _reap()
        pid = os.fork()
        if pid == 0:
            sock.close()
            _run_supervisor(os.fsdecode(workdir), fds, libc)
        for fd in fds:
            os.close(fd)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
