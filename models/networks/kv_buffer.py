"""A preallocated KV cache written by index: per-layer buffers [B, kv_heads, capacity, head_dim] and a length per row.

Decoders that reorder their buffer (ReFusion) append a chunk, drop it again, keep a few chosen tail entries, and
retire finished rows. Here each of those is an index write or a length change on buffers allocated once, so a decode
step allocates no cache memory and the shapes a compiled network sees stay simple. Rows may hold different lengths:
a forward writes row b's new entries at ``lengths[b] ...`` and attends to columns ``0 .. max(lengths) + Q - 1`` (all
of them in a compiled step); the caller's mask hides the columns a row does not own (see ``reserve``).

It is the one KV cache of the native networks, and these are its operations: a forward's columns by position
(``reserve``/``claim`` after each row's entries, ``overwrite`` over given columns), a row's length (``truncate``,
``truncate_all``, ``keep_tail``), and the rows themselves (``select_rows`` for a static batch).

Rows in flight use it as a slot pool: a stream allocates one buffer of ``max_rows`` rows (slots) once, a joining
request's prefill writes into a free slot and a leaving one frees its own (``SlotPool``), and each forward runs on the
slots of the rows it feeds (``at``): a view of the buffer when they are consecutive, else the same memory read through
the slots' index, so no op outside a forward copies the cache.
"""

from __future__ import annotations

import contextlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class Reservation:
    """Where one forward writes: ``index[b, j]`` = buffer column of row b's j-th new entry; ``key_len`` columns read."""

    index: Tensor | None  # [B, Q] long; None when ``uniform`` is set
    key_len: int
    uniform: int | None  # the common start column when every row has the same length (a plain slice write)


