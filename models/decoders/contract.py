"""What every decoder promises: ``generate(network, input_ids, attention_mask, config) -> DecodeOutput``.

A decoder config is one frozen dataclass. Its fields are what a user sets, plus the canvas and the checkpoint's
token ids, which are marked with ``canvas_field()`` / ``token_id_field()``: they default to None and the adapter
fills them (the canvas at planning, the ids at decode time). A decoder refuses to run with either unset.
This module is a leaf: decoders, adapters and the option layer import it, it imports nothing of theirs.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from harness.errors import UserError

FILLED = "filled"  # field metadata key: "canvas" or "token_id" (set by the adapter, never by a user)


class ConfigError(UserError, ValueError):
    """A decoding configuration that cannot run; the message is one line meant for the user."""


def canvas_field() -> Any:
    """The number of tokens to generate; the adapter sets it where the canvas is known."""
    return field(default=None, metadata={FILLED: "canvas"})


def token_id_field() -> Any:
    """A checkpoint's special token id (or ids); the adapter fills it from the tokenizer."""
    return field(default=None, metadata={FILLED: "token_id"})


@functools.cache
def _filled_paths(cls: type) -> tuple[tuple[tuple[str, ...], str], ...]:
    """(attribute path, role) of every filled field of a config class, nested configs included. Read once per
    class, so the check at the start of a decode is a few attribute reads, not a walk over the dataclass."""
    hints = typing.get_type_hints(cls)
    paths: list[tuple[tuple[str, ...], str]] = []
    for f in dataclasses.fields(cls):
        if FILLED in f.metadata:
            paths.append(((f.name,), f.metadata[FILLED]))
        elif dataclasses.is_dataclass(hints[f.name]):
            paths.extend(((f.name, *path), role) for path, role in _filled_paths(hints[f.name]))
    return tuple(paths)


def _filled(config: Any, role: str) -> Iterator[tuple[Any, str]]:
    """(the config holding it, field name) of every field of ``config`` marked ``role``."""
    for path, marked in _filled_paths(type(config)):
        if marked == role:
            holder = config
            for name in path[:-1]:
                holder = getattr(holder, name)
            yield holder, path[-1]


def canvas_of(config: Any) -> int | None:
    """The config's canvas (None until the adapter sets it)."""
    return next((getattr(holder, name) for holder, name in _filled(config, "canvas")), None)


def require_filled(config: Any, owner: str, roles: tuple[str, ...] = ("canvas", "token_id")) -> None:
    """One line naming the first canvas or token id still unset (the adapter fills them; a direct caller must)."""
    for role in roles:
        for holder, name in _filled(config, role):
            if getattr(holder, name) is None:
                raise ConfigError(f"{owner}: {name} is not set ({type(holder).__name__}.{name} is the "
                                  f"checkpoint's {'canvas' if role == 'canvas' else 'token id'}; set it first)")


@dataclass(frozen=True)
class DecodeResult:
    """One row: committed ids after the prompt, up to and including the first end-of-sequence id, in position
    order; its share of the network calls (a batched call split evenly across its rows: what the row cost); whether
    no end-of-sequence came; and the forwards the row took part in (what tokens per forward counts, the same at any
    batch size for a decoder whose rows finish on their own; None where a decoder cannot tell).

    ``commit_step`` says in what order the row decoded: per token of ``token_ids``, the forward (1-based, in the
    row's own count: the forwards it takes decoded alone) after which it held its final value, so the last re-take
    where a decoder edits committed tokens; ``edits`` counts those re-takes of ``token_ids`` (None: no editing).
    None where the decoder cannot tell (transformers' generate)."""

    token_ids: list[int]
    nfe: float
    hit_max_tokens: bool
    forwards: int | None = field(default=None, kw_only=True)
    commit_step: tuple[int, ...] | None = field(default=None, kw_only=True)
    edits: int | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class DecodeOutput:
    """What every decoder returns for a batch."""

    rows: tuple[DecodeResult, ...]
    nfe: int  # network calls for the whole batch (a batched call counts once)
    tokens: torch.LongTensor | None = None  # [B, canvas] as the decoder left it, before any cut (parity tests)
    trace: tuple[Any, ...] = ()  # decoder-specific per-row details (ReFusion: its RefusionTrace per row)


