"""The generation loop shared by the runner and the lm-eval model: device, seed, batches, timed decode, records.

Both callers hand it requests and get back, batch by batch, one ``SampleRecord`` per request with the fields of
docs/measurement.md; the runner stores each batch before the next starts, the lm-eval model keeps them for its speed
log. Only the decoder call is timed (tokenisation excluded), with the device synchronised on both sides. A decode
that runs out of memory halves the rows and retries what was in flight (harness.run.memory).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from harness.errors import RunError
from harness.run.memory import OUT_OF_MEMORY, DecodeCalls, RowBudget, release_memory
from harness.run.records import SampleRecord
from harness.run.schedule import CONTINUOUS, STATIC
from harness.timing.forward_timer import ForwardTimer, timed_network
from harness.timing.clock import reset_peak_memory, synchronize, timed
from models.base import Generation, GenerationRequest, ModelAdapter


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` is this rank's GPU when there is one (torchrun's LOCAL_RANK), else the CPU. A name torch does not
    know, or a GPU this machine lacks, is a one-line RunError."""
    if name == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise RunError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunError(f"device {name} requested but CUDA is not available (use --device cpu)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise RunError(f"device {name} requested but this machine has {torch.cuda.device_count()} GPU(s)")
    if device.type not in ("cpu", "cuda"):
        raise RunError(f"device {name} is not supported; use auto, cpu, cuda or cuda:N")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class LoopSettings:
    batch_size: int = 1  # rows decoded together: a static batch, or the rows in flight
    warmup: int = 1  # the first ``warmup`` samples decoded run as their own batches and are left out of speed figures
    seed: int = 1234
    rank: int = 0
    by_length: bool = False  # decode in order of prompt length (longest first), so a batch's padding is small
    schedule: str = STATIC  # CONTINUOUS: rows in flight where the decoder has them (docs/measurement.md)


@dataclass(frozen=True)
class Batch:
    """One decoded batch: the positions of its requests in the caller's list, a record per request, and the rows the
    loop decoded together when it ran (below the batch size asked once a decode ran out of memory)."""

    indices: Sequence[int]
    records: list[SampleRecord]
    rows: int = 1


def same_canvas_batches(requests: Sequence[GenerationRequest], size: int,
                        order: Sequence[int] | None = None) -> Iterator[list[int]]:
    """Requests in ``order`` (default: as given), up to ``size`` at a time, never mixing canvas lengths (a decoder
    runs one canvas)."""
    order = list(range(len(requests))) if order is None else list(order)
    start = 0
    for end in range(1, len(order) + 1):
        if end == len(order) or end - start == size or \
                requests[order[end]].canvas_tokens != requests[order[start]].canvas_tokens:
            yield order[start:end]
            start = end


def loop_batches(requests: Sequence[GenerationRequest], size: int, warmup: int,
                 order: Sequence[int] | None = None) -> Iterator[tuple[list[int], bool]]:
    """(positions, is_warmup) of every batch. The first ``warmup`` samples form their own batches (at most ``size``
    each), so every later batch is fully timed and warm-up counts samples, whatever the batch size."""
    order = list(range(len(requests))) if order is None else list(order)
    for positions in same_canvas_batches(requests, size, order[:warmup]):
        yield positions, True
    for positions in same_canvas_batches(requests, size, order[warmup:]):
        yield positions, False


def length_order(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest]) -> list[int]:
    """Positions grouped by canvas, longest prompt (in tokens) first within a canvas, as lm-eval orders its
    requests; ties keep the caller's order, so the order is deterministic. A served model's server tokenises (its
    adapter has no tokenizer here): its prompts are measured in characters."""
    tokenizer = adapter.tokenizer
    lengths = [len(adapter.render(r, config)) if tokenizer is None else
               len(tokenizer(adapter.render(r, config), add_special_tokens=False)["input_ids"]) for r in requests]
    return sorted(range(len(requests)), key=lambda i: (requests[i].canvas_tokens, -lengths[i]))


