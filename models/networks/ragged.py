"""Rows of different lengths in one padded [B, L] batch, and the cells whose logits the caller reads.

A batched decoder whose rows ask for different numbers of new tokens pads them to the widest; a network given a
``RaggedBatch`` runs its per-token work (embedding, projections, MLP, norms) on the real tokens only, packed into
[N, ...], and widens to [B, L] only where rows meet their caches (attention and the KV write). The output head runs
at the read cells alone, in the caller's order: [M, vocab] instead of [B, L, vocab], so neither the pads nor the
tokens nobody reads pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class RaggedBatch:
    """``real``: the flat [B*L] index of every token that is not padding, in order (None: no row is padded, the
    batch is used as it is). ``read``: [M] indices into the packed tokens (the flat batch when ``real`` is None) of
    the cells whose logits are wanted, repeats allowed."""

    real: Tensor | None
    read: Tensor

    def pack(self, x: Tensor) -> Tensor:
        """[B, L, ...] -> [N, ...], the real tokens' entries in order."""
        flat = x.flatten(0, 1)
        return flat if self.real is None else flat.index_select(0, self.real)

    def unpack(self, x: Tensor, batch: int, length: int) -> Tensor:
        """[N, ...] -> [B, L, ...], zeros at the pads (a packed batch: ``real`` given)."""
        padded = x.new_zeros(batch * length, *x.shape[1:]).index_copy_(0, self.real, x)
        return padded.view(batch, length, *x.shape[1:])

    def take(self, x: Tensor) -> Tensor:
        """The read cells' entries of a padded [B, L, ...] tensor: [M, ...] (for networks that compute every cell)."""
        return self.pack(x).index_select(0, self.read)
