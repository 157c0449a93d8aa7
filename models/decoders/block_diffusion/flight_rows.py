"""Rows in flight, the host's half: each row's control state as plain ints (phase, block, window, step of its
block's schedule, masks left per window, cache columns written) and the call it makes next, advanced once a round
from what the round's one read says of every row. ``stream`` runs the device half over all rows at once.

A row walks its prompt's decode alone, as ``lockstep`` runs one row: the prompt's whole blocks in one prefill (unless
the cache writes are fused), then per block peeks window by window while the window holds a mask, then the block's
commit forward where ``BlockStrategy.commit_forward`` says; it stops after a block holding an end of sequence, after
its last block, or (``eos_filled``) at the step that completes one. With token editing a block's steps run until one
changes nothing, or past ``max_post_steps`` once no mask is left. With fused cache writes a block's first peek also
feeds and writes the columns not yet written (the prompt's whole blocks, or the block before), and no commit
forward runs. The static rule's masks left are known on the host (``masks_after_static``); every other answer a
row's next call depends on comes from the device (``Answer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from models.decoders.block_diffusion.rules import masks_after_static, scheduled, transfer_schedule
from models.decoders.block_diffusion.strategy import BlockDiffusionConfig, BlockStrategy

Phase = Literal["prefill", "peek", "commit", "done"]  # peek: a step of the commit rule, or of token editing


def canvas_width(prompt_length: int, cfg: BlockDiffusionConfig) -> int:
    """Columns of a row's canvas: every block up to the one holding its last generated token."""
    return ((prompt_length + cfg.gen_length - 1) // cfg.block_length + 1) * cfg.block_length


@dataclass(frozen=True)
class Call:
    """One row's part of a forward: its canvas columns ``low .. low + width``, the first ``keep`` of them written."""

    low: int
    width: int
    keep: int


@dataclass(frozen=True)
class Answer:
    """What the device says of a row after its forward. A peek: masks ``left`` in its window, whether it ``stopped``
    (an end of sequence completed, ``eos_filled``), whether its block ``holds_eos`` (generated columns); an editing
    step: whether the block is done (``stopped``), whether it held no mask before the step (``filled``). A prefill
    or commit whose last logit set the next block's first token: that ``token``."""

    left: int = 0
    stopped: bool = False
    holds_eos: bool = False
    filled: bool = False
    token: int | None = None


@dataclass
class FlightRow:
    """A row in flight: its prompt's index, its slot in the pool, its prompt length and canvas width; its control
    state; its share of the forwards it took part in and their count (its commit steps' clock)."""

    index: int
    slot: int
    prompt_length: int
    width: int
    masks: list[int]  # per window of ``sub`` columns, the masks left
    phase: Phase = "prefill"
    block: int = 0
    window: int = 0
    step: int = 0  # the block's steps so far (its schedule's clock; not reset per window)
    post: int = 0  # editing: steps that found the block without a mask
    written: int = 0  # fused: the columns whose K/V the cache holds
    last_commit: bool = False  # the commit forward under way is the row's last
    share: float = 0.0
    forwards: int = 0


class Walk:
    """The rules every row of a stream follows (its config and strategy), as host-side transitions of a row. Its
    numbers are plain attributes: a round asks them of every row."""

    def __init__(self, cfg: BlockDiffusionConfig, strategy: BlockStrategy) -> None:
        self.cfg, self.strategy = cfg, strategy
        self.schedule = tuple(transfer_schedule(cfg.block_length, cfg.denoising_steps))
        self.size, self.sub = cfg.block_length, strategy.window
        self.fused, self.shifted = strategy.cache_write == "fused", strategy.scoring == "shifted"

    def start(self, index: int, slot: int, prompt_length: int) -> FlightRow:
        """A joining row: its prefill first, or (fused, or a prompt shorter than a block) its first block."""
        width, sub = canvas_width(prompt_length, self.cfg), self.sub
        masks = [min(sub, max(0, (w + 1) * sub - prompt_length)) for w in range(width // sub)]
        row = FlightRow(index, slot, prompt_length, width, masks)
        if prompt_length < self.size or self.fused:
            self.begin_block(row, prompt_length // self.size, False)
        return row

    def bounds(self, row: FlightRow) -> tuple[int, int]:
        """The columns [start, end) of the row's block."""
        return row.block * self.size, (row.block + 1) * self.size

    def call(self, row: FlightRow) -> Call:
        """The columns the row's next forward feeds and writes."""
        if row.phase == "prefill":
            whole = row.prompt_length // self.size * self.size
            return Call(0, whole, whole)
        start, end = self.bounds(row)
        if row.phase == "commit":
            return Call(start, self.size, self.size)
        low = row.written if self.fused else start
        return Call(low, end - low, start - low)

    def first_token_column(self, row: FlightRow) -> int | None:
        """Where the row's prefill or commit sets the next block's first token from its last logit (shifted scoring,
        a prompt ending at that column or before it); None when it sets none."""
        if not self.shifted or row.phase == "peek":
            return None
        column = row.prompt_length // self.size * self.size if row.phase == "prefill" else (row.block + 1) * self.size
        return column if row.prompt_length <= column < row.width else None

    def want(self, row: FlightRow) -> int:
        """The schedule's count for the row's next step."""
        return scheduled(row.step, self.schedule)

    def window_logits(self, row: FlightRow, call: Call) -> tuple[int, int]:
        """Where a peek's window finds its logits in its ``call``: column ``a + max(b + j, 0)`` for window position j
        (the block starts at call column ``a``; a shifted window reads one column before its own, the block's first
        reading its own)."""
        start = row.block * self.size
        offset = row.window * self.sub - start
        return start - call.low, offset - 1 if self.shifted else offset

    def knows(self, row: FlightRow) -> bool:
        """Whether the host decides the row's next call without an answer from the device: a static rule's peek
        that leaves a mask in the block, a prefill or commit that sets no first token."""
        if row.phase != "peek":
            return self.first_token_column(row) is None
        if not self.strategy.masks_known or self.strategy.stop == "eos_filled" or self.strategy.editing is not None:
            return False
        left = masks_after_static(row.masks[row.window], row.step, self.schedule)
        return left > 0 or any(row.masks[row.window + 1:self.window_stop(row)])

    def known_answer(self, row: FlightRow) -> Answer:
        """The answer the host knows (``knows``): a static peek's masks left."""
        if row.phase == "peek":
            return Answer(left=masks_after_static(row.masks[row.window], row.step, self.schedule))
        return Answer()

    # ---- transitions ------------------------------------------------------------------------------------------
    def advance(self, row: FlightRow, answer: Answer) -> None:
        """The row after the forward it took part in, given what the device says of it."""
        if row.phase == "prefill":
            self.first_token(row, answer.token)
            self.begin_block(row, row.prompt_length // self.size, self.is_eos(answer.token))
        elif row.phase == "commit":
            self.first_token(row, answer.token)
            if row.last_commit:
                row.phase = "done"
            else:
                self.begin_block(row, row.block + 1, self.is_eos(answer.token))
        elif self.strategy.editing is not None:
            self.after_edit(row, answer)
        else:
            self.after_peek(row, answer)

    def first_token(self, row: FlightRow, token: int | None) -> None:
        if token is not None:
            column = self.first_token_column(row)
            row.masks[column // self.sub] = self.sub - (token != self.cfg.mask_id)

    def is_eos(self, token: int | None) -> bool:
        return token is not None and token in self.cfg.eos_ids

    def after_peek(self, row: FlightRow, answer: Answer) -> None:
        row.written = self.bounds(row)[0]  # fused: the peek wrote what lay before its block
        if answer.stopped:
            row.phase = "done"
            return
        row.masks[row.window] = answer.left
        row.step += 1
        if not self.next_window(row):
            self.end_block(row, answer.holds_eos)

    def after_edit(self, row: FlightRow, answer: Answer) -> None:
        row.written = self.bounds(row)[0]
        row.post += answer.filled
        row.step += 1
        if answer.stopped or row.step == self.size + self.strategy.editing.max_post_steps:
            self.end_block(row, answer.holds_eos)

    def window_stop(self, row: FlightRow) -> int:
        """The first window past the row's block."""
        return (row.block + 1) * self.size // self.sub

    def next_window(self, row: FlightRow) -> bool:
        """Move to the first window of the block, from the current one, that holds a mask; False when none does."""
        stop = self.window_stop(row)
        while row.window < stop and not row.masks[row.window]:
            row.window += 1
        return row.window < stop

    def begin_block(self, row: FlightRow, block: int, filled_eos: bool) -> None:
        """Peek block ``block`` (its first window holding a mask); a block its first token filled whole (blocks of
        one column) ends at once, holding an end of sequence if ``filled_eos``."""
        row.phase, row.block, row.step, row.post = "peek", block, 0, 0
        row.window = block * self.size // self.sub
        if self.strategy.editing is None and not self.next_window(row):
            self.end_block(row, filled_eos)

    def end_block(self, row: FlightRow, holds_eos: bool) -> None:
        """A finished block: its commit forward, or the next block, or the row is done."""
        last = (row.block + 1) * self.size >= row.width
        if self.strategy.commit_forward(every_row_stopped=holds_eos):
            row.phase, row.last_commit = "commit", holds_eos or last
        elif holds_eos or last:
            row.phase = "done"
        else:
            self.begin_block(row, row.block + 1, False)
