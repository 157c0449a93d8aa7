"""An OpenAI-compatible engine server as a child process: launch on a free loopback port, wait for health, stop.

The engine (vLLM) lives in its own virtual environment, so the harness never imports it: it runs the engine's
Python as a separate process, keeps its output in a log file in the run folder and talks HTTP to it. Every failure
becomes an ``EngineError`` whose one-line message names that log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError


class EngineError(UserError, RuntimeError):
    """The engine server failed to start, died or answered an error; the message is one line for the user."""


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start one server: the command, its environment additions and where its output goes."""

    argv: tuple[str, ...]
    env: dict[str, str]
    log_path: Path
    base_url: str  # http://127.0.0.1:PORT/v1
    startup_timeout_s: float = 900.0


@dataclass
class RunningServer:
    """A launched server (``process`` set) or an attached one (``process`` None)."""

    base_url: str
    log_path: Path | None
    process: subprocess.Popen | None = None
    scratch: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    def where(self) -> str:
        return f"see {self.log_path}" if self.log_path else f"the server at {self.base_url} logs on its own side"

    def exit_status(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the server's process group (it has engine workers), SIGKILL after ``grace_s``."""
        if self.process is not None and self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait(10)
        if self.process is not None:
            _signal_group(self.process, signal.SIGKILL)  # workers the server left behind
        if self.scratch is not None:
            self.scratch.cleanup()
            self.scratch = None


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p``: health and version live beside the OpenAI routes."""
    return base_url.rstrip("/").removesuffix("/v1")


def get_json(url: str, timeout: float = 5.0) -> dict | None:
    """GET a JSON document; None when nothing (or not JSON) answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else {}
    except (OSError, ValueError):
        return None


def is_healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(server_root(base_url) + "/health", timeout=5) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def launch(plan: LaunchPlan, name: str) -> RunningServer:
    """Start the server and wait until ``/health`` answers; raise EngineError (naming the log) if it never does."""
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    # vLLM writes compile caches under ~/.cache/vllm unless told otherwise: a scratch folder, or the caller's own.
    scratch = tempfile.TemporaryDirectory(prefix="dllm-engine-")
    env = {**os.environ, "VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT", scratch.name), **plan.env}
    with plan.log_path.open("a", encoding="utf-8") as log:
        log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} launch: {' '.join(plan.argv)}\n")
        log.flush()
        try:
            process = subprocess.Popen(plan.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True)
        except OSError as error:
            scratch.cleanup()
            raise EngineError(f"{name}: cannot start the engine server ({error.strerror or error}: "
                              f"{plan.argv[0]}); give a Python with vllm installed as server_python") from None
    server = RunningServer(plan.base_url, plan.log_path, process, scratch)
    deadline = time.monotonic() + plan.startup_timeout_s
    while time.monotonic() < deadline:
        status = server.exit_status()
        if status is not None:
            server.stop()
            why = refusal(plan.log_path)
            hint = f": {why}; {server.where()}" if why else f"; {server.where()} (is vllm installed for that Python?)"
            raise EngineError(f"{name}: the engine server exited with status {status} before it became healthy{hint}")
        if is_healthy(plan.base_url):
            return server
        time.sleep(1.0)
    server.stop()
    raise EngineError(f"{name}: the engine server did not become healthy within {plan.startup_timeout_s:.0f} s; "
                      f"{server.where()} (raise startup_timeout_s if it is still loading)")


# What a refusal looks like in a server log: a Python exception, argparse's "error: ", pydantic's "Value error, ".
_REFUSAL = re.compile(r"\b(?:[A-Z]\w*(?:Error|Exception): |error: |Value error, ).+")
REFUSAL_CHARS = 300


def refusal(log_path: Path) -> str | None:
    """Why a server that exited refused to start, for the one-line error: the last error its latest launch wrote to
    the log (warnings left out, pydantic's trailing ``[type=...]`` cut), at most ``REFUSAL_CHARS``; None if none."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    launch = text.rsplit("\n=== ", 1)[-1]  # launch() opens each launch's part with a "=== <time> launch:" line
    found = [m.group(0).split(" [type=")[0].strip() for line in launch.splitlines()
             if " WARNING " not in line and (m := _REFUSAL.search(line))]
    return found[-1][:REFUSAL_CHARS] if found else None


def attach(base_url: str, name: str) -> RunningServer:
    """A server someone else runs; it must answer ``/health`` now."""
    if not is_healthy(base_url):
        raise EngineError(f"{name}: no healthy engine server at {base_url} (GET {server_root(base_url)}/health "
                          f"failed); start it, or drop base_url to let the harness launch one")
    return RunningServer(base_url, None)


def server_version(base_url: str) -> str | None:
    answer = get_json(server_root(base_url) + "/version")
    return answer.get("version") if isinstance(answer, dict) else None
