"""Fast-dLLM (v1) sampler for LLaDA: semi-autoregressive blocks, each filled `while masks remain`, with an optional
confidence threshold (parallel decoding) and an optional prefix or dual KV cache (decoders.md §4.1).

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

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from models.base import ConfigError, DecodeResult
from models.decoders.fastdllm import (
    CACHE_MODES,
    FastDLLMOutput,
    Network,
    Padding,
    decode_results,
    extend_mask,
    full_forward,
    select_transfer,
    window_forward,
)
from models.decoders.llada import check_block_schedule, check_sampling
from models.decoders.sampling import add_gumbel_noise, check_inputs, llada_transfer_counts, make_generator
from models.networks.common import KVCache



@dataclass(frozen=True)
class FastLLaDAConfig:
    """Defaults are Fast-dLLM's evaluation settings (§4.3: block 32, threshold 0.9, dual cache) at gen 256.

    ``steps`` sets the top-k schedule and is unused when ``threshold`` is set (it must still divide into blocks, as
    the reference asserts). ``threshold`` > 1 commits exactly one token per forward.
    """

    gen_length: int = 256
    steps: int = 256
    block_length: int = 32
    threshold: float | None = 0.9
    cache: str = "dual"  # "none" | "prefix" | "dual"
    temperature: float = 0.0
    remasking: str = "low_confidence"
    mask_id: int = 126336
    eos_id: int = 126081
    eot_id: int = 126348
    seed: int | None = None


def validate_fast_llada_config(cfg: FastLLaDAConfig) -> None:
    """Raise ConfigError (one line) for settings the sampler cannot run."""
    check_block_schedule(cfg.gen_length, cfg.block_length, cfg.steps)
    check_sampling(cfg.temperature, cfg.remasking, cfg.seed)
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
    candidates = block == cfg.mask_id
    x0 = torch.argmax(add_gumbel_noise(block_logits, cfg.temperature, generator), dim=-1)
    if cfg.remasking == "low_confidence":
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
) -> FastDLLMOutput:
    """Fill ``gen_length`` masks after the (left-padded) prompts block by block; returns the generated ids and the
    number of network calls."""
    validate_fast_llada_config(cfg)
    check_inputs(input_ids, attention_mask)
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    generator = make_generator(cfg.seed, device)

    x = torch.full((batch, prompt_len + cfg.gen_length), cfg.mask_id, dtype=torch.long, device=device)
    x[:, :prompt_len] = input_ids
    padding = Padding(mask=extend_mask(attention_mask, cfg.gen_length))
    num_blocks = cfg.gen_length // cfg.block_length
    steps_per_block = cfg.steps // num_blocks
    nfe = 0
    for block_index in range(num_blocks):
        start = prompt_len + block_index * cfg.block_length
        end = start + cfg.block_length
        schedule = llada_transfer_counts((x[:, start:end] == cfg.mask_id).sum(dim=1), steps_per_block)
        cache = None if cfg.cache == "none" else KVCache()
        for step in range(cfg.block_length + steps_per_block):  # each step commits >= 1; the bound only stops
            if not bool((x[:, start:end] == cfg.mask_id).any()):  # a network that keeps proposing the mask id
                break
            if step == 0:
                logits, offset = full_forward(network, x, padding, cache), 0
                if cfg.cache == "prefix":
                    cache.truncate(start)
            else:
                logits, offset = window_forward(network, x, start, end, cfg.cache, padding, cache)
            nfe += 1
            counts = schedule[:, step] if step < steps_per_block else torch.zeros_like(schedule[:, 0])
            x[:, start:end] = llada_step(
                logits[:, start - offset : end - offset], x[:, start:end], counts.clamp_min(1), cfg, generator
            )
    return FastDLLMOutput(tokens=x[:, prompt_len:], nfe=nfe)


def fast_llada_decode_results(output: FastDLLMOutput, cfg: FastLLaDAConfig) -> list[DecodeResult]:
    """Harness results: ids cut after the first EOS or EOT, nfe split evenly across the batch rows."""
    return decode_results(output, [cfg.eos_id, cfg.eot_id])
