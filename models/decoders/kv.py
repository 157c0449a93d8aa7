"""Small operations on a transformers 5.x ``DynamicCache`` that buffer-reordering decoders need.

transformers 5 removed the 4.x helpers ReFusion relied on (``key_cache`` lists, ``crop(keep_n)``). These functions
express the same operations on ``cache.layers[i].keys/values`` (shape ``[batch, kv_heads, seq, head_dim]``). Keys are
stored after RoPE, so entries may sit in any buffer order.
"""

from __future__ import annotations

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


def check_plain_cache(cache: DynamicCache) -> None:
    """Reject caches whose layers cannot be reordered entry by entry (sliding-window layers drop old entries)."""
    if any(getattr(cache, "is_sliding", []) or []):
        raise ValueError("buffer-reordering decoders need full-attention cache layers; this model uses sliding windows")
