"""A seccomp filter for the program's process: no kernel state that outlives a program or is shared between them.

Loaded in the sandbox's template process (standard library only). Namespaces give each program its own network,
IPC (System V and POSIX message queues), hostname, pids and mounts, but the kernel keyrings are keyed by user, and
every program runs as the same user: one program could leave a key that a later one reads. As container runtimes
do, the key-management calls are denied, together with the interfaces that reach shared kernel objects or bypass
the filter (eBPF maps, perf events, userfaultfd, io_uring). Without an IPC namespace the System V IPC and POSIX
message-queue calls are denied too. A denied call fails with EPERM; everything else is allowed. The filter is
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
_NR_OFFSET, _ARCH_OFFSET = 0, 4   # struct seccomp_data: int nr; __u32 arch; ...

KEYRINGS = ("add_key", "request_key", "keyctl")
SHARED_KERNEL_OBJECTS = ("bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
                         "io_uring_register")
SYSV_IPC = ("shmget", "semget", "msgget", "mq_open")

# (AUDIT_ARCH value, syscall numbers) for the architectures the filter knows.
_ARCHES = {
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "bpf": 321,
                            "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
                            "io_uring_enter": 426, "io_uring_register": 427, "shmget": 29, "semget": 64,
                            "msgget": 68, "mq_open": 240}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "bpf": 280,
                             "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
                             "io_uring_enter": 426, "io_uring_register": 427, "shmget": 194, "semget": 190,
                             "msgget": 186, "mq_open": 180}),
}


def supported() -> bool:
    return os.uname().machine in _ARCHES


def denied_calls(has_ipc_namespace: bool) -> tuple[str, ...]:
    return KEYRINGS + SHARED_KERNEL_OBJECTS + (() if has_ipc_namespace else SYSV_IPC)


def build_filter(machine: str, names: tuple[str, ...]) -> list[tuple[int, int, int, int]]:
    """The BPF program as (code, jt, jf, k): calls of another ABI (i386, x32) and the named calls get EPERM."""
    arch, numbers = _ARCHES[machine]
    deny = [numbers[name] for name in names]
    program = [(_LD_ABS, 0, 0, _ARCH_OFFSET), (_JEQ, 1, 0, arch), None, (_LD_ABS, 0, 0, _NR_OFFSET)]
    checks = ([(_JGE, None, 0, _X32_BIT)] if machine == "x86_64" else []) + [(_JEQ, None, 0, n) for n in deny]
    program += checks + [(_RET, 0, 0, _RET_ALLOW)]
    deny_at = len(program)
    program.append((_RET, 0, 0, _RET_ERRNO | _EPERM))
    program[2] = (_RET, 0, 0, _RET_ERRNO | _EPERM)  # a foreign ABI: refuse everything
    for i, (code, jt, jf, k) in enumerate(program):
        if jt is None:
            program[i] = (code, deny_at - i - 1, jf, k)  # jumps count from the next instruction
    return program


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