class KVBuffer:
    """Keys (stored after RoPE) and values of every layer, preallocated; ``lengths[b]`` entries of row b are live.

    All layers live in one tensor [layers, 2 (keys, values), B, kv_heads, capacity, head_dim], so editing a row
    (``keep_tail``) or retiring rows (``select_rows``) is one indexed copy for the whole network, not one per layer
    and per keys/values."""

    def __init__(self, n_layers: int, batch: int, capacity: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        self.kv = torch.zeros((n_layers, 2, batch, kv_heads, capacity, head_dim), dtype=dtype, device=device)
        self.lengths = [0] * batch
        self.capacity = capacity
        self._cols = torch.arange(capacity, device=device)
        self._slots: Tensor | None = None  # set on a part made by ``at`` over scattered slots: kv is the whole pool

    @property
    def keys(self) -> list[Tensor]:
        """Per layer, a [B, kv_heads, capacity, head_dim] view of the keys (a copy on a part over scattered slots)."""
        return list(self._own_rows()[:, 0])

    @property
    def values(self) -> list[Tensor]:
        return list(self._own_rows()[:, 1])

    def _own_rows(self) -> Tensor:
        return self.kv if self._slots is None else self.kv.index_select(2, self._slots)

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def n_layers(self) -> int:
        return self.kv.shape[0]

    def reserve(self, n_new: int, static: bool = False) -> Reservation:
        """Claim ``n_new`` columns after each row's entries (all rows advance by ``n_new``; ``truncate`` trims).

        ``static``: the reservation a compiled step takes, always by index and reading every column (key_len =
        capacity, the caller's mask hiding the free ones), so neither its code nor its shapes depend on the
        lengths: one graph serves every step of a decode."""
        top = max(self.lengths) + n_new
        if top > self.capacity:
            raise RuntimeError(f"KV buffer of capacity {self.capacity} cannot hold {top} entries")
        if len(set(self.lengths)) == 1 and not static:
            plan = Reservation(None, top, self.lengths[0])
        else:
            starts = torch.tensor(self.lengths, device=self._cols.device)
            plan = Reservation(starts[:, None] + self._cols[:n_new], self.capacity if static else top, None)
        self.lengths = [n + n_new for n in self.lengths]
        return plan

    @contextmanager
    def claim(self, n_new: int, keep: int | Sequence[int], static: bool = False) -> Iterator[Reservation]:
        """``reserve(n_new, static)`` for one forward, after which each row keeps only the first ``keep`` of the new
        entries (0: a block diffusion "peek", whose K/V are written, attended to and left as free columns); a
        sequence gives each row its own count (rows in flight, some peeking while others commit)."""
        keeps = [keep] * self.batch if isinstance(keep, int) else list(keep)
        if len(keeps) != self.batch or not all(0 <= k <= n_new for k in keeps):
            raise ValueError(f"cannot keep {keep} of {n_new} new entries in each of {self.batch} rows")
        before = list(self.lengths)
        plan = self.reserve(n_new, static)
        try:
            yield plan
        except BaseException:
            self.lengths = before
            raise
        self.lengths = [n + k for n, k in zip(before, keeps)]

    def overwrite(self, start: int | Sequence[int], n_new: int) -> Reservation:
        """Write ``n_new`` entries over columns ``start .. start + n_new - 1`` of every row, lengths unchanged; the
        forward reads every live column (Fast-dLLM's dual cache: the block's K/V are refreshed in place while the
        entries after it stay as they were). A start per row puts each row's block at its own columns (rows in
        flight at different blocks)."""
        starts = [start] * self.batch if isinstance(start, int) else list(start)
        if n_new < 1 or len(starts) != self.batch or any(
                not 0 <= s <= n - n_new for s, n in zip(starts, self.lengths)):
            raise ValueError(f"cannot overwrite {n_new} columns from {start}: rows hold {self.lengths} entries")
        if len(set(starts)) == 1:
            return Reservation(None, max(self.lengths), starts[0])
        index = torch.tensor(starts, device=self._cols.device)[:, None] + self._cols[:n_new]
        return Reservation(index, max(self.lengths), None)

    def store(self, layer: int, plan: Reservation, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new k/v [B, H, Q, D] where ``plan`` says; return the [B, H, key_len, D] views attention reads."""
        keys, values = self.kv[layer]
        if self._slots is not None:  # scattered slots: written by index, read gathered (inside the forward)
            columns = plan.index if plan.uniform is None else \
                self._cols[plan.uniform:plan.uniform + k.shape[2]].expand(k.shape[0], -1)
            keys[self._slots[:, None], :, columns] = k.transpose(1, 2)
            values[self._slots[:, None], :, columns] = v.transpose(1, 2)
            return (keys[:, :, :plan.key_len].index_select(0, self._slots),
                    values[:, :, :plan.key_len].index_select(0, self._slots))
        if plan.uniform is not None:
            n = k.shape[2]
            keys[:, :, plan.uniform:plan.uniform + n] = k
            values[:, :, plan.uniform:plan.uniform + n] = v
        else:
            rows = torch.arange(k.shape[0], device=k.device)[:, None]
            keys[rows, :, plan.index] = k.transpose(1, 2)
            values[rows, :, plan.index] = v.transpose(1, 2)
        return keys[:, :, :plan.key_len], values[:, :, :plan.key_len]

    def truncate(self, row: int, n: int) -> None:
        """Keep the first ``n`` entries of ``row`` (the rest become free columns)."""
        if not 0 <= n <= self.lengths[row]:
            raise ValueError(f"cannot truncate row {row} of length {self.lengths[row]} to {n}")
        self.lengths[row] = n

    def truncate_all(self, n: int) -> None:
        """``truncate(row, n)`` for every row, all checked before any changes (Fast-dLLM's prefix cache; 0 empties
        the buffer for the next block's refill)."""
        if not 0 <= n <= min(self.lengths, default=0):
            raise ValueError(f"cannot truncate rows of lengths {self.lengths} to {n}")
        self.lengths = [n] * self.batch

    def check_tail(self, row: int, start: int, index: list[int]) -> None:
        """Raise unless every ``start + index[i]`` is one of row ``row``'s live entries past ``start``."""
        if any(not 0 <= i < self.lengths[row] - start for i in index):
            raise ValueError(f"keep_tail index outside row {row}'s tail of {self.lengths[row] - start} entries")

    def keep_tail(self, row: int, start: int, index: list[int]) -> None:
        """Row ``row`` keeps entries ``0..start-1`` then entries ``start + index[i]`` in that order (a small copy)."""
        self.check_tail(row, start, index)
        if index != list(range(len(index))):
            self.keep_tails([(row, start, index)])
        self.lengths[row] = start + len(index)

    def keep_tails(self, edits: list[tuple[int, int, list[int]]]) -> None:
        """``keep_tail``'s copies for many rows in one indexed copy: for each (row, start, index), entry ``start + i``
        of ``row`` becomes its entry ``start + index[i]``. Checks and lengths are the caller's (a decoder checks and
        records its edits as it makes them and copies them together before the next forward)."""
        rows, dst, src = [], [], []
        for row, start, index in edits:
            rows += [row] * len(index)
            dst += range(start, start + len(index))
            src += [start + i for i in index]
        if rows:
            rows_t, dst_t, src_t = torch.tensor([rows, dst, src], device=self._cols.device)
            if self._slots is not None:
                rows_t = self._slots[rows_t]
            self.kv[:, :, rows_t, :, dst_t] = self.kv[:, :, rows_t, :, src_t]

    def select_rows(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order): finished rows of a static batch leave, so later forwards do no work
        for them (rows in flight free their slot instead: ``SlotPool``)."""
        if rows == list(range(self.batch)):
            return
        index = torch.tensor(rows, device=self._cols.device, dtype=torch.long)
        self.kv = self.kv.index_select(2, index)
        self.lengths = [self.lengths[r] for r in rows]

    @contextmanager
    def at(self, slots: Sequence[int]) -> Iterator["KVBuffer"]:
        """The rows ``slots`` (in that order) as a buffer of their own over this one's memory, for a forward of
        those rows alone (the others' entries neither read nor written); their lengths are taken back on exit.
        Consecutive ascending slots are a view; others are written by index and read gathered inside the forward
        (``store``), never copied outside it."""
        slots = list(slots)
        if not slots or any(not 0 <= s < self.batch for s in slots) or len(set(slots)) != len(slots):
            raise ValueError(f"slots {slots} are not distinct rows of a buffer of {self.batch}")
        part = object.__new__(KVBuffer)
        part.capacity, part._cols, part.lengths = self.capacity, self._cols, [self.lengths[s] for s in slots]
        first = slots[0]
        if self._slots is None and slots == list(range(first, first + len(slots))):
            part.kv, part._slots = self.kv[:, :, first:first + len(slots)], None
        else:
            index = torch.tensor(slots, device=self._cols.device)
            part.kv, part._slots = self.kv, index if self._slots is None else self._slots[index]
        try:
            yield part
        finally:
            for s, n in zip(slots, part.lengths):
                self.lengths[s] = n

    def rows(self, start: int, stop: int) -> "contextlib.AbstractContextManager[KVBuffer]":
        """Rows ``start..stop-1`` as a buffer of their own (``at``)."""
        return self.at(range(start, stop))

    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]:
        """Copies of row ``row``'s live keys/values per layer, [1, H, length, D] (for tests and tracing)."""
        n, slot = self.lengths[row], row if self._slots is None else int(self._slots[row])
        return [(k[slot:slot + 1, :, :n].clone(), v[slot:slot + 1, :, :n].clone()) for k, v in self.kv]


class SlotPool:
    """Which rows (slots) of a stream's buffer are free: a joining request takes the lowest free one, a leaving one
    gives its own back (its entries stay as free columns until the next holder's prefill overwrites them)."""

    def __init__(self, slots: int) -> None:
        self._free = list(range(slots))[::-1]

    def take(self) -> int:
        if not self._free:
            raise RuntimeError("no free slot: more rows in flight than the pool was made for")
        self._free.sort(reverse=True)
        return self._free.pop()

    def give(self, slot: int) -> None:
        if slot in self._free:
            raise ValueError(f"slot {slot} is free already")
        self._free.append(slot)
