"""The cache interface the ReFusion decoder needs, for both networks, and the driver that batches its rows.

The decoder is written per row, as a generator that yields ``Request``s (tokens, positions, who may see whom) and
receives their logits; between requests it edits its cache row (truncate, keep chosen tail entries). The driver
gathers the pending requests of all live rows into one forward, so N prompts decode together even when their
buffers, phases and finishing times differ; a finished row leaves the batch (its cache row is dropped).

Two implementations of the cache:
  * ``NativeStepper``: the native Qwen3 network and its preallocated ``KVBuffer`` (any batch);
  * ``TransformersStepper``: a transformers causal LM and its ``DynamicCache`` (one row; the comparison path).
Visibility: every query sees the row's committed buffer; a query in group g also sees the tail entries owned by g and
the new entries of group g at or before it (in-slot windows). ``groups=None`` means plain causal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Protocol

import torch
from torch import Tensor

from models.decoders.kv import cache_length, check_plain_cache, drop_last_entries


@dataclass(frozen=True)
class Request:
    """One row's share of a forward: new tokens on top of its cache; ``keep`` > 0 returns only the last ``keep``."""

    ids: Tensor  # [n] long
    positions: Tensor  # [n] long
    groups: list[int] | None = None  # per new token; None = plain causal over cache + new tokens
    committed: int = 0  # cache entries every query sees (the committed buffer)
    owners: list[int] | None = None  # owner group of each cache entry after ``committed``
    keep: int = 0


RowProgram = Generator[Request, Tensor, Any]


class Stepper(Protocol):
    batch: int

    def length(self, row: int) -> int: ...
    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None, keep: int) -> Tensor: ...
    def truncate(self, row: int, n: int) -> None: ...
    def keep_tail(self, row: int, start: int, index: list[int]) -> None: ...
    def select_rows(self, rows: list[int]) -> None: ...
    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]: ...


class NativeStepper:
    """A native network with ``new_cache``/``forward(ids, position_ids, attention_mask, cache, logits_to_keep)``."""

    def __init__(self, network: torch.nn.Module, batch: int, capacity: int, forward: Any = None) -> None:
        self.network, self.cache = network, network.new_cache(batch, capacity)
        self._call = network if forward is None else forward  # a torch.compile'd forward, when asked for

    @property
    def batch(self) -> int:
        return self.cache.batch

    def length(self, row: int) -> int:
        return self.cache.lengths[row]

    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None, keep: int) -> Tensor:
        return self._call(ids, position_ids=positions, attention_mask=mask, cache=self.cache, logits_to_keep=keep)

    def truncate(self, row: int, n: int) -> None:
        self.cache.truncate(row, n)

    def keep_tail(self, row: int, start: int, index: list[int]) -> None:
        self.cache.keep_tail(row, start, index)

    def select_rows(self, rows: list[int]) -> None:
        self.cache.select_rows(rows)

    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]:
        return self.cache.row_kv(row)


class TransformersStepper:
    """A transformers-style causal LM (``input_ids, position_ids, cache, use_cache`` -> ``.logits, .cache``), one
    row."""

    batch = 1

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.cache = model, None

    def length(self, row: int) -> int:
        return 0 if self.cache is None else cache_length(self.cache)

    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None, keep: int) -> Tensor:
        extra = {} if mask is None else {"attention_mask": mask}
        if keep:
            extra["logits_to_keep"] = keep
        out = self.model(input_ids=ids, position_ids=positions, cache=self.cache, use_cache=True, **extra)
        if self.cache is None:
            self.cache = out.cache
            check_plain_cache(self.cache)
        return out.logits

    def truncate(self, row: int, n: int) -> None:
        drop_last_entries(self.cache, self.length(row) - n)

    def keep_tail(self, row: int, start: int, index: list[int]) -> None:
        if index == list(range(len(index))):
            return self.truncate(row, start + len(index))
        src = torch.tensor(index, dtype=torch.long) + start
        for layer in self.cache.layers:
            src = src.to(layer.keys.device)
            layer.keys = torch.cat([layer.keys[:, :, :start], layer.keys[:, :, src]], dim=2)
            layer.values = torch.cat([layer.values[:, :, :start], layer.values[:, :, src]], dim=2)

    def select_rows(self, rows: list[int]) -> None:
        if rows != [0]:
            raise ValueError("the transformers path decodes one row at a time")

    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]:
        return [(layer.keys.clone(), layer.values.clone()) for layer in self.cache.layers]


