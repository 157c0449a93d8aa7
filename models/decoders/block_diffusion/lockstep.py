"""Block diffusion with exact KV reuse (SDAR/TraDo, Fast-dLLM v2, LLaDA2), a static batch in lockstep: blocks decoded
in parallel, left to right.

The sequence is cut into blocks of ``block_length`` at absolute positions 0, B, 2B, ...; attention is block-causal
(bidirectional inside a block), so a finished block's K/V never change and are written once. Per block:

1. the block is filled with masks (the prompt's tail shares the first decode block with them);
2. *peek*: forward the block alone against the cache without writing it, turn logits into proposals (``propose``)
   and commit some masks by the configured rule (``commit_rule``); repeat while masks remain;
3. *commit*: one forward of the finished block that writes its K/V (its last logit may give the next block's first
   token, Fast-dLLM v2's one AR step); a row stops after a block that holds an end-of-sequence id.

The config's choices come resolved once per decode, a ``BlockStrategy`` (``strategy``): the window, how a finished
block reaches the cache, how positions are scored, when a row stops, and token editing. The prompt's whole blocks
are prefilled in one forward first. With fused cache writes (``fused_commit``: LLaDA2, whose published ``generate``
recomputes the whole prefix every step) there is no prefill or commit forward of its own: a block's first peek
carries the blocks not yet written and writes them, so every forward is one of the reference's steps.
The rows of a batch run in lockstep on absolute blocks, as the published batched code runs them (each row's prompt
starts at column 0, so every row holds the same number of cached entries): a row whose prompt still covers the
current block, or whose masks are all filled, idles through the batch's peeks, which leave its cache untouched, so
its tokens are those it gets alone. Finished rows leave the batch and the cache. Rows in flight, each on its own
schedule, are ``stream``'s. Commit steps are stamped in the batch's count of forwards on the device and turned into
each row's own count at the end, from the forwards the host knows each row takes alone: not the peeks it idles
through, nor the writes of its prompt's blocks after the first (alone they are its one prefill).

On an accelerator every read of a device value by the host waits for the queue to drain, so the host tracks what
it can and reads the rest once where it must decide: the prompt lengths and each window's (sub-block's) masks at
the start; after each step, each row's masks left in the window (not for the static rule, whose count the host
knows; with LLaDA2's early stop the same read names the rows that stopped); after each block, which rows hold an end
of sequence; after a commit pass that set the next block's first token, that window's masks. The positions go to
``block_forward`` as a range, so the network knows on the host whether its entries lie in one block.

The network is any module with ``new_cache(batch, capacity)`` and ``block_forward(ids, position_ids, cache,
block_length, write)``, ``position_ids`` a range of the columns every row shares (the native Qwen3, Qwen2 and LLaDA2
networks; docs/networks.md). docs/decoders.md describes the rules and where they depart from the published code.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from models.decoders.block_diffusion.rules import (completes_to_eos, edit_changes, masks_after_static, peek_window,
                                                   row_result, scheduled, transfer_schedule)
from models.decoders.block_diffusion.strategy import BlockDiffusionConfig, BlockStrategy, Editing, block_strategy
from models.decoders.contract import DecodeOutput, require_filled, write_tokens
from models.decoders.sampling import Draws, check_inputs


# ---- the decode -------------------------------------------------------------------------------------------------
@dataclass
class Rows:
    """The rows still decoding: their canvas [A, T] (prompt at column 0), prompt lengths, and on the host their last
    block index and each window's masks left (``masks_left[a][w]``, window w = columns [w * sub, (w + 1) * sub));
    where their random numbers come from, and which input row each is; on the device, each column's forward (in the
    batch's count) that last changed it, and its re-takes (token editing)."""

    canvas: torch.Tensor
    prompt_lengths: torch.Tensor
    last_block: list[int]
    masks_left: list[list[int]]
    draws: Draws
    origin: list[int]
    steps: torch.Tensor
    edits: torch.Tensor

    def keep(self, index: list[int], cache: Any) -> "Rows":
        """Only the rows at ``index``, in the cache too (the rest do no more work)."""
        cache.select_rows(index)
        draws = self.draws if self.draws.rows is None else Draws(None, tuple(self.draws.rows[i] for i in index))
        return Rows(self.canvas[index], self.prompt_lengths[index], [self.last_block[i] for i in index],
                    [self.masks_left[i] for i in index], draws, [self.origin[i] for i in index], self.steps[index],
                    self.edits[index])


