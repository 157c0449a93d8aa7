"""What the report draws of a decode's order, from the sample records' ``commit_step`` (the forward at which each
generated token was committed) and ``token_text`` (each token's text, ``models.base.token_pieces``).

Two views: one sample's tokens with their steps, for the browser's replay (``decode_view``), and, per model and
task, the mean commit step at each position of the answer (``order_curve``). Both put a sample on its own scale, as
``harness.stats.order`` does: its span is its last commit step, so decoders of different forward counts compare.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.run.records import SampleRecord

NOT_RECORDED = "decode order not recorded for this model"
NO_TEXT = "decode order recorded, but not each token's text (a run made before it was stored)"
POSITION_BINS = 20  # the order figure's resolution: twentieths of each answer's tokens


def commit_steps(record: SampleRecord) -> list[int] | None:
    """The sample's commit steps, or None where its decoder records none (an engine, DiffusionGemma)."""
    steps = record.extra.get("commit_step")
    return list(steps) if steps else None


def decode_view(record: SampleRecord, chars: int) -> dict[str, Any]:
    """The browser's replay of one sample: its tokens' texts and commit steps, the last step (the slider's end) and
    how many tokens the ``chars`` cap left out; or a note saying why there is none."""
    steps = commit_steps(record)
    if steps is None:
        return {"note": NOT_RECORDED}
    pieces = record.extra.get("token_text")
    if not pieces or len(pieces) != len(steps):
        return {"note": NO_TEXT}
    shown, used = 0, 0
    while shown < len(pieces) and used + len(pieces[shown]) <= chars:
        used += len(pieces[shown])
        shown += 1
    return {"pieces": list(pieces[:shown]), "steps": steps[:shown], "last": max(steps),
            "hidden": len(pieces) - shown}


def order_curve(records: Sequence[SampleRecord], bins: int = POSITION_BINS) -> list[float | None] | None:
    """Mean normalised commit step (step / the sample's last step, so 1.0 is its last forward) in each of ``bins``
    equal parts of the answer's positions (a token at position i of n sits at (i + 0.5) / n). Every sample weighs
    the same in a bin, whatever its length. None where no sample recorded its steps; a bin no token fell in is
    None."""
    sums, counts = [0.0] * bins, [0] * bins
    for record in records:
        steps = commit_steps(record)
        if steps is None:
            continue
        span, n = max(steps), len(steps)
        per_bin: dict[int, list[float]] = {}
        for i, step in enumerate(steps):
            per_bin.setdefault(int((i + 0.5) / n * bins), []).append(step / span)
        for b, values in per_bin.items():
            sums[b] += sum(values) / len(values)
            counts[b] += 1
    if not any(counts):
        return None
    return [s / c if c else None for s, c in zip(sums, counts)]
