"""The step op counter (harness/timing/op_count.py) against a region whose ops and host reads are known."""

from __future__ import annotations

import torch

from harness.timing.op_count import OpCounter


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
