"""Output drift: which samples' generated token ids changed between baseline and candidate.

With deterministic decoding on the same settings, a code change that keeps outputs keeps every token id; one that
changes any is visible here long before accuracy moves (and on tiny random models, whose accuracy never moves).
Forwards per token, the other deterministic figure, is computed here over the same paired samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from harness.run.records import SampleRecord, as_json
from harness.stats.aggregate import row_forwards

EXAMPLES = 3  # changed samples listed by doc id and first differing position


@dataclass(frozen=True)
class Change:
    doc_id: str
    position: int  # first index where the ids differ (the shorter length when one is a prefix of the other)
    baseline_length: int
    candidate_length: int


@dataclass(frozen=True)
class Drift:
    compared: int  # samples both sides have, with token ids
    changed: int
    examples: tuple[Change, ...]
    deterministic: bool  # the decoding configuration samples nothing, so any change is the code's

    def describe(self) -> str:
        parts = [f"doc {c.doc_id} at token {c.position} (lengths {c.baseline_length}/{c.candidate_length})"
                 for c in self.examples]
        more = self.changed - len(self.examples)
        return ", ".join(parts) + (f", and {more} more" if more > 0 else "")


def is_deterministic(decoding: dict[str, Any]) -> bool:
    """Greedy AR (``do_sample`` off) or a diffusion decoder at temperature 0 (LLaDA, Dream, ReFusion, Fast-dLLM)."""
    if "do_sample" in decoding:
        return not decoding["do_sample"]
    temperature = decoding.get("temperature")
    alg_temp = decoding.get("alg_temp")
    return (temperature is None or float(temperature) == 0.0) and (alg_temp is None or float(alg_temp) == 0.0)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two id sequences differ, or None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def request_name(record: SampleRecord) -> str:
    """The item a record answers, and which of its repeated samples after the first."""
    return str(record.doc_id) if not record.sample else f"{record.doc_id} sample {record.sample}"


def _by_doc(records: Sequence[SampleRecord]) -> dict[str, SampleRecord]:
    return {request_name(r): r for r in records}


def output_drift(base: Sequence[SampleRecord], cand: Sequence[SampleRecord], decoding: dict[str, Any]) -> Drift:
    """Compare token ids per doc id, in baseline order."""
    b, c = _by_doc(base), _by_doc(cand)
    compared, changes = 0, []
    for doc, record in b.items():
        other = c.get(doc)
        if other is None:
            continue
        compared += 1
        position = first_difference(record.token_ids, other.token_ids)
        if position is not None:
            changes.append(Change(doc, position, len(record.token_ids), len(other.token_ids)))
    return Drift(compared, len(changes), tuple(changes[:EXAMPLES]), is_deterministic(decoding))


def forwards_per_token(records: Sequence[SampleRecord], docs: set[str] | None = None) -> float | None:
    """Forwards each row took part in per generated token over the given doc ids (all when None; the inverse of
    tokens per forward); None without tokens or where a record's forwards are unknown."""
    chosen = [r for r in records if docs is None or request_name(r) in docs]
    tokens = sum(r.gen_tokens for r in chosen)
    forwards = [row_forwards(r) for r in as_json(chosen)]
    if not tokens or any(f is None for f in forwards):
        return None
    return sum(forwards) / tokens


def shared_docs(base: Sequence[SampleRecord], cand: Sequence[SampleRecord]) -> set[str]:
    return set(_by_doc(base)) & set(_by_doc(cand))
