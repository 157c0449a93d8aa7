"""Fast-dLLM (v1) sampler for Dream (docs/decoders.md §4): Dream's shifted logits (position i scored by the output at
i-1) with confidence-threshold parallel decoding and the block-wise prefix / dual KV cache.

What runs, by ``cache`` and ``threshold``:
- none, threshold None: plain Dream (``dream_generate``, any ``alg``).
- none, threshold t: ``alg='confidence_threshold'`` over the whole canvas (no blocks). Each step ranks the top
  n + carry masks, n = max_new_tokens / steps; the top-1 is taken, every other one only if conf >= t, and the
  rejected ones carry over to the next step (steps are added at the end until no mask is left).
- prefix / dual, threshold None: blocks; entropy order on Dream's floor schedule of steps / blocks per block.
- prefix / dual, threshold t: blocks; the block's top-1 mask plus every other one with conf >= t.

In the cached modes each block starts with a full forward that refreshes the cache and **commits the block's first
token unconditionally** (Dream's ``sample_tokens`` at that position): a later window's first position would need
the output of the cached token before it, which a window call does not produce. The forced commit counts as step 1
of the block's schedule, so the cached entropy path needs at least 2 steps per block.

Decisions (the reference differs; tokens are unchanged in ordinary runs):
- The reference cached path silently scores every ``alg`` by entropy; here any alg other than ``entropy`` is a
  ConfigError with threshold None in a cached mode (with a threshold, ``alg`` and ``alg_temp`` are not used, as
  in the reference's ``confidence_threshold``).
- The reference stops a cached block after ``steps_per_block`` steps even with masks left (one step per block then
  returns masks, Fast-dLLM PR #82 / issue #66); that setting is rejected here.
- No forward is spent once a block (or the canvas) has no masks: the reference runs one more window forward for a
  block of length 1, and its no-cache threshold path keeps stepping after the last mask is gone.
- Only masks of the generated part are candidates (mask ids inside the prompt are never filled). A network that
  proposes the mask id itself leaves that position a candidate (the reference's carry loses count of it and can
  return a mask); every loop is bounded, so such a network cannot hang the sampler.
- Batches: rows are independent (per-row candidates and carry; the reference asserts batch 1 for thresholds) and
  left padding works in every mode: the attention mask covers all keys and the positions are Dream's tok_idx at
  the window's columns (the reference's cached modes overwrite position ids and mis-slice the mask, §4.2).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from models.decoders.contract import (ConfigError, DecodeOutput, Decoder, Step, output_from_tokens, require_filled,
                                      write_tokens)
from models.decoders.dream import (DreamConfig, dream_generate, dream_sample_tokens, dream_stream, padding_inputs,
                                  validate_dream_config)
from models.decoders.fastdllm.core import (
    CACHE_MODES,
    Cache,
    Network,
    Padding,
    full_forward,
    select_transfer,
    shifted_rows,
    window_forward,
)
from models.decoders.fastdllm.rows import FastRow, RowPool, Window, forward_rows, masks_left, row_by_row
from models.decoders.flight import fly
from models.decoders.sampling import (Draws, check_inputs, dream_masks_and_count, dream_timesteps, mask_order, spread,
                                      top_counts)


@dataclass(frozen=True)
class FastDreamConfig:
    """Plain Dream's settings plus Fast-dLLM's. Defaults are Fast-dLLM's dual cache + parallel setting (§4.3:
    block 32, threshold 0.9).

    ``dream.steps``: total steps (None: resolved from the canvas, one nominal step per block with a threshold, else
    one per token). Cached modes split them per block (the entropy schedule; unused with a threshold but it must
    still divide into blocks, as the reference asserts). Without a cache and with a threshold, max_new_tokens /
    steps is the nominal number of candidates per step (the reference evaluations use steps = max_new_tokens / 32).
    ``block_length`` is not used with ``cache='none'``.
    """

    dream: DreamConfig = DreamConfig()
    block_length: int = 32
    threshold: float | None = 0.9
    cache: Cache = "dual"


def fast_dream_at_canvas(cfg: FastDreamConfig, canvas: int) -> FastDreamConfig:
    steps = cfg.dream.steps
    if steps is None:
        steps = max(canvas // max(cfg.block_length, 1), 1) if cfg.threshold is not None else canvas
    return dataclasses.replace(cfg, dream=dataclasses.replace(cfg.dream, max_new_tokens=canvas, steps=steps))


def validate_fast_dream_config(cfg: FastDreamConfig) -> None:
    """Raise ConfigError (one line) for settings the sampler cannot run."""
    validate_dream_config(cfg.dream)
    if cfg.cache not in CACHE_MODES:
        raise ConfigError(f"unknown cache {cfg.cache!r}; valid: {', '.join(CACHE_MODES)}")
    if cfg.threshold is not None and (math.isnan(cfg.threshold) or cfg.threshold < 0):
        raise ConfigError(f"threshold must be >= 0 or None, got {cfg.threshold}")
    if cfg.cache == "none":
        if cfg.threshold is not None and cfg.dream.max_new_tokens % cfg.dream.steps != 0:
            raise ConfigError(
                f"max_new_tokens ({cfg.dream.max_new_tokens}) must be a multiple of steps ({cfg.dream.steps}) for threshold decoding without a cache"
            )
        return
    if cfg.block_length < 1:
        raise ConfigError(f"block_length must be >= 1, got {cfg.block_length}")
    if cfg.dream.max_new_tokens % cfg.block_length != 0:
        raise ConfigError(f"max_new_tokens ({cfg.dream.max_new_tokens}) must be a multiple of block_length ({cfg.block_length})")
    num_blocks = cfg.dream.max_new_tokens // cfg.block_length
    if cfg.dream.steps % num_blocks != 0:
        raise ConfigError(f"steps ({cfg.dream.steps}) must be a multiple of the number of blocks ({num_blocks})")
    if cfg.threshold is None:
        if cfg.dream.alg != "entropy":
            raise ConfigError(
                f"alg {cfg.dream.alg!r} is not available with cache={cfg.cache!r}: the cached path orders by entropy only; set alg='entropy' or a threshold"
            )
        if cfg.dream.steps // num_blocks < 2 and cfg.block_length > 1:
            raise ConfigError(
                f"steps ({cfg.dream.steps}) gives {cfg.dream.steps // num_blocks} step per block; the cached path needs >= 2 (the first only commits the block's first token)"
            )


# ---- no cache -----------------------------------------------------------------------------------------------------


def _threshold_no_cache(
    network: Network, x: torch.Tensor, steps: torch.Tensor, prompt_len: int, padding: Padding, cfg: FastDreamConfig,
    draws: Draws,
) -> tuple[torch.Tensor, int]:
    """Fast-dLLM's ``confidence_threshold`` over the whole canvas, with the carry written in closed form.

    The reference keeps a carry c (candidates rejected so far) and, at step i, ranks the top n + c masks; past the
    last nominal step n becomes 0 and the steps are extended. Since the masks left before step i are
    R = (steps - i) n + c, the candidate count is R - max(steps - i - 1, 0) n, which this computes per row.
    """
    nominal = cfg.dream.max_new_tokens // cfg.dream.steps
    nfe, own = 0, torch.zeros((x.shape[0], 1), dtype=torch.long, device=x.device)  # own: as alone (open_block_rows)
    for step in range(cfg.dream.max_new_tokens + cfg.dream.steps):  # each step commits >= 1; the bound only stops a network
        candidates = x[:, prompt_len:] == cfg.dream.mask_id  # that keeps proposing the mask id itself
        masks = int(candidates.sum())  # the step's one host read
        if masks == 0:
            break
        own += candidates.any(dim=1, keepdim=True)
        logits = full_forward(network, x, padding, None)
        nfe += 1
        reserved = max(cfg.dream.steps - step - 1, 0) * nominal
        batched = (x[:, prompt_len:], shifted_rows(logits, prompt_len, x.shape[1]), candidates)
        write_tokens(x, steps, slice(prompt_len, None), _commit(draws, _carry_commit, batched, reserved, cfg,
                                                                masks=masks), own)
    return x, nfe


def _commit(draws: Draws, commit: Callable[..., torch.Tensor], batched: tuple[torch.Tensor, ...], *args: Any,
            **known: int) -> torch.Tensor:
    """``commit`` on the whole batch, told what the loop's host read found (``known``: the masks, the count), or,
    with per-row generators (seeded sampling), row by row, each row reading its own back."""
    if draws.rows is None:
        return commit(*batched, *args, draws.shared, **known)
    return draws.by_row(commit, batched, *args)


def _carry_commit(
    canvas: torch.Tensor, scores: torch.Tensor, candidates: torch.Tensor, reserved: int, cfg: FastDreamConfig,
    generator: torch.Generator, masks: int | None = None,
) -> torch.Tensor:
    """One step of the no-cache threshold path: up to (masks left - ``reserved``) candidates, top-1 always, the
    rest only at conf >= threshold."""
    conf, proposals = _scored(scores, candidates, cfg, "max_prob", generator, masks)
    chosen = select_transfer(conf, candidates, candidates.sum(dim=1) - reserved, cfg.threshold)
    return torch.where(chosen, proposals, canvas)


def _scored(
    scores: torch.Tensor, candidates: torch.Tensor, cfg: FastDreamConfig, confidence: str,
    generator: torch.Generator, masks: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's masks (``candidates``) scored by Dream's ``sample_tokens``: their confidence (-inf elsewhere)
    and their proposed tokens (the mask id elsewhere). Only the masks' logits are scored, as in the reference.
    ``masks``: how many candidates there are, when the loop has read it (a row of a per-row draw reads its own)."""
    order = mask_order(candidates, int(candidates.sum()) if masks is None else masks)
    width = candidates.shape[1]
    conf, tokens = dream_sample_tokens(scores[order // width, order % width], cfg.dream, confidence, generator)
    return (spread(conf, order, candidates.shape, float("-inf")),
            spread(tokens, order, candidates.shape, cfg.dream.mask_id))


# ---- cached blocks ------------------------------------------------------------------------------------------------


def _block_time(step: int, steps_per_block: int, timesteps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(t, s, last) of a cached block's step on Dream's grid; steps past the schedule stay at its last interval."""
    last = step >= steps_per_block - 1
    t, s = (timesteps[step], timesteps[step + 1]) if not last else (timesteps[-2], timesteps[-1])
    return t, s, last


def _entropy_commit(
    block: torch.Tensor, block_scores: torch.Tensor, candidates: torch.Tensor, step: int, steps_per_block: int,
    timesteps: torch.Tensor, cfg: FastDreamConfig, generator: torch.Generator, masks: int | None = None,
    count: int | None = None,
) -> torch.Tensor:
    """One step of the cached non-threshold path: Dream's floor schedule on the block's masks, ordered by -entropy
    (top-k, or a draw from softmax(conf / alg_temp)). ``masks`` and ``count``: the loop's read for the whole batch;
    a row of a per-row draw reads its own."""
    if masks is None or count is None:
        masks, count = dream_masks_and_count(candidates, *_block_time(step, steps_per_block, timesteps))
    full_conf, proposals = _scored(block_scores, candidates, cfg, "neg_entropy", generator, masks)
    if count <= 0:
        return block
    if cfg.dream.alg_temp is None or cfg.dream.alg_temp == 0:
        chosen_idx = torch.topk(full_conf, min(count, block.shape[1]), dim=-1).indices
    else:
        weights = F.softmax(full_conf / cfg.dream.alg_temp, dim=-1)
        chosen_idx = torch.multinomial(weights, num_samples=min(count, block.shape[1]), generator=generator)
    chosen = torch.zeros_like(candidates).scatter_(1, chosen_idx, True) & candidates
    return torch.where(chosen, proposals, block)


def _threshold_commit(
    block: torch.Tensor, block_scores: torch.Tensor, candidates: torch.Tensor, cfg: FastDreamConfig,
    generator: torch.Generator, masks: int | None = None,
) -> torch.Tensor:
    """One step of the cached threshold path: the block's top-1 mask plus every other with conf >= threshold."""
    conf, proposals = _scored(block_scores, candidates, cfg, "max_prob", generator, masks)
    return torch.where(select_transfer(conf, candidates, None, cfg.threshold), proposals, block)


def _forced_first(scores: torch.Tensor, cfg: FastDreamConfig, generator: torch.Generator) -> torch.Tensor:
    """The block's first token, committed unconditionally from the full forward (Dream's ``sample_tokens``)."""
    return dream_sample_tokens(scores[:, 0], cfg.dream, "max_prob", generator)[1].unsqueeze(1)


def _cached_blocks(
    network: Network, x: torch.Tensor, steps: torch.Tensor, prompt_len: int, padding: Padding, cfg: FastDreamConfig,
    draws: Draws,
) -> tuple[torch.Tensor, int]:
    """``generation_utils_block._sample``: per block a full forward (cache refresh + forced first token), then
    window forwards until the block has no masks."""
    num_blocks = cfg.dream.max_new_tokens // cfg.block_length
    steps_per_block = cfg.dream.steps // num_blocks
    timesteps = dream_timesteps(steps_per_block, cfg.dream.eps, x.device)
    cache = network.new_cache(x.shape[0], x.shape[1])
    nfe, own = 0, torch.zeros((x.shape[0], 1), dtype=torch.long, device=x.device)  # own: as alone (open_block_rows)
    for block_index in range(num_blocks):
        start = prompt_len + block_index * cfg.block_length
        end = start + cfg.block_length
        logits = full_forward(network, x, padding, cache)
        nfe, own = nfe + 1, own + 1
        write_tokens(x, steps, slice(start, start + 1),
                     draws.by_row(_forced_first, (shifted_rows(logits, start, start + 1),), cfg), own)
        if cfg.cache == "prefix":
            cache.truncate_all(start)
        for step in range(1, cfg.block_length + steps_per_block):  # bound: see _threshold_no_cache
            candidates = x[:, start:end] == cfg.dream.mask_id  # the step's one host read: masks left (and count)
            if cfg.threshold is None:
                masks, count = dream_masks_and_count(candidates, *_block_time(step, steps_per_block, timesteps))
            else:
                masks = int(candidates.sum())
            if masks == 0:
                break
            own += candidates.any(dim=1, keepdim=True)
            logits, offset = window_forward(network, x, start, end, cfg.cache, padding, cache)
            nfe += 1
            batched = (x[:, start:end], shifted_rows(logits, start, end, offset), candidates)
            if cfg.threshold is None:
                new = _commit(draws, _entropy_commit, batched, step, steps_per_block, timesteps, cfg, masks=masks,
                              count=count)
            else:
                new = _commit(draws, _threshold_commit, batched, cfg, masks=masks)
            write_tokens(x, steps, slice(start, end), new, own)
    return x, nfe


@torch.no_grad()
def fastdllm_dream_generate(
    network: Network,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None,
    cfg: FastDreamConfig,
    row_seeds: Sequence[int] | None = None,
) -> DecodeOutput:
    """Fill ``max_new_tokens`` masks after the (left-padded) prompts; rows are cut after the first EOS.

    With ``row_seeds`` a sampling config draws each row from its own generator, so a sample decodes the same in any
    batch; otherwise one generator seeded by ``dream.seed`` serves the batch, as in the reference."""
    require_filled(cfg, "dream-fastdllm")
    validate_fast_dream_config(cfg)
    check_inputs(input_ids, attention_mask)
    if cfg.cache == "none" and cfg.threshold is None:
        return dream_generate(network, input_ids, attention_mask, cfg.dream, row_seeds)
    prompt_len = input_ids.shape[1]
    samples = cfg.dream.temperature > 0 or (cfg.threshold is None and bool(cfg.dream.alg_temp))
    draws = Draws.for_batch(cfg.dream.seed, row_seeds if samples else None, input_ids.shape[0], input_ids.device)
    x = F.pad(input_ids, (0, cfg.dream.max_new_tokens), value=cfg.dream.mask_id)
    mask, positions = padding_inputs(attention_mask, cfg.dream.max_new_tokens)
    padding = Padding(mask=mask, positions=positions)
    steps = torch.zeros_like(x)  # each position's commit step
    if cfg.cache == "none":
        x, nfe = _threshold_no_cache(network, x, steps, prompt_len, padding, cfg, draws)
    else:
        x, nfe = _cached_blocks(network, x, steps, prompt_len, padding, cfg, draws)
    return output_from_tokens(x[:, prompt_len:], nfe, cfg.dream.eos_ids, steps[:, prompt_len:])


@dataclass(frozen=True)
class _Schedule:
    """What a row in flight follows: its blocks (without a cache, one over the whole canvas), the bound on a block's
    steps, the cached entropy path's time grid, the no-cache threshold path's nominal count per step, and whether a
    step draws (then a call's rows commit one by one, each from its generator)."""

    cfg: FastDreamConfig
    block_length: int
    steps_per_block: int
    bound: int
    timesteps: torch.Tensor
    nominal: int
    samples: bool

    @classmethod
    def of(cls, cfg: FastDreamConfig, device: torch.device, samples: bool) -> "_Schedule":
        dream = cfg.dream
        if cfg.cache == "none":
            return cls(cfg, dream.max_new_tokens, dream.steps, dream.max_new_tokens + dream.steps,
                       dream_timesteps(dream.steps, dream.eps, device), dream.max_new_tokens // dream.steps, samples)
        steps_per_block = dream.steps // (dream.max_new_tokens // cfg.block_length)
        return cls(cfg, cfg.block_length, steps_per_block, cfg.block_length + steps_per_block,
                   dream_timesteps(steps_per_block, dream.eps, device), 0, samples)

    def start_block(self, row: FastRow, block: int) -> None:
        """Row ``row`` at step 0 of ``block``, every position of it a mask."""
        row.block, row.step = block, 0
        row.start = row.prompt_len + block * self.block_length
        row.end = row.start + self.block_length
        row.plan = (self.block_length, self.block_length)

    def reserved(self, row: FastRow) -> int:
        """Without a cache: the masks a step leaves to the nominal steps after it (``_threshold_no_cache``)."""
        return max(self.cfg.dream.steps - row.step - 1, 0) * self.nominal

    def ints(self, row: FastRow) -> tuple[int, int]:
        """What a row's step needs on the device: the masks it reserves for later steps (no cache) and the time index
        of its next step (cached entropy: its count is read after this step)."""
        return self.reserved(row) if self.cfg.cache == "none" else 0, min(row.step + 1, self.steps_per_block - 1)

    def commit(self, window: Window) -> torch.Tensor:
        """The rows' blocks after their step, as each alone: a cached block's forced first token at its full forward,
        else the path's commit, on every row of the call at once (one by one when the step draws)."""
        cfg, block = self.cfg, window.block
        if window.opening:
            if self.samples:
                first = row_by_row(_forced_first, window, (window.logits,), lambda row: (cfg,))
            else:
                first = dream_sample_tokens(window.logits[:, 0], cfg.dream, "max_prob", None)[1][:, None]
            return torch.cat([first, block[:, 1:]], dim=1)
        tensors = (block, window.logits, block == cfg.dream.mask_id)
        masks = sum(row.plan[0] for row in window.rows)  # the rows' reads: how many masks the call scores
        if cfg.cache == "none":
            if self.samples:
                return row_by_row(lambda x, scores, cand, known, reserved, generator: _carry_commit(
                    x, scores, cand, reserved, cfg, generator, masks=known), window, tensors,
                    lambda row: (row.plan[0], self.reserved(row)))
            return _carry_commit(*tensors, window.ints[0], cfg, None, masks=masks)
        if cfg.threshold is not None:
            if self.samples:
                return row_by_row(lambda x, scores, cand, known, generator: _threshold_commit(
                    x, scores, cand, cfg, generator, masks=known), window, tensors, lambda row: (row.plan[0],))
            return _threshold_commit(*tensors, cfg, None, masks=masks)
        if self.samples:
            return row_by_row(lambda x, scores, cand, step, known, count, generator: _entropy_commit(
                x, scores, cand, step, self.steps_per_block, self.timesteps, cfg, generator, masks=known,
                count=count), window, tensors, lambda row: (row.step, *row.plan))
        return _entropy_rows(*tensors, [row.plan[1] for row in window.rows], cfg, masks)

    def reads(self, windows: list[Window], news: list[torch.Tensor]) -> tuple[list[FastRow], list[tuple[int, int]]]:
        """The rows of the round and what each reads before its next step, as alone: its block's masks and (cached
        entropy path) the step's count, Dream's float32 arithmetic per row; all rows in one transfer."""
        rows, left = masks_left(windows, news, self.cfg.dream.mask_id)
        if self.cfg.cache == "none" or self.cfg.threshold is not None:
            return rows, [(masks, masks) for masks in left.tolist()]
        at = torch.cat([window.ints[1] for window in windows])
        t, s, last = self.timesteps[at], self.timesteps[at + 1], at == self.steps_per_block - 1
        mean = left / 1  # ``dream_transfer_count_of`` of one row: the same float32 operations, row by row
        counts = torch.where(last, mean, mean * (1 - s / t)).long()
        return rows, [tuple(pair) for pair in torch.stack([left, counts], dim=1).tolist()]


def _entropy_rows(block: torch.Tensor, block_scores: torch.Tensor, candidates: torch.Tensor, counts: list[int],
                  cfg: FastDreamConfig, masks: int) -> torch.Tensor:
    """``_entropy_commit`` (top-k, no draw) of rows with a count each: each row's pick is topk's on the row alone,
    ties included (``top_counts``: one topk per distinct count)."""
    conf, proposals = _scored(block_scores, candidates, cfg, "neg_entropy", None, masks)
    width = block.shape[1]
    chosen = top_counts(conf, [min(count, width) for count in counts], [width] * len(counts)) & candidates
    return torch.where(chosen, proposals, block)


def _advance(pool: RowPool, rows: list[FastRow], schedule: _Schedule) -> list[bool]:
    """One step of every row (``forward_rows``), each call's rows committed at once; a row whose block has no mask
    left or has run out of steps starts its next block, or is done after its last."""
    windows = forward_rows(pool, rows, True, 1, schedule.ints)
    news = []
    for window in windows:
        news.append(schedule.commit(window))
        pool.write(window, news[-1])
    ended = {}
    for row, read in zip(*schedule.reads(windows, news)):
        row.step, row.plan = row.step + 1, read
        last = row.start + schedule.block_length == row.width
        end = read[0] == 0 or row.step == schedule.bound
        if end and not last:
            schedule.start_block(row, row.block + 1)
        ended[row.index] = end and last
    done = [ended[row.index] for row in rows]
    pool.leave([row for row, end in zip(rows, done) if end])
    return done


@torch.no_grad()
def fastdllm_dream_stream(network: Network, prompts: Sequence[torch.Tensor], cfg: FastDreamConfig, max_rows: int,
                          row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight (``Decoder.stream``): each prompt runs its own blocks and steps, its tokens, forwards and
    commit steps those it has alone (with ``row_seeds``, its draws too). Without a cache and a threshold it is plain
    Dream's stream. Otherwise a round is batched work over a slot pool (``fastdllm.rows``): without a cache one
    forward of every row; cached, the rows inside a block in one window forward and the rows at a block start in
    one full forward; then each call's commit rule once over its rows' blocks, and one read of the masks left (and
    the entropy path's counts). A step that draws commits row by row, each row from its generator."""
    require_filled(cfg, "dream-fastdllm")
    validate_fast_dream_config(cfg)
    if cfg.cache == "none" and cfg.threshold is None:
        yield from dream_stream(network, prompts, cfg.dream, max_rows, row_seeds)
        return
    if not prompts:
        return
    device, canvas = prompts[0].device, cfg.dream.max_new_tokens
    samples = cfg.dream.temperature > 0 or (cfg.threshold is None and bool(cfg.dream.alg_temp))
    draws = Draws.for_batch(cfg.dream.seed, row_seeds if samples else None, len(prompts), device)
    schedule = _Schedule.of(cfg, device, samples)
    pool = RowPool(network, cfg.cache, prompts, canvas, schedule.block_length, max_rows, cfg.dream.mask_id)

    def admit(i: int) -> FastRow:
        row = pool.admit(i, draws.of(i))
        schedule.start_block(row, 0)
        return row

    yield from fly(len(prompts), max_rows, admit, lambda rows: _advance(pool, rows, schedule),
                   lambda rows: pool.results(rows, cfg.dream.eos_ids))


FAST_DREAM = Decoder("dream-fastdllm", FastDreamConfig, fastdllm_dream_generate, fast_dream_at_canvas,
                     validate_fast_dream_config, stream=fastdllm_dream_stream, version=2)
