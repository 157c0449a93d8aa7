"""Fast-dLLM (v1) sampler for LLaDA: semi-autoregressive blocks, each filled `while masks remain`, with an optional
confidence threshold (parallel decoding) and an optional prefix or dual KV cache (docs/decoders.md §4).

Per block, step 0 is a full forward (in cached modes it also refreshes the cache); later steps go through
``fastdllm.window_forward``. Each step proposes x0 = argmax(gumbel(logits, T)) for the block's masks, scores it by
its float64 softmax probability (or U(0,1) for ``random`` remasking), and commits either the scheduled top-k
(threshold None: LLaDA's ``get_num_transfer_tokens`` split of ``steps`` per block) or the top-1 plus every mask with
confidence >= threshold.

Deliberate differences from the reference, none of which changes tokens in ordinary runs:
- Only masks inside the current block are candidates in every mode (the reference's no-cache path would also fill
  mask ids found in the prompt).
- Gumbel noise and the float64 softmax are computed for the block's positions only (the reference does the whole
  canvas; a [1, 544, 126464] float64 tensor is 550 MB per step). Values per position are the same.
- A step always commits at least one mask; past the end of the top-k schedule it commits one. Only a network that
  proposes the mask id itself can leave a mask after a step (the reference then indexes past its schedule or loops
  forever); a block gives up after block_length + steps_per_block forwards, leaving those mask ids in the output.
- Batches: rows are independent (per-row top-k / threshold; the block loop runs until every row is done, and extra
  forwards never change a finished row), and left padding is honoured through the attention mask in every mode,
  which the reference cannot do (it calls SDPA without a mask).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from models.decoders.contract import (ConfigError, DecodeOutput, Decoder, Step, output_from_tokens, require_filled,
                                      write_tokens)
from models.decoders.fastdllm.core import (
    CACHE_MODES,
    Cache,
    Network,
    Padding,
    extend_mask,
    full_forward,
    open_block_rows,
    select_transfer,
    window_forward,
)
from models.decoders.fastdllm.rows import FastRow, RowPool, forward_rows, masks_left, row_by_row
from models.decoders.flight import fly
from models.decoders.llada import LLaDAConfig, llada_at_canvas, validate_llada_config
from models.decoders.sampling import Draws, add_gumbel_noise, check_inputs, llada_step_counts, llada_transfer_counts


@dataclass(frozen=True)
class FastLLaDAConfig:
    """Plain LLaDA's settings plus Fast-dLLM's. Defaults are Fast-dLLM's evaluation settings (§4.3: block 32,
    threshold 0.9, dual cache).

    ``llada.steps`` sets the top-k schedule and is unused when ``threshold`` is set (it must still divide into
    blocks, as the reference asserts). ``threshold`` > 1 commits exactly one token per forward. Fast-dLLM has no
    classifier-free guidance and no EOS options: ``cfg_scale``, ``logits_eos_inf`` and ``confidence_eos_eot_inf``
    must stay off.
    """

    llada: LLaDAConfig = field(default_factory=lambda: LLaDAConfig(block_length=32))
    threshold: float | None = 0.9
    cache: Cache = "dual"


def fast_llada_at_canvas(cfg: FastLLaDAConfig, canvas: int) -> FastLLaDAConfig:
    return dataclasses.replace(cfg, llada=llada_at_canvas(cfg.llada, canvas))


def validate_fast_llada_config(cfg: FastLLaDAConfig) -> None:
    """Raise ConfigError (one line) for settings the sampler cannot run."""
    validate_llada_config(cfg.llada)
    plain = cfg.llada
    if plain.cfg_scale or plain.logits_eos_inf or plain.confidence_eos_eot_inf:
        raise ConfigError("Fast-dLLM LLaDA has no cfg_scale, logits_eos_inf or confidence_eos_eot_inf; unset them "
                          "or use plain LLaDA (llada)")
    if cfg.threshold is not None and (math.isnan(cfg.threshold) or cfg.threshold < 0):
        raise ConfigError(f"threshold must be >= 0 or None, got {cfg.threshold}")
    if cfg.cache not in CACHE_MODES:
        raise ConfigError(f"unknown cache {cfg.cache!r}; valid: {', '.join(CACHE_MODES)}")


def llada_step(
    block_logits: torch.Tensor,
    block: torch.Tensor,
    counts: torch.Tensor,
    cfg: FastLLaDAConfig,
    generator: torch.Generator,
) -> torch.Tensor:
    """The block's tokens after one step (``get_transfer_index``): propose, score, commit the chosen masks."""
    candidates = block == cfg.llada.mask_id
    if cfg.llada.temperature == 0 and cfg.llada.remasking == "low_confidence":
        # The argmax of the logits is the argmax of their softmax (ties stay ties, the first is taken): one pass.
        confidence, x0 = F.softmax(block_logits.to(torch.float64), dim=-1).max(dim=-1)
    else:
        x0 = torch.argmax(add_gumbel_noise(block_logits, cfg.llada.temperature, generator), dim=-1)
        if cfg.llada.remasking == "low_confidence":
            probs = F.softmax(block_logits.to(torch.float64), dim=-1)
            confidence = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
        else:
            confidence = torch.rand(x0.shape, device=x0.device, generator=generator)
    chosen = select_transfer(confidence, candidates, None if cfg.threshold is not None else counts, cfg.threshold)
    return torch.where(chosen, x0, block)


