"""transformers' causal LMs behind the native cache protocol (``new_cache``, ``causal_forward``; KVBuffer's rows),
so the autoregressive decoder runs one loop on either implementation (``network=transformers``, and any ``hf:``
checkpoint without a native network).

A ``DynamicCache`` keeps one column count for every row, so rows of different lengths are columns marked live or
dead: a row truncated to n entries hides its later columns, the next forward appends at the common end, and each
query sees its row's live columns up to itself, at its row's own positions. That is what a left-padded batch is to
transformers, with the pads wherever a row dropped them.

It holds no slots, unlike the native ``KVBuffer`` (rows in flight join by ``admit`` and leave by ``select_rows``, each
a copy of the cache): a ``DynamicCache`` layer appends its new keys to every row's at each forward, so a forward
cannot run on some rows of it (a joining prompt's prefill into one slot would run every other row over its width,
and a freed slot would still be computed until another request took it), and that append copies the whole cache
inside every forward anyway.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class TransformersCache:
    """A ``DynamicCache`` and which of its columns each row owns (``live`` [B, columns] bool, and the same as a list
    per row on the host, so that hiding a row's columns needs no read); its rows are the rows in flight, in order (no
    slot pool: see the module)."""

    def __init__(self, config, batch: int, device: torch.device) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=config)
        if any(getattr(self.cache, "is_sliding", []) or []):
            raise ValueError("the transformers path needs full-attention cache layers; this model uses sliding windows")
        self.live = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        self.lengths = [0] * batch
        self.columns: list[list[int]] = [[] for _ in range(batch)]  # each row's live columns, ascending

    @property
    def batch(self) -> int:
        return len(self.lengths)

    def append(self, n_new: int) -> None:
        """Every row takes ``n_new`` new columns (the forward that follows writes them)."""
        width = self.live.shape[1]
        self.live = torch.cat([self.live, self.live.new_ones(self.batch, n_new)], dim=1)
        self.lengths = [n + n_new for n in self.lengths]
        for columns in self.columns:
            columns.extend(range(width, width + n_new))

    def truncate(self, row: int, n: int) -> None:
        """Keep the first ``n`` entries of ``row``; its later columns are hidden from every query, and the columns
        no row holds any more leave the cache (so a single row's cache is exactly its entries)."""
        if not 0 <= n <= self.lengths[row]:
            raise ValueError(f"cannot truncate row {row} of length {self.lengths[row]} to {n}")
        if n == self.lengths[row]:  # nothing to hide (ReFusion's driver trims every row after every forward)
            return
        dead, self.columns[row] = self.columns[row][n:], self.columns[row][:n]
        if self.live.shape[1] == self.lengths[row] == sum(self.lengths):  # every column is this row's: crop
            self.cache.crop(n - self.lengths[row])
            self.live, self.lengths[row] = self.live[:, :n], n
            return
        self.live[row, torch.tensor(dead, dtype=torch.long, device=self.live.device)] = False
        self.lengths[row] = n
        width = max((columns[-1] + 1 for columns in self.columns if columns), default=0)
        if width < self.live.shape[1]:
            self.cache.crop(width - self.live.shape[1])  # transformers 5 crops by a negative count
            self.live = self.live[:, :width]

    def keep_tail(self, row: int, start: int, index: list[int]) -> None:
        """A single row keeps entries ``0..start-1`` then entries ``start + index[i]`` in that order (ReFusion's
        buffer reordering, on the transformers path, which runs one row)."""
        if self.batch != 1 or not all(0 <= i < self.lengths[0] - start for i in index):
            raise ValueError(f"keep_tail needs one row and indices inside its tail of {self.lengths[0] - start}")
        if index == list(range(len(index))):
            return self.truncate(0, start + len(index))
        source = torch.tensor(index, dtype=torch.long) + start
        for layer in self.cache.layers:
            source = source.to(layer.keys.device)  # a model split across devices keeps each layer on its own
            layer.keys = torch.cat([layer.keys[:, :, :start], layer.keys[:, :, source]], dim=2)
            layer.values = torch.cat([layer.values[:, :, :start], layer.values[:, :, source]], dim=2)
        self.live, self.lengths = self.live[:, :start + len(index)], [start + len(index)]
        self.columns = [list(range(start + len(index)))]

    def admit(self, rows: "TransformersCache") -> None:
        """Append the rows of ``rows`` (prefilled apart) after the others: the shorter side's columns are padded
        with dead ones, so each row keeps its entries at their columns."""
        if not self.batch:
            self.cache, self.live, self.lengths = rows.cache, rows.live, list(rows.lengths)
            self.columns = [list(columns) for columns in rows.columns]
            return
        width = max(self.live.shape[1], rows.live.shape[1])
        for mine, theirs in zip(self.cache.layers, rows.cache.layers):
            mine.keys, mine.values = (torch.cat([widened(a, width), widened(b, width)])
                                      for a, b in ((mine.keys, theirs.keys), (mine.values, theirs.values)))
        self.live = torch.cat([widened(self.live, width), widened(rows.live, width)])
        self.lengths = self.lengths + rows.lengths
        self.columns = self.columns + [list(columns) for columns in rows.columns]

    def row_kv(self, row: int) -> list[tuple[Tensor, Tensor]]:
        """Copies of row ``row``'s live keys/values per layer, [1, H, length, D] (for tests and tracing)."""
        columns = torch.tensor(self.columns[row], dtype=torch.long, device=self.live.device)
        return [(layer.keys[row:row + 1, :, columns].clone(), layer.values[row:row + 1, :, columns].clone())
                for layer in self.cache.layers]

    def select_rows(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order)."""
        if rows == list(range(self.batch)):
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.live.device)
        self.cache.batch_select_indices(index)
        self.live = self.live.index_select(0, index)
        self.lengths = [self.lengths[r] for r in rows]
        self.columns = [self.columns[r] for r in rows]


def widened(x: Tensor, width: int) -> Tensor:
    """``x`` with zero (dead) columns appended up to ``width`` along its column axis (2 for keys and values
    [B, H, T, D], 1 for the live mask [B, T])."""
    axis = 2 if x.dim() == 4 else 1
    missing = width - x.shape[axis]
    if not missing:
        return x
    shape = list(x.shape)
    shape[axis] = missing
    return torch.cat([x, x.new_zeros(shape)], dim=axis)


class TransformersCausalLM(nn.Module):
    """A transformers causal LM with the native networks' ``new_cache`` / ``causal_forward`` (see the module)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def new_cache(self, batch: int, capacity: int) -> TransformersCache:
        """``capacity`` is the native buffer's; a DynamicCache grows as it goes."""
        return TransformersCache(self.model.config, batch, next(self.model.parameters()).device)

    def causal_forward(self, input_ids: Tensor, cache: TransformersCache, read: Tensor | None = None) -> Tensor:
        """One module call (so the forward timer's hooks see it): see ``forward``."""
        return self(input_ids, cache, read)

    def forward(self, input_ids: Tensor, cache: TransformersCache, read: Tensor | None = None) -> Tensor:
        """Logits [B, L, vocab] of L new tokens per row at that row's next positions, or [M, vocab] at the flat
        cells ``read`` (the head runs only at the columns some read cell is in)."""
        length = input_ids.shape[1]
        positions = torch.tensor(cache.lengths, device=input_ids.device)[:, None] + torch.arange(
            length, device=input_ids.device)
        cache.append(length)
        keep: int | Tensor = 0
        if read is not None:
            columns, at = torch.unique(read % length, return_inverse=True)
            keep = columns
        logits = self.model(input_ids=input_ids, attention_mask=cache.live.long(), position_ids=positions,
                            cache=cache.cache, use_cache=True, logits_to_keep=keep).logits
        return logits if read is None else logits[read // length, at]
