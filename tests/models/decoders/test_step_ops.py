"""The decode step a GPU does not wait on, as counts (benchmarks/step_ops.py): for every decoder, host reads per
forward stay <= 2 at batch 1, 8 and 16, ops outside the network per forward grow at most 2x from batch 1 to 8 and
2.5x to 16, and no row's tokens change with the batch."""

from __future__ import annotations

import pytest
from benchmarks.step_ops import CASES, measure, verdicts


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reads_and_ops_per_forward_stay_within_the_targets(case):
    rows = measure([case], [1, 8, 16], canvas=64)  # raises if a batch changes a row's tokens
    assert all(r.counts.forwards > 0 for r in rows)
    assert verdicts(rows) == []