@torch.no_grad()
def fastdllm_llada_generate(
    network: Network,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None,
    cfg: FastLLaDAConfig,
    row_seeds: Sequence[int] | None = None,
) -> DecodeOutput:
    """Fill ``gen_length`` masks after the (left-padded) prompts block by block; rows are cut after EOS or EOT.
    With ``row_seeds`` a sampling config draws each row from its own generator (blocks lie past the padding, so no
    offset), and only while its block has masks (the batch steps a block until its last row is done), so each row
    samples what it samples alone; a greedy one decodes the batch at once."""
    require_filled(cfg, "llada-fastdllm")
    validate_fast_llada_config(cfg)
    check_inputs(input_ids, attention_mask)
    plain = cfg.llada
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    samples = plain.temperature > 0 or plain.remasking == "random"
    draws = Draws.for_batch(plain.seed, row_seeds if samples else None, batch, device)

    x = torch.full((batch, prompt_len + plain.gen_length), plain.mask_id, dtype=torch.long, device=device)
    x[:, :prompt_len] = input_ids
    steps = torch.zeros_like(x)  # each position's commit step
    own = torch.zeros((batch, 1), dtype=torch.long, device=device)  # each row's forwards, as alone (open_rows)
    padding = Padding(mask=extend_mask(attention_mask, plain.gen_length))
    num_blocks = plain.gen_length // plain.block_length
    steps_per_block = plain.steps // num_blocks
    cache = None if cfg.cache == "none" else network.new_cache(batch, x.shape[1])
    nfe = 0
    for block_index in range(num_blocks):
        start = prompt_len + block_index * plain.block_length
        end = start + plain.block_length
        schedule = llada_transfer_counts((x[:, start:end] == plain.mask_id).sum(dim=1), steps_per_block)
        for step in range(plain.block_length + steps_per_block):  # each step commits >= 1; the bound only stops
            open_rows = open_block_rows(x[:, start:end], plain.mask_id)
            if not bool(open_rows.any()):  # a network that keeps proposing the mask id
                break
            own += open_rows
            if step == 0:
                logits, offset = full_forward(network, x, padding, cache), 0
                if cfg.cache == "prefix":
                    cache.truncate_all(start)
            else:
                logits, offset = window_forward(network, x, start, end, cfg.cache, padding, cache)
            nfe += 1
            counts = schedule[:, step] if step < steps_per_block else torch.zeros_like(schedule[:, 0])
            block_logits, counts = logits[:, start - offset : end - offset], counts.clamp_min(1)
            block = x[:, start:end]  # with per-row seeds a row whose block is full draws nothing, as alone
            write_tokens(x, steps, slice(start, end),
                         draws.by_open_row(llada_step, (block_logits, block, counts), open_rows, block, cfg), own)
    return output_from_tokens(x[:, prompt_len:], nfe, [plain.eos_id, plain.eot_id], steps[:, prompt_len:])


