"""The cache interface the ReFusion decoder needs, for both networks, and the driver that batches its rows.

The decoder is written per row, as a generator that yields requests (``requests.py``: a plan, a verify, or an
in-slot draft or verify) and receives a ``Reply`` on the host; between requests it edits its cache row (truncate,
keep chosen tail entries). The driver gathers the pending requests of all live rows into one forward and reads every
row's answers with one set of ops and one transfer (``read_logits``), so N prompts decode together even when their
buffers, phases and finishing times differ, at the same ops and reads per forward as one. The cache is a slot pool
allocated once: a program takes a free slot (cache row) when it starts and gives it back when it returns, a waiting
program taking it at the next round, its first request (the prompt) in a forward of its own on its slot; each
forward runs on its rows' slots, so no op outside a forward copies the cache.

Two implementations of the cache:
  * ``NativeStepper``: the native Qwen3 network and its preallocated ``KVBuffer``, one row per slot (any number);
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
from models.networks.kv_buffer import KVBuffer, SlotPool


RowProgram = Generator[Request, Reply, Any]


class Stepper(Protocol):
    """A cache of slots (rows) and the forwards over some of them; a program's row is its slot while it runs."""

    device: torch.device

    def take(self) -> int: ...
    def give(self, slot: int) -> None: ...
    def at(self, slots: list[int]) -> AbstractContextManager["Stepper"]: ...
    def length(self, row: int) -> int: ...
    def forward(self, step: StepInputs, mask: GroupedWindows | None) -> Tensor: ...
    def truncate(self, row: int, n: int) -> None: ...
    def keep_tail(self, row: int, start: int, index: list[int]) -> None: ...
    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]: ...


class NativeStepper:
    """A native network with ``new_cache``/``forward(ids, position_ids, attention_mask, cache, ragged=...)``: the
    logits at the read cells alone, the pads of a ragged batch not computed. Made with ``slots``, it allocates the
    pool (a ``KVBuffer`` of that many rows, and which are free); ``at`` gives a stepper over some of its rows (its
    ``cache`` given) for one forward."""

    def __init__(self, network: torch.nn.Module, slots: int, capacity: int, cache: KVBuffer | None = None) -> None:
        self.network, self.capacity = network, capacity
        self.cache = network.new_cache(slots, capacity) if cache is None else cache
        self.pool = SlotPool(slots) if cache is None else None
        self.device = self.cache.kv.device
        # a torch.compile'd network gets tensors only: a layout's integers would be guarded on and recompiled
        self.compiled = hasattr(network, "_orig_mod")
        self._tails: list[tuple[int, int, list[int]]] = []  # keep_tail edits not yet copied

    def take(self) -> int:
        """A free slot, emptied for a program that starts (its last holder's entries become free columns)."""
        slot = self.pool.take()
        self.cache.truncate(slot, 0)
        return slot

    def give(self, slot: int) -> None:
        """A returned program's slot, free again; tail edits it left are dropped (nothing reads them)."""
        self._tails = [edit for edit in self._tails if edit[0] != slot]
        self.pool.give(slot)

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

    @contextmanager
    def at(self, slots: list[int]) -> Iterator["NativeStepper"]:
        """Rows ``slots`` (in that order) as a stepper of their own over the same memory, for a forward of those
        rows alone (``KVBuffer.at``: a view when the slots are consecutive)."""
        self._copy_tails()
        with self.cache.at(slots) as part:
            yield NativeStepper(self.network, 0, self.capacity, cache=part)

    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]:
        self._copy_tails()
        return self.cache.row_kv(row)


class TransformersStepper:
    """One row on a transformers-style causal LM (``input_ids, position_ids, cache, use_cache`` -> ``.logits``), its
    cache the transformers path's ``TransformersCache``: one slot, a new cache for each program."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        self.cache: TransformersCache | None = None

    def take(self) -> int:
        if self.cache is not None:
            raise ValueError("the transformers path decodes one row at a time")
        self.cache = TransformersCache(getattr(self.model, "config", None), 1, self.device)
        return 0

    def give(self, slot: int) -> None:
        self.cache = None

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

    @contextmanager
    def at(self, slots: list[int]) -> Iterator["TransformersStepper"]:
        if slots != [0]:
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


def drive(stepper: Stepper, programs: list[RowProgram], slots: dict[int, int], max_rows: int) -> Iterator[Round]:
    """Run row programs to completion, one batched forward per round for the rows already running (each forward
    split evenly across the rows it ran, the harness's rule for batched calls).

    ``slots`` maps each running program to its cache row; it is filled in place as programs start (a free slot each,
    ``stepper.take``) and emptied as they return (``stepper.give``), which is how each program's ``RowCache`` finds
    its row. The other programs wait, at most ``max_rows`` running: as rows finish, as many waiting programs start
    in the slots they left. A program's first request (its prompt) runs in a forward of its own beside the round's,
    on its slot alone, so the rows in flight keep forwards as narrow as their own requests. Each forward takes its
    rows in slot order (consecutive slots are a view of the cache)."""
    nfe = [0.0] * len(programs)
    waiting, pending = list(range(len(programs)))[::-1], {}

    def start(n: int) -> list[int]:
        joined = [waiting.pop() for _ in range(n)]
        for i in joined:
            slots[i] = stepper.take()
            pending[i] = next(programs[i])  # every program asks for at least one forward
        return joined

    running, joining = [], start(min(max_rows, len(waiting)))
    while running or joining:
        ran = []
        for group in (running, joining):
            group = sorted(group, key=slots.__getitem__)
            if group:
                replies = forward_rows(stepper, [pending[i] for i in group], [slots[i] for i in group])
                ran += zip(group, replies)
                for i in group:
                    nfe[i] += 1.0 / len(group)
        returned = []
        for i, reply in ran:
            try:
                pending[i] = programs[i].send(reply)
            except StopIteration as stop:
                returned.append((i, stop.value, nfe[i]))
                stepper.give(slots.pop(i))
                del pending[i]
        started, running = tuple(joining), [i for i, _ in ran if i in pending]
        joining = start(min(max_rows - len(running), len(waiting)))
        yield Round(started, tuple(returned), len(ran))


def forward_rows(stepper: Stepper, reqs: list[Request], slots: list[int]) -> list[Reply]:
    """One forward of cache rows ``slots`` with their requests; their replies, in order."""
    plan = plan_reads(reqs)
    with stepper.at(slots) as part:
        step = batch_inputs(reqs, plan, part.device)
        lengths = [part.length(row) for row in range(len(reqs))]
        plain = not any(isinstance(r, InSlot) for r in reqs)
        mask = None if plain else request_windows(reqs, lengths, step.width)
        picked = part.forward(step, mask)
        for row, r in enumerate(reqs):
            part.truncate(row, lengths[row] + len(r.ids))  # pad entries are not kept
    return read_logits(picked, plan, step.scored_at)


class RowCache:
    """A program's handle on its cache row: the slot the driver gave it when it started (``drive``'s ``slots``)."""

    def __init__(self, stepper: Stepper, slots: dict[int, int], index: int) -> None:
        self.stepper, self._slots, self.index = stepper, slots, index

    @property
    def row(self) -> int:
        return self._slots[self.index]

    def length(self) -> int:
        return self.stepper.length(self.row)

    def truncate(self, n: int) -> None:
        self.stepper.truncate(self.row, n)

    def keep_tail(self, start: int, index: list[int]) -> None:
        self.stepper.keep_tail(self.row, start, index)

    def kv(self) -> list[tuple[Tensor, Tensor]]:
        return self.stepper.row_kv(self.row)
