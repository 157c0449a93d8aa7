"""Small operations on a transformers 5.x ``DynamicCache`` that buffer-reordering decoders need.

transformers 5 removed the 4.x helpers ReFusion relied on (``key_cache`` lists, ``crop(keep_n)``, ``full_update``,
``batch_select_minibatch``). These functions express the same operations on ``cache.layers[i].keys/values``
(shape ``[batch, kv_heads, seq, head_dim]``). Keys are stored after RoPE, so entries may sit in any buffer order.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def cache_length(cache: DynamicCache) -> int:
    """Number of buffer entries the cache holds (0 for a cache that has not seen a forward yet)."""
    return cache.get_seq_length()


def drop_last_entries(cache: DynamicCache, n: int) -> None:
    """Remove the newest ``n`` entries of every row (``crop(-n)`` in 5.x; a no-op for n == 0)."""
    if n < 0:
        raise ValueError(f"cannot drop a negative number of cache entries ({n})")
    if n > 0:
        cache.crop(-n)


def repeat_rows(cache: DynamicCache, k: int) -> None:
    """Give the cache ``k`` identical rows (one per speculative slot), in place."""
    if k > 1:
        cache.batch_repeat_interleave(k)


def keep_first_rows(cache: DynamicCache, n: int) -> None:
    """Keep only rows ``0..n-1`` of the batch axis, in place."""
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.shape[0] != n:
            layer.keys = layer.keys[:n]
            layer.values = layer.values[:n]


def merge_row_suffixes(cache: DynamicCache, shared_len: int, keep: int) -> None:
    """Turn a k-row cache into one row: the shared prefix, then every row's own suffix in row order, cut to ``keep``.

    Each row holds ``shared_len`` identical entries followed by entries computed from that prefix and the row's own
    tokens only. The merged row keeps those per-row entries as they are (no recompute), which is what ReFusion does
    after its parallel in-slot completion.
    """
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        rows, heads, length, dim = keys.shape
        if rows == 1:
            layer.keys = keys[:, :, : shared_len + keep]
            layer.values = values[:, :, : shared_len + keep]
            continue
        suffix = length - shared_len

        def flat(t: torch.Tensor) -> torch.Tensor:
            return t[:, :, shared_len:].permute(1, 0, 2, 3).reshape(1, heads, rows * suffix, dim)[:, :, :keep]

        layer.keys = torch.cat([keys[:1, :, :shared_len], flat(keys)], dim=2)
        layer.values = torch.cat([values[:1, :, :shared_len], flat(values)], dim=2)


def check_plain_cache(cache: DynamicCache) -> None:
    """Reject caches whose layers cannot be reordered entry by entry (sliding-window layers drop old entries)."""
    if any(getattr(cache, "is_sliding", []) or []):
        raise ValueError("buffer-reordering decoders need full-attention cache layers; this model uses sliding windows")
