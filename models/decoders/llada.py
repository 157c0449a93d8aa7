"""LLaDA's sampler: semi-autoregressive blocks of masked diffusion with low-confidence or random remasking.

Follows ML-GSAI/LLaDA ``generate.py`` (docs/decoders.md §2): the full sequence is run every step with no cache, the
token at position i is scored by the logits at i (no shift), and each block commits a fixed number of tokens per step.
``llada_stream`` runs rows in flight: each row the same steps on its own sequence, the rows in one forward per step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Sequence, get_args

import torch
import torch.nn.functional as F

from models.decoders.contract import (ConfigError, DecodeOutput, Decoder, Step, canvas_field, output_from_tokens,
                                      require_filled, token_id_field, write_tokens)
from models.decoders.flight import canvas_result, commit_row, fly, took_part
from models.decoders.sampling import (Draws, add_gumbel_noise, as_logits, check_inputs, llada_step_counts,
                                      right_padded, row_starts)

Network = Callable[..., Any]
Remasking = Literal["low_confidence", "random"]
REMASKING = get_args(Remasking)


@dataclass(frozen=True)
class LLaDAConfig:
    """LLaDA's ``generate`` arguments. ``nfe`` of the output counts network calls for the whole batch; a CFG step is
    one call on the doubled batch."""

    gen_length: int | None = canvas_field()
    steps: int | None = None  # None: one token per step (steps = canvas), as LLaDA's instruct evaluation
    block_length: int | None = None  # None: one block over the whole canvas
    temperature: float = 0.0
    cfg_scale: float = 0.0
    remasking: Remasking = "low_confidence"
    logits_eos_inf: bool = False
    confidence_eos_eot_inf: bool = False
    seed: int | None = None
    mask_id: int | None = token_id_field()
    eos_id: int | None = token_id_field()  # <|endoftext|>
    eot_id: int | None = token_id_field()  # <|eot_id|>


def llada_at_canvas(cfg: LLaDAConfig, canvas: int) -> LLaDAConfig:
    """The canvas, and the defaults that follow it: one token per step, one block."""
    return dataclasses.replace(cfg, gen_length=canvas, steps=canvas if cfg.steps is None else cfg.steps,
                               block_length=canvas if cfg.block_length is None else cfg.block_length)


def check_block_schedule(gen_length: int, block_length: int, steps: int) -> None:
    """The semi-autoregressive schedule must split evenly: whole blocks, the same number of steps in each."""
    if gen_length < 1:
        raise ConfigError(f"gen_length must be >= 1, got {gen_length}")
    if block_length < 1:
        raise ConfigError(f"block_length must be >= 1, got {block_length}")
    if gen_length % block_length != 0:
        raise ConfigError(f"gen_length ({gen_length}) must be a multiple of block_length ({block_length})")
    num_blocks = gen_length // block_length
    if steps < 1 or steps % num_blocks != 0:
        raise ConfigError(f"steps ({steps}) must be a positive multiple of the number of blocks ({num_blocks})")


def check_sampling(temperature: float, remasking: str, seed: int | None) -> None:
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0, got {temperature}")
    if remasking not in REMASKING:
        raise ConfigError(f"unknown remasking {remasking!r}; valid: {', '.join(REMASKING)}")
    if seed is not None and seed < 0:
        raise ConfigError(f"seed must be >= 0 or None, got {seed}")


def validate_llada_config(cfg: LLaDAConfig) -> None:
    """Raise ConfigError (one line) for settings the sampler cannot run."""
    require_filled(cfg, "llada", ("canvas",))
    if cfg.steps is None or cfg.block_length is None:
        raise ConfigError("llada: steps and block_length are not set (the adapter sets them from the canvas)")
    check_block_schedule(cfg.gen_length, cfg.block_length, cfg.steps)
    check_sampling(cfg.temperature, cfg.remasking, cfg.seed)
    if cfg.cfg_scale < 0:
        raise ConfigError(f"cfg_scale must be >= 0, got {cfg.cfg_scale}")


def _forward(
    network: Network,
    x: torch.Tensor,
    attention_mask: torch.Tensor | None,
    prompt_index: torch.Tensor | None,  # needed with CFG only
    cfg: LLaDAConfig,
) -> torch.Tensor:
    """Logits for x; with CFG one doubled batch whose second half has the prompt masked: u + (s+1)(c - u)."""
    if cfg.cfg_scale <= 0:
        return as_logits(network(x, attention_mask=attention_mask))
    unconditional = x.masked_fill(prompt_index, cfg.mask_id)
    both = torch.cat([x, unconditional], dim=0)
    mask = None if attention_mask is None else torch.cat([attention_mask, attention_mask], dim=0)
    conditional_logits, unconditional_logits = torch.chunk(as_logits(network(both, attention_mask=mask)), 2, dim=0)
    return unconditional_logits + (cfg.cfg_scale + 1) * (conditional_logits - unconditional_logits)


def _suppress(logits: torch.Tensor, columns: list[int]) -> torch.Tensor:
    """A copy of ``logits`` with the given vocabulary columns at -inf (the network's tensor is left alone)."""
    vocab = logits.size(-1)
    bad = [c for c in columns if not 0 <= c < vocab]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the network's vocabulary of {vocab}")
    index = torch.tensor(columns, device=logits.device)
    return logits.index_fill(-1, index, float("-inf"))


def _proposals_and_confidence(
    logits: torch.Tensor, cfg: LLaDAConfig, generator: torch.Generator, columns: slice
) -> tuple[torch.Tensor, torch.Tensor]:
    """Proposed tokens x0 and their confidences at ``columns``, with the EOS options of docs/decoders.md §2.

    Only the columns that can still commit are scored (argmax and softmax are per position, so this changes no
    value). Draws are made over every position, as in the reference, so the random stream is unchanged: at T > 0
    the Gumbel noise covers the whole canvas, and random remasking draws one number per position.

    ``confidence_eos_eot_inf`` reproduces the reference line
    ``logits_with_noise[:, :, eos] = logits[:, :, eot] = -inf`` run after x0 is drawn. At T = 0 the noised tensor
    *is* the logits tensor, so both EOS and EOT get confidence 0; at T > 0 only EOT does (EOS keeps p(EOS), computed
    with EOT removed from the normalisation). That asymmetry is the reference's and is kept on purpose.
    """
    length = logits.shape[1]
    scored = logits[:, columns] if cfg.temperature == 0 else logits  # at T > 0 the noise covers every position
    keep = slice(None) if cfg.temperature == 0 else columns  # the columns of ``scored`` to return
    if cfg.logits_eos_inf:
        scored = _suppress(scored, [cfg.eos_id])
    x0 = torch.argmax(add_gumbel_noise(scored, cfg.temperature, generator), dim=-1)[:, keep]
    if cfg.confidence_eos_eot_inf:
        scored = _suppress(scored, [cfg.eot_id, cfg.eos_id] if cfg.temperature == 0 else [cfg.eot_id])
    if cfg.remasking == "low_confidence":
        probs = F.softmax(scored[:, keep], dim=-1)
        return x0, torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
    return x0, torch.rand((x0.shape[0], length), device=x0.device, generator=generator)[:, columns]


def _row_proposals_and_confidence(
    logits: torch.Tensor, x: torch.Tensor, cfg: LLaDAConfig, generators: Sequence[torch.Generator], starts: list[int],
    columns: slice,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_proposals_and_confidence`` row by row, each on its real positions with its own generator: a row's draws
    are those it would make alone. Padding inside ``columns`` keeps its token and gets confidence -inf. A loop over
    rows (their launches grow with the batch), the price of per-row seeds; greedy decodes score the batch at once."""
    x0, confidence = x[:, columns].clone(), None
    for row, (generator, start) in enumerate(zip(generators, starts)):
        first = max(columns.start, start)
        row_x0, row_conf = _proposals_and_confidence(logits[row:row + 1, start:], cfg, generator,
                                                     slice(first - start, columns.stop - start))
        if confidence is None:
            confidence = torch.full(x0.shape, float("-inf"), dtype=row_conf.dtype, device=x.device)
        x0[row, first - columns.start:], confidence[row, first - columns.start:] = row_x0[0], row_conf[0]
    return x0, confidence


def _commit(
    x: torch.Tensor, x0: torch.Tensor, confidence: torch.Tensor, open_masks: torch.Tensor, columns: slice, count: int
) -> torch.Tensor:
    """The new tokens of ``columns``: each row's ``count`` most confident open masks take their proposals.

    As in the reference, ``topk`` sees whole canvas rows with -inf off the open masks (its pick among equal
    confidences depends on the row it is given, so the rows are not cut to ``columns``), and one batched call picks
    in each row what the reference's call on that row picks. ``count`` is the batch's, known to the host: every
    row's block is all masks when the block starts (steps write only up to its end), so every row has the schedule
    of ``block_length`` masks. Picks off the open masks change nothing, as there.
    """
    full = torch.full(x.shape, float("-inf"), dtype=confidence.dtype, device=x.device)
    full[:, columns] = torch.where(open_masks, confidence, float("-inf"))
    chosen = torch.zeros(x.shape, dtype=torch.bool, device=x.device).scatter_(1, torch.topk(full, count).indices, True)
    return torch.where(chosen[:, columns] & open_masks, x0, x[:, columns])


def _first_open_column(earlier_masks: torch.Tensor, start: int) -> int:
    """The first column a block's steps can commit: the block's start, or an earlier mask (a mask id inside the
    prompt, which the reference also fills). Columns before it hold no mask for the rest of the block."""
    earlier = earlier_masks.any(dim=0).nonzero()
    return int(earlier[0]) if len(earlier) else start


@torch.no_grad()
def llada_generate(
    network: Network,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None,
    cfg: LLaDAConfig,
    row_seeds: Sequence[int] | None = None,
) -> DecodeOutput:
    """Fill ``gen_length`` masks after the (left-padded) prompts, block by block; rows are cut after EOS or EOT.
    With ``row_seeds`` a sampling config draws each row from its own generator (``cfg.seed`` is then unused)."""
    require_filled(cfg, "llada")
    validate_llada_config(cfg)
    check_inputs(input_ids, attention_mask)
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    samples = cfg.temperature > 0 or cfg.remasking == "random"
    draws = Draws.for_batch(cfg.seed, row_seeds if samples else None, batch, device)  # greedy: the batch at once
    starts = row_starts(attention_mask, batch)

    x = torch.full((batch, prompt_len + cfg.gen_length), cfg.mask_id, dtype=torch.long, device=device)
    x[:, :prompt_len] = input_ids
    steps = torch.zeros_like(x)  # each position's commit step
    prompt_index = torch.zeros_like(x, dtype=torch.bool)
    prompt_index[:, :prompt_len] = input_ids != cfg.mask_id
    if attention_mask is not None:
        ones = torch.ones((batch, cfg.gen_length), dtype=attention_mask.dtype, device=device)
        attention_mask = torch.cat([attention_mask, ones], dim=-1)

    num_blocks = cfg.gen_length // cfg.block_length
    steps_per_block = cfg.steps // num_blocks
    counts = llada_step_counts(cfg.block_length, steps_per_block)  # see _commit: the same in every block and row
    nfe = 0
    for block in range(num_blocks):
        start = prompt_len + block * cfg.block_length
        end = start + cfg.block_length
        columns = slice(_first_open_column(x[:, :start] == cfg.mask_id, start), end)
        for step in range(steps_per_block):
            open_masks = x[:, columns] == cfg.mask_id
            logits = _forward(network, x, attention_mask, prompt_index, cfg)
            nfe += 1
            if draws.rows is None:
                x0, confidence = _proposals_and_confidence(logits, cfg, draws.shared, columns)
            else:
                x0, confidence = _row_proposals_and_confidence(logits, x, cfg, draws.rows, starts, columns)
            write_tokens(x, steps, columns, _commit(x, x0, confidence, open_masks, columns, counts[step]), nfe)
    return output_from_tokens(x[:, prompt_len:], nfe, [cfg.eos_id, cfg.eot_id], steps[:, prompt_len:])


@dataclass
class _Row:
    """One prompt in flight: its sequence (prompt + canvas) as it decodes alone and each position's commit step, the
    steps it has taken, the columns its current block can commit, and its generator."""

    index: int
    x: torch.Tensor  # [1, prompt + gen_length]
    steps: torch.Tensor  # [1, prompt + gen_length]
    prompt_index: torch.Tensor  # [1, prompt + gen_length] bool: the prompt's tokens (what CFG masks)
    prompt_len: int
    generator: torch.Generator | None
    columns: slice | None = None  # set when a block starts
    taken: int = 0
    share: float = 0.0
    forwards: int = 0


def _new_row(index: int, prompt: torch.Tensor, cfg: LLaDAConfig, generator: torch.Generator | None) -> _Row:
    canvas = torch.full((cfg.gen_length,), cfg.mask_id, dtype=prompt.dtype, device=prompt.device)
    prompt_index = torch.cat([prompt != cfg.mask_id, torch.zeros_like(canvas, dtype=torch.bool)])
    x = torch.cat([prompt, canvas])[None]
    return _Row(index, x, torch.zeros_like(x), prompt_index[None], len(prompt), generator)


def _advance(network: Network, rows: list[_Row], cfg: LLaDAConfig) -> list[bool]:
    """One step of every row: one forward of them all, right-padded (``right_padded``), then each row proposes and
    commits on its own sequence exactly as ``llada_generate`` on it alone; which rows are done."""
    steps_per_block = cfg.steps // (cfg.gen_length // cfg.block_length)
    counts = llada_step_counts(cfg.block_length, steps_per_block)
    for row in rows:
        if row.taken % steps_per_block == 0:  # a block starts
            start = row.prompt_len + row.taken // steps_per_block * cfg.block_length
            row.columns = slice(_first_open_column(row.x[:, :start] == cfg.mask_id, start), start + cfg.block_length)
    x, attention_mask = right_padded([row.x for row in rows], cfg.mask_id)
    prompt_index = right_padded([row.prompt_index for row in rows], False)[0] if cfg.cfg_scale > 0 else None
    logits = _forward(network, x, attention_mask, prompt_index, cfg)
    took_part(rows)
    for b, row in enumerate(rows):
        open_masks = row.x[:, row.columns] == cfg.mask_id
        x0, confidence = _proposals_and_confidence(logits[b:b + 1, :row.x.shape[1]], cfg, row.generator, row.columns)
        commit_row(row, row.columns, _commit(row.x, x0, confidence, open_masks, row.columns,
                                             counts[row.taken % steps_per_block]))
        row.taken += 1
    return [row.taken == cfg.steps for row in rows]


@torch.no_grad()
def llada_stream(network: Network, prompts: Sequence[torch.Tensor], cfg: LLaDAConfig, max_rows: int,
                 row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight (``Decoder.stream``): each prompt is its own sequence and schedule, and every step runs the
    rows in flight in one forward. A row finishes when its schedule is done (the whole canvas, as alone); with
    ``row_seeds`` a sampling row draws from its own generator, so its tokens and forwards are those it has alone
    (without, the rows share one generator seeded by ``cfg.seed``)."""
    require_filled(cfg, "llada")
    validate_llada_config(cfg)
    if not prompts:
        return
    samples = cfg.temperature > 0 or cfg.remasking == "random"
    draws = Draws.for_batch(cfg.seed, row_seeds if samples else None, len(prompts), prompts[0].device)
    yield from fly(len(prompts), max_rows, lambda i: _new_row(i, prompts[i], cfg, draws.of(i)),
                   lambda rows: _advance(network, rows, cfg),
                   lambda row: canvas_result(row, [cfg.eos_id, cfg.eot_id]))


LLADA = Decoder("llada", LLaDAConfig, llada_generate, llada_at_canvas, validate_llada_config,
                stream=llada_stream)
