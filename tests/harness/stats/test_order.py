"""``order_tau`` against scipy's Kendall tau-b, and its exact values where the order is known."""

from __future__ import annotations

import math
import random

import pytest
from scipy.stats import kendalltau

from harness.stats.order import order_tau


def test_left_to_right_is_exactly_one_and_right_to_left_minus_one():
    assert order_tau(range(1, 513)) == 1.0  # autoregressive: a token per forward, in order
    assert order_tau([1, 1, 2, 2, 2, 5]) == pytest.approx(math.sqrt(1 - 4 / 15))  # left to right, steps of many
    assert order_tau([4, 3, 2, 1]) == -1.0


def test_no_order_to_measure_is_nan():
    assert math.isnan(order_tau([]))
    assert math.isnan(order_tau([3]))
    assert math.isnan(order_tau([2, 2, 2]))


@pytest.mark.parametrize("seed", range(20))
def test_matches_scipy_tau_b_with_ties(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 300)
    steps = [rng.randint(1, rng.randint(1, 40)) for _ in range(n)]
    expected = kendalltau(range(n), steps, variant="b").statistic
    if math.isnan(expected):
        assert math.isnan(order_tau(steps))
    else:
        assert order_tau(steps) == pytest.approx(expected, abs=1e-12)
