"""How far a decode ran left to right: Kendall's tau between each token's position and its commit step.

A sample's ``commit_step`` (models/decoders/contract.py ``DecodeResult``) holds, per generated token, the forward at
which it was committed. Positions never tie; steps do (a diffusion step commits several tokens), so the statistic is
tau-b: tied pairs count neither way, and the denominator sqrt(pairs * (pairs - tied)) keeps it in [-1, 1]. It is
exactly 1.0 only when each token was committed after the one before it (autoregressive decoding); a decode that runs
left to right a step of several tokens at a time scores sqrt(1 - tied / pairs), just below.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from typing import Sequence


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
