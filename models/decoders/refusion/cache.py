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
The driver hands the network that layout (``GroupedWindows``), not a mask: the native network attends group by group
where that is cheaper, any other network gets the dense mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Protocol

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from models.decoders.kv import cache_length, check_plain_cache, drop_last_entries
from models.networks.grouped_attention import GroupedWindows, dense_mask


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
    def forward(self, ids: Tensor, positions: Tensor, mask: GroupedWindows | None, keep: int) -> Tensor: ...
    def truncate(self, row: int, n: int) -> None: ...
    def keep_tail(self, row: int, start: int, index: list[int]) -> None: ...
    def select_rows(self, rows: list[int]) -> None: ...
    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]: ...


class NativeStepper:
    """A native network with ``new_cache``/``forward(ids, position_ids, attention_mask, cache, logits_to_keep)``."""

    def __init__(self, network: torch.nn.Module, batch: int, capacity: int) -> None:
        self.network, self.cache = network, network.new_cache(batch, capacity)
        # a torch.compile'd network gets tensors only: a layout's integers would be guarded on and recompiled
        self.compiled = hasattr(network, "_orig_mod")

    @property
    def batch(self) -> int:
        return self.cache.batch

    def length(self, row: int) -> int:
        return self.cache.lengths[row]

    def forward(self, ids: Tensor, positions: Tensor, mask: GroupedWindows | None, keep: int) -> Tensor:
        if mask is not None and self.compiled:
            mask = dense_mask(mask, ids.device)
        return self.network(ids, position_ids=positions, attention_mask=mask, cache=self.cache, logits_to_keep=keep)

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

    def forward(self, ids: Tensor, positions: Tensor, mask: GroupedWindows | None, keep: int) -> Tensor:
        extra = {} if mask is None else {"attention_mask": dense_mask(mask, ids.device)}
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


def request_windows(reqs: list[Request], lengths: list[int], width: int) -> GroupedWindows:
    """The rows' visibility as the network takes it: a plain row is one group over its whole cache, an in-slot row
    one group per slot after its committed buffer."""
    rows = []
    for r, n in zip(reqs, lengths):
        n_new = r.ids.shape[0]
        if r.window == 0:
            rows.append((n, n, 1, 0, n_new))
        elif n_new % r.window:
            raise RuntimeError(f"refusion: {n_new} new tokens do not split into windows of {r.window}")
        else:
            rows.append((n, r.committed, n_new // r.window, r.owned, r.window))
    return GroupedWindows(*map(tuple, zip(*rows)), width=width)


def drive(stepper: Stepper, programs: list[RowProgram], live: list[int]) -> tuple[list[Any], list[float]]:
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
        mask = None if plain else request_windows(reqs, lengths, width)
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
