"""The forwards a ReFusion row asks for, one frozen class per kind, and how one forward serves a batch of them.

A row program (``decoder.py``) yields one request per forward and gets a ``Reply`` back. The kinds, as the decoder's
steps make them:
  * ``Plan`` (step A): masks over the still-masked slots, plain causal; reads the drafts and each slot's
    first-token confidence;
  * ``Verify`` (step B): the chosen drafts in a row, plain causal; reads which tokens pass (shifted);
  * ``SlotDraft`` / ``SlotVerify`` (step C): one window per slot (``InSlot`` visibility); read the drafts / which
    tokens pass.
Each class holds only what its forward needs; the functions below dispatch on the class to lay the rows out for
one forward (``request_windows``, ``batch_inputs``) and to read every row's answers in one transfer
(``plan_reads``, ``read_logits``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from models.decoders.sampling import add_gumbel_noise
from models.networks.grouped_attention import GroupedWindows
from models.networks.ragged import RaggedBatch


@dataclass(frozen=True)
class Request:
    """New tokens on top of a row's cache. Host lists: the decoder decides on the host from one read per forward, so
    the next forward's inputs are known there and go to the device in one copy for the whole batch."""

    ids: list[int]
    positions: list[int]


@dataclass(frozen=True)
class Plan(Request):
    """Plain causal over the whole cache. Reads the draft at every token after the first ``prompt_len`` (argmax;
    Gumbel-max at ``temperature`` > 0 from ``generator``), and at each slot's first token the draft's probability
    and whether it passes ``slot_threshold``. The first plan also feeds the prompt, whose logits are not read."""

    slot_size: int
    slot_threshold: float
    temperature: float = 0.0
    generator: torch.Generator | None = None
    prompt_len: int = 0


@dataclass(frozen=True)
class Verify(Request):
    """Plain causal over the whole cache. Reads whether each token, except the first of each run of ``run``, has
    probability above ``token_threshold`` under the logits before it (the shifted read)."""

    run: int
    token_threshold: float


@dataclass(frozen=True)
class InSlot(Request):
    """In-slot visibility: the new tokens are consecutive windows of ``window``, one per slot (group); every query
    sees the first ``committed`` cache entries, the entries after them are each group's own ``owned`` entries in
    group order, and a query sees its group's entries and its window up to itself."""

    window: int
    committed: int
    owned: int


@dataclass(frozen=True)
class SlotDraft(InSlot):
    """Reads the argmax at every token (no Gumbel noise, whatever the temperature)."""


@dataclass(frozen=True)
class SlotVerify(InSlot):
    """``Verify``'s read, one run per window."""

    token_threshold: float

    @property
    def run(self) -> int:
        return self.window


@dataclass(frozen=True)
class Reply:
    """What a row's request asked for, on the host."""

    tokens: list[int]  # Plan, SlotDraft: the draft at each read token
    confidence: list[float]  # Plan: the draft's probability at each slot's first token
    confident: list[bool]  # Plan: that probability > slot_threshold
    accepted: list[bool]  # Verify, SlotVerify: per token after the first of its run, in order


