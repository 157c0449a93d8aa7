"""Fast-dLLM (v1) core shared by its LLaDA and Dream samplers: how a denoising step calls the network in each cache
mode, and which masks a step commits (a fixed count, or a confidence threshold).

Cache modes (docs/decoders.md §4), per block [start, end) of the canvas x:
- ``none``: every step runs the whole canvas.
- ``prefix``: the block's first step runs the whole canvas and keeps the K/V of x[:, :start]; later steps feed
  x[:, start:] (this block and every later one) against that prefix, which goes stale as the block fills in.
- ``dual``: the block's first step keeps the K/V of the whole canvas; later steps feed only x[:, start:end] and
  overwrite that slice of the cache in place, so the suffix K/V stay as they were at the block start.

The cache is one ``KVBuffer`` of the canvas's width per decode (``network.new_cache(batch, canvas)``), refilled
by each block's full forward. Queries sit at their absolute canvas positions in every mode: a native network puts
them at the columns the call's reservation writes (``reserve`` for the full forward, ``claim(n, keep=0)`` for a
prefix step, ``overwrite`` for a dual step). The network is any callable with the native signature
``network(ids, attention_mask=, position_ids=, cache=, reservation=)`` returning logits, with ``new_cache`` in the
cached modes; in mode ``none`` only ``attention_mask``/``position_ids`` are passed, so plain callables work there.

Rows in flight are ``fastdllm.rows``: each row at its own block and step, one round batched over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, get_args

import torch
import torch.nn.functional as F

from models.decoders.sampling import as_logits
from models.networks.kv_buffer import KVBuffer

Network = Callable[..., Any]
Cache = Literal["none", "prefix", "dual"]
CACHE_MODES = get_args(Cache)


@dataclass(frozen=True)
class Padding:
    """What every forward needs about left padding, over the whole canvas [B, P + G].

    mask: 1 = real token, 0 = pad; None when no row is padded (so the network skips masking).
    positions: explicit RoPE positions (Dream's tok_idx); None = the network's default (the buffer index for LLaDA).
    """

    mask: torch.Tensor | None = None
    positions: torch.Tensor | None = None

    def kwargs(self, start: int = 0, end: int | None = None) -> dict[str, torch.Tensor]:
        """Forward kwargs for queries x[:, start:end]; the mask always spans every key (cached + new)."""
        out: dict[str, torch.Tensor] = {}
        if self.mask is not None:
            out["attention_mask"] = self.mask
        if self.positions is not None:
            out["position_ids"] = self.positions[:, start:end]
        return out


def extend_mask(attention_mask: torch.Tensor | None, gen_length: int) -> torch.Tensor | None:
    """The prompt mask right-extended with ones over the canvas, or None when nothing is padded."""
    if attention_mask is None or bool((attention_mask != 0).all()):
        return None
    return F.pad(attention_mask, (0, gen_length), value=1)


# ---- network calls ------------------------------------------------------------------------------------------------


def full_forward(network: Network, x: torch.Tensor, padding: Padding, cache: KVBuffer | None) -> torch.Tensor:
    """Logits of the whole canvas; with ``cache`` it also refills it: every position's K/V from column 0 on."""
    kwargs: dict[str, Any] = padding.kwargs()
    if cache is not None:
        cache.truncate_all(0)
        kwargs.update(cache=cache, reservation=cache.reserve(x.shape[1]))
    return as_logits(network(x, **kwargs))


def window_forward(
    network: Network, x: torch.Tensor, start: int, end: int, mode: str, padding: Padding, cache: KVBuffer | None
) -> tuple[torch.Tensor, int]:
    """One in-block step: logits of the positions fed and the canvas column of the first of them.

    none: the whole canvas (column 0). prefix: x[:, start:] against the cached prefix x[:, :start], its own K/V
    attended to and dropped after. dual: x[:, start:end] written over the cache slice [start, end) before attending
    to the whole cache.
    """
    if mode == "none":
        return as_logits(network(x, **padding.kwargs())), 0
    if cache is None:
        raise ValueError(f"cache mode {mode!r} needs the cache of the block's first forward")
    if mode == "prefix":
        if set(cache.lengths) != {start}:
            raise ValueError(f"prefix cache holds {cache.lengths} positions, the block starts at {start}")
        with cache.claim(x.shape[1] - start, keep=0) as reservation:
            logits = network(x[:, start:], cache=cache, reservation=reservation, **padding.kwargs(start))
        return as_logits(logits), start
    if mode == "dual":
        reservation = cache.overwrite(start, end - start)
        logits = network(x[:, start:end], cache=cache, reservation=reservation, **padding.kwargs(start, end))
        return as_logits(logits), start
    raise ValueError(f"unknown cache mode {mode!r}; valid: {', '.join(CACHE_MODES)}")


def open_block_rows(block: torch.Tensor, mask_id: int) -> torch.Tensor:
    """[B, 1]: the rows whose ``block`` still holds a mask, the ones its next step counts. A static batch steps a
    block until no row has a mask left, and a row alone leaves it at its own last, so a row's commit steps count only
    the forwards it takes open: those it takes alone."""
    return (block == mask_id).any(dim=1, keepdim=True)


# ---- selection ----------------------------------------------------------------------------------------------------


def rank_desc(confidence: torch.Tensor) -> torch.LongTensor:
    """Each entry's rank within its row, highest first (0 = most confident); ties go to the lower index."""
    order = torch.argsort(confidence, dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    positions = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return ranks.scatter_(-1, order, positions)


def select_transfer(
    confidence: torch.Tensor,
    candidates: torch.Tensor,
    counts: torch.Tensor | None = None,
    threshold: float | None = None,
) -> torch.Tensor:
    """Which candidates to commit, per row of [B, N]: the top ``counts[b]`` by confidence (threshold None), or the
    most confident one plus every other with confidence >= threshold (Fast-dLLM rejects conf < threshold).

    ``counts`` may be a [B] tensor, with threshold a cap: ranks beyond it are never taken (Dream's carry path).
    Non-candidates are never chosen, so a row without candidates commits nothing.
    """
    conf = confidence.masked_fill(~candidates, float("-inf"))
    if counts is None and threshold is not None:  # rank 0 is the row's first maximum: no sort needed
        top = torch.zeros_like(candidates).scatter_(-1, conf.argmax(dim=-1, keepdim=True), True)
        return (top | (conf >= threshold)) & candidates
    ranks = rank_desc(conf)
    if threshold is None:
        if counts is None:
            raise ValueError("select_transfer needs counts or a threshold")
        chosen = ranks < counts.reshape(-1, 1)
    else:
        chosen = (ranks == 0) | (conf >= threshold)
        if counts is not None:
            chosen &= ranks < counts.reshape(-1, 1)
    return chosen & candidates


def shifted_rows(logits: torch.Tensor, lo: int, hi: int, offset: int = 0) -> torch.Tensor:
    """Dream's right shift: the logits scoring canvas positions lo..hi-1 when ``logits`` start at column ``offset``.

    Position i is scored by the output at i-1; the first column of the call scores itself (the reference shifts
    within each call's window, so a window's position 0 is scored by its own output, which is never used for a mask).
    """
    first = lo - offset - 1
    if first >= 0:
        return logits[:, first:hi - offset - 1]  # a view: no copy
    if first < -1:
        raise ValueError(f"rows {lo}..{hi} start before the call's first column {offset}")
    return torch.cat([logits[:, :1], logits[:, :hi - offset - 1]], dim=1)
