"""Issue 19: a program's memory and processes bounded in total, no state that crosses between programs, a private
writable /tmp. Where the machine gives no cgroup or seccomp, the tests check that the sandbox says so instead.
"""

from __future__ import annotations

import glob
import os
import secrets
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tasks.execution import SandboxLimits, run_programs
from tasks.execution import cgroup
from tasks.execution.execute import execute
from tasks.execution.zygote import Zygote

pytestmark = pytest.mark.skipif(not os.uname().sysname == "Linux", reason="cgroups and seccomp are Linux's")

TIGHT = SandboxLimits(cpu_seconds=3.0, wall_seconds=10.0, memory_bytes=128 << 20, max_processes=16)
FAST = SandboxLimits(cpu_seconds=1.0, wall_seconds=4.0)


@pytest.fixture(scope="module")
def aggregate(isolation) -> bool:
    """Whether this machine gave the sandbox a cgroup; as root with memory+pids controllers mounted it must."""
    if os.geteuid() == 0 and cgroup.find_hierarchy(Path("/proc/self/mountinfo").read_text(),
                                                   Path("/proc/self/cgroup").read_text()) is not None:
        assert isolation.aggregate_limits
    return isolation.aggregate_limits


# ------------------------------------------------------------------ memory and processes in total

def test_forked_children_holding_memory_in_aggregate_are_memory(aggregate):
    # Four children of 48 MiB each: every one is under the 128 MiB address-space limit, together they are not.
    program = (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(48 << 20)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "assert all(os.waitpid(pid, 0)[1] == 0 for pid in kids)\n"
    )
    result = run_programs([program], TIGHT)[0]
    assert result.status == ("memory" if aggregate else "passed"), result.output_tail


def test_memfd_pages_beyond_the_limit_are_memory(aggregate):
    # memfd pages are not address space; each memfd stays under the file-size limit, 24 of them do not fit.
    program = (
        "import os\n"
        "held = []\n"
        "for _ in range(24):\n"
        "    fd = os.memfd_create('hold')\n"
        "    os.write(fd, b'x' * (8 << 20))\n"
        "    held.append(fd)\n"
    )
    limits = SandboxLimits(cpu_seconds=3.0, wall_seconds=10.0, memory_bytes=128 << 20, max_file_bytes=16 << 20)
    result = run_programs([program], limits)[0]
    assert result.status == ("memory" if aggregate else "passed"), result.output_tail


def test_fork_bomb_is_held_by_its_own_pids_cgroup_and_not_by_its_neighbours(aggregate):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    neighbour = (  # starts after the bomb is at its limit; a per-user RLIMIT_NPROC would refuse it
        "import os, time\n"
        "time.sleep(1.0)\n"
        "kids = [os.fork() or os._exit(0) for _ in range(8)]\n"
        "assert all(os.waitpid(pid, 0)[1] == 0 for pid in kids)\n"
    )
    limits = SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0, max_processes=16)
    with Zygote() as zygote, ThreadPoolExecutor(2) as pool:
        bombed, quiet = pool.map(lambda p: execute(p, limits, zygote)[0], [bomb, neighbour])
    assert bombed.status == "timeout"
    if aggregate:
        assert quiet.status == "passed", quiet.output_tail


def test_cgroups_are_removed_after_the_batch(aggregate):
    if not aggregate:
        pytest.skip("no cgroup on this machine")
    with Zygote() as zygote:
        batch = zygote.cgroups
        leaf = batch.create(64 << 20, 4)
        assert all(os.path.isdir(d) for d in leaf.dirs)
        batch.release(leaf)
        assert not any(os.path.exists(d) for d in leaf.dirs)
        execute("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\n", FAST, zygote)
    assert not any(os.path.exists(d) for d in batch.dirs)
    assert not glob.glob(os.path.join(os.path.dirname(batch.dirs[0]), f"dllm-sandbox-{os.getpid()}-*"))


def test_without_a_cgroup_the_run_says_so(monkeypatch):
    monkeypatch.setattr("tasks.execution.zygote.open_batch", lambda: (None, "no cgroup here (test)"))
    with pytest.warns(RuntimeWarning, match="no cgroup here"):
        with Zygote() as zygote:
            result, flags = execute("assert True\n", FAST, zygote)
    assert result.status == "passed" and "cgroup" not in flags
    if os.geteuid() == 0:
        assert "nproc" in flags  # RLIMIT_NPROC is back as the process limit


