"""Rows in flight, one round planned on the host: which slots each forward feeds and how (columns, left or right
padding, write counts), which rows apply the commit rule and where their windows' logits lie, which rows set a first
token, whether the round must read; and the host ints the device needs, sent in one transfer (``Packed``).

A forward's rows are right-padded to its widest call (the pads lie in a later block, so no real entry sees them),
except the peeks that write nothing, which are left-padded: their pads take positions after their block, so they are
as invisible, and every peek's block then ends at the forward's last column. Where every peeking row's window thus
starts at one column, the rule reads the forward's logits there as a view over all its rows (``RuleSet.window``),
the other rows' results discarded; otherwise it gathers the peeking rows' windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models.decoders.block_diffusion.flight_rows import Call, FlightRow, Walk
from models.decoders.block_diffusion.flight_state import Packed

IDLE = Call(0, 1, 0)  # an idle slot's part of a forward: its cache is empty, and it keeps nothing
RULE_FIELDS = ("slot", "low", "stamp", "from", "end", "n", "post", "want", "is")  # per row of a rule set


@dataclass
class RuleSet:
    """The rows of one forward that one application of the rule covers: all of them, their windows' logits a view
    from column ``window`` (rows that do not peek computed and discarded), or (``window`` None) the peeking rows
    alone, their windows gathered. ``peeks``: (row of the set, peeking row)."""

    window: int | None
    size: int
    peeks: list[tuple[int, FlightRow]] = field(default_factory=list)
    wants: tuple[int, ...] = ()


@dataclass
class ForwardPlan:
    """One forward: its (slot, row) in order (no row: an idle slot), calls, width, whether some rows are
    left-padded, its rule set and the rows setting a first token."""

    entries: list[tuple[int, FlightRow | None]]
    calls: list[Call]
    width: int
    rotated: bool
    rule: RuleSet | None
    first: list[FlightRow]


class RoundPlan:
    """A round's forwards (running, then joining) and what it sends; ``reads``: whether some row's next call
    depends on the device."""

    def __init__(self, walk: Walk, forwards: list[list[tuple[int, FlightRow | None]]],
                 joining: list[FlightRow]) -> None:
        self.packed, self.forwards, knows = Packed(), [], True
        first: list[tuple[int, int, int]] = []
        for g, entries in enumerate(forwards):
            plan, first_here, knows_here = _plan_forward(walk, g, entries, self.packed)
            self.forwards.append(plan)
            first += first_here
            knows = knows and knows_here
        self.reads = bool(first) or not knows
        for name, values in zip(("fslot", "fcol", "fstamp"), zip(*first) if first else ((), (), ())):
            self.packed.put(name, values)
        self.packed.put("jslot", [r.slot for r in joining])
        self.packed.put("prow", [slot for r in joining for slot in [r.slot] * r.prompt_length])
        self.packed.put("pcol", [column for r in joining for column in range(r.prompt_length)])


def _plan_forward(walk: Walk, g: int, entries: list[tuple[int, FlightRow | None]],
                  packed: Packed) -> tuple[ForwardPlan, list[tuple[int, int, int]], bool]:
    """Forward ``g``'s plan, its ints put in ``packed``; the (slot, column, stamp) of its first tokens, and whether
    the host knows its peeking rows' answers."""
    calls = [IDLE if r is None else walk.call(r) for _, r in entries]
    width = max(c.width for c in calls)
    leads = [width - c.width if r is not None and r.phase == "peek" and not c.keep else 0
             for (_, r), c in zip(entries, calls)]
    packed.put(f"slot{g}", [slot for slot, _ in entries])
    packed.put(f"low{g}", [c.low for c in calls])
    rotated = any(leads)
    if rotated:
        packed.put(f"shift{g}", [c.width if lead else 0 for c, lead in zip(calls, leads)])
    peeks, firsts, first, sets, knows = [], [], [], [], True
    for pos, ((_, row), call, lead) in enumerate(zip(entries, calls, leads)):
        if row is None:
            continue
        if row.phase == "peek":
            a, b = walk.window_logits(row, call)
            peeks.append((pos, row, lead + a, b))
            knows = knows and walk.knows(row)
        elif (column := walk.first_token_column(row)) is not None:
            sets.append((pos, call.width - 1))
            first.append((row.slot, column, row.forwards))
            firsts.append(row)
    for name, values in zip(("fpos", "flast"), zip(*sets) if sets else ((), ())):
        packed.put(f"{name}{g}", values)
    rule = _rule_set(walk, g, entries, calls, peeks, packed) if peeks else None
    return ForwardPlan(entries, calls, width, rotated, rule, firsts), first, knows


def _rule_set(walk: Walk, g: int, entries: list[tuple[int, FlightRow | None]], calls: list[Call],
              peeks: list[tuple[int, FlightRow, int, int]], packed: Packed) -> RuleSet:
    """The rows the rule covers in forward ``g`` and their ints: all rows, read as a view, where every peek's window
    starts at one call column (and, shifted, none is a block's first window) and peeks are at least half the rows;
    else the peeking rows."""
    starts = {a + b for _, _, a, b in peeks}
    view = len(starts) == 1 and min(b for _, _, _, b in peeks) >= 0 and 2 * len(peeks) >= len(entries)
    wants = tuple(sorted({walk.want(row) for _, row, _, _ in peeks}))
    if view:
        rule = RuleSet(starts.pop(), len(entries), [(pos, row) for pos, row, _, _ in peeks], wants)
        peeking = {pos: row for pos, row, _, _ in peeks}
        members = [(slot, peeking.get(pos), call) for pos, ((slot, _), call) in enumerate(zip(entries, calls))]
    else:
        rule = RuleSet(None, len(peeks), [(i, row) for i, (_, row, _, _) in enumerate(peeks)], wants)
        for name, values in zip(("rpos", "ra", "rb"), zip(*[(pos, a, b) for pos, _, a, b in peeks])):
            packed.put(f"{name}{g}", values)
        members = [(row.slot, row, calls[pos]) for pos, row, _, _ in peeks]
    size = walk.size
    rows = []
    for slot, row, call in members:  # a row that does not peek: its call's first columns, kept as they are
        if row is None:
            rows.append((slot, call.low, 0, 0, 0, 0, 0, wants[0], 0))
            continue
        start = row.block * size
        rows.append((row.slot, row.window * walk.sub, row.forwards, max(start, row.prompt_length), start + size,
                     row.prompt_length, row.post, walk.want(row), 1))
    for name, values in zip(RULE_FIELDS, zip(*rows)):
        packed.put(f"r{name}{g}", values if name != "want" or len(wants) > 1 else ())
    return rule
