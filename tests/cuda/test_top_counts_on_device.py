"""The plain LLaDA and Dream streams commit each row's own count with ``top_counts``, which on CUDA lets rows of
different widths share one ``torch.topk`` (``topk_ignores_padding``: the radix select takes equal values in index
order, so -inf columns past a row change nothing). Checked here on the device against topk on each row alone, with
ties in almost every row. Skipped without CUDA; ``DLLM_TEST_DEVICE=cpu`` runs it on the CPU."""

from __future__ import annotations

import os

import pytest
import torch

from models.decoders.sampling import top_counts
from test_sampling import tied_rows

DEVICE = torch.device(os.environ.get("DLLM_TEST_DEVICE", "cuda"))
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    pytest.skip("needs a CUDA device: run benchmarks/device_check.sh on a GPU box", allow_module_level=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("max_width", [40, 700, 3000])
def test_top_counts_picks_what_topk_picks_on_each_row_alone_on_the_device(max_width, dtype):
    generator = torch.Generator().manual_seed(max_width)
    for _ in range(20):
        scores, counts, widths = tied_rows(generator, 32, max_width)
        scores = scores.to(DEVICE, dtype)
        chosen = top_counts(scores, counts, widths).cpu()
        for row, (count, width) in enumerate(zip(counts, widths)):
            alone = torch.zeros(max_width, dtype=torch.bool)
            alone[torch.topk(scores[row:row + 1, :width], count).indices[0].cpu()] = True
            assert torch.equal(chosen[row], alone), (row, count, width)