def _right_align(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, total: int,
                 mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each left-padded prompt moved to column 0 of a [B, total] canvas of masks; and the prompt lengths."""
    batch, width = input_ids.shape
    lengths = (torch.full((batch,), width, device=input_ids.device) if attention_mask is None
               else attention_mask.sum(dim=1).to(torch.long))
    canvas = torch.full((batch, total), mask_id, dtype=torch.long, device=input_ids.device)
    columns = torch.arange(width, device=input_ids.device)[None]
    prompt = input_ids.gather(1, (columns + (width - lengths)[:, None]).clamp(max=width - 1))
    canvas[:, :width] = torch.where(columns < lengths[:, None], prompt, mask_id)
    return canvas, lengths


def _masks_per_window(canvas: torch.Tensor, mask_id: int, sub: int) -> list[list[int]]:
    """Each row's masks in each window of ``sub`` columns (one read)."""
    rows, width = canvas.shape
    return (canvas == mask_id).view(rows, width // sub, sub).sum(dim=-1).tolist()


@torch.no_grad()
def block_diffusion_generate(network: Any, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None,
                             cfg: BlockDiffusionConfig, row_seeds: Sequence[int] | None = None) -> DecodeOutput:
    """Generate ``gen_length`` tokens after each (left-padded) prompt, block by block; rows are cut after the first
    end-of-sequence id. With ``row_seeds`` a sampling config draws each row from its own generator, as alone."""
    require_filled(cfg, "block diffusion")
    strategy = block_strategy(cfg)
    check_inputs(input_ids, attention_mask)
    return _BlockDecode(network, input_ids, attention_mask, cfg, strategy, row_seeds).run()


class _BlockDecode:
    """One decode's state: the full canvas, the rows still running and their cache, the forwards spent."""

    def __init__(self, network: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 cfg: BlockDiffusionConfig, strategy: BlockStrategy, row_seeds: Sequence[int] | None) -> None:
        device = input_ids.device
        (n_rows, width), size, gen = input_ids.shape, cfg.block_length, cfg.gen_length
        canvas, self.lengths = _right_align(input_ids, attention_mask, width + gen + size, cfg.mask_id)
        self.host_lengths = [width] * n_rows if attention_mask is None else self.lengths.tolist()
        last_block = [(n + gen - 1) // size for n in self.host_lengths]  # every block up to the row's last token
        self.total = (max(last_block) + 1) * size
        self.sub = strategy.window
        self.canvas = canvas[:, :self.total].contiguous()
        draws = Draws.for_batch(cfg.seed, row_seeds if cfg.temperature > 0 else None, n_rows, device)
        masks_left = _masks_per_window(self.canvas, cfg.mask_id, self.sub)
        self.steps, self.edits = torch.zeros_like(self.canvas), torch.zeros_like(self.canvas)
        self.rows = Rows(self.canvas.clone(), self.lengths, last_block, masks_left, draws, list(range(n_rows)),
                         self.steps.clone(), self.edits.clone())
        self.network, self.cfg, self.strategy, self.device = network, cfg, strategy, device
        self.cache = network.new_cache(n_rows, self.total)
        self.eos = torch.tensor(cfg.eos_ids, device=device)
        self.schedule = transfer_schedule(size, cfg.denoising_steps)
        self.row_nfe = [0.0] * n_rows  # each row's share of the network calls
        self.row_forwards = [0] * n_rows  # the forwards each row took part in
        self.own: list[list[int]] = [[] for _ in range(n_rows)]  # the batch's forwards each row takes alone
        self.nfe = 0
        self.written = 0  # columns whose K/V are in the cache

    def run(self) -> DecodeOutput:
        cfg, size = self.cfg, self.cfg.block_length
        prefill = min(self.host_lengths) // size * size
        if prefill and self.strategy.cache_write != "fused":
            self.first_token(self.forward(0, prefill, write=True), prefill)
        for block in range(prefill // size, self.total // size):
            start, end = block * size, (block + 1) * size
            if self.decode_block(start, end) or self.finish_block(block, start, end):
                break
        return _output(self.canvas, self.steps, self.edits, self.own, self.lengths, cfg, self.strategy, self.nfe,
                       self.row_nfe, self.row_forwards)

    def forward(self, start: int, end: int, write: bool, alone: Sequence[bool] | None = None) -> torch.Tensor:
        """Logits of columns [start, end), their K/V kept if ``write``; with fused cache writes the call also feeds and
        writes the columns before ``start`` not written yet. ``alone`` (per row, None: every row): the rows that
        take this forward decoded alone, the forwards their commit steps count (``own``)."""
        self.nfe += 1
        for row, taken in zip(self.rows.origin, alone or [True] * len(self.rows.origin)):
            if taken:
                self.own[row].append(self.nfe)
        for row in self.rows.origin:
            self.row_nfe[row] += 1 / len(self.rows.origin)
            self.row_forwards[row] += 1
        low = self.written if self.strategy.cache_write == "fused" else start
        keep = (end if write else start) - low
        # every row's columns are its positions (prompts start at column 0): a range, so no read decides the mask
        logits = self.network.block_forward(self.rows.canvas[:, low:end], range(low, end), self.cache,
                                            self.cfg.block_length, keep)
        self.written = low + keep
        return logits[:, start - low:]

    def first_token(self, logits: torch.Tensor, column: int) -> None:
        """The next block's first token from this forward's last logit, for rows whose prompt ends before it. The
        argmax may be the mask id itself, so the window's masks are read back."""
        if self.strategy.scoring == "shifted" and column < self.total:
            rows, window = self.rows, column // self.sub  # column starts a block, so a window
            fill = rows.prompt_lengths <= column
            first = torch.where(fill, logits[:, -1].argmax(dim=-1), rows.canvas[:, column])
            write_tokens(rows.canvas, rows.steps, slice(column, column + 1), first[:, None], self.nfe)
            left = (rows.canvas[:, column:column + self.sub] == self.cfg.mask_id).sum(dim=1)
            for row_left, n in zip(rows.masks_left, left.tolist()):
                row_left[window] = n

    def finish_block(self, block: int, start: int, end: int) -> bool:
        """The block's commit forward (``BlockStrategy.commit_forward``), then the rows done leave: those past their
        last block, known on the host, and those whose block holds an end of sequence, read once (not at all when
        the host needs no answer). True when no row is left."""
        rows = self.rows
        generated = torch.arange(start, end, device=self.device)[None] >= rows.prompt_lengths[:, None]
        holds_eos = (torch.isin(rows.canvas[:, start:end], self.eos) & generated).any(dim=1)
        commit_waits = self.strategy.cache_write == "commit_while_running"  # the commit depends on the answer
        stopped = holds_eos.tolist() if commit_waits else None
        if self.strategy.commit_forward(commit_waits and all(stopped)):
            alone = [start == 0 or self.host_lengths[row] < end for row in rows.origin]  # a prompt's: its prefill's
            self.first_token(self.forward(start, end, write=True, alone=alone), end)
        done = [last <= block for last in rows.last_block]
        if not all(done):
            stopped = stopped if stopped is not None else holds_eos.tolist()
            done = [past or eos for past, eos in zip(done, stopped)]
        return self.stop(done)

    def stop(self, done: list[bool]) -> bool:
        """Rows that are done leave the batch (their tokens kept); True when none is left."""
        if not any(done):
            return False
        self.canvas[self.rows.origin] = self.rows.canvas
        self.steps[self.rows.origin], self.edits[self.rows.origin] = self.rows.steps, self.rows.edits
        if all(done):
            return True
        self.rows = self.rows.keep([row for row, gone in enumerate(done) if not gone], self.cache)
        return False

    def decode_block(self, start: int, end: int) -> bool:
        """Peek and commit until no row holds a mask in the block [start, end), window by window; True when an end
        of sequence has stopped every row mid-block."""
        cfg, strategy, step = self.cfg, self.strategy, 0
        if strategy.editing is not None:
            self.edit_block(strategy.editing, start, end)
            return False
        for low in range(start, end, self.sub):
            window = low // self.sub
            while any(row_left[window] for row_left in self.rows.masks_left):
                current = self.rows.canvas[:, low:low + self.sub]
                drawing = [row for row, row_left in enumerate(self.rows.masks_left) if row_left[window]]
                alone = [bool(row_left[window]) for row_left in self.rows.masks_left]  # the others idle through it
                updated, chosen, tokens = peek_window(cfg, strategy, self.forward(start, end, write=False, alone=alone),
                                                      current, low - start, scheduled(step, self.schedule),
                                                      self.rows.draws, drawing)
                write_tokens(self.rows.canvas, self.rows.steps, slice(low, low + self.sub), updated, self.nfe)
                stopped = None
                if strategy.stop == "eos_filled":
                    stopped = completes_to_eos(self.rows.canvas[:, :end], self.rows.prompt_lengths, self.eos,
                                               cfg.mask_id, chosen & torch.isin(tokens, self.eos))
                if self.count_masks(window, step, updated, stopped):
                    return True
                step += 1
        return False

    def count_masks(self, window: int, step: int, updated: torch.Tensor, stopped: torch.Tensor | None) -> bool:
        """Each row's masks left in ``window`` (now ``updated``) after ``step``. The static rule's are known on the
        host (``masks_after_static``); any other rule's are read, in the same read as the rows ``stopped`` mid-block
        (read as -1), which leave. True when every row has stopped."""
        cfg, rows = self.cfg, self.rows
        if self.strategy.masks_known and stopped is None:
            for row_left in rows.masks_left:
                row_left[window] = masks_after_static(row_left[window], step, self.schedule)
            return False
        left = (updated == cfg.mask_id).sum(dim=1)
        counts = (left if stopped is None else torch.where(stopped, -1, left)).tolist()
        for row_left, n in zip(rows.masks_left, counts):
            row_left[window] = n
        return self.stop([n < 0 for n in counts])

    def edit_block(self, editing: Editing, start: int, end: int) -> None:
        """LLaDA2.1's joint threshold (mask-to-token and token-to-token, as SGLang's ``JointThreshold`` runs it):
        each step fills masks by ``commit_rule`` and re-takes every generated token of the block whose proposal
        differs with confidence above ``editing.threshold``. A row is done when a step changes nothing, or after
        ``editing.max_post_steps`` steps with no mask left; which are is read once per step (alone, a row's block
        ends at the step that makes it done, so it takes no later step of the block as its own)."""
        cfg, rows = self.cfg, self.rows
        columns = torch.arange(start, end, device=self.device)[None]
        editable = columns >= rows.prompt_lengths[:, None]
        done = torch.zeros(len(rows.origin), dtype=torch.bool, device=self.device)
        post_steps = torch.zeros_like(done, dtype=torch.long)
        alone = [self.host_lengths[row] < end for row in rows.origin]  # alone, a row runs no block of its prompt
        for step in range(cfg.block_length + editing.max_post_steps):
            current = rows.canvas[:, start:end]
            tokens, change = edit_changes(cfg, editing, self.forward(start, end, write=False, alone=alone), current,
                                          editable, scheduled(step, self.schedule))
            filled = ~(current == cfg.mask_id).any(dim=1)
            post_steps += (filled & ~done).long()
            done |= filled & (post_steps > editing.max_post_steps)
            change &= ~done[:, None]
            done |= ~change.any(dim=1)
            rows.edits[:, start:end] += change & (current != cfg.mask_id)
            write_tokens(rows.canvas, rows.steps, slice(start, end), torch.where(change, tokens, current), self.nfe)
            finished = done.tolist()
            if all(finished):
                return
            alone = [taken and not gone for taken, gone in zip(alone, finished)]


def _output(canvas: torch.Tensor, steps: torch.Tensor, edits: torch.Tensor, own: list[list[int]],
            lengths: torch.Tensor, cfg: BlockDiffusionConfig, strategy: BlockStrategy, nfe: int,
            row_nfe: list[float], row_forwards: list[int]) -> DecodeOutput:
    """Each row's ``gen`` tokens after its prompt, cut after the first end-of-sequence id, with their commit steps
    (all read in one transfer) turned from the batch's count into the row's ``own``."""
    columns = lengths[:, None] + torch.arange(cfg.gen_length, device=canvas.device)[None]
    tokens = canvas.gather(1, columns)
    read = torch.stack([tokens, steps.gather(1, columns), edits.gather(1, columns)]).tolist()
    results = tuple(row_result(ids, [bisect.bisect_right(taken, g) for g in at], re_takes, cfg, strategy, spent,
                               forwards)
                    for ids, at, re_takes, taken, spent, forwards in zip(*read, own, row_nfe, row_forwards))
    return DecodeOutput(rows=results, nfe=nfe, tokens=tokens)
