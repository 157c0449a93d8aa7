"""Per-program control groups: a program's memory and process count bounded in total, descendants included.

`RLIMIT_AS` bounds each process separately and `RLIMIT_NPROC` counts the processes of a whole user, so neither
bounds a program that forks, nor memfd or tmpfs pages (which are not address space). A memory and a pids cgroup per
program do: every page the program or any descendant charges (anonymous, memfd, tmpfs, page tables) counts against
`memory_bytes`, and every process and thread against `max_processes`. The harness makes one directory per batch
under its own cgroup and one leaf per program in it; the program's process joins its leaf before it runs anything
(see `_supervisor.prepare_child`). cgroup v2 is used where its memory and pids controllers are available to us,
otherwise v1's memory and pids hierarchies; with neither (not root, no delegation) `open_batch` returns None and
the caller says so once.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLERS = ("memory", "pids")
_REMOVE_TRIES = 50   # x 10 ms: how long to wait for killed leftovers to be released before deferring


@dataclass(frozen=True)
class Hierarchy:
    """Where cgroups can be made: `base` directories to create batch folders in (v1: one per controller)."""

    version: int
    bases: tuple[str, ...]


def parse_mountinfo(text: str) -> list[tuple[str, str, str, frozenset[str]]]:
    """(root, mount point, fstype, super options) of each mount; mountinfo escapes are left as they are."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        after = fields[fields.index("-") + 1:]
        mounts.append((fields[3], fields[4], after[0], frozenset(after[2].split(","))))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Controller name (or "" for v2) -> this process's cgroup path."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _inside(mount_root: str, mount_point: str, path: str) -> str | None:
    """The directory of cgroup `path` under a mount of the hierarchy whose root is `mount_root`."""
    root = mount_root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return (mount_point.rstrip("/") + path[len(root):]).rstrip("/") or "/"


