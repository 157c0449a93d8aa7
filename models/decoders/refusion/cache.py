"""The cache interface the ReFusion decoder needs, for both networks, and the driver that batches its rows.

The decoder is written per row, as a generator that yields requests (``requests.py``: a plan, a verify, or an
in-slot draft or verify) and receives a ``Reply`` on the host; between requests it edits its cache row (truncate,
keep chosen tail entries). The driver gathers the pending requests of all live rows into one forward and reads every
row's answers with one set of ops and one transfer (``read_logits``), so N prompts decode together even when their
buffers, phases and finishing times differ, at the same ops and reads per forward as one; a finished row leaves the
cache and a waiting program joins at its end, its first request (the prompt) in a forward of its own.

Two implementations of the cache:
  * ``NativeStepper``: the native Qwen3 network and its preallocated ``KVBuffer`` (any batch);
  * ``TransformersStepper``: a transformers causal LM and the transformers path's ``TransformersCache`` (one row;
    the comparison path).
Visibility: plain causal over the whole cache, or in-slot windows (``InSlot``): every query sees the row's committed
buffer, and a query in window g also sees the tail entries owned by g and the entries of window g at or before it.
The driver hands the network that layout (``GroupedWindows``), not a mask: the native network attends group by group
where that is cheaper, any other network gets the dense mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generator, Iterator, Protocol

import torch
from torch import Tensor

from models.decoders.refusion.requests import (InSlot, Reply, Request, StepInputs, batch_inputs, plan_reads,
                                               read_logits, request_windows)
from models.networks.grouped_attention import GroupedWindows, dense_mask
from models.networks.hf_causal import TransformersCache
from models.networks.kv_buffer import KVBuffer


RowProgram = Generator[Request, Reply, Any]


class Stepper(Protocol):
    batch: int
    device: torch.device

    def length(self, row: int) -> int: ...
    def forward(self, step: StepInputs, mask: GroupedWindows | None) -> Tensor: ...
    def truncate(self, row: int, n: int) -> None: ...
    def keep_tail(self, row: int, start: int, index: list[int]) -> None: ...
    def select_rows(self, rows: list[int]) -> None: ...
    def admit(self, n_rows: int) -> None: ...
    def rows(self, start: int, stop: int) -> AbstractContextManager["Stepper"]: ...
    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]: ...


class NativeStepper:
    """A native network with ``new_cache``/``forward(ids, position_ids, attention_mask, cache, ragged=...)``: the
    logits at the read cells alone, the pads of a ragged batch not computed."""

    def __init__(self, network: torch.nn.Module, batch: int, capacity: int, cache: KVBuffer | None = None) -> None:
        self.network, self.capacity = network, capacity
        self.cache = network.new_cache(batch, capacity) if cache is None else cache
        self.device = self.cache.kv.device
        # a torch.compile'd network gets tensors only: a layout's integers would be guarded on and recompiled
        self.compiled = hasattr(network, "_orig_mod")
        self._tails: list[tuple[int, int, list[int]]] = []  # keep_tail edits not yet copied

    @property
    def batch(self) -> int:
        return self.cache.batch

    def length(self, row: int) -> int:
        return self.cache.lengths[row]

    def forward(self, step: StepInputs, mask: GroupedWindows | None) -> Tensor:
        self._copy_tails()
        if mask is not None and self.compiled:
            mask = dense_mask(mask, step.ids.device)
        return self.network(step.ids, position_ids=step.positions, attention_mask=mask, cache=self.cache,
                            ragged=step.ragged)

    def truncate(self, row: int, n: int) -> None:
        self.cache.truncate(row, n)

    def keep_tail(self, row: int, start: int, index: list[int]) -> None:
        """Recorded now, copied before the next forward together with every other row's: one copy per forward for
        the whole batch, not one per row."""
        self.cache.check_tail(row, start, index)
        if index != list(range(len(index))):
            self._tails.append((row, start, index))
        self.cache.truncate(row, start + len(index))

    def _copy_tails(self) -> None:
        if self._tails:
            self.cache.keep_tails(self._tails)
            self._tails = []

    def select_rows(self, rows: list[int]) -> None:
        self._copy_tails()
        self.cache.select_rows(rows)

    def admit(self, n_rows: int) -> None:
        """``n_rows`` empty rows after the others, for programs joining the batch."""
        self.cache.admit(self.network.new_cache(n_rows, self.capacity))

    @contextmanager
    def rows(self, start: int, stop: int) -> Iterator["NativeStepper"]:
        """Rows ``start..stop-1`` as a stepper of their own over the same memory (a forward of those rows alone)."""
        self._copy_tails()
        with self.cache.rows(start, stop) as part:
            yield NativeStepper(self.network, 0, self.capacity, cache=part)

    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]:
        self._copy_tails()
        return self.cache.row_kv(row)


class TransformersStepper:
    """One row on a transformers-style causal LM (``input_ids, position_ids, cache, use_cache`` -> ``.logits``), its
    cache the transformers path's ``TransformersCache``."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        self.cache = TransformersCache(getattr(model, "config", None), 1, device)

    @property
    def batch(self) -> int:
        return self.cache.batch

    def length(self, row: int) -> int:
        return self.cache.lengths[row]

    def forward(self, step: StepInputs, mask: GroupedWindows | None) -> Tensor:
        """The trailing ``step.keep`` logits computed (all a causal LM can skip), the read cells taken from them."""
        extra = {} if mask is None else {"attention_mask": dense_mask(mask, step.ids.device)}
        if step.keep < step.width:
            extra["logits_to_keep"] = step.keep
        self.cache.append(step.width)
        out = self.model(input_ids=step.ids, position_ids=step.positions, cache=self.cache.cache, use_cache=True,
                         **extra)
        return out.logits[0].index_select(0, step.ragged.read - (step.width - step.keep))

    def truncate(self, row: int, n: int) -> None:
        self.cache.truncate(row, n)

    def keep_tail(self, row: int, start: int, index: list[int]) -> None:
        self.cache.keep_tail(row, start, index)

    def select_rows(self, rows: list[int]) -> None:
        if not rows:  # the row finished: the next program starts on a new cache
            self.cache = TransformersCache(getattr(self.model, "config", None), 0, self.device)
        elif rows != [0] or self.batch != 1:
            raise ValueError("the transformers path decodes one row at a time")

    def admit(self, n_rows: int) -> None:
        if self.batch + n_rows != 1:
            raise ValueError("the transformers path decodes one row at a time")
        self.cache = TransformersCache(getattr(self.model, "config", None), 1, self.device)

    @contextmanager
    def rows(self, start: int, stop: int) -> Iterator["TransformersStepper"]:
        if (start, stop) != (0, 1):
            raise ValueError("the transformers path decodes one row at a time")
        yield self

    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]:
        return self.cache.row_kv(row)


