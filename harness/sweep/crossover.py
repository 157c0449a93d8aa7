"""Where two throughput-against-batch-size curves cross.

Rule: each curve is interpolated linearly in log2(batch size) between its measured batch sizes, over the range both
curves cover (no extrapolation); a crossover is a batch size where the difference of the two changes sign. Between
two measured sizes the difference is linear in log2(batch size), so the crossing there is exact under the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class Crossing:
    batch_size: float
    faster_after: int  # 0: the first curve is faster above this batch size, 1: the second


def crossings(first: Mapping[int, float], second: Mapping[int, float]) -> list[Crossing]:
    """Every crossover of two curves given as {batch size: tokens/s}, in increasing batch size."""
    lo, hi = max(min(first), min(second)), min(max(first), max(second))
    xs = np.log2(sorted({b for b in (*first, *second) if lo <= b <= hi}))
    if len(xs) < 2:
        return []

    def curve(points: Mapping[int, float]) -> np.ndarray:
        sizes = sorted(points)
        return np.interp(xs, np.log2(sizes), [points[b] for b in sizes])

    diff = curve(first) - curve(second)
    out: list[Crossing] = []
    last: int | None = None  # index of the last point where the curves differ
    for i, d in enumerate(diff):
        if d == 0:
            continue
        if last is not None and math.copysign(1, d) != math.copysign(1, diff[last]):
            if last == i - 1:  # linear between the two: the root of the difference
                x = xs[last] + (xs[i] - xs[last]) * diff[last] / (diff[last] - d)
            else:  # equal at one or more measured sizes in between: the first of them
                x = xs[last + 1]
            out.append(Crossing(float(2 ** x), 0 if d > 0 else 1))
        last = i
    return out
