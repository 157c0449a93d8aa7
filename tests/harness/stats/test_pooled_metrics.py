"""A metric a task weights per sample (diagnostics' ``weights``) is aggregated as a pooled ratio; others stay means."""

from __future__ import annotations

import math

import pytest

from harness.stats.aggregate import metric_table

POOLED, PLAIN = "pooled,none", "plain,none"


def record(followed: int, units: int) -> dict:
    return {"scores": {POOLED: followed / units, PLAIN: float(followed == units)},
            "diagnostics": {"weights": {POOLED: units}}}


def test_a_weighted_metric_pools_its_units_and_the_others_stay_means_over_samples():
    records = [record(1, 1), record(0, 3), record(2, 4)]  # 3 of 8 units; the mean of the shares would be 0.5
    table = metric_table(records)
    assert table[POOLED]["value"] == pytest.approx(3 / 8) and table[POOLED]["n"] == 3
    assert table[PLAIN]["value"] == pytest.approx(1 / 3)
    # ratio estimator: sqrt(n / (n - 1) * sum(w_i^2 (x_i - R)^2)) / sum(w)
    residuals = (1 - 3 / 8) ** 2 + (3 * (0 - 3 / 8)) ** 2 + (4 * (0.5 - 3 / 8)) ** 2
    stderr = math.sqrt(1.5 * residuals) / 8
    assert table[POOLED]["stderr"] == pytest.approx(stderr)
    assert table[POOLED]["ci95"] == pytest.approx([3 / 8 - 1.96 * stderr, 3 / 8 + 1.96 * stderr])


def test_equal_weights_give_the_plain_mean():
    records = [record(1, 2), record(2, 2), record(0, 2)]
    assert metric_table(records)[POOLED]["value"] == pytest.approx(0.5)