def generate_timed(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest],
                   calls: DecodeCalls | None = None) -> tuple[list[str], list[Generation], float, float | None]:
    """Rendered prompts, generations, the wall seconds of the decoder call alone (tokenisation excluded) and the
    seconds of it spent inside network forwards (None when the network runs elsewhere, e.g. in an engine)."""
    batch = adapter.prepare(requests, config)
    network = timed_network(adapter, batch.config)  # loads the weights, outside the timed call
    if calls is not None:
        calls.tick()
    if network is None:
        results, seconds = timed(adapter.device, lambda: adapter.decode(batch))
        return batch.prompts, adapter.finish(batch, results), seconds, None
    with ForwardTimer(network, adapter.device) as forwards:
        results, seconds = timed(adapter.device, lambda: adapter.decode(batch))
    return batch.prompts, adapter.finish(batch, results), seconds, forwards.seconds()


def generate_streamed(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest],
                      rows: int) -> tuple[list[Generation], float]:
    """The requests decoded with at most ``rows`` in flight, and the stream's wall seconds (tokenisation outside):
    what a sweep's re-timing measures of a continuously batched point."""
    batch = adapter.prepare(requests, config)
    timed_network(adapter, batch.config)  # loads the weights, outside the timed stretch
    steps, seconds = timed(adapter.device, lambda: list(adapter.stream(batch, rows)))
    return [g for step in steps if step.finished for g in adapter.finish_some(batch, step.finished)], seconds


def sample_record(prompt: str, generation: Generation, seconds: float, batch_size: int, warmup: bool,
                  rank: int, forward_seconds: float | None = None) -> SampleRecord:
    """One request's record of a static batch; the batch's time (and its time inside forwards) is split evenly
    across its rows. The fields an adapter's own ``Generation`` adds are kept with it."""
    return SampleRecord.from_json({
        "prompt": prompt,
        **dataclasses.asdict(generation),
        "latency_s": seconds / batch_size,
        "forward_s": None if forward_seconds is None else forward_seconds / batch_size,
        "batch_latency_s": seconds,
        "batch_size": batch_size,
        "schedule": STATIC,
        "warmup": warmup,
        "rank": rank,
    })


def print_note(message: str) -> None:
    print(f"note: {message}", flush=True)


def generate_batches(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest],
                     settings: LoopSettings, note: Callable[[str], None] = print_note) -> Iterator[Batch]:
    """Seed, reset the peak-memory counter, then decode ``requests`` batch by batch (in the caller's order, or by
    prompt length), or, with the continuous schedule and a decoder that keeps rows in flight, the warm-up batches
    and then every other request of a canvas in one stream, a batch per forward that finished any. A decode that
    runs out of memory halves the rows (``note`` says so) and retries the requests it held; every later batch keeps
    the smaller size. Read ``harness.timing.clock.peak_memory_bytes(adapter.device)`` once the loop is done for the
    peak of this loop."""
    seed_everything(settings.seed)
    reset_peak_memory(adapter.device)
    order = length_order(adapter, config, requests) if settings.by_length else list(range(len(requests)))
    loop = Loop(adapter, config, requests, settings, RowBudget(settings.batch_size), DecodeCalls.from_env(), note)
    yield from loop.static(order[:settings.warmup], True)
    if settings.schedule != CONTINUOUS or adapter.decoder.stream is None:
        yield from loop.static(order[settings.warmup:], False)
        return
    for positions in same_canvas_batches(requests, len(requests), order[settings.warmup:]):
        yield from loop.stream(positions)


