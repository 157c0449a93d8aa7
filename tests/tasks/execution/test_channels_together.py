"""Issue 19: no channel between programs that run at the same time (ptys, the kernel log, locks and watches on host
files every program can read), on both isolation paths, and the seccomp filter's program checked instruction by
instruction by an independent interpreter.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.execution import SandboxLimits
from tasks.execution import _seccomp as seccomp
from tasks.execution.execute import execute
from tasks.execution.zygote import Zygote

pytestmark = pytest.mark.skipif(not os.uname().sysname == "Linux", reason="namespaces and seccomp are Linux's")

TOGETHER = SandboxLimits(cpu_seconds=2.0, wall_seconds=8.0)
PATHS = pytest.mark.parametrize("force_userns", [False, True], ids=["default-path", "user-namespace-path"])


def _run_together(programs: list[str], force_userns: bool) -> list[tuple]:
    """At the same time, each in its own sandbox of one batch: what one holds while the other looks."""
    with Zygote() as zygote, ThreadPoolExecutor(len(programs)) as pool:
        return list(pool.map(lambda p: execute(p, TOGETHER, zygote, force_userns), programs))


def _skip_without(flag: str, flags: frozenset, force_userns: bool) -> None:
    if force_userns and "caps" not in flags:
        pytest.skip("no user namespaces on this machine")
    if flag not in flags:
        pytest.skip(f"no {flag!r} isolation on this machine")


@PATHS
def test_a_pty_of_one_program_cannot_be_opened_by_another(force_userns):
    # Without a private devpts every program shares the host's /dev/pts: B could open A's terminal and read or type.
    holder = (
        "import os, time\n"
        "master, slave = os.openpty()\n"   # a good program's pty keeps working
        "os.write(master, b'ping\\n')\n"
        "assert os.read(slave, 5) == b'ping\\n'\n"
        "print('made', os.ttyname(slave), flush=True)\n"
        "time.sleep(4)\n"
    )
    looker = (
        "import os, time\n"
        "opened, end = [], time.monotonic() + 3.5\n"
        "while time.monotonic() < end and not opened:\n"
        "    for name in os.listdir('/dev/pts'):\n"
        "        if name == 'ptmx':\n"
        "            continue\n"
        "        try:\n"
        "            os.close(os.open('/dev/pts/' + name, os.O_RDWR | os.O_NOCTTY))\n"
        "            opened.append(name)\n"
        "        except OSError:\n"
        "            pass\n"
        "    time.sleep(0.05)\n"
        "print('opened', opened, sorted(os.listdir('/dev/pts')))\n"
        "assert not opened\n"
    )
    (held, flags), (looked, _) = _run_together([holder, looker], force_userns)
    _skip_without("fs", flags, force_userns)
    assert held.status == "passed" and "made /dev/pts/" in held.output_tail, held.output_tail
    assert looked.status == "passed", looked.output_tail
    assert "opened [] ['ptmx']" in looked.output_tail  # its own devpts: no other program's terminal in it


@PATHS
def test_the_kernel_log_is_empty_inside(force_userns):
    # /dev/kmsg is mode 644 and names other programs' segfaults and OOM kills; only dmesg_restrict closes it.
    reader = (
        "import os\n"
        "fd = os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK)\n"
        "print('read', repr(os.read(fd, 4096)))\n"
    )
    (read, flags), = _run_together([reader], force_userns)
    _skip_without("fs", flags, force_userns)
    assert read.status == "passed" and "read b''" in read.output_tail, read.output_tail


LOCK_FILES = "import os, re, typing\nfiles = [os.__file__, re.__file__, typing.__file__]\n"  # readable by every program


@PATHS
def test_a_lock_held_by_one_program_is_invisible_to_another(force_userns):
    # flock, POSIX record locks and open-file-description locks on a host file every program can read.
    holder = LOCK_FILES + (
        "import fcntl, struct, time\n"
        "held = [open(f, 'rb') for f in files]\n"
        "shared = struct.pack('hhqqi', fcntl.F_RDLCK, 0, 0, 0, 0)\n"
        "calls = [lambda f: fcntl.flock(f, fcntl.LOCK_SH), lambda f: fcntl.fcntl(f, fcntl.F_SETLK, shared),\n"
        "         lambda f: fcntl.fcntl(f, fcntl.F_OFD_SETLK, shared)]\n"
        "for take, f in zip(calls, held):\n"
        "    try:\n"
        "        take(f)\n"
        "        print('locked', flush=True)\n"
        "    except OSError as exc:\n"
        "        print('lock errno', exc.errno, flush=True)\n"
        "time.sleep(4)\n"
    )
    looker = LOCK_FILES + (
        "import fcntl, struct, time\n"
        "exclusive = struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0)\n"
        "def busy(kind, f):\n"
        "    try:\n"
        "        if kind == 0:\n"
        "            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "            fcntl.flock(f, fcntl.LOCK_UN)\n"
        "            return False\n"
        "        found = fcntl.fcntl(f, fcntl.F_GETLK if kind == 1 else fcntl.F_OFD_GETLK, exclusive)\n"
        "        return struct.unpack('hhqqi', found)[0] != fcntl.F_UNLCK\n"
        "    except BlockingIOError:\n"
        "        return True\n"
        "    except OSError as exc:\n"
        "        print('probe errno', exc.errno)\n"
        "        return False\n"
        "seen, end = set(), time.monotonic() + 3.5\n"
        "while time.monotonic() < end and len(seen) < 3:\n"
        "    for kind, f in enumerate(files):\n"
        "        with open(f, 'rb') as handle:\n"
        "            if busy(kind, handle):\n"
        "                seen.add(kind)\n"
        "    time.sleep(0.05)\n"
        "print('seen', sorted(seen))\n"
        "assert not seen\n"
    )
    (held, flags), (looked, _) = _run_together([holder, looker], force_userns)
    _skip_without("seccomp", flags, force_userns)
    assert held.status == "passed" and looked.status == "passed", (held.output_tail, looked.output_tail)
    assert held.output_tail.count("lock errno 1") == 3, held.output_tail  # EPERM: no lock was ever taken
    assert looked.output_tail.count("probe errno 1") >= 3 and "seen []" in looked.output_tail


@PATHS
def test_one_program_cannot_watch_another_open_or_read_a_file(force_userns):
    # inotify, fanotify (unprivileged since Linux 5.13), dnotify (F_NOTIFY) and leases (F_SETLEASE, where the
    # program owns the file: the user namespace path keeps the harness's uid) all tell a watcher about others' opens.
    watcher = LOCK_FILES + (
        "import ctypes, fcntl, select, signal, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,\n"
        "                               ctypes.c_char_p]\n"
        "seen, denied, fds, leases = [], [], [], []\n"
        "def got(kind):\n"
        "    seen.append(kind)\n"
        "def lease_broken(*_):\n"
        "    got('lease')\n"
        "    for f in leases:\n"
        "        fcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_UNLCK)\n"
        "signal.signal(signal.SIGUSR1, lambda *_: got('dnotify'))\n"
        "signal.signal(signal.SIGIO, lease_broken)\n"
        "ino = libc.inotify_init1(0)\n"
        "if ino < 0:\n"
        "    denied.append(('inotify', ctypes.get_errno()))\n"
        "else:\n"
        "    fds.append(ino)\n"
        "    libc.inotify_add_watch(ino, files[0].encode(), 0x20)\n"   # IN_OPEN
        "fan = libc.fanotify_init(0x200, os.O_RDONLY)\n"              # FAN_CLASS_NOTIF | FAN_REPORT_FID
        "if fan < 0:\n"
        "    denied.append(('fanotify', ctypes.get_errno()))\n"
        "elif libc.fanotify_mark(fan, 1, 0x20, -100, files[0].encode()) == 0:\n"  # FAN_MARK_ADD, FAN_OPEN
        "    fds.append(fan)\n"
        "directory = os.open(os.path.dirname(files[0]), os.O_RDONLY)\n"
        "try:\n"
        "    fcntl.fcntl(directory, fcntl.F_SETSIG, signal.SIGUSR1)\n"
        "    fcntl.fcntl(directory, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)\n"
        "except OSError as exc:\n"
        "    denied.append(('dnotify', exc.errno))\n"
        "for name in files:\n"
        "    f = os.open(name, os.O_RDONLY)\n"
        "    try:\n"
        "        fcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n"
        "        leases.append(f)\n"
        "    except OSError as exc:\n"
        "        denied.append(('lease', exc.errno))\n"
        "end = time.monotonic() + 3.5\n"
        "while time.monotonic() < end and not seen:\n"
        "    ready, _, _ = select.select(fds, [], [], 0.1)\n"
        "    seen += ['inotify' if fd == ino else 'fanotify' for fd in ready]\n"
        "print('denied', sorted(denied))\n"
        "print('seen', seen)\n"
        "assert not seen\n"
    )
    actor = LOCK_FILES + (
        "import time\n"
        "end = time.monotonic() + 4\n"
        "while time.monotonic() < end:\n"
        "    for name in files:\n"
        "        with open(name, 'rb') as f:\n"
        "            f.read(16)\n"
        "    time.sleep(0.05)\n"
    )
    (watched, flags), (acted, _) = _run_together([watcher, actor], force_userns)
    _skip_without("seccomp", flags, force_userns)
    assert acted.status == "passed", acted.output_tail
    assert watched.status == "passed", watched.output_tail
    denied = "denied [('dnotify', 1), ('fanotify', 1), ('inotify', 1), ('lease', 1), ('lease', 1), ('lease', 1)]"
    assert denied in watched.output_tail, watched.output_tail  # EPERM from the filter, not a kernel refusal


def _run_bpf(program, nr: int, arch: int, arg1: int = 0) -> int:
    """An independent interpreter for the four BPF instructions the filter uses (little-endian seccomp_data)."""
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        assert 0 <= jt <= 255 and 0 <= jf <= 255
        if code == 0x20:
            acc = {0: nr, 4: arch, 24: arg1 & 0xFFFFFFFF, 28: arg1 >> 32}[k]
        elif code == 0x06:
            return k
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += jt if hit else jf
        pc += 1


def test_filter_program_denies_exactly_the_listed_calls():
    eperm, allow = 0x00050001, 0x7FFF0000
    denied_commands = set(seccomp.FCNTL_COMMANDS.values())
    assert denied_commands == {5, 6, 7, 36, 37, 38, 1024, 1026}  # F_(OFD_)GETLK/SETLK/SETLKW, F_SETLEASE, F_NOTIFY
    for machine in ("x86_64", "aarch64"):
        arch, numbers = seccomp._ARCHES[machine]
        names = seccomp.denied_calls(has_ipc_namespace=True)
        assert {"flock", "inotify_init1", "fanotify_init"} <= set(names) and "shmget" not in names
        program = seccomp.build_filter(machine, names)
        for name, nr in numbers.items():
            assert _run_bpf(program, nr, arch) == (eperm if name in names else allow), (machine, name)
        for nr in (0, 1, 57, 59, 231, 435):  # read, write, fork, execve, exit_group, clone3
            assert _run_bpf(program, nr, arch) == allow
        fcntl = numbers["fcntl"]
        for command in range(2048):  # F_DUPFD, F_GETFD, F_SETFL, F_GETLEASE, F_DUPFD_CLOEXEC, ... stay allowed
            expected = eperm if command in denied_commands else allow
            assert _run_bpf(program, fcntl, arch, command) == expected, (machine, command)
            assert _run_bpf(program, fcntl, arch, (1 << 32) | command) == expected  # the kernel reads 32 bits
            assert _run_bpf(program, 0, arch, command) == allow  # the second argument matters for fcntl only
        assert _run_bpf(program, 0, 0x40000003) == eperm  # i386 ABI on a 64-bit kernel
    assert "inotify_init" in seccomp._ARCHES["x86_64"][1] and "inotify_init" not in seccomp._ARCHES["aarch64"][1]
    x86 = seccomp.build_filter("x86_64", ())
    assert _run_bpf(x86, 0x40000000 | 248, seccomp._ARCHES["x86_64"][0]) == 0x00050001  # x32 ABI
    no_commands = seccomp.build_filter("x86_64", ("flock",), fcntl_commands=())
    assert _run_bpf(no_commands, 72, seccomp._ARCHES["x86_64"][0], 6) == allow