def request_windows(reqs: Sequence[Request], lengths: list[int], width: int) -> GroupedWindows:
    """The rows' visibility as the network takes it: a plain row is one group over its whole cache, an in-slot row
    one group per slot after its committed buffer."""
    rows = []
    for r, n in zip(reqs, lengths):
        n_new = len(r.ids)
        if not isinstance(r, InSlot):
            rows.append((n, n, 1, 0, n_new))
        elif n_new % r.window:
            raise RuntimeError(f"refusion: {n_new} new tokens do not split into windows of {r.window}")
        else:
            rows.append((n, r.committed, n_new // r.window, r.owned, r.window))
    return GroupedWindows(*map(tuple, zip(*rows)), width=width)


@dataclass
class ReadPlan:
    """Where one forward's reads sit: cells (row, new-token index) of the drafts, then of the acceptances; the draft
    index of every confidence read; the token each acceptance scores; each row's share of every kind; and the
    thresholds the rows compare against (one of each per forward)."""

    rows: list[int] = field(default_factory=list)
    columns: list[int] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    noisy: list[tuple[int, int, Plan]] = field(default_factory=list)  # (start, end) of a noisy row's drafts
    shares: list[tuple[int, int, int]] = field(default_factory=list)  # per row: drafts, confidences, acceptances
    n_draft: int = 0
    slot_thresholds: set[float] = field(default_factory=set)
    token_thresholds: set[float] = field(default_factory=set)

    def add_drafts(self, row: int, span: range) -> None:
        self.rows += [row] * len(span)
        self.columns += span
        self.n_draft += len(span)


def plan_reads(reqs: Sequence[Request]) -> ReadPlan:
    """Host arithmetic only: a draft reads its own cell, an acceptance of token j the cell of token j - 1."""
    plan, accept_rows, accept_columns = ReadPlan(), [], []
    for row, r in enumerate(reqs):
        d, f, a = plan.n_draft, len(plan.firsts), len(plan.tokens)
        match r:
            case Plan():
                plan.add_drafts(row, range(r.prompt_len, len(r.ids)))
                plan.firsts += range(d, plan.n_draft, r.slot_size)
                if r.temperature > 0:
                    plan.noisy.append((d, plan.n_draft, r))
                plan.slot_thresholds.add(r.slot_threshold)
            case SlotDraft():
                plan.add_drafts(row, range(len(r.ids)))
            case Verify() | SlotVerify():
                scored = [j for j in range(len(r.ids)) if j % r.run]  # every token but the first of each run
                accept_rows += [row] * len(scored)
                accept_columns += [j - 1 for j in scored]
                plan.tokens += [r.ids[j] for j in scored]
                plan.token_thresholds.add(r.token_threshold)
            case _:
                raise TypeError(f"refusion: no reads for a {type(r).__name__}")
        plan.shares.append((plan.n_draft - d, len(plan.firsts) - f, len(plan.tokens) - a))
    plan.rows += accept_rows
    plan.columns += accept_columns
    return plan


@dataclass(frozen=True)
class StepInputs:
    """One forward's device inputs, from one host-to-device copy: ids and positions [rows, width] (pads 0 after each
    row's tokens), the ragged layout with the read cells in the plan's order, and the token ids the acceptances
    score after the confidence reads' draft indices (``scored_at``); on the host, the width and how many trailing
    columns hold every read cell (``keep``: what a network that can only drop leading logits keeps)."""

    ids: Tensor
    positions: Tensor
    ragged: RaggedBatch
    scored_at: Tensor
    width: int
    keep: int


def batch_inputs(reqs: Sequence[Request], plan: ReadPlan, device: torch.device) -> StepInputs:
    """The rows' tokens and the plan's cells as ``StepInputs``. Packed (``RaggedBatch.real``) when some row is
    shorter than the widest: the network then computes no pad."""
    lengths = [len(r.ids) for r in reqs]
    width, rows = max(lengths), len(reqs)
    pads = [[0] * (width - n) for n in lengths]
    packed = min(lengths) < width
    starts = list(itertools.accumulate(lengths, initial=0)) if packed else range(0, rows * width, width)
    real = [row * width + j for row, n in enumerate(lengths) for j in range(n)] if packed else []
    read = [starts[row] + j for row, j in zip(plan.rows, plan.columns)]
    flat = [t for r, pad in zip(reqs, pads) for t in r.ids + pad] + [p for r, pad in zip(reqs, pads)
                                                                       for p in r.positions + pad]
    parts = torch.tensor(flat + real + read + plan.firsts + plan.tokens, dtype=torch.long, device=device).split(
        [2 * rows * width, len(real), len(read), len(plan.firsts) + len(plan.tokens)])
    both = parts[0].view(2, rows, width)
    keep = width - min(plan.columns, default=0)
    return StepInputs(both[0], both[1], RaggedBatch(parts[1] if packed else None, parts[2]), parts[3], width, keep)


def read_logits(picked: Tensor, plan: ReadPlan, scored_at: Tensor) -> list[Reply]:
    """Every row's reads from one forward's logits at the plan's cells [draft + accept, V], with one set of ops for
    the whole batch and one host read: the drafts, confidences and acceptances of all rows travel in one float32
    tensor (token ids below 2**24 and probabilities in float32 or narrower are exact in it). Thresholds are compared
    on the device, in the logits' dtype, as the published decoder compares them. Only Gumbel noise (temperature > 0)
    is drawn row by row, each row from its own generator, so a row's draws do not depend on its batch."""
    n_draft, n_first, n_accept = plan.n_draft, len(plan.firsts), len(plan.tokens)
    parts = []
    if n_draft:
        drafted = picked[:n_draft]
        top = drafted.argmax(-1)
        for start, end, r in plan.noisy:
            top[start:end] = add_gumbel_noise(drafted[start:end], r.temperature, r.generator).argmax(-1)
        parts.append(top.float())
    if n_first or n_accept:
        firsts = scored_at[:n_first]
        rows = torch.cat([picked[firsts], picked[n_draft:]])
        targets = torch.cat([top[firsts], scored_at[n_first:]]) if n_first else scored_at
        probs = torch.softmax(rows, dim=-1).gather(-1, targets[:, None])[:, 0]
        if n_first:
            threshold = shared_threshold(plan.slot_thresholds, "slot_threshold")
            parts += [probs[:n_first].float(), (probs[:n_first] > threshold).float()]
        if n_accept:
            parts.append((probs[n_first:] > shared_threshold(plan.token_thresholds, "token_threshold")).float())
    values = torch.cat(parts).tolist() if parts else []
    tokens = [int(v) for v in values[:n_draft]]
    confidence = values[n_draft:n_draft + n_first]
    confident = [v > 0 for v in values[n_draft + n_first:n_draft + 2 * n_first]]
    accepted = [v > 0 for v in values[n_draft + 2 * n_first:]]
    replies, d, f, a = [], 0, 0, 0
    for n_d, n_f, n_a in plan.shares:
        replies.append(Reply(tokens[d:d + n_d], confidence[f:f + n_f], confident[f:f + n_f], accepted[a:a + n_a]))
        d, f, a = d + n_d, f + n_f, a + n_a
    return replies


def shared_threshold(values: set[float], name: str) -> float:
    """The threshold every row of a forward shares (rows of one decode have one config)."""
    if len(values) != 1:
        raise RuntimeError(f"refusion: the rows of one forward disagree on {name} ({sorted(values)})")
    return next(iter(values))
