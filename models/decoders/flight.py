"""Rows in flight (``Decoder.stream``), the part every decoder shares: at most ``max_rows`` prompts decode
together, and a waiting prompt takes the row of the first to finish before the next step. A decoder supplies its rows
(small state machines of its own) and one batched step over them; the driver admits, retires and reports.

Rows count what they cost as they run: ``took_part`` charges each row of a batched call 1/n of it and one forward
of its own (the forwards it would take alone). A canvas decoder (LLaDA, Dream, Fast-dLLM) writes its rows' tokens
with ``commit_row``, which stamps each changed position with the row's forward count, and reports them with
``canvas_result``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol, Sequence, TypeVar

import torch

from models.decoders.contract import DecodeResult, Step, committed, read_rows, write_tokens


class InFlight(Protocol):
    """What the driver reads of a decoder's row: its prompt's index, its share of the calls it took part in (a
    call on n rows costs each 1/n) and how many it took part in (its count alone)."""

    index: int
    share: float
    forwards: int


class CanvasRow(InFlight, Protocol):
    """A row that decodes a canvas: its sequence [1, prompt + canvas] and each position's commit step (the same
    shape)."""

    x: torch.Tensor
    prompt_len: int
    steps: torch.Tensor


Row = TypeVar("Row", bound=InFlight)


def took_part(rows: Sequence[InFlight]) -> None:
    """Count one batched call for each of ``rows``."""
    for row in rows:
        row.share += 1 / len(rows)
        row.forwards += 1


def commit_row(row: CanvasRow, columns: slice, new: torch.Tensor) -> None:
    """The row's ``x[:, columns] = new``, what changes stamped with the row's forward count (``write_tokens``)."""
    write_tokens(row.x, row.steps, columns, new, row.forwards)


def canvas_result(row: CanvasRow, eos_ids: Sequence[int]) -> DecodeResult:
    """A finished canvas row: its canvas past the prompt, cut after the first end of sequence, read in one transfer."""
    (ids,), (steps,) = read_rows(row.x[:, row.prompt_len:], row.steps[:, row.prompt_len:])
    return DecodeResult(nfe=row.share, forwards=row.forwards, **committed(ids, steps, eos_ids))


def joined(cache: Any | None, rows: Any) -> Any:
    """The cache of the rows in flight with ``rows`` (a cache of rows just prefilled apart) appended after its own
    (``KVBuffer.admit``); ``rows`` itself when nothing was in flight."""
    if cache is None:
        return rows
    cache.admit(rows)
    return cache


def drop_finished(cache: Any, done: Sequence[bool]) -> None:
    """Only the cache rows of the rows still in flight stay (``done`` per row, in the cache's order)."""
    if any(done):
        cache.select_rows([row for row, end in enumerate(done) if not end])


def fly(count: int, max_rows: int, admit: Callable[[int], Row], advance: Callable[[list[Row]], list[bool]],
        results: Callable[[list[Row]], Sequence[DecodeResult]]) -> Iterator[Step]:
    """Rows in flight over ``count`` prompts: ``admit(i)`` makes prompt i's row (appended after the rows already in
    flight); ``advance(rows)`` runs one step of every row — the new ones last, which a decoder with a cache prefills
    apart — and says which finished (a decoder with a cache frees their slots); ``results(rows)`` are the finished
    rows' ``DecodeResult``s, in order (read back together: one transfer a round, however many finish). One ``Step``
    per advance."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    waiting, rows = list(range(count))[::-1], []
    while waiting or rows:
        admitted = [waiting.pop() for _ in range(min(max_rows - len(rows), len(waiting)))]
        rows += [admit(i) for i in admitted]
        ran = len(rows)
        done = advance(rows)
        ended = [row for row, end in zip(rows, done) if end]
        finished = tuple(zip((row.index for row in ended), results(ended))) if ended else ()
        rows = [row for row, end in zip(rows, done) if not end]
        yield Step(tuple(admitted), finished, ran)
