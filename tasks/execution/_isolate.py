"""Linux isolation primitives for the sandbox supervisor (namespaces, mounts, capabilities).

Loaded in the sandbox's template process (a fresh `python -I -S`), so it uses the standard
library only. Every function raises OSError naming the failing call, so the supervisor can
report one line.
"""

import os
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38

_CAP_VERSION_3 = 0x20080522
_MOUNT_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}


class Libc:
    """Thin errno-checking wrappers over the libc calls Python 3.11's `os` lacks.

    Built once per template process and inherited by every forked supervisor.
    """

    def __init__(self) -> None:
        import ctypes

        self._ctypes = ctypes
        self._lib = ctypes.CDLL(None, use_errno=True)
        self._lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                    ctypes.c_ulong, ctypes.c_char_p]
        self._lib.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            err = self._ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def unshare(self, flags: int) -> None:
        self._check(self._lib.unshare(flags), "unshare")

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int,
              data: str | None = None) -> None:
        def encode(text: str | None) -> bytes | None:
            return None if text is None else os.fsencode(text)

        result = self._lib.mount(encode(source), encode(target), encode(fstype), flags, encode(data))
        self._check(result, f"mount {target}")

    def prctl(self, option: int, arg: int) -> None:
        self._check(self._lib.prctl(option, arg, 0, 0, 0), f"prctl {option}")

    def drop_capabilities(self) -> None:
        """Empty the effective, permitted and inheritable sets (capset, version 3)."""
        ct = self._ctypes
        header = (ct.c_uint32 * 2)(_CAP_VERSION_3, 0)   # struct __user_cap_header_struct
        data = (ct.c_uint32 * 6)()                        # struct __user_cap_data_struct[2]
        self._check(self._lib.capset(ct.byref(header), ct.byref(data)), "capset")


def write_id_maps(uid: int, gid: int) -> None:
    """Map our own ids 1:1 into a fresh user namespace, so file ownership looks unchanged."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo octal."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def read_mounts() -> list[tuple[str, frozenset[str]]]:
    """(mount point, per-mount options) for every mount visible to this process, in order."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mounts.append((_unescape(fields[4]), frozenset(fields[5].split(","))))
    return mounts


def remount_readonly(libc: Libc, keep_writable: set[str]) -> None:
    """Make every mount read-only except the mount points in `keep_writable`.

    Bind remounts change only the per-mount flag, never the filesystem itself, so the host keeps
    its writable view; nosuid/nodev/noexec are carried over because a user namespace may not
    clear them. A path hidden by a later mount (EINVAL) or no longer reachable (ENOENT) is
    skipped: nothing can reach it from inside.
    """
    seen = set()
    for point, options in reversed(read_mounts()):
        if point in seen:
            continue
        seen.add(point)  # only the topmost mount at a point is reachable; a covered one is left alone
        if point in keep_writable:
            continue
        if "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        for name, bit in _MOUNT_OPTION_FLAGS.items():
            if name in options:
                flags |= bit
        try:
            libc.mount(None, point, None, flags)
        except OSError as exc:
            if exc.errno not in (2, 22):  # ENOENT, EINVAL
                raise


def searchable_by(path: str, uid: int) -> bool:
    """Whether `uid` (without supplementary groups) may traverse directory `path`."""
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == uid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def blocked_ancestor(path: str, uid: int) -> str | None:
    """The highest directory above `path` that `uid` cannot traverse, if any."""
    parts = os.path.abspath(path).split(os.sep)[1:-1]
    current = ""
    for part in parts:
        current = current + os.sep + part
        if not searchable_by(current, uid):
            return current
    return None


def _outermost(paths: list[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(os.path.abspath(p) for p in paths)):
        if not any(path == k or path.startswith(k + os.sep) for k in kept):
            kept.append(path)
    return kept


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def hide_directories(libc: Libc, hide: list[str], keep: list[str],
                     options: str = "mode=0755,size=1m") -> list[str]:
    """Cover each directory in `hide` with an empty tmpfs (mount `options`), except the `keep` paths inside it.

    Only this mount namespace sees the change; the host's files and permissions are untouched.
    Each kept path is bind-mounted back from a descriptor opened before covering, so the covered
    directory shows nothing but the way down to it. A directory inside a kept path is left
    alone. Returns the directories that were covered.
    """
    keep = _outermost([p for p in keep if os.path.isdir(p)])
    covered = []
    for directory in _outermost([d for d in hide if os.path.isdir(d) and d != os.sep]):
        if any(_under(directory, k) for k in keep):
            continue
        targets = [k for k in keep if _under(k, directory)]
        handles = [os.open(target, os.O_PATH | os.O_DIRECTORY) for target in targets]
        try:
            libc.mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, options)
            for target, handle in zip(targets, handles):
                os.makedirs(target, 0o755, exist_ok=True)
                libc.mount(f"/proc/self/fd/{handle}", target, None, MS_BIND | MS_REC)
        finally:
            for handle in handles:
                os.close(handle)
        covered.append(directory)
    return covered


def mount_workdir(libc: Libc, workdir: str, size: int, owner: int | None) -> None:
    """A private, size-capped tmpfs on the work dir: the only writable place, gone with the run."""
    data = f"mode=0700,size={size}"
    if owner is not None:
        data += f",uid={owner},gid={owner}"
    libc.mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, data)


def private_ptys(libc: Libc) -> None:
    """Give this mount namespace its own devpts, so no program can open a terminal another one made.

    The host's /dev/pts is one instance shared by everything (and /dev/ptmx is mode 666): a pty
    one program opens appears there, and another program of the same uid can open it and read or
    type. A fresh instance (`newinstance`; ptmxmode=0666 so uid 65534 may use it) on /dev/pts,
    with its own multiplexer bound over /dev/ptmx, shows each program only its own ptys;
    `os.openpty()` keeps working. Where devpts cannot be mounted here, both are hidden instead
    (an empty /dev/pts, /dev/null as /dev/ptmx), so opening a pty fails. Without /dev/pts there is
    no shared instance to reach. Raises OSError if neither works.
    """
    pts, ptmx = "/dev/pts", "/dev/ptmx"
    if not os.path.isdir(pts):
        return
    multiplexer = os.path.exists(ptmx) and not os.path.islink(ptmx)  # a link (pts/ptmx) follows the new /dev/pts
    try:
        libc.mount("devpts", pts, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    except OSError:
        hide_directories(libc, [pts], [])
        if multiplexer:
            libc.mount(os.devnull, ptmx, None, MS_BIND)
        return
    if multiplexer:
        libc.mount(f"{pts}/ptmx", ptmx, None, MS_BIND)


KERNEL_LOG = "/dev/kmsg"


def hide_kernel_log(libc: Libc) -> None:
    """/dev/null over /dev/kmsg: the kernel log names other programs' crashes and OOM kills, and is mode 644 (only
    the host's dmesg_restrict keeps it closed, and not every machine sets it)."""
    if os.path.exists(KERNEL_LOG):
        libc.mount(os.devnull, KERNEL_LOG, None, MS_BIND)


def mount_proc(libc: Libc) -> None:
    """A /proc that shows only this pid namespace: the harness and its environment are not there."""
    libc.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
