"""Which speed differences a sweep's timing supports: pass-by-pass ratios, their median and a 95% interval.

A sweep re-times every point in interleaved passes (harness.sweep.retime). Two points timed in the same pass ran
seconds apart, under nearly the same load, so their ratio of tokens/s in that pass cancels most of the machine's
swings; the median ratio over passes is the speed-up, and its interval is distribution-free (the order statistics of
the ratios that cover the median with at least 95% probability: scipy.stats.quantile_test), since timing noise is
neither normal nor symmetric. A difference is supported when that interval excludes 1; otherwise it is "within
noise". Fewer than 6 passes cannot give such an interval (the min-max of 5 covers the median 94% of the time), and
one pass gives none: such ratios are "untested".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from scipy import stats as scipy_stats

CONFIDENCE = 0.95
FASTER, SLOWER, WITHIN_NOISE, UNTESTED = "faster", "slower", "within noise", "untested"


@dataclass(frozen=True)
class Ratio:
    """The median of pass-by-pass tokens/s ratios, with its interval (None when the passes are too few for one)."""

    median: float
    low: float | None
    high: float | None
    passes: int

    @property
    def verdict(self) -> str:
        """``faster`` (interval above 1), ``slower`` (below 1), ``within noise``, or ``untested`` (no interval)."""
        if self.low is None or self.high is None:
            return UNTESTED
        return FASTER if self.low > 1 else SLOWER if self.high < 1 else WITHIN_NOISE

    @property
    def supported(self) -> bool:
        return self.verdict in (FASTER, SLOWER)

    def text(self, of: str = "") -> str:
        """``3.02x{of} (95% interval 2.81-3.20x, 6 interleaved passes)``, or how little the timing says."""
        if self.low is None or self.high is None:
            passes = "one timing pass" if self.passes == 1 else f"{self.passes} timing passes"
            return (f"{self.median:.2f}x{of} ({passes}: no 95% interval, not tested against noise; "
                    f"sweep --repeats 6 gives one)")
        return (f"{self.median:.2f}x{of} (95% interval {self.low:.2f}-{self.high:.2f}x, {self.passes} interleaved "
                f"passes)")


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """A distribution-free interval of the median: the order statistics scipy's quantile test picks; (None, None)
    when there are too few values for the confidence (fewer than 6 at 95%)."""
    if len(values) < 2:
        return None, None
    interval = scipy_stats.quantile_test(list(values), q=0, p=0.5).confidence_interval(confidence)
    low, high = float(interval.low), float(interval.high)
    return (None, None) if math.isnan(low) or math.isnan(high) else (low, high)


def pass_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
    """Tokens/s of one point over another's, pass by pass (the i-th values were timed in the same pass)."""
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError(f"pass_ratio needs the same number of passes on both sides, got {len(numerator)} and "
                         f"{len(denominator)}")
    ratios = [n / d for n, d in zip(numerator, denominator)]
    low, high = median_interval(ratios)
    return Ratio(statistics.median(ratios), low, high, len(ratios))


def speed_ratio(numerator: float, denominator: float, numerator_passes: Sequence[float] | None,
                denominator_passes: Sequence[float] | None) -> Ratio:
    """One point's tokens/s over another's: pass by pass when both were re-timed in the same passes, else the ratio
    of their single figures, untested."""
    if numerator_passes and denominator_passes and len(numerator_passes) == len(denominator_passes):
        return pass_ratio(numerator_passes, denominator_passes)
    return Ratio(numerator / denominator, None, None, 1)
