"""The decode step a GPU does not wait on, as counts (benchmarks/step_ops.py): for every decoder, host reads per
forward stay <= 2 at batch 1, 8 and 16, ops outside the network per forward grow at most 2x from batch 1 to 8 and
2.5x to 16, and no row's tokens change with the batch."""

from __future__ import annotations

import pytest
import torch

from harness.timing.op_count import OpCounter
from step_ops import CASES, measure, verdicts


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reads_and_ops_per_forward_stay_within_the_targets(case):
    rows = measure([case], [1, 8, 16], canvas=64)  # raises if a batch changes a row's tokens
    assert all(r.counts.forwards > 0 for r in rows)
    assert verdicts(rows) == []


def test_the_counter_sees_each_kind_of_host_read_and_keeps_forwards_apart():
    layer = torch.nn.Linear(4, 4)
    x = torch.ones(3, 4)
    with torch.inference_mode(), OpCounter(layer) as counts:
        y = layer(x)  # inside a forward: not the decoder's ops
        bool(y.sum() > 0), y.max().item(), y.tolist(), y[y > 0], (y > 0).nonzero()
        y.argmax(-1)
    assert counts.forwards == 1
    assert counts.reads == {"aten::is_nonzero": 1, "aten::item": 1, "Tensor.tolist": 1, "aten::index": 1,
                            "aten::nonzero": 1}
    assert "aten::addmm" not in counts.ops and counts.ops["aten::argmax"] == 1
