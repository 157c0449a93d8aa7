"""Repeated samples per item (``--samples K``) as the report reads them: the ``repeated`` block a result carries when
K > 1 (avg@K, pass@k for k = 1..K, maj@K, how often an item's K samples agree), typed once at the boundary, and the
words that say K wherever a figure over K samples is shown or set beside a published one.

A published avg@k is compared with a measured avg@K only where k == K: a mean over 64 samples and a mean over 8 have
the same expectation but not the same spread, and a greedy pass is another quantity again, so where they differ (or
the source does not say its k) the published figure is shown with a note that says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Estimate:
    """One figure over an item-clustered sample: a fraction in [0, 1], its 95% interval and the items it is over."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int | None


@dataclass(frozen=True)
class Agreement:
    """Shares of items whose K samples were all correct, all wrong, or some of each."""

    all_correct: float | None
    all_wrong: float | None
    mixed: float | None


@dataclass(frozen=True)
class Repeated:
    """A result's ``repeated`` block: K samples per item and the figures over them."""

    samples_per_item: int
    items: int | None
    metric: str | None
    avg: Estimate
    pass_at: tuple[Estimate, ...]  # pass@k at index k - 1, for k = 1..K; empty for a graded (not 0/1) metric
    maj: Estimate | None  # None where the task extracts no answer to vote on
    agreement: Agreement  # all None for a graded metric

    def pass_at_k(self, k: int) -> Estimate | None:
        return self.pass_at[k - 1] if 1 <= k <= len(self.pass_at) else None

    @property
    def pass_at_top(self) -> Estimate | None:
        """pass@K, over every sample of an item."""
        return self.pass_at[-1] if self.pass_at else None


def number(value: Any) -> float | None:
    """A figure as results.json holds it, as a float; None for null, NaN, a flag or anything not a number."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _estimate(raw: Any, what: str) -> Estimate:
    if not isinstance(raw, Mapping):
        raise ValueError(f"'repeated' {what} is not an object with value, ci95 and n")
    ci = raw.get("ci95") or [None, None]
    n = number(raw.get("n"))
    return Estimate(number(raw.get("value")), number(ci[0]), number(ci[1]), None if n is None else int(n))


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"'repeated' {what} must be a whole number of at least 1, got {value!r}")
    return value


def parse_repeated(raw: Any) -> Repeated | None:
    """The block as results.json holds it (docs/measurement.md); None where absent (a one-sample result). Raises
    ValueError with one line on a block the report cannot read."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError("'repeated' is not an object")
    k = _count(raw.get("samples_per_item"), "samples_per_item")
    passes = raw.get("pass_at") or {}  # null for a graded metric: pass@k needs right or wrong
    if not isinstance(passes, Mapping):
        raise ValueError("'repeated' pass_at is not an object of k -> figure")
    try:
        by_k = {int(key): value for key, value in passes.items()}
    except (TypeError, ValueError):
        by_k = {}
    if passes and sorted(by_k) != list(range(1, k + 1)):
        raise ValueError(f"'repeated' pass_at keys must be k = 1..{k}, got {sorted(map(str, passes))}")
    shares = raw.get("agreement") or {}
    if not isinstance(shares, Mapping):
        raise ValueError("'repeated' agreement is not an object of shares")
    items = number(raw.get("items"))
    return Repeated(
        samples_per_item=k, items=None if items is None else int(items), metric=raw.get("metric"),
        avg=_estimate(raw.get("avg"), "avg"), pass_at=tuple(_estimate(by_k[i], f"pass_at {i}") for i in sorted(by_k)),
        maj=None if raw.get("maj") is None else _estimate(raw["maj"], "maj"),
        agreement=Agreement(number(shares.get("all_correct")), number(shares.get("all_wrong")),
                            number(shares.get("mixed"))),
    )


def samples_of(manifest: Mapping[str, Any], repeated: Repeated | None) -> int:
    """A result's samples per item: its manifest's ``samples`` (absent for a one-sample run), else its block's."""
    recorded = manifest.get("samples")
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 1:
        return recorded
    return repeated.samples_per_item if repeated is not None else 1


# --- words -----------------------------------------------------------------------------------------------------------

def avg_label(k: int) -> str:
    """What a primary figure over k samples per item is called: "avg@8"; "" for one sample (a plain score)."""
    return f"avg@{k}" if k > 1 else ""


def samples_words(k: int) -> str:
    return f"avg@{k}" if k > 1 else "one pass"


def k_note(measured: int, published: int | None) -> str | None:
    """The note beside a published cell set against a measured figure over ``measured`` samples per item; None where
    the two are over the same k and so compare."""
    if published is None:
        return "published k not stated"
    if published == measured:
        return None
    return f"published {samples_words(published)}, this run {samples_words(measured)}"


def table_ks(largest: int) -> list[int]:
    """The k a table shows of a curve up to ``largest``: 1, the powers of two below it, and itself (the figure has
    every k)."""
    ks, k = [], 1
    while k < largest:
        ks.append(k)
        k *= 2
    return ks + [largest]
