"""Timing the decoder call alone, with the device synchronised on both sides, and peak memory."""

from __future__ import annotations

import resource
import sys
import time
from typing import Callable, TypeVar

import torch

T = TypeVar("T")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, call: Callable[[], T]) -> tuple[T, float]:
    """Run ``call`` and return its result and wall seconds, the device idle before the start and after the end."""
    synchronize(device)
    start = time.perf_counter()
    result = call()
    synchronize(device)
    return result, time.perf_counter() - start


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated device memory on CUDA; on CPU the process's peak resident set (not resettable)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
