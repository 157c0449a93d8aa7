"""Can the gate see the drop it is asked to tolerate? The smallest drop each accuracy test could declare significant.

The rule (stated in docs/report_and_gate.md): a drop of ``d`` items is *detectable* when, in the most favourable case
for detection (every changed item went right -> wrong, none back; for unpaired runs a baseline at 100%), its exact
p-value is below ``alpha / m``, where ``m`` is the number of (model, task) comparisons Holm corrects across.
``alpha / m`` is Holm's first (strictest) step, the only threshold that guarantees significance whatever the other
tasks show. The gate flags drops larger than the tolerance, so the tolerance is detectable when the smallest drop
above it, ``floor(tolerance * n / 100) + 1`` items, is itself detectable. Real power is lower: wrong -> right pairs
dilute the test. This is a necessary condition, not a power calculation at a chosen effect size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scipy import stats as scipy_stats

from harness.stats.estimates import mcnemar_exact

NOT_GATED_POINTS = 100.0  # a tolerance of 100 points tolerates every drop: accuracy is then not gated


@dataclass(frozen=True)
class Power:
    """What one accuracy comparison can detect."""

    test: str  # "mcnemar" | "fisher" | "clustered" (items' means of repeated samples) | "none" (graded scores)
    n: int  # paired items (McNemar, clustered) or candidate items (Fisher)
    min_items: int | None  # the smallest detectable drop in items; None when no drop of at most n items is
    threshold: float  # alpha / m
    item_sd: float | None = None  # clustered: the spread of an item's mean score (significance.clustered_test)

    @property
    def min_drop_points(self) -> float | None:
        if self.test == "clustered":
            return clustered_min_points(self.item_sd, self.n, self.threshold)
        return None if self.min_items is None else 100.0 * self.min_items / self.n

    def detects(self, tolerance_points: float) -> bool:
        """Whether the smallest drop the gate would flag at this tolerance is also significant."""
        if self.test == "none" or tolerance_points >= NOT_GATED_POINTS:
            return True
        if self.test == "clustered":
            smallest = self.min_drop_points
            return smallest is not None and smallest <= tolerance_points
        return self.min_items is not None and smallest_flagged(tolerance_points, self.n) >= self.min_items


def smallest_flagged(tolerance_points: float, n: int) -> int:
    """The fewest lost items whose drop exceeds the tolerance (1e-9 absorbs float error in tolerance * n)."""
    return math.floor(tolerance_points * n / 100.0 + 1e-9) + 1


@lru_cache(maxsize=256)
def mcnemar_min_items(threshold: float, limit: int) -> int | None:
    """Smallest d <= limit with the exact McNemar p of (d right->wrong, 0 back) below the threshold."""
    for d in range(1, limit + 1):
        if mcnemar_exact(d, 0) < threshold:
            return d
    return None


@lru_cache(maxsize=256)
def fisher_min_items(threshold: float, n_base: int, n_cand: int) -> int | None:
    """Smallest k <= n_cand with Fisher's p (baseline all right, candidate k wrong) below the threshold."""
    for k in range(1, n_cand + 1):
        if float(scipy_stats.fisher_exact([[n_base, 0], [n_cand - k, k]]).pvalue) < threshold:
            return k
    return None


def clustered_min_points(item_sd: float | None, n: int, threshold: float) -> float | None:
    """The smallest drop in points a two-sided z-test over n items' means reaches ``threshold`` at, when an item's
    figure spreads by ``item_sd`` on either side together (sqrt(var_b + var_c): the paired test does at least as
    well when the two runs' items move together). None where the spread is unknown (fewer than two items)."""
    if item_sd is None or math.isnan(item_sd) or n < 2:
        return None
    return clustered_scale(item_sd, threshold) / math.sqrt(n)


def clustered_scale(item_sd: float, threshold: float) -> float:
    """``clustered_min_points`` times sqrt(n): the bound in points were there one item."""
    return 100.0 * float(scipy_stats.norm.isf(threshold / 2)) * item_sd


def clustered_power(n: int, item_sd: float | None, alpha: float, m: int) -> Power:
    return Power("clustered", n, None, alpha / m, item_sd)


def paired_power(n: int, alpha: float, m: int) -> Power:
    threshold = alpha / m
    return Power("mcnemar", n, mcnemar_min_items(threshold, n), threshold)


def unpaired_power(n_base: int, n_cand: int, alpha: float, m: int) -> Power:
    threshold = alpha / m
    return Power("fisher", n_cand, fisher_min_items(threshold, n_base, n_cand), threshold)


def no_power(n: int, alpha: float, m: int) -> Power:
    return Power("none", n, None, alpha / m)


def items_needed(power: Power, tolerance_points: float, cap: int = 10_000_000) -> int | None:
    """The smallest n (paired items, or items per side for Fisher) at which this tolerance is detectable; None when
    no n up to ``cap`` is (a tolerance of 0 never is: one lost item is never significant)."""
    def ok(n: int) -> bool:
        if power.test == "mcnemar":
            trial = Power("mcnemar", n, mcnemar_min_items(power.threshold, n), power.threshold)
        else:
            trial = Power("fisher", n, fisher_min_items(power.threshold, n, n), power.threshold)
        return trial.detects(tolerance_points)

    if tolerance_points <= 0:
        return None
    if power.test == "clustered":  # the bound shrinks as 1 / sqrt(n): solved directly
        if power.item_sd is None or math.isnan(power.item_sd):
            return None
        needed = max(2, math.ceil((clustered_scale(power.item_sd, power.threshold) / tolerance_points) ** 2))
        return needed if needed <= cap else None
    high = max(power.n, 1)
    while not ok(high):
        high *= 2
        if high > cap:
            return None
    low = high // 2
    while low + 1 < high:  # detectability only improves with n: more items, smaller p for the same share lost
        mid = (low + high) // 2
        low, high = (low, mid) if ok(mid) else (mid, high)
    return high
