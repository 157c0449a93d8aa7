"""One writer per run folder: an advisory lock on ``<run>/run.lock`` held for the run's whole life.

Two runs of one command on one folder would both generate what the store lacks and store it twice. The lock is
``fcntl.flock`` on a file that names its holder (pid, host, start time), so a second run can say whom it waits for:
it exits with one line (``FolderInUse``), or with ``--wait`` waits until the folder is free. The kernel drops a flock
when its holder dies, however it dies, so a lock file a killed run left behind is simply taken over, and the run
says so; a holder that died while a process it started still holds the file is found by its pid and its file
replaced. A data-parallel launch takes the lock once, on rank 0, before the ranks meet, so no rank starts until the
folder is its run's.

The file is removed on release. Whoever locks it checks afterwards that the path still names the file it locked
(a release between its open and its lock would leave it holding a removed file) and otherwise tries again.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from harness.errors import RunError
from harness.run.folder import check_writable

LOCK_NAME = "run.lock"
POLL_SECONDS = 0.5  # how often --wait looks again (it also notices a holder that died)


class FolderInUse(RunError):
    """Another run holds the run folder (exit 2; --wait waits instead)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a run folder's lock, as its lock file says."""

    pid: int
    host: str
    started: str

    @classmethod
    def this_process(cls) -> Holder:
        return cls(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S %z"))

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        try:
            data = json.loads(text)
            return cls(int(data["pid"]), str(data["host"]), str(data["started"]))
        except (ValueError, KeyError, TypeError):
            return None  # empty (its holder is about to write it) or not ours

    def describe(self) -> str:
        where = "" if self.host == socket.gethostname() else f" on {self.host}"
        return f"pid {self.pid}{where} (started {self.started})"

    def running(self) -> bool:
        """Whether the holder's process still runs; a holder on another host is assumed to."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's process
            return True
        return True


def lock_path(root: Path) -> Path:
    return Path(root) / LOCK_NAME


@contextmanager
def hold_run_folder(root: Path, wait: bool = False, note: Callable[[str], None] = print) -> Iterator[Holder]:
    """Hold ``root``'s lock for the body (the folder is created if needed; one that cannot be written is a
    RunError); FolderInUse if another run holds it and ``wait`` is false. ``note`` gets the one-line notices
    (waiting, taking over a dead run's lock)."""
    check_writable(root)
    path = lock_path(root)
    fd, holder = acquire(path, wait, note)
    try:
        yield holder
    finally:
        release(path, fd)


def acquire(path: Path, wait: bool, note: Callable[[str], None]) -> tuple[int, Holder]:
    """The locked file's descriptor, with this process written in it as the holder."""
    waiting = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(fd, settle=True)
            if holder is not None and not holder.running():
                # its holder is dead, but a process it started still has the file open and locked: replace it
                remove_if_same(path, fd)
                os.close(fd)
                note(f"{path.parent}: took over the run lock of {holder.describe()}, which is no longer running")
                continue
            os.close(fd)
            who = holder.describe() if holder is not None else "another run (starting up)"
            if not wait:
                raise FolderInUse(f"run folder {path.parent} is in use by {who}; wait for it to finish (--wait "
                                  f"waits for it), or give another --output")
            if not waiting:
                note(f"{path.parent} is in use by {who}; waiting for it to finish (--wait)")
                waiting = True
            time.sleep(POLL_SECONDS)
            continue
        if not same_file(path, fd):  # released (and removed) between our open and our lock
            os.close(fd)
            continue
        previous = read_holder(fd)
        if previous is not None and previous.pid != os.getpid():
            state = "no longer running" if not previous.running() else "no longer holds it"
            note(f"{path.parent}: took over the run lock left by {previous.describe()}, which is {state}")
        me = Holder.this_process()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(asdict(me)) + "\n").encode(), 0)
        except OSError:  # a full disk, say: leave no lock behind
            release(path, fd)
            raise
        return fd, me


def release(path: Path, fd: int) -> None:
    """Remove the lock file (still locked, so nobody reads it half-gone), then unlock by closing it."""
    try:
        remove_if_same(path, fd)
    finally:
        os.close(fd)


def read_holder(fd: int, settle: bool = False) -> Holder | None:
    """The holder written in the file; ``settle`` gives a holder that has just locked it a moment to write."""
    for attempt in range(2 if settle else 1):
        holder = Holder.parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        if holder is not None or not settle:
            return holder
        if attempt == 0:
            time.sleep(0.2)
    return None


def same_file(path: Path, fd: int) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def remove_if_same(path: Path, fd: int) -> None:
    if same_file(path, fd):
        path.unlink(missing_ok=True)
