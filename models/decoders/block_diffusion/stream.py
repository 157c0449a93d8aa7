"""Block diffusion with rows in flight: one round is batched tensor work over a slot pool, every row advanced by one
forward, each row's tokens, forwards and commit steps those of its prompt decoded alone.

A stream allocates its state once: a KV cache of ``min(max_rows, prompts)`` rows (slots) and a pool of the same
slots holding each row's canvas, commit steps and re-takes (``flight_state.Pool``). A joining row takes the lowest
free slot, and its prefill (its prompt's whole blocks) or first peek runs in a forward of its own beside the running
rows' one, into its own slots, so a prefill does not widen the running rows' forward; a finished row gives its slot
back. No op outside a forward copies the cache: a forward reads its rows' slots as a view where they are
consecutive (the running rows' forward takes a few missing slots along idle, ``_consecutive``), else by index
inside the forward (``KVBuffer.at``).

Each row's control state (phase, block, window, step of its schedule, masks left, cache columns written) is plain
ints on the host (``flight_rows``), and a round is planned on the host (``flight_plan``). A round:

1. sends the host ints it needs in one transfer (``Packed``) and feeds each forward's rows, whatever block and phase
   each is at — peeks, commit forwards, fused first peeks twice as wide (``fused_commit``) — gathered from the pool
   at their own positions, padded to the widest call, with a write count per row;
2. applies the proposal and the commit rule (or LLaDA2.1's editing step) once per forward to every peeking row's
   window ([rows, window, vocab]: the network's LM head computed at those cells alone, ``read_cells``, each row's
   window where it lies, with Fast-dLLM v2's shift in the index), each row at its own step of its schedule
   (``RowWants``), and scatters the windows back with their commit steps, each row's forward count; a prefill's or
   commit's last logit gives the next block's first token (Fast-dLLM v2), for all such rows at once;
3. reads back, in one transfer and only when some row's next call depends on it, each row's answer (``Answer``: masks
   left, end of sequence completed or held by its block, editing done, first token); the host then moves each row.

The finished rows' tokens and commit steps are read in one transfer. A round thus costs the same handful of ops at
any number of rows and at most two host reads. Sampling with per-row seeds (``row_seeds``) draws one
``multinomial`` per peeking row from its own generator, as alone (torch has no batched generators); without them the
rows share the config's seed and one draw.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch

from models.decoders.block_diffusion.flight_plan import ForwardPlan, RoundPlan
from models.decoders.block_diffusion.flight_rows import Answer, FlightRow, Walk, canvas_width
from models.decoders.block_diffusion.flight_state import EDITS, STEPS, TOKENS, Pool, Sent
from models.decoders.block_diffusion.rules import (RowWants, commit_window, completes_to_eos, edit_changes,
                                                   row_result)
from models.decoders.block_diffusion.strategy import BlockDiffusionConfig, block_strategy
from models.decoders.contract import DecodeResult, Step, require_filled
from models.decoders.flight import fly, took_part
from models.decoders.sampling import Draws, make_generator, row_generators
from models.networks.kv_buffer import SlotPool


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
    flight = _Flight(network, Walk(cfg, strategy), prompts, row_seeds, max(1, min(max_rows, len(prompts))))
    yield from fly(len(prompts), max_rows, flight.admit, flight.round, flight.results)


class _Flight:
    """A stream's state (the KV cache's slots, the pool, the free slots) and its three calls for ``fly``."""

    def __init__(self, network: Any, walk: Walk, prompts: Sequence[torch.Tensor], row_seeds: Sequence[int] | None,
                 slots: int) -> None:
        cfg = walk.cfg
        self.network, self.walk, self.cfg, self.prompts = network, walk, cfg, prompts
        self.device = prompts[0].device
        capacity = max(canvas_width(int(p.shape[0]), cfg) for p in prompts) + cfg.block_length
        self.cache = network.new_cache(slots, capacity)
        self.pool, self.free = Pool(slots, capacity, cfg.mask_id, self.device), SlotPool(slots)
        self.eos = torch.tensor(cfg.eos_ids, device=self.device)
        self.generators = row_generators(row_seeds, len(prompts), self.device) if cfg.temperature > 0 else None
        self.shared = make_generator(cfg.seed, self.device)

    def admit(self, index: int) -> FlightRow:
        slot = self.free.take()
        self.cache.truncate(slot, 0)
        return self.walk.start(index, slot, int(self.prompts[index].shape[0]))

    def results(self, rows: list[FlightRow]) -> list[DecodeResult]:
        """The finished rows' results, read in one transfer; their slots freed."""
        tokens, steps, edits = self.pool.finished([r.slot for r in rows], [r.prompt_length for r in rows],
                                                  self.cfg.gen_length)
        for row in rows:
            self.cache.truncate(row.slot, 0)  # an idle slot until it is taken again (``_consecutive``)
            self.free.give(row.slot)
        return [row_result(ids, at, re_takes, self.cfg, self.walk.strategy, row.share, row.forwards)
                for row, ids, at, re_takes in zip(rows, tokens, steps, edits)]

    def round(self, rows: list[FlightRow]) -> list[bool]:
        """One forward of the running rows and one of the joining rows, the rules applied to all of them at once,
        at most one read; which rows are done."""
        joining = sorted((r for r in rows if not r.forwards), key=lambda r: r.slot)
        running = sorted((r for r in rows if r.forwards), key=lambda r: r.slot)
        for group in (running, joining):
            if group:
                took_part(group)
        forwards = [_consecutive(running), [(r.slot, r) for r in joining]]
        plan = RoundPlan(self.walk, [f for f in forwards if f], joining)
        sent = plan.packed.send(self.device)
        if joining:
            self.pool.admit(sent["jslot"], [self.prompts[r.index] for r in joining], sent["prow"], sent["pcol"])
        logits = [self.forward(g, f, sent) for g, f in enumerate(plan.forwards)]
        for row, answer in self.update(plan, logits, sent):
            self.walk.advance(row, answer)
        return [row.phase == "done" for row in rows]

    def forward(self, g: int, plan: ForwardPlan, sent: Sent) -> torch.Tensor:
        """One forward of ``plan``'s calls, each row at its own positions, padded (``flight_plan``); its logits at the
        cells the round reads (``read_cells``), [cells, vocab]."""
        calls, width = plan.calls, plan.width
        offsets = self.pool.columns[:width]
        if plan.rotated:  # a left-padded row's pads come first, at the positions after its call's columns
            offsets = (offsets + sent[f"shift{g}"][:, None]) % width
        columns = sent[f"low{g}"][:, None] + offsets
        ids = self.pool.tokens[sent[f"slot{g}"][:, None], columns]
        lows, keeps = [c.low for c in calls], [c.keep for c in calls]
        positions = range(lows[0], lows[0] + width) if len(set(lows)) == 1 and not plan.rotated else columns
        with self.cache.at([slot for slot, _ in plan.entries]) as part:
            if part.lengths != lows:
                raise RuntimeError(f"rows feed columns {lows} but their caches hold {part.lengths} entries")
            return self.network.block_forward(ids, positions, part, self.cfg.block_length,
                                              keeps[0] if len(set(keeps)) == 1 else keeps,
                                              read=self.read_cells(g, plan, sent))

    def read_cells(self, g: int, plan: ForwardPlan, sent: Sent) -> torch.Tensor:
        """The flat cells of forward ``g``'s [rows * width] logits that the round reads, so the LM head runs there
        alone (none for a forward nobody reads): the rule set's windows in order (every row's from one column, or
        each peeking row's, with Fast-dLLM v2's shift in the index), then each first token's column."""
        width, sub, rule = plan.width, self.walk.sub, plan.rule
        cells = []
        if rule is not None and rule.window is not None:
            rows = torch.arange(rule.size, device=self.device)
            cells.append((rows[:, None] * width + rule.window + self.pool.columns[:sub]).flatten())
        elif rule is not None:
            offsets = sent[f"rb{g}"][:, None] + self.pool.columns[:sub]
            if self.walk.shifted:
                offsets = offsets.clamp(min=0)
            cells.append((sent[f"rpos{g}"][:, None] * width + sent[f"ra{g}"][:, None] + offsets).flatten())
        if plan.first:
            cells.append(sent[f"fpos{g}"] * width + sent[f"flast{g}"])
        if not cells:
            return self.pool.columns[:0]
        return cells[0] if len(cells) == 1 else torch.cat(cells)

    def update(self, plan: RoundPlan, logits: list[torch.Tensor], sent: Sent) -> list[tuple[FlightRow, Answer]]:
        """The rules over every forward's peeking rows, the first tokens, and the answers each row's next call
        needs (one read, where the round reads)."""
        strategy, read = self.walk.strategy, []
        for g, forward in enumerate(plan.forwards):
            if forward.rule is not None:
                found = self.peek(g, forward, logits[g], sent, plan.reads)
                if found is not None:
                    read.append(found.flatten())
        first = [row for forward in plan.forwards for row in forward.first]
        if first:
            read.append(self.first_tokens(plan, logits, sent))
        got = (read[0] if len(read) == 1 else torch.cat(read)).tolist() if plan.reads else []
        editing = strategy.editing is not None
        width = 3 if editing or strategy.stop == "eos_filled" else 2  # the columns of ``peek``'s answer
        answers, at = [], 0
        for forward in plan.forwards:
            rule = forward.rule
            if rule is None:
                continue
            for i, row in rule.peeks:
                if not plan.reads:
                    answers.append((row, self.walk.known_answer(row)))
                    continue
                head, *middle, holds = got[at + width * i:at + width * (i + 1)]
                middle = bool(middle and middle[0])
                answers.append((row, Answer(stopped=bool(head), filled=middle, holds_eos=bool(holds)) if editing
                                else Answer(left=head, stopped=middle, holds_eos=bool(holds))))
            at += width * rule.size if plan.reads else 0
        answers += [(row, Answer(token=token)) for row, token in zip(first, got[at:])]
        told = {id(row) for row, _ in answers}
        answers += [(row, Answer()) for forward in plan.forwards for _, row in forward.entries
                    if row is not None and id(row) not in told]
        return answers

    def window_cells(self, plan: ForwardPlan) -> int:
        """How many of the cells forward ``plan`` read are its rule set's windows (the first ones, ``read_cells``);
        its first tokens' columns follow."""
        return 0 if plan.rule is None else plan.rule.size * self.walk.sub

    def window_logits(self, plan: ForwardPlan, logits: torch.Tensor) -> torch.Tensor:
        """[rule set rows, window, vocab]: the windows' cells of the forward's logits, as a view."""
        return logits[:self.window_cells(plan)].view(plan.rule.size, self.walk.sub, -1)

    def peek(self, g: int, plan: ForwardPlan, logits: torch.Tensor, sent: Sent, reads: bool) -> torch.Tensor | None:
        """The commit rule (or editing step) over forward ``g``'s rule set at once, written back; where the round
        reads, [rows, 2 or 3]: masks left (editing: the block done), end of sequence completed (``eos_filled``;
        editing: no mask before the step), block holds an end of sequence."""
        cfg, rule = self.cfg, plan.rule
        window_logits = self.window_logits(plan, logits)
        index = self.pool.window(sent[f"rslot{g}"], sent[f"rlow{g}"], self.walk.sub)
        before = self.pool.state[:, index[0], index[1]]  # [3, rows, window]
        current, peeking = before[TOKENS], None if rule.window is None else (sent[f"ris{g}"] > 0)[:, None]
        want = rule.wants[0] if len(rule.wants) == 1 else RowWants(sent[f"rwant{g}"], rule.wants)
        if self.walk.strategy.editing is not None:
            return self.edit(g, window_logits, before, index, want, peeking, sent)
        if cfg.temperature == 0:
            draws, drawing = Draws(None, None), None
        elif self.generators is None:
            draws, drawing = Draws(self.shared, None), None
        else:
            rows = dict(rule.peeks)
            draws = Draws(None, tuple(self.generators[rows[i].index] if i in rows else None
                                      for i in range(rule.size)))
            drawing = [i for i, _ in rule.peeks]
        updated, chosen, proposed = commit_window(cfg, window_logits, current, want, draws, drawing)
        if peeking is not None:  # the rows that do not peek keep their columns
            updated, chosen = torch.where(peeking, updated, current), chosen & peeking
        stamped = torch.where(updated != current, sent[f"rstamp{g}"][:, None], before[STEPS])
        self.pool.state[:EDITS, index[0], index[1]] = torch.stack([updated, stamped])
        if not reads:
            return None
        found = [(updated == cfg.mask_id).sum(dim=1)]
        if self.walk.strategy.stop == "eos_filled":
            canvas = self.pool.tokens.index_select(0, sent[f"rslot{g}"])
            found.append(completes_to_eos(canvas, sent[f"rn{g}"], self.eos, cfg.mask_id,
                                          chosen & torch.isin(proposed, self.eos), sent[f"rend{g}"]))
        return torch.stack([*found, self.holds_eos(g, updated, index, sent)], dim=1).long()

    def edit(self, g: int, block_logits: torch.Tensor, before: torch.Tensor, index: tuple[torch.Tensor, torch.Tensor],
             want: int | RowWants, peeking: torch.Tensor | None, sent: Sent) -> torch.Tensor:
        """LLaDA2.1's editing step over forward ``g``'s rule set at once (``lockstep``'s ``edit_block`` per row): a
        row's block is done when the step changes nothing or its steps without a mask pass ``max_post_steps`` (that
        step then writes nothing)."""
        cfg, editing = self.cfg, self.walk.strategy.editing
        current = before[TOKENS]
        masked = current == cfg.mask_id
        tokens, change = edit_changes(cfg, editing, block_logits, current, index[1] >= sent[f"rn{g}"][:, None], want)
        filled = ~masked.any(dim=1)
        done = (sent[f"rpost{g}"] + filled > editing.max_post_steps) | ~change.any(dim=1)
        change = change & ~done[:, None] if peeking is None else change & ~done[:, None] & peeking
        updated = torch.where(change, tokens, current)
        stamped = torch.where(updated != current, sent[f"rstamp{g}"][:, None], before[STEPS])
        self.pool.state[:, index[0], index[1]] = torch.stack([updated, stamped, before[EDITS] + (change & ~masked)])
        return torch.stack([done, filled, self.holds_eos(g, updated, index, sent)], dim=1).long()

    def holds_eos(self, g: int, window: torch.Tensor, index: tuple[torch.Tensor, torch.Tensor],
                  sent: Sent) -> torch.Tensor:
        """[rows] bool: whether each row's block holds an end of sequence in its generated columns; from the
        ``window`` just written where the window is the block, else from the pool."""
        if self.walk.sub == self.walk.size:
            return (torch.isin(window, self.eos) & (index[1] >= sent[f"rfrom{g}"][:, None])).any(dim=1)
        columns = sent[f"rend{g}"][:, None] - self.walk.size + self.pool.columns[:self.walk.size]
        block = self.pool.tokens[index[0], columns]
        return (torch.isin(block, self.eos) & (columns >= sent[f"rfrom{g}"][:, None])).any(dim=1)

    def first_tokens(self, plan: RoundPlan, logits: list[torch.Tensor], sent: Sent) -> torch.Tensor:
        """The next block's first token, the argmax of each prefill's or commit's last logit (Fast-dLLM v2), written
        with its commit step (the column held a mask and no step before); the tokens."""
        last = [group_logits[self.window_cells(forward):].argmax(dim=-1)
                for forward, group_logits in zip(plan.forwards, logits) if forward.first]
        tokens = last[0] if len(last) == 1 else torch.cat(last)
        stamped = torch.where(tokens != self.cfg.mask_id, sent["fstamp"], 0)
        self.pool.state[:EDITS, sent["fslot"], sent["fcol"]] = torch.stack([tokens, stamped])
        return tokens


def _consecutive(rows: list[FlightRow]) -> list[tuple[int, FlightRow | None]]:
    """The running rows' forward, in slot order, as one run of consecutive slots where few are missing (the slots
    of the rows joining this round, or freed): those take part idle (an empty cache fed one pad, nothing kept, no
    result read), so the forward reads the cache as a view instead of gathering every layer's entries by slot
    (``KVBuffer.at``). With more holes than a quarter of the rows, the rows alone."""
    if not rows:
        return []
    by_slot = {r.slot: r for r in rows}
    span = range(rows[0].slot, rows[-1].slot + 1)
    if len(span) - len(rows) > len(rows) // 4:
        return [(r.slot, r) for r in rows]
    return [(slot, by_slot.get(slot)) for slot in span]