def batch_mask(reqs: list[Request], lengths: list[int], width: int, key_len: int, device: torch.device) -> Tensor:
    """[B, 1, width, key_len] bool for rows holding ``lengths`` entries whose new tokens land at columns length..
    (padded to ``width``). Each key column carries a group: the committed buffer is seen by every query, a tail entry
    by the queries of its owner group, a new entry by the queries of its group at or after it (pad queries form a
    group of their own, so no real query sees a pad). Built from one small tensor per kind, for all rows at once."""
    never, pad = -3, -2
    query_groups, key_groups, committed = [], [], []
    for r, n in zip(reqs, lengths):
        new = [0] * r.ids.shape[0] if r.groups is None else list(r.groups)
        new += [pad] * (width - len(new))
        seen = n if r.groups is None else r.committed  # a plain request sees its whole cache
        owners = [] if r.groups is None else list(r.owners or ())
        if len(owners) != n - seen:
            raise RuntimeError(f"refusion: {len(owners)} tail owners for {n - seen} tail entries")
        query_groups.append(new)
        key_groups.append([never] * seen + owners + new + [never] * (key_len - n - width))
        committed.append(seen)
    starts = torch.tensor([lengths, committed], device=device)[:, :, None, None]  # [2, B, 1, 1]
    queries = torch.tensor(query_groups, device=device)[:, :, None]  # [B, W, 1]
    keys = torch.tensor(key_groups, device=device)[:, None, :]  # [B, 1, K]
    cols = torch.arange(key_len, device=device)
    rows = torch.arange(width, device=device)[:, None]
    causal = (cols < starts[0]) | (cols - starts[0] <= rows)  # tail entries, or new entries at or before the query
    return ((cols < starts[1]) | ((keys == queries) & causal))[:, None]


def drive(stepper: Stepper, programs: list[RowProgram], live: list[int],
          device: torch.device) -> tuple[list[Any], list[float]]:
    """Run row programs to completion, one batched forward per round; returns their results and forwards per row
    (each forward split evenly across the rows it ran, the harness's rule for batched calls).

    ``live`` lists the program index of each cache row (initially 0..N-1); it is updated in place as rows leave,
    which is how each program's ``RowCache`` finds its row."""
    results: list[Any] = [None] * len(programs)
    nfe = [0.0] * len(programs)
    pending = {i: next(programs[i]) for i in live}  # every program asks for at least one forward
    while live:
        reqs = [pending[i] for i in live]
        width = max(r.ids.shape[0] for r in reqs)
        ids = torch.zeros(len(live), width, dtype=torch.long, device=device)
        pos = torch.zeros(len(live), width, dtype=torch.long, device=device)
        for row, r in enumerate(reqs):
            ids[row, :r.ids.shape[0]] = r.ids
            pos[row, :r.ids.shape[0]] = r.positions
        lengths = [stepper.length(row) for row in range(len(live))]
        plain = all(r.groups is None for r in reqs)
        mask = None
        if not plain:
            key_len = max(lengths) + width
            mask = batch_mask(reqs, lengths, width, key_len, device)
        keep = max(width - (r.ids.shape[0] - r.keep) if r.keep else width for r in reqs)
        logits = stepper.forward(ids, pos, mask, 0 if keep == width else keep)
        for row, r in enumerate(reqs):
            stepper.truncate(row, lengths[row] + r.ids.shape[0])  # pad entries are not kept
        finished = []
        for row, (i, r) in enumerate(zip(live, reqs)):
            nfe[i] += 1.0 / len(live)
            n = r.ids.shape[0]
            hi = n - (width - keep)
            mine = logits[row, hi - (r.keep or n):hi]
            try:
                pending[i] = programs[i].send(mine)
            except StopIteration as stop:
                results[i] = stop.value
                finished.append(i)
        if finished:
            keep_rows = [row for row, i in enumerate(live) if i not in finished]
            live[:] = [live[row] for row in keep_rows]
            if live:
                stepper.select_rows(keep_rows)
    return results, nfe


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
