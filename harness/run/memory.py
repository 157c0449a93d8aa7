"""Out of memory during a decode: the rows (or the static batch) halve and the requests in flight are retried.

A batch size that fits the first prompts may not fit a long one later; instead of ending the run (and making the
user guess a smaller ``--batch-size``), the generation loop keeps every finished request, halves its rows and
retries what was in flight, once per halving, down to one row; only a single row that does not fit ends the run.

``DLLM_INJECT_OOM=K`` is a test hook, read here and nowhere else: the K-th decoder call of each generation loop (a
static batch's decode, or one round of a stream) raises ``torch.OutOfMemoryError`` before it runs, so the retry path
can be exercised on a CPU.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Iterator, TypeVar

import torch

from harness.errors import RunError

INJECT_OOM_ENV = "DLLM_INJECT_OOM"
OUT_OF_MEMORY = (torch.OutOfMemoryError, MemoryError)  # CUDA's (torch.cuda.OutOfMemoryError is the same class)

T = TypeVar("T")


class OutOfMemoryAtOneRow(RunError):
    """A single request does not fit in memory; nothing smaller is left to try."""


@dataclass
class DecodeCalls:
    """A generation loop's count of decoder calls; with the test hook set, the ``inject_at``-th raises."""

    inject_at: int | None = None
    count: int = 0

    @classmethod
    def from_env(cls) -> DecodeCalls:
        value = os.environ.get(INJECT_OOM_ENV, "").strip()
        if not value:
            return cls()
        if not value.isdigit() or int(value) < 1:
            raise RunError(f"{INJECT_OOM_ENV}={value!r} is not a positive whole number (the decoder call that runs "
                           f"out of memory, a test hook); unset it for a normal run")
        return cls(int(value))

    def tick(self) -> None:
        """Count one decoder call; the hook's call raises as a real allocation failure would."""
        self.count += 1
        if self.count == self.inject_at:
            raise torch.OutOfMemoryError(f"out of memory injected by {INJECT_OOM_ENV}={self.inject_at} "
                                         f"(decoder call {self.count})")

    def counted(self, steps: Iterator[T]) -> Iterator[T]:
        """A stream's rounds, each counted as one decoder call before it runs."""
        while True:
            self.tick()
            try:
                step = next(steps)
            except StopIteration:
                return
            yield step


@dataclass
class RowBudget:
    """The rows a loop decodes together: ``asked`` (--batch-size) until a decode runs out of memory, then halved."""

    asked: int
    rows: int = 0

    def __post_init__(self) -> None:
        self.rows = self.rows or self.asked

    @property
    def reduced(self) -> bool:
        return self.rows < self.asked

    def halve(self, failed_rows: int, error: BaseException, what: str) -> str:
        """After ``failed_rows`` rows ran out of memory: the next size (half of them), and the note that says so;
        at one row, OutOfMemoryAtOneRow."""
        reason = first_line(error)
        if failed_rows <= 1:
            raise OutOfMemoryAtOneRow(
                f"{what}: out of memory decoding a single request ({reason}); the finished samples are stored: free "
                f"memory on the device, or shorten the canvas (--gen-length), then rerun the same command to resume")
        self.rows = max(1, failed_rows // 2)
        return f"{what}: out of memory at {failed_rows} rows ({reason}); retrying the requests in flight at " \
               f"{self.rows}"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def release_memory(device: torch.device) -> None:
    """Free what the failed decode left (its tensors are garbage once its exception is gone)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
