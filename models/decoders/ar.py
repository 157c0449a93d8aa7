"""Autoregressive decoding with a KV cache: the baseline every diffusion decoder is compared against.

The decoder speaks the cache protocol every native decoder speaks (``network.new_cache`` and
``network.causal_forward``, models/networks/common.py): each row's prompt is written at its own length, so a ragged
batch carries no padding in its cache, rows at different lengths share one forward, and a row that ends leaves the
cache (``select_rows``), so the forwards that follow do no work for it. transformers' causal LMs speak the same
protocol through ``TransformersCausalLM`` (models/networks/hf_causal.py).

Each row is a small state machine (what it feeds next, what it generated) and one batched step drives them all, so
rows in flight (``ar_stream``: a waiting prompt takes the row of the first to finish) and a static batch
(``ar_generate``: every prompt in flight from the start) are the same loop.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch

from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, Step, canvas_field,
                                      cut_after_eos, require_filled, token_id_field)
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


@dataclass
class _Row:
    """One prompt in flight: what it feeds next, what it generated, the forwards it took part in and its share of
    them (a forward of n rows costs each 1/n)."""

    index: int
    feed: list[int]
    generator: torch.Generator | None
    generated: list[int] = field(default_factory=list)
    share: float = 0.0

    def result(self, eos_ids: Sequence[int]) -> DecodeResult:
        kept, found = cut_after_eos(self.generated, eos_ids)
        return DecodeResult(token_ids=kept, nfe=self.share, hit_max_tokens=not found, forwards=len(self.generated))


def forward_rows(network: Any, cache: Any, feeds: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """One forward of every cache row's ``feeds`` (a prompt, or the last token), right-padded into one [B, L] call
    whose pads are then dropped from the cache; the logits [B, vocab] after each row's last fed token."""
    width, starts = max(map(len, feeds)), list(cache.lengths)
    if width == 1:
        return network.causal_forward(torch.tensor(feeds, device=device), cache)[:, -1]
    ids = torch.tensor([f + [pad_id] * (width - len(f)) for f in feeds], device=device)
    last = torch.tensor([row * width + len(f) - 1 for row, f in enumerate(feeds)], device=device)
    logits = network.causal_forward(ids, cache, read=last)
    for row, (start, f) in enumerate(zip(starts, feeds)):
        if len(f) < width:
            cache.truncate(row, start + len(f))
    return logits


def ar_stream(network: Any, prompts: Sequence[torch.Tensor], cfg: ARConfig, max_rows: int,
              row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight: at most ``max_rows`` prompts decode together, one forward per step; a row leaves the cache
    at its end of sequence and a waiting prompt takes a row at the next step, its prefill in that step's forward
    beside the others' single tokens. With ``row_seeds`` a sampling row draws from its own generator (the same
    tokens as alone); without, the rows in a step share one (torch's global stream unless ``cfg.seed``)."""
    require_filled(cfg, "ar")
    validate_ar_config(cfg)
    if max_rows < 1:
        raise ValueError(f"ar: max_rows must be at least 1, got {max_rows}")
    if not prompts:
        return
    device, eos = prompts[0].device, set(cfg.eos_ids)
    lengths = [int(p.shape[0]) for p in prompts]
    if min(lengths) == 0:
        raise ValueError("ar: every prompt needs at least one token")
    flat = torch.cat(list(prompts)).tolist()  # every prompt read once, together
    bounds = [0, *itertools.accumulate(lengths)]
    host = [flat[a:b] for a, b in zip(bounds, bounds[1:])]
    generators = row_generators(row_seeds, len(prompts), device) if cfg.do_sample else None
    shared = torch.Generator(device=device).manual_seed(cfg.seed) if cfg.do_sample and cfg.seed is not None \
        else None
    # with prompts waiting, a row near its end can share a forward with a new prompt's prefill, padded to its width
    headroom = max(lengths) if max_rows < len(prompts) else 0
    cache = network.new_cache(0, max(lengths) + cfg.max_new_tokens + headroom)
    waiting, rows = list(range(len(prompts)))[::-1], []
    while waiting or rows:
        admitted = [waiting.pop() for _ in range(min(max_rows - len(rows), len(waiting)))]
        if admitted:
            cache.admit(len(admitted))
            rows += [_Row(i, host[i], None if generators is None else generators[i]) for i in admitted]
        logits = forward_rows(network, cache, [r.feed for r in rows], cfg.pad_id, device)
        draws = Draws(shared, None if generators is None else tuple(r.generator for r in rows))
        for row, token in zip(rows, draws.by_row(next_tokens, (logits,), cfg).tolist()):
            row.generated.append(token)
            row.feed = [token]
            row.share += 1 / len(rows)
        ended = [r.generated[-1] in eos or len(r.generated) == cfg.max_new_tokens for r in rows]
        finished = tuple((r.index, r.result(cfg.eos_ids)) for r, end in zip(rows, ended) if end)
        step = Step(tuple(admitted), finished, len(rows))
        if finished:  # finished rows leave the cache and the batch
            keep = [b for b, end in enumerate(ended) if not end]
            cache.select_rows(keep)
            rows = [rows[b] for b in keep]
        yield step


@torch.inference_mode()
def ar_generate(network: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, cfg: ARConfig,
                row_seeds: Sequence[int] | None = None) -> DecodeOutput:
    """A static batch: every row in flight from the first forward (``ar_stream`` with a row per prompt); returns
    each row's ids up to and including its first eos and the forwards it took part in (one per token)."""
    check_inputs(input_ids, attention_mask)
    prompts = list(input_ids) if attention_mask is None else \
        [row[mask.bool()] for row, mask in zip(input_ids, attention_mask)]
    results: dict[int, DecodeResult] = {}
    steps = 0
    for step in ar_stream(network, prompts, cfg, len(prompts), row_seeds):
        results.update(step.finished)
        steps += 1
    rows = tuple(results[i] for i in range(len(prompts)))
    longest = max(len(r.token_ids) for r in rows)
    tokens = torch.tensor([r.token_ids + [cfg.pad_id] * (longest - len(r.token_ids)) for r in rows],
                          device=input_ids.device)
    return DecodeOutput(rows=rows, nfe=steps, tokens=tokens)


def ar_at_canvas(cfg: ARConfig, canvas: int) -> ARConfig:
    return dataclasses.replace(cfg, max_new_tokens=canvas)


AR = Decoder("ar", ARConfig, ar_generate, ar_at_canvas, validate_ar_config, stream=torch.inference_mode()(ar_stream))

