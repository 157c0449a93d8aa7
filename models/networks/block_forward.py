"""The two calls every cached decoder makes of a native network (``new_cache``, ``block_forward``, and
``causal_forward`` built on it), shared by the Qwen3, Qwen2 (Dream) and LLaDA2 networks: block-causal forwards of new
entries against a ``KVBuffer``, rows at their own positions and lengths."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor, nn

from models.networks.common import QwenFamilyConfig
from models.networks.kv_buffer import KVBuffer, Reservation


def block_causal_mask(plan: Reservation, positions: Tensor, block_length: int,
                      one_block: bool | None = None) -> Tensor | None:
    """[B|1, 1, L, K] bool (True = may attend) for L new entries written where ``plan`` says: each sees every live
    cached entry of its row and the new entries whose block (position // block_length) is not after its own; other
    rows' columns stay hidden. None when that is every column (equal rows, one block): SDPA then needs no mask.

    ``one_block``: whether every row's positions lie in one block, when the host knows it (``block_positions``);
    None reads it from ``positions`` (one sync on an accelerator)."""
    if plan.uniform is not None and one_block:
        return None
    blocks = positions.div(block_length, rounding_mode="floor")  # [B|1, L]
    if plan.uniform is not None and one_block is None and bool((blocks.amax(1) == blocks.amin(1)).all()):
        return None
    length = positions.shape[-1]
    cols = torch.arange(plan.key_len, device=positions.device)
    starts = plan.index[:, :1] if plan.index is not None else torch.tensor([[plan.uniform]], device=positions.device)
    rel = cols - starts  # [B|1, K]: a column's index among its row's new entries (< 0: cached)
    rows = max(rel.shape[0], blocks.shape[0])
    blocks, rel = blocks.expand(rows, length), rel.expand(rows, plan.key_len)
    key_blocks = blocks.gather(1, rel.clamp(0, length - 1))
    is_new = (rel >= 0) & (rel < length)
    allowed = (rel < 0)[:, None] | (is_new[:, None] & (key_blocks[:, None] <= blocks[:, :, None]))
    return allowed[:, None]


def block_positions(input_ids: Tensor, position_ids: Tensor | range, cache: KVBuffer,
                    block_length: int) -> tuple[Tensor, bool | None]:
    """The checked [B|1, L] long positions of a ``block_forward`` call, and whether they lie in one block when the
    host knows it without a read (``position_ids`` a range: the positions every row shares)."""
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must be [B, L] with L >= 1, got shape {list(input_ids.shape)}")
    b, length = input_ids.shape
    if not isinstance(cache, KVBuffer) or cache.batch != b:
        raise ValueError(f"block_forward needs a KVBuffer of {b} rows (new_cache), got "
                         f"{cache.batch if isinstance(cache, KVBuffer) else type(cache).__name__}")
    if block_length < 1:
        raise ValueError(f"block_length must be >= 1, got {block_length}")
    if isinstance(position_ids, range):
        if len(position_ids) != length or position_ids.step != 1 or position_ids.start < 0:
            raise ValueError(f"position_ids as a range must be {length} consecutive positions >= 0, got {position_ids}")
        one_block = position_ids.start // block_length == (position_ids.stop - 1) // block_length
        return torch.arange(position_ids.start, position_ids.stop, device=input_ids.device)[None], one_block
    if position_ids.dim() != 2 or tuple(position_ids.shape) not in ((b, length), (1, length)):
        raise ValueError(f"position_ids must be [B|1, L] = [{b}|1, {length}], got shape {list(position_ids.shape)}")
    return position_ids.to(input_ids.device).long(), None


class BlockForward:
    """The two calls a block diffusion decoder (SDAR/TraDo on Qwen3, Fast-dLLM v2 on Dream's Qwen2) makes, the same
    on both networks: ``new_cache`` and ``block_forward``. A network of the Qwen layout (``model.embed_tokens``,
    ``model.layers``, a ``QwenFamilyConfig``) supplies ``cached_logits``: its layers over a given mask and cache.
    ``block_forward`` is a host half and a device half, which ``CompiledNetwork`` (models/networks/compiled.py) runs
    eagerly and compiled."""

    config: QwenFamilyConfig
    model: nn.Module

    def new_cache(self, batch: int, capacity: int) -> KVBuffer:
        """An empty preallocated cache for ``batch`` rows of up to ``capacity`` entries, in the network's dtype;
        keys are stored after RoPE."""
        w = self.model.embed_tokens.weight
        return KVBuffer(self.config.num_hidden_layers, batch, capacity, self.config.kv_heads,
                        self.config.dim_per_head, w.dtype, w.device)

    def block_forward(self, input_ids: Tensor, position_ids: Tensor | range, cache: KVBuffer, block_length: int,
                      write: bool | int | Sequence[int], read: Tensor | None = None) -> Tensor:
        """Logits [B, L, vocab], unshifted, of L new entries at ``position_ids`` [B|1, L] (or a range every row
        shares, which spares the one-block test its read), which attend to every live cached entry of their row and
        to each other block-causally (``block_causal_mask``): one call for a prefill
        of whole blocks and for one block. ``write``: how many of the new entries, from the left, keep their K/V
        (True: all, a commit; False: none, a peek, the columns past each row's length then hold garbage; a count
        in between: a commit fused with the next block's peek; a count per row: rows in flight at different
        phases). ``read``: flat cells of [B * L]; the logits [M, vocab] there, the LM head computed at those cells
        alone (none at all for an empty ``read``; its float rounding may then differ from the full head's)."""
        with self.block_forward_call(input_ids, position_ids, cache, block_length, write, read=read) as step:
            return self.block_forward_step(*step)

    @contextmanager
    def block_forward_call(self, input_ids: Tensor, position_ids: Tensor | range, cache: KVBuffer, block_length: int,
                           write: bool | int | Sequence[int], static: bool = False,
                           read: Tensor | None = None) -> Iterator[tuple[Any, ...]]:
        """``block_forward``'s host half: the inputs checked and the cache's columns claimed for the call
        (``KVBuffer.claim``; ``static`` as a compiled step takes them); yields ``block_forward_step``'s arguments."""
        positions, one_block = block_positions(input_ids, position_ids, cache, block_length)
        keep = input_ids.shape[1] if write is True else write if isinstance(write, Sequence) else int(write)
        with cache.claim(input_ids.shape[1], keep=keep, static=static) as plan:
            yield input_ids, positions, cache, plan, block_length, one_block, read

    def block_forward_step(self, input_ids: Tensor, positions: Tensor, cache: KVBuffer, plan: Reservation,
                           block_length: int, one_block: bool | None = None, read: Tensor | None = None) -> Tensor:
        """``block_forward``'s device half, tensor work only with a static ``plan``: the mask and the layers."""
        mask = block_causal_mask(plan, positions, block_length, one_block)
        return self.cached_logits(input_ids, positions, mask, cache, plan, read)

    def causal_forward(self, input_ids: Tensor, cache: KVBuffer, read: Tensor | None = None) -> Tensor:
        """An autoregressive forward: row b's L new tokens go after its ``cache.lengths[b]`` entries, at those
        positions, each attending to its row's entries and to the new tokens up to itself (block diffusion with
        blocks of one token, so rows of any lengths share the call). Logits [B, L, vocab], or [M, vocab] at the
        flat cells ``read`` (the head computed there alone: a prompt's last token, not the whole prompt)."""
        with self.causal_forward_call(input_ids, cache, read) as step:
            return self.block_forward_step(*step)

    @contextmanager
    def causal_forward_call(self, input_ids: Tensor, cache: KVBuffer, read: Tensor | None = None,
                            static: bool = False) -> Iterator[tuple[Any, ...]]:
        """``causal_forward``'s host half (``block_forward_call`` at each row's length); its device half is
        ``block_forward_step``."""
        length, starts = input_ids.shape[1], set(cache.lengths)
        if len(starts) == 1:  # a range: one block of one token needs no mask and no read to know it
            positions: Tensor | range = range(starts.pop(), cache.lengths[0] + length)
        else:
            positions = torch.tensor(cache.lengths, device=input_ids.device)[:, None] + torch.arange(
                length, device=input_ids.device)
        with self.block_forward_call(input_ids, positions, cache, 1, True, static, read) as step:
            yield step

    causal_forward_step = block_forward_step

    def cached_logits(self, input_ids: Tensor, positions: Tensor, mask: Tensor | None, cache: KVBuffer,
                      plan: Reservation, read: Tensor | None = None) -> Tensor:
        """Logits of ``input_ids`` at ``positions`` [B|1, L], their K/V written where ``plan`` says, attending with the
        bool ``mask`` [B|1, 1, L, K] (None: every one of the K columns); at the flat cells ``read`` alone if given."""
        raise NotImplementedError
