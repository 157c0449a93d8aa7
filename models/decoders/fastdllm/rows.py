"""Fast-dLLM (v1) rows in flight as batched work, the part its LLaDA and Dream streams share.

Each row runs its own blocks and steps (docs/decoders.md §4), so one round holds rows at different blocks and phases.
What a row is lives in two places:
- its control state on the host (``FastRow``: slot, block, step in the block, the plan its last read gave), plain
  ints a Python loop over the rows updates for free;
- its tokens on the device (``RowPool``): every row's canvas in one [slots, capacity] tensor indexed by slot (its
  prompt and canvas from column 0, mask ids after), the commit step of each position beside it, and in the cached
  modes one KV buffer of the same slots (``network.new_cache(slots, capacity)``), all allocated once per stream.

A round (``forward_rows``) is one call for every row without a cache; cached, one window call for the rows inside a
block and one full call for the rows at a block start (their shapes differ), each row in one of them. Each call's
inputs are gathered by one index built from the host ints, its rows' blocks come back as one [rows, block] tensor
with the logits scoring them (``Window``), the sampler applies its commit rule once over it, and ``RowPool.write``
scatters the new tokens and their commit steps back. A row at a block start refills its own slot of the cache with
its full forward (prefix: kept up to its block); a row inside a block writes its window over its slot (dual) or peeks
past its prefix (prefix, dropped after). Joining rows write their prompts into free slots, leaving rows give their
slot back: no op copies the cache or a canvas of a row that is not in the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from models.decoders.contract import DecodeResult, committed, read_rows
from models.decoders.fastdllm.core import CACHE_MODES, Network
from models.decoders.flight import took_part
from models.decoders.sampling import as_logits, logits_at
from models.networks.kv_buffer import SlotPool


@dataclass
class FastRow:
    """One prompt in flight, on the host: its slot in the pool, its prompt and width (prompt + canvas: the columns of
    its slot it owns), its block [start, end) and its step in it (0: the block's full forward, which refills the
    row's cache; later: window forwards against it), the plan its last read gave its next step (Dream: masks left
    and the step's count), its generator, and what it cost (``took_part``)."""

    index: int
    slot: int
    prompt_len: int
    width: int
    generator: torch.Generator | None
    block: int = 0
    step: int = 0
    start: int = 0
    end: int = 0
    plan: tuple[int, int] = (0, 0)
    share: float = 0.0
    forwards: int = 0


@dataclass(frozen=True)
class Window:
    """One call's rows (in slot order) and what their step reads: each row's slot, its block of the canvas
    (``columns`` [n, L]: start .. start + L - 1), its forward count (``stamps``, what its commits are stamped with),
    its tokens before the step (``block``), the logits scoring its first K columns (``logits`` [n, K, V]; Dream's
    shifted ones), and the per-row ints the sampler asked for (``ints`` [k, n]: its counts, its time step), all the
    ints sent in one transfer. ``opening``: the call is the rows' full forward at a block start in a cached mode."""

    rows: list[FastRow]
    slots: torch.Tensor
    columns: torch.Tensor
    stamps: torch.Tensor
    ints: torch.Tensor
    block: torch.Tensor
    logits: torch.Tensor
    opening: bool


class RowPool:
    """The device state of a stream's rows in flight, allocated once (see the module docstring). ``fill`` is the
    mask id (the value past each row's width, which its key mask hides); ``block_length`` the columns a step
    commits in (Dream without a cache: the whole canvas). The prefix mode's canvas and cache are one canvas wider
    than the widest row, for the right-padded windows that run from a block to the row's end."""

    def __init__(self, network: Network, mode: str, prompts: Sequence[torch.Tensor], canvas: int, block_length: int,
                 max_rows: int, fill: int) -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"unknown cache mode {mode!r}; valid: {', '.join(CACHE_MODES)}")
        device = prompts[0].device
        slots = min(max_rows, len(prompts))
        self.network, self.mode, self.canvas_length, self.block_length, self.fill = \
            network, mode, canvas, block_length, fill
        self.reads_cells = bool(getattr(network, "reads_cells", False))  # ``forward(read=)``: the head at cells
        self.prompt_lengths = [len(p) for p in prompts]
        self.widest = max(self.prompt_lengths) + canvas
        capacity = self.widest + (canvas if mode == "prefix" else 0)
        self.prompts = pad_sequence(list(prompts), batch_first=True, padding_value=fill)  # [prompts, longest]
        self.canvas = torch.full((slots, capacity), fill, dtype=torch.long, device=device)
        self.steps = torch.zeros_like(self.canvas)  # each position's commit step, in its row's own forward count
        self.cache = None if mode == "none" else network.new_cache(slots, capacity)
        self.span = torch.arange(capacity, device=device)
        self.free = SlotPool(slots)
        self.joining: list[FastRow] = []

    def admit(self, index: int, generator: torch.Generator | None) -> FastRow:
        """Prompt ``index``'s row in the lowest free slot; its prompt is written there before the next call."""
        prompt_len = self.prompt_lengths[index]
        row = FastRow(index, self.free.take(), prompt_len, prompt_len + self.canvas_length, generator)
        self.joining.append(row)
        return row

    def join(self) -> None:
        """The rows admitted since the last call: their slots hold their prompts then mask ids, no commit step."""
        if not self.joining:
            return
        slots, prompts = torch.tensor([[row.slot for row in self.joining], [row.index for row in self.joining]],
                                      device=self.canvas.device)
        self.canvas.index_fill_(0, slots, self.fill)
        self.canvas[:, :self.prompts.shape[1]].index_copy_(0, slots, self.prompts.index_select(0, prompts))
        self.steps.index_fill_(0, slots, 0)
        self.joining = []

    def leave(self, rows: Sequence[FastRow]) -> None:
        """Finished rows give their slots back (read them with ``results`` before the next round admits)."""
        for row in rows:
            self.free.give(row.slot)

    def results(self, rows: Sequence[FastRow], eos_ids: Sequence[int]) -> list[DecodeResult]:
        """Finished rows' canvases past their prompts, cut after the first end of sequence, with their commit steps:
        all of them read back in one transfer."""
        slots = torch.tensor([row.slot for row in rows], device=self.canvas.device)
        ids, steps = read_rows(self.canvas[:, :self.widest].index_select(0, slots),
                               self.steps[:, :self.widest].index_select(0, slots))
        return [DecodeResult(nfe=row.share, forwards=row.forwards,
                             **committed(i[row.prompt_len:row.width], s[row.prompt_len:row.width], eos_ids))
                for row, i, s in zip(rows, ids, steps)]

    def write(self, window: Window, new: torch.Tensor) -> None:
        """The rows' blocks become ``new`` [n, L]; what changes is stamped with each row's forward count."""
        index = (window.slots[:, None], window.columns)
        self.steps[index] = torch.where(new != window.block, window.stamps[:, None], self.steps[index])
        self.canvas[index] = new

    # ---- calls ----------------------------------------------------------------------------------------------------

    def _key_mask(self, widths: torch.Tensor, known: list[int], key_len: int) -> torch.Tensor | None:
        """[n, key_len] 1 on each row's own columns (its width; right padding or free columns after), or None when
        every row owns every key."""
        if min(known) >= key_len:
            return None
        return (self.span[:key_len] < widths[:, None]).long()

    def call(self, rows: list[FastRow], opening: bool, shift: bool, scored: int,
             ints: Callable[[FastRow], Sequence[int]]) -> Window:
        """One forward of ``rows`` (a full forward when ``opening`` or without a cache, else the mode's window) and
        their blocks. ``shift``: Dream's logits (position i scored by the output at i - 1; a call's first column by
        its own). ``scored``: how many of each block's first columns the step reads: the LM head runs at those cells
        alone where the network can (``reads_cells``), so no call holds [rows, canvas, vocab] logits."""
        rows = sorted(rows, key=lambda row: row.slot)  # consecutive ascending slots: the cache part is a view
        took_part(rows)
        extra = [list(ints(row)) for row in rows]
        meta = torch.tensor([[row.slot for row in rows], [row.start for row in rows], [row.width for row in rows],
                             [row.forwards for row in rows], *zip(*extra)], dtype=torch.long,
                            device=self.canvas.device)
        slots, starts, widths = meta[0], meta[1], meta[2]
        known = [row.width for row in rows]
        length = rows[0].end - rows[0].start
        columns = starts[:, None] + self.span[:length]
        full = self.mode == "none" or opening
        # the cells read, as call columns: a full call's are the blocks' own, a window's start at its column 0;
        # a shifted read takes the column before (a call's first column scores itself)
        read = (columns if full else self.span[:length].expand(len(rows), -1))[:, :scored]
        read = (read - 1).clamp_min(0) if shift else read
        if full:
            logits, block = self._full(rows, slots, widths, known, read)
            block = block.gather(1, columns)
        else:
            logits, block = self._window(rows, slots, starts, widths, known, length, read)
        return Window(rows, slots, columns, meta[3], meta[4:], block, logits, opening and self.mode != "none")

    def _logits(self, ids: torch.Tensor, read: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """[n, k, V]: the network's logits of ``ids`` [n, w] at the call columns ``read`` [n, k] of each row
        (``sampling.logits_at``)."""
        def forward(cells: torch.Tensor | None) -> torch.Tensor:
            return as_logits(self.network(ids, **kwargs) if cells is None else self.network(ids, read=cells, **kwargs))
        return logits_at(forward, read, ids.shape[1], self.reads_cells)

    def _full(self, rows: list[FastRow], slots: torch.Tensor, widths: torch.Tensor, known: list[int],
              read: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits at ``read`` of every column of ``rows`` (right-padded to the widest) and the rows' ids; cached,
        each row's slot refilled from column 0 (prefix: kept up to its block)."""
        width = max(known)
        ids = self.canvas[:, :width].index_select(0, slots)
        mask = self._key_mask(widths, known, width)
        if self.cache is None:
            return self._logits(ids, read, attention_mask=mask), ids
        with self.cache.at([row.slot for row in rows]) as part:
            part.truncate_all(0)
            logits = self._logits(ids, read, attention_mask=mask, cache=part, reservation=part.reserve(width))
            for b, row in enumerate(rows):
                part.truncate(b, row.start if self.mode == "prefix" else row.width)
        return logits, ids

    def _window(self, rows: list[FastRow], slots: torch.Tensor, starts: torch.Tensor, widths: torch.Tensor,
                known: list[int], length: int, read: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits at ``read`` of the window of every row, its query j at column ``start + j``, and the rows'
        blocks: dual, the block written over its slot's columns against the whole cache; prefix, the block and all
        after it (right-padded) against the cached prefix, their K/V dropped after."""
        with self.cache.at([row.slot for row in rows]) as part:
            if self.mode == "dual":
                ids = self.canvas[slots[:, None], starts[:, None] + self.span[:length]]
                plan = part.overwrite([row.start for row in rows], length)
                mask = self._key_mask(widths, known, plan.key_len)
                return self._logits(ids, read, attention_mask=mask, cache=part, reservation=plan), ids
            queries = max(row.width - row.start for row in rows)
            ids = self.canvas[slots[:, None], starts[:, None] + self.span[:queries]]
            with part.claim(queries, keep=0) as plan:
                mask = self._key_mask(widths, known, plan.key_len)
                logits = self._logits(ids, read, attention_mask=mask, cache=part, reservation=plan)
            return logits, ids[:, :length]


def forward_rows(pool: RowPool, rows: list[FastRow], shift: bool, opening_scored: int,
                 ints: Callable[[FastRow], Sequence[int]] = lambda row: ()) -> list[Window]:
    """This round's calls: without a cache one of every row; cached, one window call for the rows inside a block and
    one full call for the rows at a block start (their call shapes differ), each row in one of them. The block
    start's call keeps the logits of ``opening_scored`` columns (Dream's forced first token reads one)."""
    pool.join()
    length = pool.block_length
    if pool.mode == "none":
        return [pool.call(rows, False, shift, length, ints)]
    inside, starting = [row for row in rows if row.step > 0], [row for row in rows if row.step == 0]
    calls = [pool.call(inside, False, shift, length, ints)] if inside else []
    return calls + ([pool.call(starting, True, shift, opening_scored, ints)] if starting else [])


def masks_left(windows: list[Window], news: list[torch.Tensor], fill: int) -> tuple[list[FastRow], torch.Tensor]:
    """The rows of this round's calls in order and each one's masks left in its block after the step (one [rows]
    tensor, for the round's one read)."""
    rows = [row for window in windows for row in window.rows]
    return rows, torch.cat([(new == fill).sum(dim=1) for new in news])


def row_by_row(step: Callable[..., torch.Tensor], window: Window, tensors: tuple[torch.Tensor, ...],
               args: Callable[[FastRow], tuple[Any, ...]]) -> torch.Tensor:
    """``step(*row's slices of tensors, *args(row), row.generator)`` for each row of a sampling call, stacked: each
    row draws from its own generator what it draws alone (torch has no batched generators)."""
    return torch.cat([step(*(t[b:b + 1] for t in tensors), *args(row), row.generator)
                      for b, row in enumerate(window.rows)])
