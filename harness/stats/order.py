"""How far a decode ran left to right: Kendall's tau between each token's position and its commit step.

A sample's ``commit_step`` (models/decoders/contract.py ``DecodeResult``) holds, per generated token, the forward at
which it was committed. Positions never tie; steps do (a diffusion step commits several tokens), so the statistic is
tau-b: tied pairs count neither way, and the denominator sqrt(pairs * (pairs - tied)) keeps it in [-1, 1]. It is
exactly 1.0 only when each token was committed after the one before it (autoregressive decoding); a decode that runs
left to right a step of several tokens at a time scores sqrt(1 - tied / pairs), just below.

Beside tau, how many tokens each forward committed over the course of the decode (the parallelism profile) and how
many were left to the last tenth of the forwards, on each sample's own scale of forwards; and the split of a set of
samples at their median tau, so accuracy can be set beside order (``harness.stats.aggregate.decode_order``).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from typing import Any, Mapping, Sequence


def order_tau(commit_step: Sequence[int]) -> float:
    """Kendall's tau-b of (position, commit step): 1.0 strictly left to right, -1.0 right to left, near 0 for no
    order. NaN where no two tokens were committed at different forwards (fewer than two tokens, or all in one
    forward): there is no order to measure, as scipy's ``kendalltau`` says."""
    n = len(commit_step)
    pairs = n * (n - 1) // 2
    tied = sum(count * (count - 1) // 2 for count in Counter(commit_step).values())
    if pairs == tied:
        return math.nan
    return _score(commit_step) / math.sqrt(pairs * (pairs - tied))


def _score(steps: Sequence[int]) -> int:
    """Concordant minus discordant pairs: over i < j, +1 where step j is later than step i, -1 where earlier (ties
    count neither). Each step against the sorted steps before it, so O(n log n) comparisons."""
    seen: list[int] = []
    score = 0
    for step in steps:
        earlier, later = bisect.bisect_left(seen, step), len(seen) - bisect.bisect_right(seen, step)
        score += earlier - later
        bisect.insort(seen, step)
    return score


TENTHS = 10  # the parallelism profile's resolution: tenths of a sample's forwards


def committed_by_tenth(commit_step: Sequence[int]) -> list[int]:
    """Tokens committed in each tenth of the sample's own forwards (1 .. max(commit_step)), in tenths of a token.
    A forward that straddles two tenths counts in each by the share of it that falls there, so a decode of fewer
    than ten forwards has a profile too; on a scale of ten times the forwards every boundary is an integer, so the
    shares are exact (AR's profile is exactly flat). Not ``forwards``: a static batch's rows count the batch's."""
    span = max(commit_step)
    tenths = [0] * TENTHS
    for step, count in Counter(commit_step).items():
        for k in range(TENTHS):  # forward ``step`` covers [10(step-1), 10 step], tenth k covers [k span, (k+1) span]
            overlap = min(TENTHS * step, (k + 1) * span) - max(TENTHS * (step - 1), k * span)
            tenths[k] += count * max(overlap, 0)
    return tenths


def sample_order(commit_step: Sequence[int]) -> dict[str, Any] | None:
    """One sample's order figures (docs/measurement.md, ``decode_order``): its tau (None where undefined), tokens
    committed per forward in each tenth of its forwards, and the share of its tokens committed in the last tenth.
    None for a sample that generated nothing."""
    if not commit_step:
        return None
    tau = order_tau(commit_step)
    tenths, span = committed_by_tenth(commit_step), max(commit_step)
    return {
        "order_tau": None if math.isnan(tau) else tau,
        "parallelism_profile": [t / span for t in tenths],  # (t / 10 tokens) / (span / 10 forwards)
        "last_tenth_share": tenths[-1] / (TENTHS * len(commit_step)),
    }


def order_summary(orders: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over samples of their ``sample_order`` figures (each sample weighs the same, whatever its length), and
    the median tau, where the samples split into their out-of-order and in-order halves."""
    if not orders:
        return {"order_tau": None, "parallelism_profile": None, "last_tenth_share": None}
    taus = [o["order_tau"] for o in orders]
    return {
        "order_tau": {"mean": statistics.fmean(taus), "median": statistics.median(taus)},
        "parallelism_profile": [statistics.fmean(t) for t in zip(*(o["parallelism_profile"] for o in orders))],
        "last_tenth_share": statistics.fmean(o["last_tenth_share"] for o in orders),
    }


def median_split(taus: Sequence[float]) -> tuple[list[int], list[int]]:
    """Indices of the taus below and above their median. Those at the median sit in neither half, so the halves
    are the same size when the taus differ, and a set whose taus are all equal (AR) has no halves to compare."""
    if not taus:
        return [], []
    median = statistics.median(taus)
    return [i for i, t in enumerate(taus) if t < median], [i for i, t in enumerate(taus) if t > median]


def order_record(sample: Mapping[str, Any]) -> dict[str, Any]:
    """What a scored sample's record gains (its ``decode_order`` figures), where it recorded its commit steps."""
    steps = sample.get("commit_step")
    return {} if steps is None else {"decode_order": sample_order(steps)}
