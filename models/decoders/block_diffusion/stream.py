"""Block diffusion with rows in flight: each prompt decodes as a program of its own, and one batched forward a round
runs every row.

A row's program (``row_decode``) is the decode of that prompt alone, written as the forwards it asks for: it yields
a ``Call`` (the columns it feeds, how many of them to write) and receives their logits. ``flight.fly`` keeps at most
``max_rows`` programs in flight; each round (``_Round``) feeds every pending call in one
``block_forward`` — rows at different blocks, peeking or committing, each at its own positions, right-padded to the
widest call (the pads lie in a later block, so no real entry sees them) with a write count per row — and sends each
program its logits. A prompt that takes a free row makes its first call (its prompt's whole blocks, or its first
peek) in a forward of its own, whose cache rows then join the others (``KVBuffer.admit``): its prefill does not widen
the running rows' forward. A row leaves the cache when its program returns.

Each row's program makes the calls, draws and commits the static batch makes for that prompt alone (``lockstep``,
the same rules from ``rules``, the same ``BlockStrategy``), so its tokens and forwards are the prompt's alone. With
fused cache writes (``fused_commit``) a block's first peek also writes the block before it (twice the width), and
the other rows of that forward are padded to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Iterator, Sequence

import torch

from models.decoders.block_diffusion.rules import (completes_to_eos, edit_changes, masks_after_static, peek_window,
                                                   row_result, transfer_schedule)
from models.decoders.block_diffusion.strategy import BlockDiffusionConfig, BlockStrategy, block_strategy
from models.decoders.contract import DecodeResult, Step, require_filled, write_tokens
from models.decoders.flight import drop_finished, fly, joined, took_part
from models.decoders.sampling import Draws, make_generator, row_generators


@dataclass(frozen=True)
class Call:
    """One row's part of a forward: its canvas columns ``low ..`` (``ids``), the first ``keep`` of them written."""

    ids: torch.Tensor  # [W] on the device
    low: int
    keep: int


RowProgram = Generator[Call, torch.Tensor, "Canvas"]  # sends the call's logits [W, vocab]; returns the row's canvas


@dataclass(frozen=True)
class Canvas:
    """A finished row past its prompt: per column its token, its commit step (the program's forward that last
    changed it) and how often a token editing step re-took it."""

    ids: list[int]
    steps: list[int]
    edits: list[int]


