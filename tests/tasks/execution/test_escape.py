"""The execution sandbox, escaping the box: files outside the work dir, privileges, the harness user's home, shared
temp and runtime dirs, the environment, the network, and the unprivileged user-namespace path.

Where the machine can build namespaces (checked independently with util-linux `unshare`, conftest.py) or the harness
runs as root, every attempt must be contained; elsewhere `probe_isolation` must not claim what it cannot give.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import socket
import sys
import tempfile
import threading
from pathlib import Path

from tasks.execution import SandboxLimits, probe_isolation, run_program, run_programs
from tasks.execution.execute import execute
from tasks.execution.zygote import Zygote

FAST = SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0)


def test_files_outside_the_work_dir_are_untouchable(tmp_path, contained, isolation):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    intruder = tmp_path / "intruder.txt"
    loose = Path("/tmp") / f"sandbox-escape-{secrets.token_hex(6)}"
    attacks = [
        f"import os\nos.remove({str(victim)!r})\n",
        f"open({str(victim)!r}, 'w').write('overwritten')\n",
        f"open({str(intruder)!r}, 'w').write('hello')\n",
        f"open({str(loose)!r}, 'w').write('hello')\n",
        # Undo the read-only view: needs privileges the program must not have.
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.mount(None, b'/', None, 0x1020, None) != 0:\n"  # MS_REMOUNT | MS_BIND, read-write
        "    raise OSError(ctypes.get_errno(), 'remount refused')\n"
        f"open({str(loose)!r}, 'w').write('hello')\n",
    ]
    results = run_programs(attacks, FAST)
    if not contained:
        assert not isolation.filesystem  # at least the report is honest
        return
    # /tmp inside is private and writable (where the filesystem view exists), so the loose file is written there,
    # never on the host.
    expected = ["error", "error", "error", "passed" if isolation.filesystem else "error", "error"]
    assert [r.status for r in results] == expected, [r.output_tail for r in results]
    assert victim.read_text() == "keep me"
    assert not intruder.exists() and not loose.exists()


def test_program_holds_no_privileges():
    program = (
        "import os, sys\n"
        "if sys.platform.startswith('linux'):\n"
        "    status = open('/proc/self/status').read().splitlines()\n"
        "    fields = dict(line.split(':', 1) for line in status)\n"
        "    assert int(fields['CapEff'].strip(), 16) == 0, fields['CapEff']\n"
        "    assert int(fields['CapPrm'].strip(), 16) == 0, fields['CapPrm']\n"
        "    assert fields['NoNewPrivs'].strip() == '1'\n"
        "else:\n"
        "    assert os.geteuid() != 0\n"
    )
    result = run_program(program, FAST)
    assert result.status == "passed", result.output_tail


def test_harness_users_home_is_hidden_but_python_is_not(contained):
    home = Path(os.path.expanduser("~"))
    needed = {p.parts[len(home.parts)] for p in map(Path, [*sys.path, sys.prefix, sys.base_prefix])
              if p.is_relative_to(home) and p != home}
    program = (
        "import os\n"
        "try:\n"
        f"    print(sorted(os.listdir({str(home)!r})))\n"
        "except PermissionError:\n"
        "    print([])\n"
    )
    result = run_program(program, FAST)
    assert result.status == "passed", result.output_tail
    seen = set(ast.literal_eval(result.output_tail.strip().splitlines()[-1]))
    assert set(os.listdir(home)) - needed  # there is something to hide
    if contained:
        assert seen <= needed


def test_shared_temp_and_runtime_dirs_look_empty(namespaces):
    # Other processes' sockets (ssh agent, D-Bus session bus, X11) live in these directories.
    program = (
        "import json, os\n"
        "print(json.dumps({d: sorted(os.listdir(d)) for d in ('/tmp', '/var/tmp', '/run') "
        "if os.path.isdir(d)} | {'cwd': os.getcwd()}))\n"
    )
    result = run_program(program, FAST)
    assert result.status == "passed", result.output_tail
    seen = json.loads(result.output_tail.strip().splitlines()[-1])
    if namespaces:
        workdir = Path(seen.pop("cwd"))
        # Visible on purpose: the program's own work dir, and the Python install when it lives under /tmp.
        allowed = {path.relative_to(shared).parts[0]
                   for path in (workdir, *python_install_paths()) for shared in [Path("/tmp")]
                   if path.is_relative_to(shared) and path != shared}
        listed = set(seen.pop("/tmp"))
        assert listed <= allowed
        assert (workdir.name in listed) == (workdir.parent == Path("/tmp"))
        assert all(entries == [] for entries in seen.values()), seen


def python_install_paths() -> list[Path]:
    return [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable)]


def test_work_dir_is_writable_private_and_removed():
    program = (
        "import os\n"
        "open('scratch.txt', 'w').write('data')\n"
        "assert open('scratch.txt').read() == 'data'\n"
        "assert os.listdir('.') == ['scratch.txt']\n"
        "print(os.getcwd())\n"
    )
    result = run_program(program, FAST)
    assert result.status == "passed", result.output_tail
    workdir = Path(result.output_tail.strip().splitlines()[-1])
    assert not workdir.exists()


def test_parent_environment_does_not_leak(monkeypatch, contained):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("SANDBOX_TEST_SECRET", secret)
    program = (
        "import os\n"
        "assert 'SANDBOX_TEST_SECRET' not in os.environ, 'in os.environ'\n"
        "found = []\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if b'SANDBOX_TEST_SECRET' in data:\n"
        "        found.append(data)\n"
        "print(found)\n"
        "assert not found\n"
    )
    result = run_program(program, FAST)
    assert secret not in result.output_tail
    if contained:
        assert result.status == "passed", result.output_tail


def test_network_is_cut_where_the_platform_allows(isolation, namespaces):
    accepted: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    port = server.getsockname()[1]

    def accept() -> None:
        try:
            conn, _ = server.accept()
            accepted.append(conn.recv(100))
            conn.close()
        except OSError:
            pass

    listener = threading.Thread(target=accept)
    listener.start()
    program = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "s.sendall(b'escaped')\n"
        "s.close()\n"
    )
    result = run_program(program, FAST)
    if not accepted:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # release the listener
    listener.join()
    server.close()
    assert isolation.network == namespaces
    if isolation.network:
        assert result.status == "error" and "Network is unreachable" in result.output_tail
        assert b"escaped" not in accepted
    else:  # honest report: where it is not cut, the connection does go through
        assert result.status == "passed" and accepted == [b"escaped"]


def test_unprivileged_user_namespace_path(user_namespaces):
    """The path non-root users get (user namespace), exercised even when the tests run as root."""
    if not user_namespaces:
        assert not probe_isolation().network or os.geteuid() == 0
        return
    with Zygote() as zygote:
        def run(program: str):
            return execute(program, FAST, zygote, force_userns=True)

        passed, flags = run("assert sorted([2, 1]) == [1, 2]\n")
        failed, _ = run("assert sorted([2, 1]) == [2, 1]\n")
        shared = Path(tempfile.gettempdir()) / f"sandbox-escape-{secrets.token_hex(6)}"  # the host's shared temp
        scratch, _ = run(f"open({str(shared)!r}, 'w')\n")  # lands in the program's private /tmp
        outside = Path(__file__).with_name(f"sandbox-escape-{secrets.token_hex(6)}")
        escape, _ = run(f"open({str(outside)!r}, 'w')\n")
        network, _ = run("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n")
    assert {"net", "pid", "fs", "caps"} <= flags
    assert (passed.status, failed.status) == ("passed", "failed")
    # the checkout is mounted read-only; a checkout under /tmp is behind the program's private /tmp instead
    refused = "No such file or directory" if outside.is_relative_to(tempfile.gettempdir()) else "Read-only file system"
    assert escape.status == "error" and refused in escape.output_tail, escape.output_tail
    assert not outside.exists()
    assert scratch.status == ("passed" if shared.parent == Path("/tmp") else "error") and not shared.exists()
    assert network.status == "error" and "Network is unreachable" in network.output_tail