def find_hierarchy(mountinfo: str, proc_cgroup: str) -> Hierarchy | None:
    """v1 memory+pids hierarchies if both are mounted, else a v2 hierarchy offering both controllers, else None.

    v1 wins on a hybrid machine because there the controllers are bound to v1 and the v2 tree has none. For v2 the
    batch folder is made next to our own cgroup (in its parent), since a cgroup holding processes may not hand
    controllers to children unless it is the root.
    """
    mounts, own = parse_mountinfo(mountinfo), parse_proc_cgroup(proc_cgroup)
    v1 = {}
    for root, point, fstype, options in mounts:
        for name in CONTROLLERS:
            if fstype == "cgroup" and name in options and name in own and name not in v1:
                v1[name] = _inside(root, point, own[name])
    if len(v1) == len(CONTROLLERS) and all(v1.values()):
        return Hierarchy(1, tuple(v1[name] for name in CONTROLLERS))
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            mine = _inside(root, point, own[""])
            if mine is None:
                continue
            try:
                offered = Path(mine, "cgroup.controllers").read_text().split()
            except OSError:
                continue
            if all(name in offered for name in CONTROLLERS):
                at_root = own[""] == root or own[""] == "/"
                return Hierarchy(2, (mine if at_root else os.path.dirname(mine),))
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read_counter(path: str, key: str) -> int:
    """`key N` from a flat-keyed cgroup file (memory.events, memory.oom_control); 0 if absent."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@dataclass(frozen=True)
class ProgramCgroup:
    """One program's leaf cgroup (v1: a memory and a pids directory; v2: one directory)."""

    version: int
    dirs: tuple[str, ...]

    @property
    def procs_files(self) -> tuple[str, ...]:
        """What the program's process writes "0" to, to join."""
        return tuple(os.path.join(d, "cgroup.procs") for d in self.dirs)

    def memory_exceeded(self) -> bool:
        """Whether the kernel killed a process of the program for exceeding the memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _read_counter(os.path.join(self.dirs[0], name), "oom_kill") > 0

    def kill_members(self) -> None:
        """Kill what is left (a daemon without a pid namespace, a process not yet reaped)."""
        if self.version == 2 and os.path.exists(os.path.join(self.dirs[0], "cgroup.kill")):
            try:
                _write(os.path.join(self.dirs[0], "cgroup.kill"), "1")
                return
            except OSError:
                pass
        for procs in self.procs_files:
            try:
                pids = Path(procs).read_text().split()
            except OSError:
                continue
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError, ValueError):
                    pass

    def try_remove(self) -> bool:
        """Remove the leaf; False while killed members are still being released."""
        for directory in self.dirs:
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                continue
            except OSError:
                return False
        return True


@dataclass
class BatchCgroups:
    """The cgroup folder of one batch (one per `Zygote`) and the program leaves in it."""

    hierarchy: Hierarchy
    dirs: tuple[str, ...]
    _leftover: list[ProgramCgroup] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, memory_bytes: int, max_processes: int) -> ProgramCgroup:
        """A fresh leaf with the program's limits; raises OSError if the kernel refuses."""
        name = "p-" + secrets.token_hex(6)
        leaf = ProgramCgroup(self.hierarchy.version, tuple(os.path.join(d, name) for d in self.dirs))
        try:
            for directory in leaf.dirs:
                os.mkdir(directory, 0o700)
            memory, pids = leaf.dirs[0], leaf.dirs[-1]
            if leaf.version == 2:
                _write(os.path.join(memory, "memory.max"), str(memory_bytes))
                _write_if_present(os.path.join(memory, "memory.swap.max"), "0")
                _write(os.path.join(memory, "memory.oom.group"), "1")  # an OOM kill takes every process
            else:
                _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
                _write_if_present(os.path.join(memory, "memory.memsw.limit_in_bytes"), str(memory_bytes))
            _write(os.path.join(pids, "pids.max"), str(max_processes))
        except OSError:
            leaf.try_remove()
            raise
        return leaf

    def release(self, leaf: ProgramCgroup) -> None:
        """Kill whatever is left in the leaf and remove it (later, at `close`, if it is slow to empty)."""
        for _ in range(_REMOVE_TRIES):
            if leaf.try_remove():
                return
            leaf.kill_members()
            time.sleep(0.01)
        with self._lock:
            self._leftover.append(leaf)

    def close(self) -> None:
        with self._lock:
            leftover, self._leftover = self._leftover, []
        for leaf in leftover:
            leaf.kill_members()
            for _ in range(_REMOVE_TRIES):
                if leaf.try_remove():
                    break
                time.sleep(0.01)
        for directory in self.dirs:
            try:
                os.rmdir(directory)
            except OSError:
                pass  # a leaf that never emptied: it stays (empty folders cost nothing) rather than hang


def _write_if_present(path: str, value: str) -> None:
    """Swap limits exist only with swap accounting; without it there is nothing to bound there."""
    if os.path.exists(path):
        _write(path, value)


def open_batch() -> tuple[BatchCgroups | None, str]:
    """A batch folder under our own cgroup, or (None, why not)."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None, "no /proc/self/cgroup (not Linux)"
    hierarchy = find_hierarchy(mountinfo, own)
    if hierarchy is None:
        return None, "no cgroup hierarchy with the memory and pids controllers is mounted"
    name = f"dllm-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
    made: list[str] = []
    try:
        for base in hierarchy.bases:
            made.append(os.path.join(base, name))
            os.mkdir(made[-1], 0o755)
        if hierarchy.version == 2:
            _write(os.path.join(made[0], "cgroup.subtree_control"), "+memory +pids")
    except OSError as exc:
        for directory in reversed(made):
            try:
                os.rmdir(directory)
            except OSError:
                pass
        return None, f"cannot create a cgroup under {hierarchy.bases[0]} ({exc.strerror or exc})"
    return BatchCgroups(hierarchy, tuple(made)), ""
