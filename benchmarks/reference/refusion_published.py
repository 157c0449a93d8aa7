"""The project side of the published ReFusion decoder: benchmarks/reference/refusion_worker.py started in a subprocess
with the Python of an environment the published code imports in, and asked for one case at a time (so a caller's
rounds interleave with it). Used by the ``refusion_reference`` benchmark and
tests/models/decoders/test_refusion_published.py."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class PublishedUnavailable(RuntimeError):
    """The checkout is missing, or does not import with that Python; the message is its last line of stderr."""


@dataclass(frozen=True)
class PublishedAnswer:
    seconds: float  # the decode's wall time, measured in the worker
    tokens: list[list[int]]  # per prompt, the generated ids
    forwards: list[int]  # per prompt, the network calls


class PublishedWorker:
    def __init__(self, python: str, checkout: str | Path, checkpoint: str | Path, **flags: Any) -> None:
        if not (Path(checkout) / "generate.py").is_file():
            raise PublishedUnavailable(f"no generate.py in {checkout}")
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).with_name("refusion_worker.py")), f"--reference={checkout}",
             f"--checkpoint={checkpoint}", *(f"--{k.replace('_', '-')}={v}" for k, v in flags.items())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self._answer()  # {"ready": true}, or the import error

    def _answer(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.log.seek(0)
            last = [x for x in self.log.read().splitlines() if x.strip()][-1:] or [f"exit {self.proc.returncode}"]
            self.log.close()
            raise PublishedUnavailable(last[0].strip())
        return json.loads(line)

    def decode(self, canvas: int, regime: str = "90%", **options: Any) -> PublishedAnswer:
        """Every prompt once at ``canvas`` (options: slot_size, serial_num_blocks, slot_threshold, token_threshold)."""
        self.proc.stdin.write(json.dumps({"canvas": canvas, "regime": regime, **options}) + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        return PublishedAnswer(answer["seconds"], answer["tokens"], answer["forwards"])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()
