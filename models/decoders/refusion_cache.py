"""The cache interface the ReFusion decoder needs, for both networks, and the driver that batches its rows.

The decoder is written per row, as a generator that yields ``Request``s (tokens, positions, who may see whom) and
receives their logits; between requests it edits its cache row (truncate, keep chosen tail entries). The driver
gathers the pending requests of all live rows into one forward, so N prompts decode together even when their
buffers, phases and finishing times differ; a finished row leaves the batch (its cache row is dropped).

Two implementations of the cache:
  * ``NativeStepper``: the native Qwen3 network and its preallocated ``KVBuffer`` (any batch);
  * ``TransformersStepper``: a transformers causal LM and its ``DynamicCache`` (one row; the comparison path).
Visibility (``Request``): plain causal over the whole cache, or in-slot windows: every query sees the row's committed
buffer, and a query in window g also sees the tail entries owned by g and the entries of window g at or before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Protocol

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from models.decoders.kv import cache_length, check_plain_cache, drop_last_entries


@dataclass(frozen=True)
class Request:
    """One row's share of a forward: new tokens on top of its cache; ``keep`` > 0 returns only the last ``keep``.

    ``window`` = 0 is plain causal over the whole cache. ``window`` > 0 is in-slot completion: the new tokens are
    consecutive windows of that many, one per slot (group); every query sees the first ``committed`` cache entries,
    the entries after them are each group's own ``owned`` entries in group order, and a query sees its group's
    entries and its window up to itself."""

    ids: Tensor  # [n] long
    positions: Tensor  # [n] long
    window: int = 0
    committed: int = 0
    owned: int = 0
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
    """One row on a transformers-style causal LM (``input_ids, position_ids, cache, use_cache`` -> ``.logits``)."""

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
    (padded to ``width``), all rows at once from five integers each. Every key column gets a group (the committed
    buffer: seen by all; a tail entry: its owner's; a new entry: its window's, pads a group of their own, so no real
    query sees a pad) and a query sees its group's tail and new entries at or before it."""
    never, pad = -3, -2
    layout = []  # per row: cache length, entries all see, new tokens, window, tail entries per group
    for r, n in zip(reqs, lengths):
        n_new = r.ids.shape[0]
        if r.window == 0:  # plain causal: one group over the whole cache and the new tokens
            layout.append((n, n, n_new, n_new, 1))
            continue
        if n_new % r.window or n - r.committed != n_new // r.window * r.owned:
            raise RuntimeError(f"refusion: {n_new} new tokens in windows of {r.window} do not match a tail of "
                               f"{n - r.committed} entries, {r.owned} per group")
        layout.append((n, r.committed, n_new, r.window, max(r.owned, 1)))
    length, seen, n_new, window, owned = torch.tensor(layout, device=device).T[:, :, None, None]  # each [B, 1, 1]
    q = torch.arange(width, device=device)[:, None]
    c = torch.arange(key_len, device=device)
    j = c - length  # the new entry a column holds, when >= 0
    query_group = torch.where(q < n_new, q // window, pad)
    key_group = torch.where(c < seen, never, torch.where(c < length, (c - seen) // owned,
                            torch.where(j < n_new, j // window, torch.where(j < width, pad, never))))
    return ((c < seen) | ((key_group == query_group) & ((c < length) | (j <= q))))[:, None]


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
        ids = pad_sequence([r.ids for r in reqs], batch_first=True)  # [rows, width], pads 0 after each row's ids
        pos = pad_sequence([r.positions for r in reqs], batch_first=True)
        lengths = [stepper.length(row) for row in range(len(live))]
        plain = all(r.window == 0 for r in reqs)
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
