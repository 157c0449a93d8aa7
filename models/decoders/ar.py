"""Autoregressive decoding with a KV cache: the baseline every diffusion decoder is compared against.

The decoder speaks the cache protocol every native decoder speaks (``network.new_cache`` and
``network.causal_forward``, models/networks/common.py): each row's prompt is written at its own length, so a ragged
batch carries no padding in its cache, rows at different lengths share one forward, and a row that ends leaves the
cache (``select_rows``), so the forwards that follow do no work for it. transformers' causal LMs speak the same
protocol through ``TransformersCausalLM`` (models/networks/hf_causal.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, canvas_field, cut_after_eos,
                                      require_filled, token_id_field)
from models.decoders.sampling import Draws, check_inputs, row_generators


@dataclass(frozen=True)
class ARConfig:
    max_new_tokens: int | None = canvas_field()
    do_sample: bool = False  # greedy unless asked, whatever the checkpoint's generation_config says
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    eos_ids: tuple[int, ...] | None = token_id_field()  # the generation config's (Qwen3 has two)
    pad_id: int | None = token_id_field()  # pads the prompts of a ragged batch at prefill (never attended to)


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


def prompt_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    """Each row's real tokens, in order (one read of the batch)."""
    ids = input_ids.tolist()
    if attention_mask is None:
        return ids
    return [[t for t, real in zip(row, mask) if real] for row, mask in zip(ids, attention_mask.tolist())]


def prefill(network: Any, prompts: list[list[int]], capacity: int, pad_id: int,
            device: torch.device) -> tuple[Any, torch.Tensor]:
    """A new cache holding every prompt at its own length, and the logits [B, vocab] after each prompt's last
    token. The prompts go in right-padded (a real token never sees a later pad), the pads then dropped."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([p + [pad_id] * (width - len(p)) for p in prompts], device=device)
    last = torch.tensor([row * width + len(p) - 1 for row, p in enumerate(prompts)], device=device)
    cache = network.new_cache(len(prompts), capacity)
    logits = network.causal_forward(ids, cache, read=last)
    for row, prompt in enumerate(prompts):
        cache.truncate(row, len(prompt))
    return cache, logits


@torch.inference_mode()
def ar_generate(network: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, cfg: ARConfig,
                row_seeds: Sequence[int] | None = None) -> DecodeOutput:
    """Decode up to ``max_new_tokens`` per row; returns each row's ids up to and including its first eos and the
    forwards it took part in (one per token). With ``row_seeds`` a sampling row draws from its own generator."""
    require_filled(cfg, "ar")
    validate_ar_config(cfg)
    check_inputs(input_ids, attention_mask)
    device, eos = input_ids.device, set(cfg.eos_ids)
    prompts = prompt_rows(input_ids, attention_mask)
    if min(map(len, prompts)) == 0:
        raise ValueError("ar: every row needs at least one prompt token")
    batch = len(prompts)
    generator = None
    if cfg.do_sample and cfg.seed is not None:
        generator = torch.Generator(device=device).manual_seed(cfg.seed)
    rows = row_generators(row_seeds, batch, device) if cfg.do_sample else None
    draws = Draws(generator, None if rows is None else tuple(rows))  # unseeded: torch's global stream

    cache, logits = prefill(network, prompts, max(map(len, prompts)) + cfg.max_new_tokens, cfg.pad_id, device)
    live = list(range(batch))  # the prompt row of each cache row
    generated: list[list[int]] = [[] for _ in prompts]
    widths = [batch]  # rows in each forward so far
    while True:
        token = draws.by_row(next_tokens, (logits,), cfg)
        for row, t in zip(live, token.tolist()):
            generated[row].append(t)
        keep = [i for i, row in enumerate(live)
                if generated[row][-1] not in eos and len(generated[row]) < cfg.max_new_tokens]
        if not keep:
            break
        if len(keep) < len(live):  # finished rows leave the cache and the batch
            cache.select_rows(keep)
            token, live = token[keep], [live[i] for i in keep]
            if draws.rows is not None:
                draws = Draws(None, tuple(draws.rows[i] for i in keep))
        logits = network.causal_forward(token[:, None], cache)[:, -1]
        widths.append(len(live))
    return ar_output(generated, widths, cfg, device)


def ar_output(generated: list[list[int]], widths: list[int], cfg: ARConfig, device: torch.device) -> DecodeOutput:
    """Row i took part in the first len(generated[i]) forwards (one token each) and paid 1/width of each."""
    rows = []
    for ids in generated:
        kept, found = cut_after_eos(ids, cfg.eos_ids)
        share = sum(1 / width for width in widths[:len(ids)])
        rows.append(DecodeResult(token_ids=kept, nfe=share, hit_max_tokens=not found, forwards=len(ids)))
    longest = max(map(len, generated))
    tokens = torch.tensor([ids + [cfg.pad_id] * (longest - len(ids)) for ids in generated], device=device)
    return DecodeOutput(rows=tuple(rows), nfe=len(widths), tokens=tokens)


def ar_at_canvas(cfg: ARConfig, canvas: int) -> ARConfig:
    return dataclasses.replace(cfg, max_new_tokens=canvas)


AR = Decoder("ar", ARConfig, ar_generate, ar_at_canvas, validate_ar_config)

