"""Plain LLaDA's and Dream's rows in flight as batched rounds: 32 rows of 40 prompts decode as each prompt alone
(rows at different blocks and steps commit their own counts in one op), the LM head at the cells a step reads gives
the full head's values, and a greedy round's ops and host reads do not grow with the rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.timing.op_count import OpCounter
from models.decoders.dream import DREAM, DreamConfig
from models.decoders.llada import LLADA, LLaDAConfig
from models.decoders.sampling import row_seed
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.loading import build_network
from test_diffusion_stream import DREAMS, LLADAS, MASK, V, assert_rows_decode_alone, native, stub

# 40 prompts of 2 to 13 ids, every seventh holding the mask id (its row's blocks then open before the block)
MANY = [[MASK if (i % 7 == 3 and j == 1) else (5 * i + 3 * j) % 12 for j in range(2 + i % 12)] for i in range(40)]
SEEDS = tuple(row_seed(99, str(i)) for i in range(len(MANY)))
AT_32 = {
    "llada greedy": (LLADA, LLADAS["greedy"]),
    "llada blocks, end of sequence deferred (ties)": (LLADA, dataclasses.replace(LLADAS["eos-options"], block_length=4,
                                                                                 steps=4)),
    "llada cfg": (LLADA, LLADAS["cfg"]),
    "llada gumbel, seeded": (LLADA, LLADAS["gumbel"]),
    "llada random remasking, seeded": (LLADA, LLADAS["random-remasking"]),
    "dream entropy": (DREAM, DREAMS["entropy"]),
    "dream margin top-p": (DREAM, DREAMS["margin-top-p"]),
    "dream origin, seeded": (DREAM, DREAMS["origin"]),
    "dream alg_temp, seeded": (DREAM, DREAMS["maskgit-alg-temp"]),
}
NETWORKS = {"llada": tiny_llada_config, "dream": tiny_dream_config}


@pytest.mark.parametrize("network", [lambda kind: stub("rope" if kind == "llada" else "absolute"),
                                     lambda kind: native(NETWORKS[kind](V))], ids=["stub", "native"])
@pytest.mark.parametrize("name", list(AT_32))
def test_32_rows_of_40_prompts_decode_as_alone(network, name):
    """The stub's logits are the whole canvas's (gathered at the cells read); the native network's head runs at
    those cells alone."""
    decoder, config = AT_32[name]
    assert_rows_decode_alone(decoder, network(decoder.name), config, SEEDS if "seeded" in name else None, MANY, 32)


@pytest.mark.parametrize("kind", list(NETWORKS))
def test_the_head_at_cells_is_the_full_head_there(kind):
    """``forward(read=cells)`` against the full forward's logits at those cells, right-padded rows included."""
    network = build_network(NETWORKS[kind](V), seed=0)
    ids = torch.tensor([[3, 7, 2, 9, 15, 15], [4, 1, 15, 15, 15, 15]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    cells = torch.tensor([4, 5, 2, 3, 0, 2])
    with torch.no_grad():
        full = network(ids, attention_mask=mask).flatten(0, 1)[cells]
        torch.testing.assert_close(network(ids, attention_mask=mask, read=cells), full)


def prompts(count: int) -> list[torch.Tensor]:
    """``count`` prompts of 16 ids (one width: every round's counts and widths are then the same at any size)."""
    base = torch.randint(0, 200, (40,), generator=torch.Generator().manual_seed(3))
    return [base.roll(i)[:16] for i in range(count)]


@pytest.mark.parametrize("decoder,config", [
    (LLADA, LLaDAConfig(gen_length=64, steps=32, block_length=32, mask_id=255, eos_id=256, eot_id=257)),
    (DREAM, DreamConfig(max_new_tokens=64, steps=32, mask_id=255, eos_ids=(256,)))], ids=["llada", "dream"])
def test_a_greedy_round_costs_the_same_ops_and_reads_at_any_number_of_rows(decoder, config):
    """Counted outside the network's calls (harness/timing/op_count.py), 2N prompts through N rows: the same ops
    per call at 8 rows as at 1, and at most two host reads a round."""
    configs = {"llada": tiny_llada_config, "dream": tiny_dream_config}
    network = build_network(configs[decoder.name](256), seed=0)
    per_call = {}
    for rows in (1, 8):
        requests = prompts(2 * rows)
        with torch.inference_mode(), OpCounter(network) as counts:
            steps = list(decoder.stream(network, requests, config, rows, None))
        per_call[rows] = counts.per_forward()
        assert counts.forwards == len(steps) and counts.read_count <= 2 * len(steps)
    assert per_call[8] == per_call[1]