Decode = Callable[[Any, torch.Tensor, "torch.Tensor | None", Any], DecodeOutput]


@dataclass(frozen=True)
class Step:
    """One round of a stream (rows in flight), every row advanced by one forward of its own count (rows just admitted,
    or at another phase, may run in a call apart): the prompts that took free rows before it (by index), those it
    finished with their results, and the rows it ran."""

    admitted: tuple[int, ...]
    finished: tuple[tuple[int, DecodeResult], ...]
    rows: int


# (network, prompts [1-D ids on the device], config, max_rows, row_seeds) -> one Step per round: at most max_rows
# rows in flight, a waiting prompt taking the row of the first to finish; each row's tokens and forwards are those
# of the prompt decoded alone
Stream = Callable[[Any, Sequence[torch.Tensor], Any, int, "Sequence[int] | None"], Iterator[Step]]


@dataclass(frozen=True)
class Decoder:
    """A decoder as the adapters see it: its config class, how the canvas resolves its defaults, its checks, and,
    where its rows run as state machines of their own, ``stream`` (rows in flight).

    ``version`` is raised whenever a change alters what the decoder outputs for some input: it enters every sample
    key (from 2 on; version 1 keys are those of the stores written before versions existed), so a rerun regenerates
    the samples an older version stored instead of mixing two decoders' outputs (docs/design.md)."""

    name: str
    config_class: type
    generate: Decode
    at_canvas: Callable[[Any, int], Any]  # (config, canvas) -> config with the canvas and canvas-relative defaults
    validate: Callable[[Any], None]  # ConfigError for settings it cannot run (token ids are checked at generate)
    stream: Stream | None = None
    version: int = field(default=1, kw_only=True)


def cut_after_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> tuple[list[int], bool]:
    """Keep ids up to and including the first end-of-sequence id; also say whether one was found."""
    eos = set(eos_ids)
    for i, t in enumerate(ids):
        if t in eos:
            return list(ids[: i + 1]), True
    return list(ids), False


def write_tokens(x: torch.Tensor, steps: torch.Tensor, columns: slice, new: torch.Tensor,
                 forward: int | torch.Tensor) -> None:
    """``x[:, columns] = new``, each position it changes stamped with ``forward`` in ``steps`` (x's shape; a [B, 1]
    tensor gives each row its own count). On the device, so recording costs no read: after the last write every
    position holds the forward that last changed it, its commit step (or its last re-take)."""
    changed = new != x[:, columns]
    if isinstance(forward, int):  # in place: one launch fewer, the most frequent case (every row's count the same)
        steps[:, columns].masked_fill_(changed, forward)
    else:
        steps[:, columns] = torch.where(changed, forward, steps[:, columns])
    x[:, columns] = new


def read_rows(tokens: torch.Tensor, steps: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
    """Tokens and their commit steps ([B, N] each) read back in one transfer."""
    both = torch.stack([tokens, steps.to(tokens.dtype)]).tolist()
    return both[0], both[1]


def committed(ids: Sequence[int], steps: Sequence[int], eos_ids: Sequence[int]) -> dict[str, Any]:
    """A row's ``DecodeResult`` fields for its ids cut after the first end-of-sequence id, with their steps."""
    kept, found = cut_after_eos(ids, eos_ids)
    return dict(token_ids=kept, hit_max_tokens=not found, commit_step=tuple(steps[:len(kept)]))


def output_from_tokens(tokens: torch.Tensor, nfe: int, eos_ids: Sequence[int], steps: torch.Tensor) -> DecodeOutput:
    """Rows cut after the first end-of-sequence id with their commit ``steps``, the batch's forwards split evenly
    across them; every row took part in every forward (a static batch runs until its last row is done)."""
    rows, row_steps = read_rows(tokens, steps)
    per_row = nfe / max(len(rows), 1)
    results = tuple(DecodeResult(nfe=per_row, forwards=nfe, **committed(row, at, eos_ids))
                    for row, at in zip(rows, row_steps))
    return DecodeOutput(rows=results, nfe=nfe, tokens=tokens)
