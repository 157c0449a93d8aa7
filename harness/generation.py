"""One timed generation batch and its per-sample record: shared by the runner and the lm-eval model."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from harness.forward_timer import ForwardTimer, timed_network
from harness.timing import timed
from models.base import Generation, GenerationRequest, ModelAdapter


def generate_timed(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest]
                   ) -> tuple[list[str], list[Generation], float, float | None]:
    """Rendered prompts, generations, the wall seconds of the decoder call alone (tokenisation excluded) and the
    seconds of it spent inside network forwards (None when the network runs elsewhere, e.g. in an engine)."""
    batch = adapter.prepare(requests, config)
    network = timed_network(adapter)  # loads the weights, outside the timed call
    if network is None:
        results, seconds = timed(adapter.device, lambda: adapter.decode(batch))
        return batch.prompts, adapter.finish(batch, results), seconds, None
    with ForwardTimer(network, adapter.device) as forwards:
        results, seconds = timed(adapter.device, lambda: adapter.decode(batch))
    return batch.prompts, adapter.finish(batch, results), seconds, forwards.seconds()


def warmup_batches(warmup_samples: int, batch_size: int) -> int:
    """Batches left out of the speed figures: every batch holding one of the first ``warmup_samples`` samples."""
    return math.ceil(warmup_samples / batch_size) if warmup_samples > 0 else 0


def timing_record(prompt: str, generation: Generation, seconds: float, batch_size: int, warmup: bool,
                  rank: int, forward_seconds: float | None = None) -> dict[str, Any]:
    """The measurement.md fields of one sample; a batch's time is split evenly across its rows."""
    return {
        "prompt": prompt,
        **dataclasses.asdict(generation),
        "latency_s": seconds / batch_size,
        "forward_s": None if forward_seconds is None else forward_seconds / batch_size,
        "batch_latency_s": seconds,
        "batch_size": batch_size,
        "warmup": warmup,
        "rank": rank,
    }