@dataclass(frozen=True)
class Round:
    """One forward of ``drive``: the programs that started before it, those that returned with it (index, value,
    their share of the forwards they ran), and the rows it ran."""

    started: tuple[int, ...]
    returned: tuple[tuple[int, Any, float], ...]
    rows: int


def drive(stepper: Stepper, programs: list[RowProgram], live: list[int], max_rows: int) -> Iterator[Round]:
    """Run row programs to completion, one batched forward per round for the rows already running (each forward
    split evenly across the rows it ran, the harness's rule for batched calls).

    ``live`` lists the program index of each cache row, in order; it is updated in place as rows leave and join,
    which is how each program's ``RowCache`` finds its row. The other programs wait: as rows finish they leave the
    cache and as many waiting programs join at its end, at most ``max_rows`` in all. A program's first request (its
    prompt) runs in a forward of its own beside the round's, on its cache rows alone, so the rows in flight keep
    forwards as narrow as their own requests."""
    nfe = [0.0] * len(programs)
    waiting = [i for i in range(len(programs)) if i not in live][::-1]
    started, running = tuple(live), 0  # rows [running:] started this round
    pending = {i: next(programs[i]) for i in live}  # every program asks for at least one forward
    while live:
        replies = []
        for start, stop in ((0, running), (running, len(live))):
            if start < stop:
                replies += forward_rows(stepper, [pending[i] for i in live[start:stop]], start, stop)
                for i in live[start:stop]:
                    nfe[i] += 1.0 / (stop - start)
        returned, rows = [], len(live)
        for i, reply in zip(list(live), replies):
            try:
                pending[i] = programs[i].send(reply)
            except StopIteration as stop:
                returned.append((i, stop.value, nfe[i]))
        if returned:
            ended = {i for i, _, _ in returned}
            keep = [row for row, i in enumerate(live) if i not in ended]
            live[:] = [live[row] for row in keep]
            stepper.select_rows(keep)
        joined = [waiting.pop() for _ in range(min(max_rows - len(live), len(waiting)))]
        if joined:
            stepper.admit(len(joined))
            live += joined
            pending.update({i: next(programs[i]) for i in joined})
        yield Round(started, tuple(returned), rows)
        started, running = tuple(joined), len(live) - len(joined)


def forward_rows(stepper: Stepper, reqs: list[Request], start: int, stop: int) -> list[Reply]:
    """One forward of cache rows ``start..stop-1`` with their requests; their replies, in order."""
    plan = plan_reads(reqs)
    with stepper.rows(start, stop) as part:
        step = batch_inputs(reqs, plan, part.device)
        lengths = [part.length(row) for row in range(stop - start)]
        plain = not any(isinstance(r, InSlot) for r in reqs)
        mask = None if plain else request_windows(reqs, lengths, step.width)
        picked = part.forward(step, mask)
        for row, r in enumerate(reqs):
            part.truncate(row, lengths[row] + len(r.ids))  # pad entries are not kept
    return read_logits(picked, plan, step.scored_at)


class RowCache:
    """A program's handle on its cache row; the driver renumbers rows when others leave, so look the row up live."""

    def __init__(self, stepper: Stepper, live: list[int], index: int) -> None:
        self.stepper, self._live, self.index = stepper, live, index

    @property
    def row(self) -> int:
        return self._live.index(self.index)

    def length(self) -> int:
        return self.stepper.length(self.row)

    def truncate(self, n: int) -> None:
        self.stepper.truncate(self.row, n)

    def keep_tail(self, start: int, index: list[int]) -> None:
        self.stepper.keep_tail(self.row, start, index)

    def kv(self) -> list[tuple[Tensor, Tensor]]:
        return self.stepper.row_kv(self.row)
