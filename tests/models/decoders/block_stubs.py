"""Networks for the block-diffusion decoder tests: a full recompute (no cache) and scripted logits.

Both implement what the decoder drives (``new_cache``, ``block_forward``), with the tokens a row has committed as
their only "cache", so the cached path of the native networks can be checked against a computation that never
reuses a key or value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from models.networks.dream import DreamNetwork


@dataclass
class TokenHistory:
    """The committed tokens of every row, in place of a KV cache: [B, n]."""

    tokens: torch.Tensor
    selections: list[list[int]] = field(default_factory=list)

    def select_rows(self, rows: list[int]) -> None:
        self.selections.append(list(rows))
        self.tokens = self.tokens[rows]


def block_causal(positions: torch.Tensor, block_length: int) -> torch.Tensor:
    """[1, 1, K, K] bool: query i may see key j iff j's block is not after i's."""
    blocks = positions.view(-1) // block_length
    return (blocks[None, :] <= blocks[:, None])[None, None]


@dataclass
class RecomputeNetwork:
    """``block_forward`` by running the whole sequence so far through ``logits_of(ids, positions, mask)`` with a
    block-causal mask and no cache; records each call as (first position, length, entries written)."""

    logits_of: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    calls: list[tuple[int, int, bool]] = field(default_factory=list)

    def new_cache(self, batch: int, capacity: int) -> TokenHistory:
        return TokenHistory(torch.zeros(batch, 0, dtype=torch.long))

    def block_forward(self, ids: torch.Tensor, positions: range, cache: TokenHistory, block_length: int,
                      write: int, read: torch.Tensor | None = None) -> torch.Tensor:
        """``write``: how many of the new entries (from the left) join the history; ``read``: the flat cells
        returned (all when None)."""
        assert positions == range(cache.tokens.shape[1], cache.tokens.shape[1] + ids.shape[1])  # the decoder's columns
        self.calls.append((positions.start, ids.shape[1], int(write)))
        full = torch.cat([cache.tokens.to(ids.device), ids], dim=1)
        everywhere = torch.arange(full.shape[1], device=ids.device)[None]
        logits = self.logits_of(full, everywhere, block_causal(everywhere, block_length))
        cache.tokens = full[:, :cache.tokens.shape[1] + int(write)]
        logits = logits[:, -ids.shape[1]:]
        return logits if read is None else logits.flatten(0, 1)[read]


def native_logits(network: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """A native network's uncached forward under a 4-D bool mask: the Qwen2 (Dream) network takes it as
    ``attention_bias`` beside its padding mask, Qwen3 and LLaDA2 as ``attention_mask``."""
    def logits_of(ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if isinstance(network, DreamNetwork):
            return network(ids, position_ids=positions.expand(ids.shape[0], -1), attention_bias=mask)
        return network(ids, position_ids=positions, attention_mask=mask)
    return logits_of


def table_logits(table: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """Logits that depend only on the absolute position: ``table[p]`` at position p, whatever the tokens."""
    def logits_of(ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return table[positions.view(-1)].unsqueeze(0).expand(ids.shape[0], -1, -1).clone()
    return logits_of
