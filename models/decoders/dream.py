"""Dream's sampler (``diffusion_generate``): every step runs the whole sequence and commits a scheduled share of masks.

Follows Dream's ``generation_utils._sample`` (docs/decoders.md §3): logits are shifted right by one over the whole
sequence (the token at i is scored by the output at i-1, position 0 by its own), the number committed per step is
floor(masks * (1 - s/t)) on the grid linspace(1, eps, steps+1), and ``origin`` unmasks each mask independently.
``dream_stream`` runs rows in flight: each row the same steps on its own sequence, the rows in one forward per step
and one batched commit, their tokens in a slot pool on the device (``canvas_pool``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Sequence, get_args

import torch
import torch.nn.functional as F

from models.decoders.contract import (ConfigError, DecodeOutput, Decoder, Step, canvas_field, output_from_tokens,
                                      require_filled, token_id_field, write_tokens)
from models.decoders.canvas_pool import CanvasPool
from models.decoders.flight import fly, took_part
from models.decoders.sampling import (
    Draws,
    as_logits,
    check_inputs,
    dream_timesteps,
    dream_masks_and_count,
    host_ints,
    margin_confidence,
    mask_order,
    max_prob_confidence,
    neg_entropy_confidence,
    passes_simplex_check,
    row_starts,
    sample_categorical,
    spread,
    top_counts,
    top_k_filter,
    top_p_filter,
)

Network = Callable[..., Any]
Alg = Literal["origin", "maskgit_plus", "topk_margin", "entropy"]
ALGS = get_args(Alg)


@dataclass(frozen=True)
class DreamConfig:
    """Dream's ``diffusion_generate`` arguments."""

    max_new_tokens: int | None = canvas_field()
    steps: int | None = None  # None: one token per step (steps = canvas)
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    alg: Alg = "entropy"
    alg_temp: float | None = None
    eps: float = 1e-3
    seed: int | None = None
    mask_id: int | None = token_id_field()
    eos_ids: tuple[int, ...] | None = token_id_field()  # where a row's output is cut (<|endoftext|>, <|im_end|>)


def dream_at_canvas(cfg: DreamConfig, canvas: int) -> DreamConfig:
    return dataclasses.replace(cfg, max_new_tokens=canvas, steps=canvas if cfg.steps is None else cfg.steps)


def validate_dream_config(cfg: DreamConfig) -> None:
    """Raise ConfigError (one line) for settings the sampler cannot run."""
    require_filled(cfg, "dream", ("canvas",))
    if cfg.steps is None:
        raise ConfigError("dream: steps is not set (the adapter sets it from the canvas)")
    if cfg.max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.steps < 1:
        raise ConfigError(f"steps must be >= 1, got {cfg.steps}")
    if cfg.temperature < 0:
        raise ConfigError(f"temperature must be >= 0, got {cfg.temperature}")
    if cfg.top_p is not None and not 0 < cfg.top_p <= 1:
        raise ConfigError(f"top_p must be in (0, 1] or None, got {cfg.top_p}")
    if cfg.top_k is not None and cfg.top_k < 1:
        raise ConfigError(f"top_k must be >= 1 or None, got {cfg.top_k}")
    if cfg.alg not in ALGS:
        raise ConfigError(f"unknown alg {cfg.alg!r}; valid: {', '.join(ALGS)}")
    if cfg.alg_temp is not None and cfg.alg_temp < 0:
        raise ConfigError(f"alg_temp must be >= 0 or None, got {cfg.alg_temp}")
    if not 0 < cfg.eps < 1:
        raise ConfigError(f"eps must be in (0, 1), got {cfg.eps}")
    if cfg.seed is not None and cfg.seed < 0:
        raise ConfigError(f"seed must be >= 0 or None, got {cfg.seed}")


def dream_sample_tokens(
    logits: torch.Tensor,
    cfg: DreamConfig,
    confidence: str,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.LongTensor]:
    """Dream's ``sample_tokens`` on logits [N, V]: confidences ("max_prob" | "margin" | "neg_entropy") and tokens.

    Temperature divides, then top-p and top-k truncate, then softmax in the logits' dtype. The confidences come
    from that truncated distribution, so top-p/top-k change them even at T = 0. At T > 0 a token is drawn
    (Categorical); if the reference's Categorical validation would reject the probabilities, it falls back to argmax.
    """
    if cfg.temperature > 0:
        logits = logits / cfg.temperature
    if cfg.top_p is not None and cfg.top_p < 1:
        logits = top_p_filter(logits, cfg.top_p)
    if cfg.top_k is not None:
        logits = top_k_filter(logits, cfg.top_k)
    probs = torch.softmax(logits, dim=-1)
    if cfg.temperature > 0 and probs.numel() > 0 and passes_simplex_check(probs):
        tokens = sample_categorical(probs, generator)
        conf = torch.gather(probs, -1, tokens.unsqueeze(-1)).squeeze(-1)
    else:
        conf, tokens = max_prob_confidence(probs)
    if confidence == "margin":
        conf = margin_confidence(probs)
    elif confidence == "neg_entropy":
        conf = neg_entropy_confidence(probs)
    elif confidence != "max_prob":
        raise ValueError(f"unknown confidence {confidence!r}")
    return conf, tokens


