"""A seccomp filter for the program's process: no kernel state that outlives a program or is shared between them.

Loaded in the sandbox's template process (standard library only). Namespaces give each program its own network,
IPC (System V and POSIX message queues), hostname, pids and mounts, but the kernel keyrings are keyed by user, and
every program runs as the same user: one program could leave a key that a later one reads. As container runtimes
do, the key-management calls are denied, together with the interfaces that reach shared kernel objects or bypass
the filter (eBPF maps, perf events, userfaultfd, io_uring). Every program can read the same host files, and locks
and watches on a file are visible to whoever else uses it: a lock one program holds makes another's fail, a watch
sees another's opens and reads. So file locks (flock, the fcntl record-lock and lease commands) and watches
(inotify, fanotify, fcntl F_NOTIFY) are denied too. Without an IPC namespace the System V IPC and POSIX
message-queue calls are denied as well. A denied call fails with EPERM; everything else is allowed. The filter is
inherited by every descendant and cannot be removed.
"""

import ctypes
import os

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM = 1
_X32_BIT = 0x40000000
# BPF opcodes: load word at absolute offset, jump if equal / greater or equal (constant), return constant.
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]. Both known architectures are
# little-endian, so the word at args[1] is the low half of the second argument: fcntl's `unsigned int cmd`, whole.
_NR_OFFSET, _ARCH_OFFSET, _ARG1_OFFSET = 0, 4, 24

KEYRINGS = ("add_key", "request_key", "keyctl")
SHARED_KERNEL_OBJECTS = ("bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
                         "io_uring_register")
LOCKS_AND_WATCHES = ("flock", "inotify_init", "inotify_init1", "fanotify_init")  # aarch64 has no inotify_init
SYSV_IPC = ("shmget", "semget", "msgget", "mq_open")
# fcntl commands that lock a file, show another process's lock, or watch a file or directory. Other commands
# (descriptor flags, F_DUPFD, F_GETLEASE of its own lease, pipe sizes, seals) stay allowed.
FCNTL_COMMANDS = {"F_GETLK": 5, "F_SETLK": 6, "F_SETLKW": 7, "F_OFD_GETLK": 36, "F_OFD_SETLK": 37,
                  "F_OFD_SETLKW": 38, "F_SETLEASE": 1024, "F_NOTIFY": 1026}

# (AUDIT_ARCH value, syscall numbers) for the architectures the filter knows.
_ARCHES = {
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "bpf": 321,
                            "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
                            "io_uring_enter": 426, "io_uring_register": 427, "flock": 73, "inotify_init": 253,
                            "inotify_init1": 294, "fanotify_init": 300, "fcntl": 72, "shmget": 29, "semget": 64,
                            "msgget": 68, "mq_open": 240}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "bpf": 280,
                             "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
                             "io_uring_enter": 426, "io_uring_register": 427, "flock": 32, "inotify_init1": 26,
                             "fanotify_init": 262, "fcntl": 25, "shmget": 194, "semget": 190, "msgget": 186,
                             "mq_open": 180}),
}


def supported() -> bool:
    return os.uname().machine in _ARCHES


def denied_calls(has_ipc_namespace: bool) -> tuple[str, ...]:
    return KEYRINGS + SHARED_KERNEL_OBJECTS + LOCKS_AND_WATCHES + (() if has_ipc_namespace else SYSV_IPC)


def build_filter(machine: str, names: tuple[str, ...],
                 fcntl_commands: tuple[int, ...] = tuple(FCNTL_COMMANDS.values())) -> list[tuple[int, int, int, int]]:
    """The BPF program as (code, jt, jf, k): calls of another ABI (i386, x32), the named calls (those this
    architecture has) and fcntl with one of `fcntl_commands` get EPERM."""
    arch, numbers = _ARCHES[machine]
    deny, allow = "deny", "allow"  # jump targets, resolved below
    program: list[tuple] = [(_LD_ABS, 0, 0, _ARCH_OFFSET), (_JEQ, 1, 0, arch),
                            (_RET, 0, 0, _RET_ERRNO | _EPERM),  # a foreign ABI: refuse everything
                            (_LD_ABS, 0, 0, _NR_OFFSET)]
    if machine == "x86_64":
        program.append((_JGE, deny, 0, _X32_BIT))
    program += [(_JEQ, deny, 0, numbers[name]) for name in names if name in numbers]
    if fcntl_commands:  # fcntl itself is needed (descriptor flags); only its lock and watch commands are not
        program += [(_JEQ, 0, allow, numbers["fcntl"]), (_LD_ABS, 0, 0, _ARG1_OFFSET)]
        program += [(_JEQ, deny, 0, command) for command in fcntl_commands]
    targets = {allow: len(program), deny: len(program) + 1}
    program += [(_RET, 0, 0, _RET_ALLOW), (_RET, 0, 0, _RET_ERRNO | _EPERM)]
    # Jumps count from the next instruction.
    return [(code, targets[jt] - i - 1 if jt in targets else jt, targets[jf] - i - 1 if jf in targets else jf, k)
            for i, (code, jt, jf, k) in enumerate(program)]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install(names: tuple[str, ...]) -> None:
    """Install the filter on this process (needs no_new_privs or CAP_SYS_ADMIN); raises OSError."""
    program = build_filter(os.uname().machine, names)
    filters = (_SockFilter * len(program))(*[_SockFilter(*insn) for insn in program])
    fprog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl PR_SET_SECCOMP: {os.strerror(err)}")
