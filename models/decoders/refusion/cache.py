"""The cache interface the ReFusion decoder needs, for both networks, and the driver that batches its rows.

The decoder is written per row, as a generator that yields ``Request``s (tokens, positions, who may see whom, what
to read back) and receives a ``Reply`` on the host; between requests it edits its cache row (truncate, keep chosen
tail entries). The driver gathers the pending requests of all live rows into one forward and reads every row's
answers with one set of ops and one transfer (``read_logits``), so N prompts decode together even when their
buffers, phases and finishing times differ, at the same ops and reads per forward as one; a finished row leaves the
cache and a waiting program joins at its end, its first request (the prompt) in a forward of its own.

Two implementations of the cache:
  * ``NativeStepper``: the native Qwen3 network and its preallocated ``KVBuffer`` (any batch);
  * ``TransformersStepper``: a transformers causal LM and the transformers path's ``TransformersCache`` (one row;
    the comparison path).
Visibility (``Request``): plain causal over the whole cache, or in-slot windows: every query sees the row's committed
buffer, and a query in window g also sees the tail entries owned by g and the entries of window g at or before it.
The driver hands the network that layout (``GroupedWindows``), not a mask: the native network attends group by group
where that is cheaper, any other network gets the dense mask.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generator, Iterator, Protocol

import torch
from torch import Tensor

from models.decoders.sampling import add_gumbel_noise
from models.networks.grouped_attention import GroupedWindows, dense_mask
from models.networks.hf_causal import TransformersCache
from models.networks.kv_buffer import KVBuffer
from models.networks.ragged import RaggedBatch


@dataclass(frozen=True)
class Request:
    """One row's share of a forward: new tokens on top of its cache, and what the row needs read from the logits.

    ``ids``/``positions`` are host lists: the decoder's decisions are made on the host from one read per forward, so
    the next forward's inputs are known there and go to the device in one copy for the whole batch.

    ``window`` = 0 is plain causal over the whole cache. ``window`` > 0 is in-slot completion: the new tokens are
    consecutive windows of that many, one per slot (group); every query sees the first ``committed`` cache entries,
    the entries after them are each group's own ``owned`` entries in group order, and a query sees its group's
    entries and its window up to itself. ``keep`` > 0: only the last ``keep`` new tokens are read (the prompt fed with
    the first plan is not).

    Reads, over the read tokens (``Reply``): ``draft``: the argmax at each (Gumbel-max at ``temperature`` > 0 with
    ``generator``); ``first_of`` > 0: also the probability of the draft at every ``first_of``-th token and whether it
    passes ``slot_threshold``; ``verify`` > 0: whether each token, except the first of each run of ``verify``, has
    probability above ``token_threshold`` under the logits before it (the shifted read)."""

    ids: list[int]
    positions: list[int]
    window: int = 0
    committed: int = 0
    owned: int = 0
    keep: int = 0
    draft: bool = False
    first_of: int = 0
    verify: int = 0
    temperature: float = 0.0
    generator: torch.Generator | None = None
    slot_threshold: float = 0.0
    token_threshold: float = 0.0

    def read_span(self) -> range:
        """Indices of the new tokens whose logits are read."""
        n = len(self.ids)
        return range(n - self.keep, n) if self.keep else range(n)


@dataclass(frozen=True)
class Reply:
    """What a row's ``Request`` asked for, on the host."""

    tokens: list[int]  # draft: one per read token
    confidence: list[float]  # first_of: the draft's probability at each first token
    confident: list[bool]  # first_of: that probability > slot_threshold
    accepted: list[bool]  # verify: per read token after the first of its run, in order


RowProgram = Generator[Request, Reply, Any]


class Stepper(Protocol):
    batch: int
    device: torch.device

    def length(self, row: int) -> int: ...
    def forward(self, step: "StepInputs", mask: GroupedWindows | None) -> Tensor: ...
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

    def forward(self, step: "StepInputs", mask: GroupedWindows | None) -> Tensor:
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

    def forward(self, step: "StepInputs", mask: GroupedWindows | None) -> Tensor:
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