@dataclass(frozen=True)
class Loop:
    """One generation loop's decodes, each retried at half the rows when it runs out of memory."""

    adapter: ModelAdapter
    config: Any
    requests: Sequence[GenerationRequest]
    settings: LoopSettings
    budget: RowBudget
    calls: DecodeCalls
    note: Callable[[str], None]

    def static(self, order: Sequence[int], warm: bool) -> Iterator[Batch]:
        """Static batches over ``order`` of at most the budget's rows, one canvas each."""
        left = list(order)
        while left:
            positions = next(same_canvas_batches(self.requests, self.budget.rows, left))
            failed = None
            try:
                batch = static_batch(self.adapter, self.config, self.requests, positions, warm, self.settings.rank,
                                     self.calls)
            except OUT_OF_MEMORY as error:
                failed = self.budget.halve(len(positions), error, self.adapter.name)
            if failed is not None:  # outside the handler, so the failed decode's frames are gone
                self.retry(failed)
                continue
            left = left[len(positions):]
            yield dataclasses.replace(batch, rows=self.budget.rows)

    def stream(self, positions: Sequence[int]) -> Iterator[Batch]:
        """Rows in flight over ``positions`` (one canvas); after an out-of-memory error, a new stream over those
        that had not finished, at half the rows."""
        left = list(positions)
        while left:
            done: set[int] = set()
            failed = None
            try:
                for batch in stream_batches(self.adapter, self.config, [self.requests[i] for i in left],
                                            self.settings, self.budget.rows, self.calls):
                    done.update(batch.indices)
                    yield Batch([left[i] for i in batch.indices], batch.records, self.budget.rows)
            except OUT_OF_MEMORY as error:
                failed = self.budget.halve(min(self.budget.rows, len(left) - len(done)), error, self.adapter.name)
            left = [p for i, p in enumerate(left) if i not in done] if failed is not None else []
            if failed is not None:
                self.retry(failed)

    def retry(self, message: str) -> None:
        self.note(message)
        release_memory(self.adapter.device)


def static_batch(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest], positions: list[int],
                 warm: bool, rank: int, calls: DecodeCalls | None = None) -> Batch:
    """One decoder call on ``requests[positions]``, timed as a whole and split across its rows."""
    prompts, generations, seconds, forward_s = generate_timed(adapter, config, [requests[i] for i in positions],
                                                              calls)
    return Batch(positions, [sample_record(prompt, gen, seconds, len(positions), warm, rank, forward_s)
                             for prompt, gen in zip(prompts, generations)])


def stream_batches(adapter: ModelAdapter, config: Any, requests: Sequence[GenerationRequest],
                   settings: LoopSettings, rows: int | None = None, calls: DecodeCalls | None = None
                   ) -> Iterator[Batch]:
    """Rows in flight over ``requests`` (one canvas): at most ``rows`` (default ``batch_size``) rows, a waiting
    request taking the row of the first to finish. Each request's record carries its own times, on the phase's clock
    (which stops while what finished is detokenised and the caller stores it): ``queue_s`` from the phase's start to
    the forward that admitted it, ``latency_s`` from there to the forward that finished it, ``forward_s`` its share
    of the forwards it ran (each forward's time split across its rows), and ``phase_elapsed_s`` from the phase's
    start to its finish (the phase's wall time, which tokens/s divides by, is the largest)."""
    rows = rows or settings.batch_size
    batch = adapter.prepare(requests, config)
    network = timed_network(adapter, batch.config)  # loads the weights, outside the phase
    timer = ForwardTimer(network, adapter.device) if network is not None else None
    phase = f"{time.time_ns():x}"
    joined: dict[int, float] = {}  # admission time of each request in flight
    inside: dict[int, float] = {}  # its forward seconds so far
    paused = 0.0
    with timer if timer is not None else contextlib.nullcontext():
        synchronize(adapter.device)
        start = step_start = time.perf_counter()
        steps = adapter.stream(batch, rows)
        for step in (steps if calls is None else calls.counted(steps)):
            synchronize(adapter.device)
            now = time.perf_counter() - paused
            for i in step.admitted:
                joined[i], inside[i] = step_start - start, 0.0
            share = (timer.take() if timer is not None else 0.0) / step.rows
            for i in inside:  # every request in this forward, the ones it finished included
                inside[i] += share
            if step.finished:
                stopped = time.perf_counter()
                records = []
                for (i, _), generation in zip(step.finished, adapter.finish_some(batch, step.finished)):
                    queued, forward_s = joined.pop(i), inside.pop(i)
                    record = sample_record(batch.prompts[i], generation, now - start - queued, 1, False,
                                           settings.rank, forward_s if timer is not None else None)
                    records.append(dataclasses.replace(
                        record, batch_latency_s=None, batch_size=rows, schedule=CONTINUOUS,
                        queue_s=queued, phase=phase, phase_elapsed_s=now - start))
                yield Batch([i for i, _ in step.finished], records)
                paused += time.perf_counter() - stopped
            step_start = time.perf_counter() - paused