def shifted_sources(batch: int, length: int, device: torch.device | str) -> torch.LongTensor:
    """For each flat canvas index of a [batch, length] canvas, the flat row of [batch * length, V] logits that
    scores it: position i by the output at i-1, position 0 by its own."""
    flat = torch.arange(batch * length, device=device)
    return flat - (flat % length != 0).long()


def masked_logits(logits: torch.Tensor, order: torch.LongTensor, sources: torch.LongTensor) -> torch.Tensor:
    """The right-shifted logits of the masks at flat canvas indices ``order`` (``mask_order``), [N, V] in row-major
    order: ``shifted[mask_index]`` without shifting the whole tensor or waiting for ``nonzero``."""
    return logits.reshape(-1, logits.shape[-1])[sources[order]]


def padding_inputs(
    attention_mask: torch.Tensor | None, max_new_tokens: int
) -> tuple[torch.Tensor | None, torch.LongTensor | None]:
    """The mask and position ids Dream's network gets: None/None without padding; else the 2D mask extended with
    ones and positions cumsum(mask) - 1 with pad positions set to 1 (real tokens count 0, 1, ... per row)."""
    if attention_mask is None or not bool(torch.any(attention_mask == 0)):
        return None, None
    mask = F.pad(attention_mask, (0, max_new_tokens), value=1)
    positions = mask.long().cumsum(-1) - 1
    positions = positions.masked_fill(mask == 0, 1)
    return mask, positions


_CONFIDENCE_OF_ALG = {"maskgit_plus": "max_prob", "topk_margin": "margin", "entropy": "neg_entropy"}


def _origin_step(
    x: torch.Tensor,
    order: torch.LongTensor,  # the masks' flat indices (mask_order)
    logits: torch.Tensor,  # the masks' logits, [N, V]
    p_transfer: torch.Tensor | float,
    cfg: DreamConfig,
    generator: torch.Generator,
) -> torch.Tensor:
    """Each mask is unmasked independently with probability p_transfer, its value drawn by ``sample_tokens``.
    A sampling path: which masks are drawn sets the next draws' shapes, so it reads ``chosen`` back."""
    proposals = torch.full(order.shape, cfg.mask_id, dtype=torch.long, device=x.device)
    chosen = torch.rand(proposals.shape, device=x.device, generator=generator) < p_transfer
    _, tokens = dream_sample_tokens(logits[chosen], cfg, "max_prob", generator)
    proposals[chosen] = tokens
    return x.reshape(-1).scatter(0, order, proposals).view(x.shape)


def _confidence_step(
    x: torch.Tensor,
    order: torch.LongTensor,  # the masks' flat indices (mask_order)
    logits: torch.Tensor,  # the masks' logits, [N, V]
    count: int,
    cfg: DreamConfig,
    generator: torch.Generator,
) -> torch.Tensor:
    """Commit ``count`` masks per row: the most confident (alg_temp None/0) or a draw from softmax(conf/alg_temp)."""
    conf, tokens = dream_sample_tokens(logits, cfg, _CONFIDENCE_OF_ALG[cfg.alg], generator)
    if count <= 0:
        return x
    full_conf = spread(conf, order, x.shape, float("-inf"))
    if cfg.alg_temp is None or cfg.alg_temp == 0:
        chosen = torch.topk(full_conf, count, dim=-1).indices
    else:
        weights = F.softmax(full_conf / cfg.alg_temp, dim=-1)
        chosen = torch.multinomial(weights, num_samples=count, generator=generator)
    proposals = spread(tokens, order, x.shape, cfg.mask_id)
    return x.scatter(1, chosen, proposals.gather(1, chosen))


def _step(cfg: DreamConfig, t: torch.Tensor, s: torch.Tensor, last: bool, count: int) -> Callable[..., torch.Tensor]:
    """The step from t to s, ``step(x, order, logits, generator=)``: origin's draw, or ``count`` confident commits."""
    if cfg.alg == "origin":
        return functools.partial(_origin_step, p_transfer=1.0 if last else 1 - s / t, cfg=cfg)
    return functools.partial(_confidence_step, count=count, cfg=cfg)