def _start_block(row: FastRow, block: int, block_length: int) -> None:
    """Row ``row`` at step 0 of ``block``."""
    row.block, row.step = block, 0
    row.start = row.prompt_len + block * block_length
    row.end = row.start + block_length


def _advance(pool: RowPool, rows: list[FastRow], cfg: FastLLaDAConfig, counts: list[int], draws: Draws) -> list[bool]:
    """One step of every row (``forward_rows``), each call's rows committed at once, each row by its own count of
    the block's top-k schedule (``counts[step]``, at least one) or the threshold; a row whose block has no mask left
    (one read for all rows) or has run out of steps starts its next block, or is done after its last."""
    plain = cfg.llada
    blocks, bound = plain.gen_length // plain.block_length, len(counts)
    windows = forward_rows(pool, rows, False, plain.block_length, lambda row: (counts[row.step],))
    news = []
    for window in windows:
        batched = (window.logits, window.block, window.ints[0])
        if draws.rows is None:
            new = llada_step(*batched, cfg, draws.shared)
        else:  # per-row seeds: each row draws from its own generator, as alone
            new = row_by_row(llada_step, window, batched, lambda row: (cfg,))
        pool.write(window, new)
        news.append(new)
    stepped, left = masks_left(windows, news, plain.mask_id)
    ended = {}
    for row, masks in zip(stepped, left.tolist()):
        row.step += 1
        end, last = masks == 0 or row.step == bound, row.block + 1 == blocks
        if end and not last:
            _start_block(row, row.block + 1, plain.block_length)
        ended[row.index] = end and last
    done = [ended[row.index] for row in rows]
    pool.leave([row for row, end in zip(rows, done) if end])
    return done


@torch.no_grad()
def fastdllm_llada_stream(network: Network, prompts: Sequence[torch.Tensor], cfg: FastLLaDAConfig, max_rows: int,
                          row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight (``Decoder.stream``): each prompt runs its own blocks and steps, its tokens, forwards and
    commit steps those it has alone (with ``row_seeds``, its draws too). A round is batched work over a slot pool
    (``fastdllm.rows``): without a cache one forward of every row; cached, the rows inside a block in one window
    forward and the rows at a block start in one full forward; then each call's commit rule once over its rows'
    blocks, and one read of the masks left. With ``row_seeds`` a sampling round draws row by row (one generator call
    per row); without, the rows share one generator seeded by ``seed``."""
    require_filled(cfg, "llada-fastdllm")
    validate_fast_llada_config(cfg)
    if not prompts:
        return
    plain = cfg.llada
    samples = plain.temperature > 0 or plain.remasking == "random"
    draws = Draws.for_batch(plain.seed, row_seeds if samples else None, len(prompts), prompts[0].device)
    steps_per_block = plain.steps // (plain.gen_length // plain.block_length)
    # the schedule of a block (every block starts full of masks), then one commit a step up to the bound
    counts = [max(c, 1) for c in llada_step_counts(plain.block_length, steps_per_block)] + [1] * plain.block_length
    pool = RowPool(network, cfg.cache, prompts, plain.gen_length, plain.block_length, max_rows, plain.mask_id)

    def admit(i: int) -> FastRow:
        row = pool.admit(i, draws.of(i))
        _start_block(row, 0, plain.block_length)
        return row

    yield from fly(len(prompts), max_rows, admit, lambda rows: _advance(pool, rows, cfg, counts, draws),
                   lambda rows: pool.results(rows, [plain.eos_id, plain.eot_id]))


FAST_LLADA = Decoder("llada-fastdllm", FastLLaDAConfig, fastdllm_llada_generate, fast_llada_at_canvas,
                     validate_fast_llada_config, stream=fastdllm_llada_stream, version=2)
