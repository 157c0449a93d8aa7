"""Rows in flight (``Decoder.stream``), the part every decoder shares: at most ``max_rows`` prompts decode
together, and a waiting prompt takes the row of the first to finish before the next step. A decoder supplies its rows
(small state machines of its own) and one batched step over them; the driver admits, retires and reports.

Rows count what they cost as they run: ``took_part`` charges each row of a batched call 1/n of it and one forward
of its own (the forwards it would take alone). A decoder with a KV cache gives each row a slot of one buffer for its
life (``KVBuffer.at``, ``SlotPool``); the canvas decoders keep their rows' tokens in pools by slot too
(``canvas_pool``).
"""

from __future__ import annotations

from typing import Callable, Iterator, Protocol, Sequence, TypeVar

from models.decoders.contract import DecodeResult, Step


class InFlight(Protocol):
    """What the driver reads of a decoder's row: its prompt's index, its share of the calls it took part in (a
    call on n rows costs each 1/n) and how many it took part in (its count alone)."""

    index: int
    share: float
    forwards: int


Row = TypeVar("Row", bound=InFlight)


def took_part(rows: Sequence[InFlight]) -> None:
    """Count one batched call for each of ``rows``."""
    for row in rows:
        row.share += 1 / len(rows)
        row.forwards += 1


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