def _row_by_row(step: Callable[..., torch.Tensor], x: torch.Tensor, mask_index: torch.Tensor, logits: torch.Tensor,
                generators: Sequence[torch.Generator], starts: list[int]) -> torch.Tensor:
    """One step on each row alone, on its real positions with its own generator: the draws it would make alone.
    ``logits`` are the masks' logits in row-major order, so each row's are one contiguous run. A sampling path: it
    reads each row's mask count back, which the batched path does not need."""
    x = x.clone()
    ends = mask_index.sum(dim=1).cumsum(0).tolist()
    for row, (generator, start) in enumerate(zip(generators, starts)):
        part = slice(row, row + 1), slice(start, None)
        masks = int(mask_index[part].sum())  # masks inside the padding are not the row's
        order = mask_order(mask_index[part], masks)
        x[part] = step(x[part], order, logits[ends[row] - masks:ends[row]], generator=generator)
    return x


@torch.no_grad()
def dream_generate(
    network: Network,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None,
    cfg: DreamConfig,
    row_seeds: Sequence[int] | None = None,
) -> DecodeOutput:
    """Fill ``max_new_tokens`` masks after the (left-padded) prompts in ``steps`` full-sequence forwards. With
    ``row_seeds`` a sampling config draws each row from its own generator (``cfg.seed`` is then unused)."""
    require_filled(cfg, "dream")
    validate_dream_config(cfg)
    check_inputs(input_ids, attention_mask)
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    samples = cfg.temperature > 0 or cfg.alg == "origin" or bool(cfg.alg_temp)
    draws = Draws.for_batch(cfg.seed, row_seeds if samples else None, batch, device)  # greedy: the batch at once
    starts = row_starts(attention_mask, batch)

    x = F.pad(input_ids, (0, cfg.max_new_tokens), value=cfg.mask_id)
    steps = torch.zeros_like(x)  # each position's commit step
    mask, positions = padding_inputs(attention_mask, cfg.max_new_tokens)
    timesteps = dream_timesteps(cfg.steps, cfg.eps, device)
    sources = shifted_sources(batch, x.shape[1], device)
    for i in range(cfg.steps):
        mask_index = x == cfg.mask_id
        t, s = timesteps[i], timesteps[i + 1]
        last = i == cfg.steps - 1
        masks, count = dream_masks_and_count(mask_index, t, s, last)  # the step's one host read
        order = mask_order(mask_index, masks)
        logits = masked_logits(as_logits(network(x, attention_mask=mask, position_ids=positions)), order, sources)
        step = _step(cfg, t, s, last, count)
        if draws.rows is None:
            new = step(x, order, logits, generator=draws.shared)
        else:
            new = _row_by_row(step, x, mask_index, logits, draws.rows, starts)
        write_tokens(x, steps, slice(None), new, i + 1)
    return output_from_tokens(x[:, prompt_len:], cfg.steps, cfg.eos_ids, steps[:, prompt_len:])


