"""LLaDA's sampler: semi-autoregressive blocks of masked diffusion with low-confidence or random remasking.

Follows ML-GSAI/LLaDA ``generate.py`` (docs/decoders.md §2): the full sequence is run every step with no cache, the
token at position i is scored by the logits at i (no shift), and each block commits a fixed number of tokens per step.
``llada_stream`` runs rows in flight: each row the same steps on its own sequence, the rows in one forward per step
and one batched commit over their blocks, their tokens in a slot pool on the device (``canvas_pool``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Sequence, get_args

import torch
import torch.nn.functional as F

from models.decoders.contract import (ConfigError, DecodeOutput, Decoder, Step, canvas_field, output_from_tokens,
                                      require_filled, token_id_field, write_tokens)
from models.decoders.canvas_pool import CanvasPool
from models.decoders.flight import fly, took_part
from models.decoders.sampling import (Draws, add_gumbel_noise, as_logits, check_inputs, host_ints, llada_step_counts,
                                      logits_at, row_starts, top_counts)

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
    read: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits for x; with CFG one doubled batch whose second half has the prompt masked: u + (s+1)(c - u). With
    ``read`` (flat cells of x) only those cells' logits, [M, V], the network's head computed there alone."""
    at = {} if read is None else {"read": read}
    if cfg.cfg_scale <= 0:
        return as_logits(network(x, attention_mask=attention_mask, **at))
    unconditional = x.masked_fill(prompt_index, cfg.mask_id)
    both = torch.cat([x, unconditional], dim=0)
    mask = None if attention_mask is None else torch.cat([attention_mask, attention_mask], dim=0)
    if read is not None:
        at = {"read": torch.cat([read, read + x.numel()])}
    conditional_logits, unconditional_logits = torch.chunk(as_logits(network(both, attention_mask=mask, **at)), 2,
                                                           dim=0)
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