def canvas_width(prompt_length: int, cfg: BlockDiffusionConfig) -> int:
    """Columns of a row's canvas: every block up to the one holding its last generated token."""
    return ((prompt_length + cfg.gen_length - 1) // cfg.block_length + 1) * cfg.block_length


def row_decode(prompt: torch.Tensor, cfg: BlockDiffusionConfig, strategy: BlockStrategy, draws: Draws) -> RowProgram:
    """The decode of one prompt (1-D ids), as the calls it makes: prefill its whole blocks (unless the cache writes
    are fused), then per block peek and commit until no mask is left, window by window, and write the block; it stops
    after a block holding an end of sequence, or (``eos_filled``) as soon as everything up to one is filled. Returns
    the canvas past the prompt, each column's commit step in the program's count of forwards (``write_tokens``)."""
    size, sub, n = cfg.block_length, strategy.window, int(prompt.shape[0])
    fused = strategy.cache_write == "fused"
    device, schedule = prompt.device, transfer_schedule(cfg.block_length, cfg.denoising_steps)
    eos, lengths = torch.tensor(cfg.eos_ids, device=device), torch.tensor([n], device=device)
    width = canvas_width(n, cfg)
    canvas = torch.full((1, width), cfg.mask_id, dtype=torch.long, device=device)
    canvas[0, :n] = prompt
    steps, edited = torch.zeros_like(canvas), torch.zeros_like(canvas)
    masks_left = (canvas == cfg.mask_id).view(width // sub, sub).sum(dim=-1).tolist()
    forwards = 0

    def ask(call: Call) -> Generator[Call, torch.Tensor, torch.Tensor]:
        """One forward of ``call``, counted; its logits."""
        nonlocal forwards
        logits = yield call
        forwards += 1
        return logits

    def first_token(logits: torch.Tensor, column: int) -> None:
        """The next block's first token from the call's last logit, where the prompt ends at ``column``."""
        if strategy.scoring == "shifted" and column < width and n <= column:
            write_tokens(canvas, steps, slice(column, column + 1), logits[-1].argmax().view(1, 1), forwards)
            masks_left[column // sub] = int((canvas[0, column:column + sub] == cfg.mask_id).sum())

    def tokens() -> Canvas:
        return Canvas(*torch.stack([canvas, steps, edited])[:, 0, n:n + cfg.gen_length].tolist())

    prefill = n // size * size  # the prompt's whole blocks
    if prefill and not fused:
        first_token((yield from ask(Call(canvas[0, :prefill], 0, prefill))), prefill)
    written = 0  # fused: the columns whose K/V the cache holds (the next peek writes the rest)
    for block in range(n // size, width // size):
        start, end = block * size, (block + 1) * size

        def peek() -> Generator[Call, torch.Tensor, torch.Tensor]:
            """One peek of the block (fused: also writing what is not written yet); its logits."""
            nonlocal written
            low = written if fused else start
            logits = yield from ask(Call(canvas[0, low:end], low, start - low))
            written = start
            return logits[start - low:][None]

        if (editing := strategy.editing) is not None:
            editable, post_steps = (torch.arange(start, end, device=device) >= n)[None], 0
            for step in range(size + editing.max_post_steps):
                current = canvas[:, start:end]
                new, change = edit_changes(cfg, editing, (yield from peek()), current, editable, step, schedule)
                post_steps += not bool((current == cfg.mask_id).any())
                if post_steps > editing.max_post_steps or not bool(change.any()):
                    break
                edited[:, start:end] += change & (current != cfg.mask_id)
                write_tokens(canvas, steps, slice(start, end), torch.where(change, new, current), forwards)
        else:
            step = 0
            for low in range(start, end, sub):
                while masks_left[low // sub]:
                    updated, chosen, proposed = peek_window(cfg, strategy, (yield from peek()),
                                                            canvas[:, low:low + sub], low - start, step, schedule,
                                                            draws, (0,))
                    write_tokens(canvas, steps, slice(low, low + sub), updated, forwards)
                    if strategy.stop == "eos_filled" and bool(completes_to_eos(
                            canvas[:, :end], lengths, eos, cfg.mask_id, chosen & torch.isin(proposed, eos))):
                        return tokens()
                    masks_left[low // sub] = masks_after_static(masks_left[low // sub], step, schedule) \
                        if strategy.masks_known else int((updated == cfg.mask_id).sum())
                    step += 1
        holds_eos = bool(torch.isin(canvas[0, max(start, n):end], eos).any())
        if strategy.commit_forward(every_row_stopped=holds_eos):
            first_token((yield from ask(Call(canvas[0, start:end], start, size))), end)
        if holds_eos:
            break
    return tokens()


@dataclass
class _Flight:
    """A row in flight: its prompt's index, its program and the call it waits on; what it spent."""

    index: int
    program: RowProgram
    call: Call
    share: float = 0.0
    forwards: int = 0
    canvas: Canvas | None = field(default=None)


def _forward(network: Any, cache: Any, flights: list[_Flight], block_length: int, pad_id: int) -> None:
    """One forward of every flight's call, each program sent its logits (a program that returns is done)."""
    width = max(f.call.ids.shape[0] for f in flights)
    ids = torch.stack([torch.nn.functional.pad(f.call.ids, (0, width - f.call.ids.shape[0]), value=pad_id)
                       for f in flights])
    lows = [f.call.low for f in flights]
    if lows != cache.lengths:
        raise RuntimeError(f"rows feed columns {lows} but their caches hold {cache.lengths} entries")
    positions: torch.Tensor | range = range(lows[0], lows[0] + width) if len(set(lows)) == 1 else \
        torch.tensor(lows, device=ids.device)[:, None] + torch.arange(width, device=ids.device)
    keeps = [f.call.keep for f in flights]
    logits = network.block_forward(ids, positions, cache, block_length, keeps[0] if len(set(keeps)) == 1 else keeps)
    took_part(flights)
    for row, flight in enumerate(flights):
        try:
            flight.call = flight.program.send(logits[row, :flight.call.ids.shape[0]])
        except StopIteration as stop:
            flight.canvas = stop.value


class _Round:
    """The rows in flight's cache (in the rows' order) and one round over them: the running rows in one forward,
    the rows just admitted in a forward of their own, so a prefill does not widen the running rows' forward; their
    cache rows then join, and finished rows leave."""

    def __init__(self, network: Any, cfg: BlockDiffusionConfig, capacity: int) -> None:
        self.network, self.cfg, self.capacity, self.cache = network, cfg, capacity, None

    def __call__(self, flights: list[_Flight]) -> list[bool]:
        running = [f for f in flights if f.forwards]
        joining = flights[len(running):]
        if running:
            _forward(self.network, self.cache, running, self.cfg.block_length, self.cfg.mask_id)
        if joining:
            rows = self.network.new_cache(len(joining), self.capacity)
            _forward(self.network, rows, joining, self.cfg.block_length, self.cfg.mask_id)
            self.cache = joined(self.cache, rows)
        done = [f.canvas is not None for f in flights]
        drop_finished(self.cache, done)
        return done


@torch.no_grad()
def block_diffusion_stream(network: Any, prompts: Sequence[torch.Tensor], cfg: BlockDiffusionConfig, max_rows: int,
                           row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight (``Decoder.stream``): one ``Step`` per round, every row in flight advanced by one forward (the
    rows joining in a forward of their own). With ``row_seeds`` a sampling row draws from its own generator (its
    tokens alone); without, the rows share the config's seed."""
    require_filled(cfg, "block diffusion")
    strategy = block_strategy(cfg)
    if not prompts:
        return
    if min(int(p.shape[0]) for p in prompts) == 0:
        raise ValueError("block diffusion: every prompt needs at least one token")
    device = prompts[0].device
    generators = row_generators(row_seeds, len(prompts), device) if cfg.temperature > 0 else None
    shared = Draws(make_generator(cfg.seed, device), None)

    def admit(i: int) -> _Flight:
        program = row_decode(prompts[i], cfg, strategy,
                             shared if generators is None else Draws(None, (generators[i],)))
        return _Flight(i, program, next(program))

    capacity = max(canvas_width(int(p.shape[0]), cfg) for p in prompts) + cfg.block_length
    yield from fly(len(prompts), max_rows, admit, _Round(network, cfg, capacity),
                   lambda f: _result(f, cfg, strategy))


def _result(flight: _Flight, cfg: BlockDiffusionConfig, strategy: BlockStrategy) -> DecodeResult:
    return row_result(flight.canvas.ids, flight.canvas.steps, flight.canvas.edits, cfg, strategy, flight.share,
                      flight.forwards)