def transfer_counts(mask_index: torch.Tensor, taken: torch.Tensor, timesteps: torch.Tensor,
                    steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's masks and ``dream_transfer_count_of`` as alone, at its own step ``taken[r]`` ([n] long): the same
    float32 arithmetic, every row at once, left on the device."""
    totals = mask_index.sum(dim=1)
    mean = totals / 1  # the reference's mean over a batch of one row, in float32
    t, s = timesteps[taken], timesteps[taken + 1]
    return totals, torch.where(taken == steps - 1, mean, mean * (1 - s / t)).long()


@dataclass
class _Row:
    """One prompt in flight, its control state on the host (its tokens are in the stream's ``CanvasPool``): its slot,
    the steps it has taken and its generator."""

    index: int
    slot: int
    prompt_len: int
    generator: torch.Generator | None
    taken: int = 0
    share: float = 0.0
    forwards: int = 0


@dataclass(frozen=True)
class _Flight:
    """What every round of a stream shares."""

    network: Network
    cfg: DreamConfig
    pool: CanvasPool
    timesteps: torch.Tensor
    reads_cells: bool  # the network runs its LM head at given cells (``forward(read=)``)
    samples: bool  # draws (T > 0, origin, alg_temp): each row's step row by row

    def ranked(self, ids: torch.Tensor, order: torch.Tensor, logits: torch.Tensor, counts: list[int],
               widths: list[int]) -> torch.Tensor:
        """``_confidence_step`` without draws on every row at once, each committing its own count (``top_counts``):
        one set of ops whatever the rows' steps."""
        conf, tokens = dream_sample_tokens(logits, self.cfg, _CONFIDENCE_OF_ALG[self.cfg.alg], None)
        chosen = top_counts(spread(conf, order, ids.shape, float("-inf")), counts, widths)
        return torch.where(chosen, spread(tokens, order, ids.shape, self.cfg.mask_id), ids)

    def drawn(self, rows: list[_Row], ids: torch.Tensor, mask_index: torch.Tensor, logits: torch.Tensor,
              masks: list[int], counts: list[int], widths: list[int]) -> torch.Tensor:
        """Each row's step alone, row by row (origin's and alg_temp's draws, per-row seeded sampling: one generator
        call per row, as torch has no batched generators), on its real columns with its own generator. ``logits``
        are the masks' in row-major order, so each row's are one contiguous run."""
        new, end = ids.clone(), 0
        for b, (row, row_masks, count, width) in enumerate(zip(rows, masks, counts, widths)):
            part = slice(b, b + 1), slice(0, width)
            t, s = self.timesteps[row.taken], self.timesteps[row.taken + 1]
            step = _step(self.cfg, t, s, row.taken == self.cfg.steps - 1, count)
            order = mask_order(mask_index[part], row_masks)
            new[part] = step(ids[part], order, logits[end:end + row_masks], generator=row.generator)
            end += row_masks
        return new

    def advance(self, rows: list[_Row]) -> list[bool]:
        """One step of every row: one forward of them all, right-padded (the network's default positions are then
        each row's own), every row's masks and transfer count for its own time in one computation read back in one
        transfer, the head at the masks' shifted sources, then the commit of every row at once; which are done."""
        cfg, pool, device = self.cfg, self.pool, self.pool.x.device
        pool.join()
        widths = [row.prompt_len + cfg.max_new_tokens for row in rows]
        width = max(widths)
        at = host_ints([[row.slot, w, row.taken, row.taken + 1] for row, w in zip(rows, widths)], device)
        ids = pool.ids([row.slot for row in rows], width, at[:, 0])
        real = None if min(widths) == width else torch.arange(width, device=device) < at[:, 1:2]
        mask_index = ids == cfg.mask_id if real is None else (ids == cfg.mask_id) & real
        masks, counts = torch.stack(transfer_counts(mask_index, at[:, 2], self.timesteps, cfg.steps)).tolist()
        order = mask_order(mask_index, sum(masks))
        sources = shifted_sources(len(rows), width, device)[order]
        if self.reads_cells:
            logits = as_logits(self.network(ids, attention_mask=real, position_ids=None, read=sources))
        else:
            logits = as_logits(self.network(ids, attention_mask=real, position_ids=None))
            logits = logits.reshape(-1, logits.shape[-1])[sources]
        took_part(rows)
        if self.samples:
            new = self.drawn(rows, ids, mask_index, logits, masks, counts, widths)
        else:
            new = self.ranked(ids, order, logits, counts, widths)
        pool.write(at[:, 0], torch.arange(width, device=device)[None], ids, new, at[:, 3])
        for row in rows:
            row.taken += 1
        return [row.taken == cfg.steps for row in rows]


@torch.no_grad()
def dream_stream(network: Network, prompts: Sequence[torch.Tensor], cfg: DreamConfig, max_rows: int,
                 row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight (``Decoder.stream``): each prompt is its own sequence and schedule, every step runs the rows
    in flight in one forward and commits them at once (``_Flight.advance``). A row finishes after its ``steps`` (the
    whole canvas, as alone). Without draws a round is a fixed set of ops whatever the number of rows (a few more for
    mixed widths: ``top_counts``), with one host read before the forward (every row's masks and count) and one for
    the rows that finish. With draws (``origin``, ``alg_temp``, T > 0) each row's step runs alone, row by row; with
    ``row_seeds`` a sampling row draws from its own generator, so its tokens and forwards are those it has alone
    (without, the rows share one generator seeded by ``cfg.seed``). Where the network can (``reads_cells``) its head
    runs at the masks' shifted sources alone (the prompt's cells are never read). A row's tokens equal its decode
    alone by ``dream_generate`` (fp32, tested), the head's float rounding aside, as a batch's shapes already change
    the forward's."""
    require_filled(cfg, "dream")
    validate_dream_config(cfg)
    if not prompts:
        return
    device = prompts[0].device
    samples = cfg.temperature > 0 or cfg.alg == "origin" or bool(cfg.alg_temp)
    draws = Draws.for_batch(cfg.seed, row_seeds if samples else None, len(prompts), device)
    pool = CanvasPool.build(prompts, cfg.max_new_tokens, cfg.mask_id, min(max_rows, len(prompts)))
    flight = _Flight(network, cfg, pool, dream_timesteps(cfg.steps, cfg.eps, device),
                     bool(getattr(network, "reads_cells", False)), samples)
    yield from fly(len(prompts), max_rows,
                   lambda i: _Row(i, pool.take(i), len(prompts[i]), draws.of(i) if samples else None),
                   flight.advance, lambda rows: pool.results(rows, cfg.eos_ids))


DREAM = Decoder("dream", DreamConfig, dream_generate, dream_at_canvas, validate_dream_config,
                stream=dream_stream, version=1)