def _window_proposals(logits: torch.Tensor, cfg: LLaDAConfig, generator: torch.Generator | None, length: int,
                      first: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``_proposals_and_confidence`` from the logits of a window alone ([B, w, V]: columns first .. first+w-1 of rows
    of ``length`` columns): the same values, and the same draws (B is then 1). At T > 0 the Gumbel noise is drawn
    over the whole row, [B, length, V] as the reference draws it, and the window's part used: the random stream
    stays the reference's, one row's noise alive at a time (elementwise, so the window's values are the full ones);
    random remasking draws one number per position of the row."""
    window = slice(first, first + logits.shape[1])
    scored = _suppress(logits, [cfg.eos_id]) if cfg.logits_eos_inf else logits
    noised = scored
    if cfg.temperature > 0:
        shape = (scored.shape[0], length, scored.shape[-1])
        noise = torch.rand(shape, dtype=torch.float64, device=scored.device, generator=generator)[:, window]
        noised = scored.to(torch.float64).exp() / (-torch.log(noise)) ** cfg.temperature
    x0 = torch.argmax(noised, dim=-1)
    if cfg.confidence_eos_eot_inf:
        scored = _suppress(scored, [cfg.eot_id, cfg.eos_id] if cfg.temperature == 0 else [cfg.eot_id])
    if cfg.remasking == "low_confidence":
        return x0, torch.gather(F.softmax(scored, dim=-1), -1, x0.unsqueeze(-1)).squeeze(-1)
    return x0, torch.rand((x0.shape[0], length), device=x0.device, generator=generator)[:, window]


@dataclass
class _Row:
    """One prompt in flight, its control state on the host (its tokens are in the stream's ``CanvasPool``): its slot,
    the steps it has taken, the first column its current block can commit, and its generator."""

    index: int
    slot: int
    prompt_len: int
    generator: torch.Generator | None
    first: int = 0  # the first column the current block can commit (``_first_open_column``), set as a block starts
    taken: int = 0
    share: float = 0.0
    forwards: int = 0


@dataclass(frozen=True)
class _Flight:
    """What every round of a stream shares: the network, the settings, the rows' tokens and, with CFG, each prompt's
    own tokens (what the unconditional row masks)."""

    network: Network
    cfg: LLaDAConfig
    pool: CanvasPool
    prompt_index: torch.Tensor | None  # [prompts, width] bool, with CFG only
    reads_cells: bool  # the network runs its LM head at given cells (``forward(read=)``)
    samples: bool  # draws (T > 0 or random remasking): each row's proposals row by row
    steps_per_block: int
    counts: list[int]  # each step's commits, the same in every block (llada_step_counts)

    def block_start(self, row: _Row) -> int:
        return row.prompt_len + row.taken // self.steps_per_block * self.cfg.block_length

    def open_blocks(self, rows: list[_Row]) -> None:
        """Each row starting a block gets its first open column (``_first_open_column`` on its own sequence); the
        rows starting one are read back together, in one transfer."""
        starting = [row for row in rows if row.taken % self.steps_per_block == 0]
        if not starting:
            return
        x = self.pool.x
        at = host_ints([[row.slot, self.block_start(row)] for row in starting], x.device)
        before = torch.arange(x.shape[1], device=x.device) < at[:, 1:]
        earlier = (x.index_select(0, at[:, 0]) == self.cfg.mask_id) & before
        first = torch.where(earlier.any(dim=1), earlier.to(torch.uint8).argmax(dim=1), at[:, 1])
        for row, column in zip(starting, first.tolist()):
            row.first = column

    def logits(self, ids: torch.Tensor, attention_mask: torch.Tensor | None, prompts: torch.Tensor,
               cells: torch.Tensor) -> torch.Tensor:
        """[n, w, V]: the logits at each row's window ``cells`` [n, w] (CFG applied), the head computed at those
        cells alone when the network can, else gathered from the whole canvas's."""
        width = ids.shape[1]
        prompt_index = None if self.prompt_index is None else self.prompt_index.index_select(0, prompts)[:, :width]
        return logits_at(lambda read: _forward(self.network, ids, attention_mask, prompt_index, self.cfg, read),
                         cells, width, self.reads_cells)

    def drawn(self, rows: list[_Row], logits: torch.Tensor, widths: list[int],
              windows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Proposals and confidences [n, w] of sampling rows, row by row (one generator call per row: torch has no
        batched generators), each on its own window (the last ``windows[b]`` cells of its row of ``logits``) and
        drawing what it draws alone; cells outside a row's window get confidence -inf."""
        drawn = [_window_proposals(logits[b:b + 1, logits.shape[1] - w:], self.cfg, row.generator, width, row.first)
                 for b, (row, width, w) in enumerate(zip(rows, widths, windows))]
        x0 = torch.zeros(logits.shape[:2], dtype=torch.long, device=logits.device)
        confidence = torch.full(logits.shape[:2], float("-inf"), dtype=drawn[0][1].dtype, device=logits.device)
        for b, ((row_x0, row_confidence), w) in enumerate(zip(drawn, windows)):
            x0[b, x0.shape[1] - w:], confidence[b, x0.shape[1] - w:] = row_x0[0], row_confidence[0]
        return x0, confidence

    def advance(self, rows: list[_Row]) -> list[bool]:
        """One step of every row in one forward of them all, right-padded (each row at its own columns, so its own
        positions), then one proposal, confidence and commit over every row's window [n, w] at once, rows at
        different blocks and steps in the same ops (each its own count: ``top_counts``); which rows are done."""
        cfg, pool, device = self.cfg, self.pool, self.pool.x.device
        pool.join()
        self.open_blocks(rows)
        widths = [row.prompt_len + cfg.gen_length for row in rows]
        ends = [self.block_start(row) + cfg.block_length for row in rows]
        width, window = max(widths), max(end - row.first for row, end in zip(rows, ends))
        exact = all(end - row.first == window for row, end in zip(rows, ends))  # every window exactly w wide
        at = host_ints([[row.slot, w, row.first, end, row.taken + 1, row.index]
                        for row, w, end in zip(rows, widths, ends)], device)
        ids = pool.ids([row.slot for row in rows], width, at[:, 0])
        attention_mask = None if min(widths) == width else torch.arange(width, device=device) < at[:, 1:2]
        cells = at[:, 3:4] - window + torch.arange(window, device=device)  # each row's window, right-aligned at its end
        valid = None if exact else cells >= at[:, 2:3]
        read = cells if valid is None else cells.clamp(min=0)
        logits = self.logits(ids, attention_mask, at[:, 5], read)
        took_part(rows)
        if self.samples:
            x0, confidence = self.drawn(rows, logits, widths, [end - row.first for row, end in zip(rows, ends)])
        else:
            x0, confidence = _window_proposals(logits, cfg, None, width, 0)
        old = ids.gather(1, read)
        open_masks = old == cfg.mask_id if valid is None else (old == cfg.mask_id) & valid
        scores = torch.full((len(rows), width + 1), float("-inf"), dtype=confidence.dtype, device=device)
        scatter_to = read if valid is None else torch.where(valid, cells, width)  # outside a window: the scratch column
        scores.scatter_(1, scatter_to, torch.where(open_masks, confidence, float("-inf")))
        counts = [self.counts[row.taken % self.steps_per_block] for row in rows]
        chosen = top_counts(scores[:, :width], counts, widths).gather(1, read) & open_masks
        write_to = read if valid is None else torch.where(valid, cells, pool.width)
        pool.write(at[:, 0], write_to, old, torch.where(chosen, x0, old), at[:, 4])
        for row in rows:
            row.taken += 1
        return [row.taken == cfg.steps for row in rows]


@torch.no_grad()
def llada_stream(network: Network, prompts: Sequence[torch.Tensor], cfg: LLaDAConfig, max_rows: int,
                 row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight (``Decoder.stream``): each prompt is its own sequence and schedule, every step runs the rows
    in flight in one forward and commits every row's block at once (``_Flight.advance``). A row finishes when its
    schedule is done (the whole canvas, as alone). Greedy, a round is a fixed set of ops whatever the number of rows
    (a few more for rows of mixed widths, and on the CPU one topk per width below 64 x count columns: ``top_counts``)
    and at most two host reads (the first open columns of rows starting a block, the finished rows' tokens). With
    ``row_seeds`` a sampling row draws from its own generator, row by row (torch has no batched generators), so its
    tokens and forwards are those it has alone (without, the rows share one generator seeded by ``cfg.seed``).

    Where the network can (``reads_cells``), its LM head runs at the rows' windows alone, and no tensor outside the
    network spans canvas x vocabulary except, at T > 0, one row's Gumbel noise at a time, drawn over its whole canvas
    so the random stream is the reference's. A row's tokens equal its decode alone by ``llada_generate`` (fp32,
    tested), the head's float rounding aside, as a batch's shapes already change the forward's."""
    require_filled(cfg, "llada")
    validate_llada_config(cfg)
    if not prompts:
        return
    samples = cfg.temperature > 0 or cfg.remasking == "random"
    draws = Draws.for_batch(cfg.seed, row_seeds if samples else None, len(prompts), prompts[0].device)
    pool = CanvasPool.build(prompts, cfg.gen_length, cfg.mask_id, min(max_rows, len(prompts)))
    prompt_index = None
    if cfg.cfg_scale > 0:
        lengths = torch.tensor(pool.lengths, device=pool.packed.device)
        prompt_index = (pool.packed != cfg.mask_id) & (torch.arange(pool.width, device=lengths.device)
                                                       < lengths[:, None])
    steps_per_block = cfg.steps // (cfg.gen_length // cfg.block_length)
    flight = _Flight(network, cfg, pool, prompt_index, bool(getattr(network, "reads_cells", False)), samples,
                     steps_per_block, llada_step_counts(cfg.block_length, steps_per_block))
    yield from fly(len(prompts), max_rows,
                   lambda i: _Row(i, pool.take(i), len(prompts[i]), draws.of(i) if samples else None),
                   flight.advance, lambda rows: pool.results(rows, [cfg.eos_id, cfg.eot_id]))


LLADA = Decoder("llada", LLaDAConfig, llada_generate, llada_at_canvas, validate_llada_config,
                stream=llada_stream, version=1)
