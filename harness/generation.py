"""The generation loop shared by the runner and the lm-eval model: device, seed, batches, timed decode, records.

Both callers hand it requests and get back, batch by batch, one record per request with the fields of
docs/measurement.md; the runner stores each batch before the next starts, the lm-eval model keeps them for its speed
log. Only the decoder call is timed (tokenisation excluded), with the device synchronised on both sides.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from harness.errors import RunError
from harness.timing import reset_peak_memory, timed
from models.base import Generation, GenerationRequest, ModelAdapter
from models.options import with_default_seed


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` is this rank's GPU when there is one (torchrun's LOCAL_RANK), else the CPU."""
    if name == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunError(f"device {name} requested but CUDA is not available (use --device cpu)")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def with_run_seed(config: Any, seed: int) -> Any:
    """Samplers without an explicit seed take the run's seed, so sampled runs are reproducible too."""
    return with_default_seed(config, seed)


@dataclass(frozen=True)
class LoopSettings:
    batch_size: int = 1
    warmup: int = 1  # samples left out of the speed figures (every batch holding one of them)
    seed: int = 1234
    rank: int = 0


@dataclass(frozen=True)
class Batch:
    """One decoded batch: the positions of its requests in the caller's list and a record per request."""

    indices: range
    records: list[dict[str, Any]]


def warmup_batches(warmup_samples: int, batch_size: int) -> int:
    """Batches left out of the speed figures: every batch holding one of the first ``warmup_samples`` samples."""
    return math.ceil(warmup_samples / batch_size) if warmup_samples > 0 else 0


def same_canvas_batches(requests: Sequence[GenerationRequest], size: int) -> Iterator[range]:
    """Consecutive requests, up to ``size`` at a time, never mixing canvas lengths (a decoder runs one canvas)."""
    start = 0
    for end in range(1, len(requests) + 1):
        if end == len(requests) or end - start == size or \
                requests[end].canvas_tokens != requests[start].canvas_tokens:
            yield range(start, end)
            start = end


def generate_timed(adapter: ModelAdapter, config: Any,
                   requests: Sequence[GenerationRequest]) -> tuple[list[str], list[Generation], float]:
    """Rendered prompts, generations and the wall seconds of the decoder call alone (tokenisation excluded)."""
    batch = adapter.prepare(requests, config)
    results, seconds = timed(adapter.device, lambda: adapter.decode(batch))
    return batch.prompts, adapter.finish(batch, results), seconds


def timing_record(prompt: str, generation: Generation, seconds: float, batch_size: int, warmup: bool,
                  rank: int) -> dict[str, Any]:
    """The measurement fields of one sample; a batch's time is split evenly across its rows."""
    return {
        "prompt": prompt,
        **dataclasses.asdict(generation),
        "latency_s": seconds / batch_size,
        "batch_latency_s": seconds,
        "batch_size": batch_size,
        "warmup": warmup,
        "rank": rank,
    }


def generate_batches(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest],
                     settings: LoopSettings) -> Iterator[Batch]:
    """Seed, reset the peak-memory counter, then decode ``requests`` batch by batch, in order. Read
    ``harness.timing.peak_memory_bytes(adapter.device)`` once the loop is done for the peak of this loop."""
    seed_everything(settings.seed)
    reset_peak_memory(adapter.device)
    warm = warmup_batches(settings.warmup, settings.batch_size)
    for index, positions in enumerate(same_canvas_batches(requests, settings.batch_size)):
        prompts, generations, seconds = generate_timed(adapter, config, [requests[i] for i in positions])
        yield Batch(positions, [timing_record(prompt, gen, seconds, len(positions), index < warm, settings.rank)
                                for prompt, gen in zip(prompts, generations)])

