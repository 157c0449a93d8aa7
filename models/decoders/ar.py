"""Autoregressive decoding with a KV cache: the baseline every diffusion decoder is compared against.

The decoder speaks the cache protocol every native decoder speaks (``network.new_cache`` and
``network.causal_forward``, models/networks/block_forward.py): each row's prompt is written at its own length, so a
ragged batch carries no padding in its cache, and rows at different lengths share one forward. transformers' causal
LMs speak the same protocol through ``TransformersCausalLM`` (models/networks/hf_causal.py).

Each row is a small state machine (what it feeds next, what it generated) and one batched step drives them all, so
rows in flight (``ar_stream``: a waiting prompt takes the row of the first to finish) and a static batch
(``ar_generate``: every prompt in flight from the start) are the same loop. On a native network (a ``KVBuffer``) the
cache is a slot pool allocated once per stream: a joining prompt is prefilled into a free slot, a finished row gives
its slot back, and each forward runs on its rows' slots, so no op outside a forward copies the cache. A
``TransformersCache`` cannot hold slots (see its docstring): there rows join by appending their cache and leave by
keeping the others' (``admit``, ``select_rows``).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, Step, canvas_field,
                                      cut_after_eos, require_filled, token_id_field)
from models.decoders.flight import fly, took_part
from models.decoders.sampling import Draws, check_inputs, row_generators, top_k_filter, top_p_filter
from models.networks.kv_buffer import KVBuffer, SlotPool


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
        logits = top_k_filter(logits, sampling.top_k)
    if sampling.top_p < 1.0:
        logits = top_p_filter(logits, sampling.top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@dataclass
class _Row:
    """One prompt in flight: what it generated (its last token is what it feeds next), and its share of the network
    calls it took part in (a call on n rows costs each 1/n)."""

    index: int
    generator: torch.Generator | None
    generated: list[int] = field(default_factory=list)
    share: float = 0.0
    forwards: int = 0

    def result(self, eos_ids: Sequence[int]) -> DecodeResult:
        kept, found = cut_after_eos(self.generated, eos_ids)
        return DecodeResult(token_ids=kept, nfe=self.share, hit_max_tokens=not found, forwards=self.forwards,
                            commit_step=tuple(range(1, len(kept) + 1)))  # a token per forward, in order


def prefill(network: Any, cache: Any, prompts: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """Every prompt written into ``cache`` (one row each, empty) at its own length; the logits [B, vocab] after each
    prompt's last token. The prompts go in right-padded (a real token never sees a later pad), the pads then dropped."""
    width = max(map(len, prompts))
    ids = torch.tensor([p + [pad_id] * (width - len(p)) for p in prompts], device=device)
    last = torch.tensor([row * width + len(p) - 1 for row, p in enumerate(prompts)], device=device)
    logits = network.causal_forward(ids, cache, read=last)
    for row, prompt in enumerate(prompts):
        cache.truncate(row, len(prompt))
    return logits


def next_logits(network: Any, cache: Any, rows: list[_Row], device: torch.device) -> torch.Tensor:
    """One forward of every row's last token, each row's share of it counted; the logits [B, vocab] after it."""
    took_part(rows)
    return network.causal_forward(torch.tensor([[r.generated[-1]] for r in rows], device=device), cache)[:, -1]


class _Round:
    """One round over the rows in flight: a token for every row. The running rows take one forward together and
    the rows just admitted are prefilled in a forward of their own (beside the others' their prompts would widen
    it); each group's tokens are drawn from its logits and read back after both forwards are queued (the second
    read finds the queue drained: one wait a round, and no copy to join the groups' tokens). The cache is
    allocated on the first round, and what it is decides how rows join and leave (``_SlotCache`` for a
    ``KVBuffer``, ``_JoinedCache`` for any other)."""

    def __init__(self, network: Any, prompts: list[list[int]], cfg: ARConfig, shared: torch.Generator | None,
                 device: torch.device, slots: int) -> None:
        self.network, self.prompts, self.cfg, self.shared, self.device = network, prompts, cfg, shared, device
        self.capacity, self.slots = max(map(len, prompts)) + cfg.max_new_tokens, slots
        self.eos, self.cache = set(cfg.eos_ids), None

    def __call__(self, rows: list[_Row]) -> list[bool]:
        if self.cache is None:
            cache = self.network.new_cache(self.slots, self.capacity)
            self.cache = _SlotCache(cache) if isinstance(cache, KVBuffer) else _JoinedCache(self.network, self.capacity)
        running = [r for r in rows if r.generated]
        joining = rows[len(running):]
        groups = []
        if running:
            groups.append(self.cache.step(running, self.next_logits))
        if joining:
            took_part(joining)
            groups.append(self.cache.join(joining, self.prefill))
        drawn = [self.draw(logits, ordered) for ordered, logits in groups]
        tokens = [token for ids in drawn for token in ids.tolist()]  # read once both forwards are queued
        for row, token in zip((row for ordered, _ in groups for row in ordered), tokens):
            row.generated.append(token)
        ended = [r.generated[-1] in self.eos or len(r.generated) == self.cfg.max_new_tokens for r in rows]
        self.cache.leave(rows, ended)
        return ended

    def next_logits(self, cache: Any, rows: list[_Row]) -> torch.Tensor:
        return next_logits(self.network, cache, rows, self.device)

    def prefill(self, cache: Any, rows: list[_Row]) -> torch.Tensor:
        return prefill(self.network, cache, [self.prompts[r.index] for r in rows], self.cfg.pad_id, self.device)

    def draw(self, logits: torch.Tensor, rows: list[_Row]) -> torch.Tensor:
        """The next token of each of ``rows`` (the logits' order): a row with its own generator draws alone (the
        draws it makes alone), the others share one."""
        generators = None if rows[0].generator is None else tuple(r.generator for r in rows)
        return Draws(self.shared, generators).by_row(next_tokens, (logits,), self.cfg)


