"""Open a local page in headless Chromium and record what it did, over the DevTools protocol on a pipe.

Why the DevTools protocol: it reports every request the page attempts (``Network.requestWillBeSent``, before any
policy blocks it), every uncaught exception, console error and browser log error, and it takes the screenshot, all
from outside the page; nothing has to be injected into the report. ``--remote-debugging-pipe`` needs no port.
Chromium reads commands on fd 3 and writes replies and events on fd 4, each message NUL-terminated JSON.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--mute-audio", "--remote-debugging-pipe",
         # Belt and braces: even a request that escaped detection could not resolve a host.
         "--host-resolver-rules=MAP * ~NOTFOUND")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageVisit:
    requests: list[str] = field(default_factory=list)  # URLs other than the page itself and data: URIs
    errors: list[str] = field(default_factory=list)  # exceptions, console errors, browser log errors
    screenshot: bytes = b""
    evaluations: dict[str, Any] = field(default_factory=dict)


class _Pipe:
    def __init__(self, binary: str, profile: Path, width: int, height: int):
        to_chrome_r, self._write = os.pipe()
        self._read, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child: move the pipe ends to fds 3 and 4 (dup2 clears close-on-exec)
            high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire, close_fds=False,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._receive(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            os.write(self._write, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._write)
        os.close(self._read)


def visit(binary: str, page: Path, profile: Path, expressions: dict[str, str] | None = None,
          width: int = 1280, height: int = 900, full_page: bool = False, ready: str = "true") -> PageVisit:
    """Load ``page``, wait for its load event and for the ``ready`` expression, evaluate ``expressions``,
    take a screenshot, and return everything the page requested or logged as an error."""
    pipe = _Pipe(binary, profile, width, height)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            pipe.send(method, session=session)
        pipe.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        url = page.resolve().as_uri()
        pipe.send("Page.navigate", {"url": url}, session=session)
        pipe.wait_for("Page.loadEventFired")
        deadline = time.monotonic() + 20
        while not pipe.send("Runtime.evaluate", {"expression": f"Boolean({ready})", "returnByValue": True},
                            session=session)["result"].get("value"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never became ready ({ready})")
            time.sleep(0.1)
        result = PageVisit()
        for name, expression in (expressions or {}).items():
            reply = pipe.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                              session=session)
            result.evaluations[name] = reply["result"].get("value")
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = pipe.send("Runtime.evaluate", {"expression": "document.documentElement.scrollHeight",
                                                  "returnByValue": True}, session=session)["result"]["value"]
            params.update({"captureBeyondViewport": True,
                           "clip": {"x": 0, "y": 0, "width": width, "height": min(int(size), 16000), "scale": 1}})
        result.screenshot = base64.b64decode(pipe.send("Page.captureScreenshot", params, session=session)["data"])
        for event in pipe.events:
            method, p = event.get("method"), event.get("params", {})
            if method == "Network.requestWillBeSent":
                requested = p["request"]["url"]
                if requested != url and not requested.startswith(("data:", "about:")):
                    result.requests.append(requested)
            elif method == "Runtime.exceptionThrown":
                details = p["exceptionDetails"]
                result.errors.append(f"exception: {details.get('exception', {}).get('description') or details['text']}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                result.errors.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                result.errors.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return result
    finally:
        pipe.close()