def test_hierarchy_discovery_reads_v1_v2_and_hybrid_layouts(tmp_path):
    v1 = ("35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
          "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    own = "8:pids:/\n4:memory:/api/c1\n0::/\n"
    expected = cgroup.Hierarchy(1, ("/sys/fs/cgroup/memory/api/c1", "/sys/fs/cgroup/pids"))
    assert cgroup.find_hierarchy(v1, own) == expected
    # A container whose hierarchy is mounted from its own cgroup: the mount root is cut from the path.
    nested = v1.replace("0:32 / ", "0:32 /docker/x ")
    assert cgroup.find_hierarchy(nested, "8:pids:/\n4:memory:/docker/x/y\n").bases[0] == "/sys/fs/cgroup/memory/y"
    assert cgroup.find_hierarchy(v1, "4:memory:/api\n0::/\n") is None  # no pids controller
    (tmp_path / "app.slice" / "me.scope").mkdir(parents=True)
    (tmp_path / "app.slice" / "me.scope" / "cgroup.controllers").write_text("cpu memory pids\n")
    v2 = f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    assert cgroup.find_hierarchy(v2, "0::/app.slice/me.scope\n") == cgroup.Hierarchy(2, (f"{tmp_path}/app.slice",))
    (tmp_path / "app.slice" / "me.scope" / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroup.find_hierarchy(v2, "0::/app.slice/me.scope\n") is None


@pytest.mark.parametrize("version", [1, 2])
def test_leaf_limits_and_counters_use_each_versions_files(tmp_path, version):
    """The files a leaf writes and reads, on a plain directory standing in for each hierarchy."""
    bases = (tmp_path / "memory", tmp_path / "pids") if version == 1 else (tmp_path / "unified",)
    for base in bases:
        base.mkdir()
    batch = cgroup.BatchCgroups(cgroup.Hierarchy(version, tuple(map(str, bases))), tuple(map(str, bases)))
    leaf = batch.create(96 << 20, 7)
    memory, pids = Path(leaf.dirs[0]), Path(leaf.dirs[-1])
    if version == 1:
        assert (memory / "memory.limit_in_bytes").read_text() == str(96 << 20)
        assert not (memory / "memory.oom.group").exists()
        counter = memory / "memory.oom_control"
        counter.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    else:
        assert (memory / "memory.max").read_text() == str(96 << 20)
        assert (memory / "memory.oom.group").read_text() == "1"
        counter = memory / "memory.events"
        counter.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    assert (pids / "pids.max").read_text() == "7"
    assert leaf.procs_files == tuple(str(Path(d) / "cgroup.procs") for d in leaf.dirs)
    assert not leaf.memory_exceeded()
    counter.write_text(counter.read_text().replace("oom_kill 0", "oom_kill 2"))
    assert leaf.memory_exceeded()


# ------------------------------------------------------------------ no state crosses between programs

def _run_in_order(programs: list[str], limits: SandboxLimits = FAST) -> list:
    """One after the other, each in its own sandbox of one batch (a later program sees what an earlier left)."""
    with Zygote() as zygote:
        return [execute(p, limits, zygote) for p in programs]


SYSCALL = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"


def test_a_key_added_by_one_program_is_invisible_to_the_next(isolation):
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86_64 syscall numbers")
    name = f"dllm-probe-{secrets.token_hex(4)}".encode()
    add = SYSCALL + (  # add_key("user", name, "secret", 5, KEY_SPEC_USER_KEYRING)
        f"r = libc.syscall(248, b'user', {name!r}, b'secret', 6, -4)\n"
        "print('added', r, ctypes.get_errno())\n"
    )
    find = SYSCALL + (  # request_key("user", name, NULL, 0), keyctl(KEYCTL_SEARCH, @u, "user", name, 0): without
        f"r = libc.syscall(249, b'user', {name!r}, None, 0)\n"  # the filter both find the key here (uid 65534's
        f"s = libc.syscall(250, 10, -4, b'user', {name!r}, 0)\n"  # keyring is the host's, shared by all programs)
        "print('found', r, s, ctypes.get_errno())\n"
        "assert r < 0 and s < 0\n"
    )
    (added, _), (found, flags) = _run_in_order([add, find])
    assert found.status == "passed", found.output_tail
    if isolation.syscall_filter:
        assert "seccomp" in flags
        assert "added -1 1" in added.output_tail  # EPERM: the call never reached the kernel's keyrings


def test_system_v_and_posix_ipc_do_not_cross_between_programs():
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86_64 syscall numbers")
    key = secrets.randbelow(1 << 30) + 1
    queue = f"dllm-probe-{secrets.token_hex(4)}".encode()
    create = SYSCALL + (  # shmget(key, 4096, IPC_CREAT|0666); mq_open(queue, O_CREAT|O_RDWR, 0666, NULL)
        f"shm = libc.syscall(29, {key}, 4096, 0o1666)\n"
        f"mq = libc.syscall(240, {queue!r}, 0o102, 0o666, None)\n"
        "print('made', shm, mq)\n"
    )
    look = SYSCALL + (  # the same calls without IPC_CREAT / O_CREAT must not find them
        f"assert libc.syscall(29, {key}, 0, 0) < 0\n"
        f"assert libc.syscall(240, {queue!r}, 0o2, 0, None) < 0\n"
    )
    (made, _), (looked, _) = _run_in_order([create, look])
    assert made.status == "passed" and looked.status == "passed", (made.output_tail, looked.output_tail)
    host_keys = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    assert str(key) not in host_keys  # nor did it reach the harness's own IPC namespace
    assert not os.path.exists(f"/dev/mqueue/{queue.decode()}")


def test_the_filter_is_in_force_inside(isolation):
    result, _ = _run_in_order(["print(open('/proc/self/status').read())\n"])[0]
    mode = [line.split()[1] for line in result.output_tail.splitlines() if line.startswith("Seccomp:")]
    if isolation.syscall_filter:
        assert mode == ["2"]


# ------------------------------------------------------------------ scratch space

def test_a_correct_program_writing_scratch_files_to_tmp_passes(isolation):
    name = f"scratch-{secrets.token_hex(4)}"
    write = (
        "import os, tempfile\n"
        f"with open('/tmp/{name}', 'w') as f:\n"
        "    f.write('x' * 100_000)\n"
        f"assert len(open('/tmp/{name}').read()) == 100_000\n"
        "with tempfile.NamedTemporaryFile(dir='/tmp') as f:\n"
        "    f.write(b'y')\n"
    )
    later = f"import os\nassert not os.path.exists('/tmp/{name}')\n"
    (wrote, _), (looked, _) = _run_in_order([write, later])
    assert wrote.status == "passed", wrote.output_tail
    if isolation.filesystem:
        assert looked.status == "passed" and not os.path.exists(f"/tmp/{name}")


def test_tmp_is_bounded(isolation):
    if not isolation.filesystem:
        pytest.skip("no private /tmp on this machine")
    program = "import tempfile\nwith tempfile.NamedTemporaryFile(dir='/tmp') as f:\n    f.write(b'x' * (3 << 20))\n"
    limits = SandboxLimits(cpu_seconds=2.0, max_disk_bytes=2 << 20)
    result = run_programs([program], limits)[0]
    assert result.status == "error" and "No space left on device" in result.output_tail


def test_tmpfs_pages_count_toward_the_memory_limit(isolation, aggregate):
    # 4 x 60 MiB: each private tmpfs stays under its 64 MiB cap, together they are far over the 128 MiB limit.
    if not isolation.filesystem:
        pytest.skip("no private tmpfs on this machine: /tmp is the host's")
    program = (
        "for place in ('/tmp', '/var/tmp', '/dev/shm', '.'):\n"
        "    with open(place + '/fill', 'wb') as f:\n"
        "        for _ in range(60):\n"
        "            f.write(b'x' * (1 << 20))\n"
    )
    limits = SandboxLimits(cpu_seconds=3.0, wall_seconds=10.0, memory_bytes=128 << 20, max_file_bytes=64 << 20)
    result = run_programs([program], limits)[0]
    assert result.status == ("memory" if aggregate else "passed"), result.output_tail


def test_writing_past_the_work_dir_cap_fails_inside_with_enospc(isolation):
    if not isolation.filesystem:
        pytest.skip("no size-capped work dir on this machine")
    program = (
        "import errno, os\n"
        "try:\n"
        "    with open('big', 'wb') as f:\n"
        "        for _ in range(5):\n"
        "            f.write(b'x' * (1 << 20))\n"
        "            f.flush()\n"
        "except OSError as exc:\n"
        "    assert exc.errno == errno.ENOSPC, exc\n"
        "else:\n"
        "    raise AssertionError('wrote 5 MiB into a 4 MiB work dir')\n"
        "assert os.path.getsize('big') <= 4 << 20\n"
        "print(os.getcwd())\n"
    )
    limits = SandboxLimits(cpu_seconds=2.0, wall_seconds=6.0, max_disk_bytes=4 << 20)
    with Zygote() as zygote:
        full, _ = execute(program, limits, zygote)
        after, _ = execute("assert sorted([3, 1, 2]) == [1, 2, 3]\n", limits, zygote)  # the harness carries on
    assert full.status == "passed", full.output_tail
    assert after.status == "passed", after.output_tail
    assert not os.path.exists(full.output_tail.strip().splitlines()[-1])  # and the host-side directory is gone


def test_no_warning_where_cgroups_exist(aggregate):
    if not aggregate:
        pytest.skip("no cgroup on this machine")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_programs(["assert True\n"], FAST)
