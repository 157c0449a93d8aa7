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


def test_the_counter_adds_up_the_bytes_each_copy_like_op_wrote_outside_forwards():
    layer = torch.nn.Linear(6, 6)
    a = torch.zeros(4, 6)  # float32: a row is 24 bytes
    rows = torch.ones(2, 6)
    index = torch.tensor([1, 3])
    mask = torch.tensor([True, False, True, False])
    with torch.inference_mode(), OpCounter(layer) as counts:
        layer(torch.cat([a, a]))  # the forward's own copies are not counted; the cat that feeds it is (192)
        a[index] = rows  # index_put_: two rows written (48)
        a[mask] = rows  # index_put_ by a mask: its two true rows (48)
        a[1:3] = rows  # copy_ into a slice (48)
        a[mask, 1:3] = 5.0  # index_put_ of a value: 2 rows x 2 columns (16)
        a[index]  # index: a new [2, 6] (48)
        a.to(torch.float64)  # a new [4, 6] of 8-byte elements (192)
        a.to(torch.float32), a.contiguous(), a.reshape(-1)  # each hands back its input: nothing written
        a.t().contiguous()  # a transposed copy (96)
        a.gather(1, torch.zeros(4, 2, dtype=torch.long))  # [4, 2] (32)
        a.scatter_(1, torch.zeros(4, 3, dtype=torch.long), 1.0)  # one element per index (48)
        torch.where(mask[:, None], a, rows[:1])  # [4, 6] (96)
        a.fill_(0), a.masked_fill_(mask[:, None], 1.0), a.zero_()  # constants, not copies
        a.add(1)  # computed, not copied
    assert counts.forwards == 1
    assert counts.copied == {"aten::cat": 192, "aten::index_put_": 48 + 48 + 16, "aten::copy_": 48,
                             "aten::index": 48, "aten::to": 192, "aten::contiguous": 96, "aten::gather": 32,
                             "aten::scatter_": 48, "aten::where": 96}
    assert counts.copied_bytes == 192 + 112 + 48 + 48 + 192 + 96 + 32 + 48 + 96


def test_the_decompositions_of_copies_are_counted_as_the_ops_they_decompose_into():
    """Outside inference mode ``to`` and ``contiguous`` reach the counter as ``_to_copy`` and ``clone``."""
    a = torch.zeros(3, 5, dtype=torch.int64)
    with OpCounter(torch.nn.Identity()) as counts:
        a.to(torch.int32), a.t().contiguous(), a.to(torch.int64)
        torch.nn.functional.pad(a, (1, 0))  # constant_pad_nd: a new [3, 6] of 8-byte elements
    assert counts.copied == {"aten::_to_copy": 60, "aten::clone": 120, "aten::constant_pad_nd": 144}
