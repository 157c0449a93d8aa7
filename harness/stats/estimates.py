"""Statistics the harness reports: means with lm-eval's standard error, Wilson intervals, paired tests."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats


@dataclass(frozen=True)
class MetricSummary:
    value: float
    stderr: float
    ci95: tuple[float, float]
    n: int

    def as_dict(self) -> dict:
        return {"value": self.value, "stderr": self.stderr, "ci95": list(self.ci95), "n": self.n}


def mean_stderr(values: Sequence[float]) -> float:
    """Sample standard deviation over sqrt(n), as lm-eval's ``mean_stderr``; for 0/1 values sqrt(p(1-p)/(n-1))."""
    n = len(values)
    if n < 2:
        return float("nan")
    return float(np.std(np.asarray(values, dtype=float), ddof=1) / math.sqrt(n))


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion; well behaved at 0, at 1 and for small n, unlike the normal one."""
    if n == 0:
        return (float("nan"), float("nan"))
    z = scipy_stats.norm.ppf(0.5 + confidence / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(values: Sequence[float]) -> MetricSummary:
    """Mean, stderr and a 95% interval: Wilson for 0/1 scores, normal otherwise."""
    n = len(values)
    if n == 0:
        nan = float("nan")
        return MetricSummary(nan, nan, (nan, nan), 0)
    mean = float(np.mean(values))
    stderr = mean_stderr(values)
    if all(v in (0.0, 1.0) for v in values):
        interval = wilson_interval(sum(values), n)
    else:
        half = 1.96 * stderr if not math.isnan(stderr) else float("nan")
        interval = (mean - half, mean + half)
    return MetricSummary(mean, stderr, interval, n)


def mcnemar_exact(right_to_wrong: int, wrong_to_right: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test on the discordant pairs."""
    discordant = right_to_wrong + wrong_to_right
    if discordant == 0:
        return 1.0
    return float(scipy_stats.binomtest(right_to_wrong, discordant, 0.5).pvalue)


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control across the tasks compared)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