Forward = Callable[[Any, list[_Row]], torch.Tensor]  # (cache of these rows, rows) -> their logits [rows, vocab]


class _SlotCache:
    """A ``KVBuffer`` of one slot per row in flight, allocated once: a joining row takes the lowest free slot and is
    prefilled into it, a finished row gives it back (its entries stay as free columns, never read again), and each
    forward runs on its rows' slots in slot order (a view of the buffer when they are consecutive)."""

    def __init__(self, buffer: KVBuffer) -> None:
        self.buffer, self.pool, self.slot = buffer, SlotPool(buffer.batch), {}

    def step(self, rows: list[_Row], forward: Forward) -> tuple[list[_Row], torch.Tensor]:
        ordered = sorted(rows, key=lambda r: self.slot[r.index])
        with self.buffer.at([self.slot[r.index] for r in ordered]) as part:
            return ordered, forward(part, ordered)

    def join(self, rows: list[_Row], forward: Forward) -> tuple[list[_Row], torch.Tensor]:
        for row in rows:
            self.slot[row.index] = slot = self.pool.take()
            self.buffer.truncate(slot, 0)  # the slot's last holder's entries become free columns
        return self.step(rows, forward)

    def leave(self, rows: list[_Row], ended: list[bool]) -> None:
        for row, end in zip(rows, ended):
            if end:
                self.pool.give(self.slot.pop(row.index))


class _JoinedCache:
    """Any other cache (transformers' ``TransformersCache``): its rows in the rows' order; joining rows are prefilled
    into a cache of their own, appended after the others' (``admit``), and finished rows leave it (``select_rows``),
    each a copy of the cache."""

    def __init__(self, network: Any, capacity: int) -> None:
        self.network, self.capacity, self.cache = network, capacity, None

    def step(self, rows: list[_Row], forward: Forward) -> tuple[list[_Row], torch.Tensor]:
        return rows, forward(self.cache, rows)

    def join(self, rows: list[_Row], forward: Forward) -> tuple[list[_Row], torch.Tensor]:
        cache = self.network.new_cache(len(rows), self.capacity)
        logits = forward(cache, rows)
        if self.cache is None:
            self.cache = cache
        else:
            self.cache.admit(cache)
        return rows, logits

    def leave(self, rows: list[_Row], ended: list[bool]) -> None:
        if any(ended):
            self.cache.select_rows([row for row, end in enumerate(ended) if not end])


def ar_stream(network: Any, prompts: Sequence[torch.Tensor], cfg: ARConfig, max_rows: int,
              row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight (``flight.fly``): at most ``max_rows`` prompts decode together, one forward of a token each
    per step; a row frees its cache row at its end of sequence and a waiting prompt takes it at the next step. With
    ``row_seeds`` a sampling row draws from its own generator (the same tokens as alone); without, the rows in a
    step share one (torch's global stream unless ``cfg.seed``), the running rows drawing in their cache's order."""
    require_filled(cfg, "ar")
    validate_ar_config(cfg)
    if not prompts:
        return
    device = prompts[0].device
    lengths = [int(p.shape[0]) for p in prompts]
    if min(lengths) == 0:
        raise ValueError("ar: every prompt needs at least one token")
    flat = torch.cat(list(prompts)).tolist()  # every prompt read once, together
    bounds = [0, *itertools.accumulate(lengths)]
    host = [flat[a:b] for a, b in zip(bounds, bounds[1:])]
    generators = row_generators(row_seeds, len(prompts), device) if cfg.do_sample else None
    shared = torch.Generator(device=device).manual_seed(cfg.seed) if cfg.do_sample and cfg.seed is not None \
        else None
    advance = _Round(network, host, cfg, shared, device, min(max_rows, len(prompts)))
    yield from fly(len(prompts), max_rows, lambda i: _Row(i, None if generators is None else generators[i]),
                   advance, lambda rows: [row.result(cfg.eos_ids) for row in rows])


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


AR = Decoder("ar", ARConfig, ar_generate, ar_at_canvas, validate_ar_config, stream=torch.inference_mode()(ar_stream),
             version=1)