def request_windows(reqs: list[Request], lengths: list[int], width: int) -> GroupedWindows:
    """The rows' visibility as the network takes it: a plain row is one group over its whole cache, an in-slot row
    one group per slot after its committed buffer."""
    rows = []
    for r, n in zip(reqs, lengths):
        n_new = len(r.ids)
        if r.window == 0:
            rows.append((n, n, 1, 0, n_new))
        elif n_new % r.window:
            raise RuntimeError(f"refusion: {n_new} new tokens do not split into windows of {r.window}")
        else:
            rows.append((n, r.committed, n_new // r.window, r.owned, r.window))
    return GroupedWindows(*map(tuple, zip(*rows)), width=width)


@dataclass
class ReadPlan:
    """Where one forward's reads sit: cells (row, new-token index) of the drafts, then of the acceptances; the draft
    index of every confidence read; the token each acceptance scores; and each row's share of every kind."""

    rows: list[int] = field(default_factory=list)
    columns: list[int] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    noisy: list[tuple[int, int, Request]] = field(default_factory=list)  # (start, end) of a noisy row's drafts
    shares: list[tuple[int, int, int]] = field(default_factory=list)  # per row: drafts, confidences, acceptances
    n_draft: int = 0


def plan_reads(reqs: list[Request]) -> ReadPlan:
    """Host arithmetic only: a draft reads its own cell, an acceptance of token j the cell of token j - 1."""
    plan, accept_rows, accept_columns = ReadPlan(), [], []
    for row, r in enumerate(reqs):
        span = r.read_span()
        n_d = n_f = n_a = 0
        if r.draft:
            n_d = len(span)
            if r.temperature > 0:
                plan.noisy.append((plan.n_draft, plan.n_draft + n_d, r))
            if r.first_of:
                firsts = range(plan.n_draft, plan.n_draft + n_d, r.first_of)
                plan.firsts += firsts
                n_f = len(firsts)
            plan.rows += [row] * n_d
            plan.columns += span
            plan.n_draft += n_d
        if r.verify:
            scored = [j for j in span if (j - span.start) % r.verify]  # every token but the first of each run
            n_a = len(scored)
            accept_rows += [row] * n_a
            accept_columns += [j - 1 for j in scored]
            plan.tokens += [r.ids[j] for j in scored]
        plan.shares.append((n_d, n_f, n_a))
    plan.rows += accept_rows
    plan.columns += accept_columns
    return plan


@dataclass(frozen=True)
class StepInputs:
    """One forward's device inputs, from one host-to-device copy: ids and positions [rows, width] (pads 0 after each
    row's tokens), the ragged layout with the read cells in the plan's order, and the token ids the acceptances
    score after the confidence reads' draft indices (``scored_at``); on the host, the width and how many trailing
    columns hold every read cell (``keep``: what a network that can only drop leading logits keeps)."""

    ids: Tensor
    positions: Tensor
    ragged: RaggedBatch
    scored_at: Tensor
    width: int
    keep: int


def batch_inputs(reqs: list[Request], plan: ReadPlan, device: torch.device) -> StepInputs:
    """The rows' tokens and the plan's cells as ``StepInputs``. Packed (``RaggedBatch.real``) when some row is
    shorter than the widest: the network then computes no pad."""
    lengths = [len(r.ids) for r in reqs]
    width, rows = max(lengths), len(reqs)
    pads = [[0] * (width - n) for n in lengths]
    packed = min(lengths) < width
    starts = list(itertools.accumulate(lengths, initial=0)) if packed else range(0, rows * width, width)
    real = [row * width + j for row, n in enumerate(lengths) for j in range(n)] if packed else []
    read = [starts[row] + j for row, j in zip(plan.rows, plan.columns)]
    flat = [t for r, pad in zip(reqs, pads) for t in r.ids + pad] + [p for r, pad in zip(reqs, pads)
                                                                       for p in r.positions + pad]
    parts = torch.tensor(flat + real + read + plan.firsts + plan.tokens, dtype=torch.long, device=device).split(
        [2 * rows * width, len(real), len(read), len(plan.firsts) + len(plan.tokens)])
    both = parts[0].view(2, rows, width)
    keep = width - min(plan.columns, default=0)
    return StepInputs(both[0], both[1], RaggedBatch(parts[1] if packed else None, parts[2]), parts[3], width, keep)


def read_logits(picked: Tensor, reqs: list[Request], plan: ReadPlan, scored_at: Tensor) -> list[Reply]:
    """Every row's reads from one forward's logits at the plan's cells [draft + accept, V], with one set of ops for
    the whole batch and one host read: the drafts, confidences and acceptances of all rows travel in one float32
    tensor (token ids below 2**24 and probabilities in float32 or narrower are exact in it). Thresholds are compared
    on the device, in the logits' dtype, as the published decoder compares them. Only Gumbel noise (temperature > 0)
    is drawn row by row, each row from its own generator, so a row's draws do not depend on its batch."""
    n_draft, n_first, n_accept = plan.n_draft, len(plan.firsts), len(plan.tokens)
    parts = []
    if n_draft:
        drafted = picked[:n_draft]
        top = drafted.argmax(-1)
        for start, end, r in plan.noisy:
            top[start:end] = add_gumbel_noise(drafted[start:end], r.temperature, r.generator).argmax(-1)
        parts.append(top.float())
    if n_first or n_accept:
        firsts = scored_at[:n_first]
        rows = torch.cat([picked[firsts], picked[n_draft:]])
        targets = torch.cat([top[firsts], scored_at[n_first:]]) if n_first else scored_at
        probs = torch.softmax(rows, dim=-1).gather(-1, targets[:, None])[:, 0]
        if n_first:
            parts += [probs[:n_first].float(), (probs[:n_first] > reqs_threshold(reqs, "slot_threshold")).float()]
        if n_accept:
            parts.append((probs[n_first:] > reqs_threshold(reqs, "token_threshold")).float())
    values = torch.cat(parts).tolist() if parts else []
    tokens = [int(v) for v in values[:n_draft]]
    confidence = values[n_draft:n_draft + n_first]
    confident = [v > 0 for v in values[n_draft + n_first:n_draft + 2 * n_first]]
    accepted = [v > 0 for v in values[n_draft + 2 * n_first:]]
    replies, d, f, a = [], 0, 0, 0
    for n_d, n_f, n_a in plan.shares:
        replies.append(Reply(tokens[d:d + n_d], confidence[f:f + n_f], confident[f:f + n_f], accepted[a:a + n_a]))
        d, f, a = d + n_d, f + n_f, a + n_a
    return replies


def reqs_threshold(reqs: list[Request], name: str) -> float:
    """The threshold every row of a forward shares (rows of one decode have one config)."""
    values = {getattr(r, name) for r in reqs if (r.first_of if name == "slot_threshold" else r.verify)}
    if len(values) != 1:
        raise RuntimeError(f"refusion: the rows of one forward disagree on {name} ({sorted(values)})")
    return values.pop()


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
        plain = all(r.window == 0 for r in reqs)
        mask = None if plain else request_windows(reqs, lengths, step.width)
        picked = part.forward(step, mask)
        for row, r in enumerate(reqs):
            part.truncate(row, lengths[row] + len(r.ids))  # pad entries are not kept
    return read_logits(picked, reqs, plan, step.scored_at)


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
