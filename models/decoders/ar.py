"""Autoregressive decoding with a KV cache: the baseline every diffusion decoder is compared against.

One prefill over the left-padded batch, then one forward per new token. Rows stop independently at their first
end-of-sequence id; finished rows are fed padding until the whole batch is done.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch
from transformers import DynamicCache

from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, canvas_field, cut_after_eos,
                                      require_filled, token_id_field)
from models.decoders.sampling import Draws, row_generators


@dataclass(frozen=True)
class ARConfig:
    max_new_tokens: int | None = canvas_field()
    do_sample: bool = False  # greedy unless asked, whatever the checkpoint's generation_config says
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    eos_ids: tuple[int, ...] | None = token_id_field()  # the generation config's (Qwen3 has two)
    pad_id: int | None = token_id_field()  # fed to finished rows


def validate_ar_config(cfg: ARConfig) -> None:
    """Raise ConfigError (one line) for settings the sampler cannot run."""
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.do_sample and cfg.temperature <= 0:
        raise ConfigError(f"temperature must be > 0 when do_sample is on, got {cfg.temperature}")
    if not 0 < cfg.top_p <= 1:
        raise ConfigError(f"top_p must be in (0, 1], got {cfg.top_p}")
    if cfg.top_k < 0:
        raise ConfigError(f"top_k must be >= 0 (0 = off), got {cfg.top_k}")


def next_tokens(logits: torch.Tensor, sampling: ARConfig, generator: torch.Generator | None) -> torch.Tensor:
    """Greedy argmax, or a sample from the temperature / top-k / top-p filtered distribution."""
    if not sampling.do_sample:
        return logits.argmax(dim=-1)
    logits = logits.float() / max(sampling.temperature, 1e-6)
    if sampling.top_k > 0:
        kth = torch.topk(logits, min(sampling.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cumulative - sorted_logits.softmax(-1) > sampling.top_p  # keep the token that crosses top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def ar_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, cfg: ARConfig,
                row_seeds: Sequence[int] | None = None) -> DecodeOutput:
    """Decode up to ``max_new_tokens`` per row; returns each row's ids up to and including its first eos. With
    ``row_seeds`` a sampling row draws from its own generator."""
    require_filled(cfg, "ar")
    validate_ar_config(cfg)
    sampling, max_new_tokens, eos_ids, pad_id = cfg, cfg.max_new_tokens, list(cfg.eos_ids), cfg.pad_id
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    batch = input_ids.shape[0]
    device = input_ids.device
    generator = None
    if sampling.do_sample and sampling.seed is not None:
        generator = torch.Generator(device=device).manual_seed(sampling.seed)
    rows = row_generators(row_seeds, batch, device) if sampling.do_sample else None
    draws = Draws(generator, None if rows is None else tuple(rows))  # unseeded: torch's global stream, as before
    eos = torch.tensor(eos_ids, device=device)
    mask = attention_mask.clone()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)

    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, cache=cache,
                   use_cache=True, logits_to_keep=1).logits[:, -1]
    forwards = 1
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    generated: list[torch.Tensor] = []
    next_pos = positions[:, -1:] + 1
    for step in range(max_new_tokens):
        token = draws.by_row(next_tokens, (logits,), sampling)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        generated.append(token)
        done |= torch.isin(token, eos)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=-1)
        logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos, cache=cache,
                       use_cache=True).logits[:, -1]
        next_pos = next_pos + 1
        forwards += 1

    tokens = torch.stack(generated, dim=1)
    results = []
    for row in tokens.tolist():
        kept, found = cut_after_eos(row, eos_ids)
        results.append(DecodeResult(token_ids=kept, nfe=forwards / batch, hit_max_tokens=not found))
    return DecodeOutput(rows=tuple(results), nfe=forwards, tokens=tokens)


def ar_at_canvas(cfg: ARConfig, canvas: int) -> ARConfig:
    return dataclasses.replace(cfg, max_new_tokens=canvas)


AR = Decoder("ar", ARConfig, ar_generate, ar_at_canvas, validate_ar_config)

