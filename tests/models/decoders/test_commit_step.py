"""Every decoder's ``commit_step`` (and LLaDA2.1's ``edits``) against decodes whose order is known: scripted networks
whose confidences set the order by hand, the positions each call of a full-sequence decoder saw filled, and every row
of a left-padded static batch against the row decoded alone (rows in flight against alone: test_diffusion_stream,
test_block_diffusion, test_refusion_batch)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from block_stubs import RecomputeNetwork, table_logits
from diffusion_stubs import ScriptedNet, commits_per_call, one_hot_table, per_position_logits
from harness.stats.order import order_tau
from models.decoders.ar import AR, ARConfig
from models.decoders.block_diffusion import BlockDiffusionConfig
from models.decoders.contract import DecodeResult
from models.decoders.dream import DREAM, DreamConfig, dream_generate
from models.decoders.fastdllm.dream_sampler import FAST_DREAM, FastDreamConfig, fastdllm_dream_generate
from models.decoders.fastdllm.llada_sampler import FAST_LLADA, FastLLaDAConfig, fastdllm_llada_generate
from models.decoders.llada import LLADA, LLaDAConfig, llada_generate
from models.decoders.refusion.decoder import refusion_decode_row
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.qwen3 import Qwen3Network, Qwen3NetworkConfig
from test_block_diffusion import EOS as EOS_BLOCK
from test_block_diffusion import V as V_BLOCK
from test_block_diffusion import LLADA2, SDAR, V2, decode, next_filled_logits, one_hot
from test_diffusion_stream import DREAMS, FAST_DREAMS, FAST_LLADAS, LLADAS, PROMPTS, SEEDS, native, stub
from test_refusion import scripted, scripted_config

V, MASK, EOS, EOT = 16, 15, 14, 13


def heights_table(heights: list[float], prompt_len: int, shift: int = 0) -> torch.Tensor:
    """Logits over a prompt of ``prompt_len`` and a canvas whose position p proposes token p (never the mask or an
    end) at one-hot height ``heights[p]``: its confidence rises with it, so the heights set the order. ``shift``
    moves each row one column earlier (Dream scores position i by the output at i - 1)."""
    targets = [0] * (prompt_len - shift) + list(range(len(heights))) + [0] * shift
    table = one_hot_table(targets, V)
    for p, height in enumerate(heights):
        table[prompt_len - shift + p, p] = height
    return table


def filled_at(net: ScriptedNet, prompt: torch.Tensor, canvas: torch.Tensor) -> tuple[int, ...]:
    """Row 0's canvas: the 1-based call after which each position went from mask to token, read from what the
    network was fed (an independent record of the commit order)."""
    commits = commits_per_call(net.calls, torch.cat([prompt, canvas], dim=1), MASK)
    return tuple(next(i + 1 for i, c in enumerate(commits) if c[0, prompt.shape[1] + column])
                 for column in range(canvas.shape[1]))


# ---- known orders, scripted by hand -----------------------------------------------------------------------------
def test_ar_commits_a_token_per_forward_in_order():
    torch.manual_seed(0)
    net = Qwen3Network(Qwen3NetworkConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=8)).eval()
    cfg = ARConfig(max_new_tokens=12, eos_ids=(63,), pad_id=0)
    prompts = [torch.tensor(p) for p in ([3, 4, 5], [6, 7], [8, 9, 10, 11, 12])]
    batch = AR.generate(net, torch.stack([torch.cat([torch.zeros(5 - len(p), dtype=torch.long), p])
                                          for p in prompts]),
                        torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1], [1] * 5]), cfg)
    flown = dict(item for step in AR.stream(net, prompts, cfg, 2, None) for item in step.finished)
    for i, row in enumerate(batch.rows):
        assert row.commit_step == tuple(range(1, len(row.token_ids) + 1)) == flown[i].commit_step
        assert order_tau(row.commit_step) == 1.0


def test_llada_commits_the_most_confident_mask_of_the_block_each_step():
    """One token per step: in one block the heights' order (3 1 4 2); in two blocks of two, block by block."""
    net = ScriptedNet(per_position_logits(heights_table([2.0, 4.0, 1.0, 3.0], 1)))
    base = LLaDAConfig(gen_length=4, steps=4, block_length=4, mask_id=MASK, eos_id=EOS, eot_id=EOT)
    (row,) = llada_generate(net, torch.tensor([[1]]), None, base).rows
    assert row.commit_step == (3, 1, 4, 2) and row.token_ids == [0, 1, 2, 3]
    (row,) = llada_generate(net, torch.tensor([[1]]), None, dataclasses.replace(base, block_length=2)).rows
    assert row.commit_step == (2, 1, 4, 3)
    assert order_tau(row.commit_step) == pytest.approx(1 / 3)  # of 6 pairs 4 in order, 2 not, none tied


def test_dream_commits_the_most_confident_masks_as_the_calls_saw():
    """Scored by the output one column earlier, in the heights' order: Dream's schedule (eps > 0) takes one token at
    the first of two steps, the rest at the last."""
    net = ScriptedNet(per_position_logits(heights_table([1.0, 5.0, 4.0, 2.0], 2, shift=1)))
    cfg = DreamConfig(max_new_tokens=4, steps=2, alg="maskgit_plus", mask_id=MASK, eos_ids=(EOS,))
    prompt = torch.tensor([[1, 2]])
    out = dream_generate(net, prompt, None, cfg)
    assert out.rows[0].commit_step == (2, 1, 2, 2) == filled_at(net, prompt, out.tokens)


def test_fastdllm_llada_threshold_commits_every_confident_mask_at_once():
    """Heights 10 pass the threshold together; then the single best, ties to the left."""
    net = ScriptedNet(per_position_logits(heights_table([10.0, 1.0, 10.0, 1.0], 1)))
    plain = LLaDAConfig(gen_length=4, steps=4, block_length=4, mask_id=MASK, eos_id=EOS, eot_id=EOT)
    prompt = torch.tensor([[1]])
    out = fastdllm_llada_generate(net, prompt, None, FastLLaDAConfig(plain, threshold=0.9, cache="none"))
    assert out.rows[0].commit_step == (1, 2, 1, 3) == filled_at(net, prompt, out.tokens)


def test_fastdllm_dream_threshold_commits_every_confident_mask_at_once():
    net = ScriptedNet(per_position_logits(heights_table([1.0, 10.0, 1.0, 10.0], 1, shift=1)))
    dream = DreamConfig(max_new_tokens=4, steps=1, mask_id=MASK, eos_ids=(EOS,))  # one step: no carry held back
    prompt = torch.tensor([[1]])
    out = fastdllm_dream_generate(net, prompt, None, FastDreamConfig(dream, threshold=0.9, cache="none"))
    assert out.rows[0].commit_step == (2, 1, 3, 1) == filled_at(net, prompt, out.tokens)


def alone(table: torch.Tensor, prompt: list[int], cfg: BlockDiffusionConfig, gen: int) -> DecodeResult:
    """The prompt decoded alone on logits that depend on the position only (its rows in flight: the flight tests)."""
    return decode(RecomputeNetwork(table_logits(table)), [prompt], cfg, gen=gen).rows[0]


def test_block_diffusion_counts_the_prefill_peeks_and_commits():
    """A whole-block prompt (the prefill is forward 1), confidences rising along the block: one token a peek, the
    last position first (forwards 2..5), then the block's commit forward (6)."""
    table = torch.zeros(8, V_BLOCK)
    for i in range(8):
        table[i, i] = 2.0 + i
    row = alone(table, [1] * 4, SDAR, 4)
    assert row.commit_step == (5, 4, 3, 2) and row.edits is None
    assert order_tau(row.commit_step) == -1.0


def test_fastdllm_v2_first_token_takes_the_commit_forward():
    """Prefill (1) gives the block's first token, one confident peek per sub-block (2, 3), the commit (4) the next
    block's first token, then peeks 5 and 6."""
    table = one_hot([(p + 1) % 40 for p in range(40)], high=20.0)
    row = alone(table, [1] * 8, V2, 16)
    assert row.commit_step == (1, 2, 2, 2, 3, 3, 3, 3, 4, 5, 5, 5, 6, 6, 6, 6)


def test_llada2_fused_commit_counts_one_forward_a_step():
    """The first peek writes the prompt's whole block and fills the rest of its last block at once; one peek a
    block after it. One token a step with ``eos_early_stop``: the end of sequence at the second stops the row."""
    row = alone(one_hot(list(range(16)), high=20.0), [1] * 6, LLADA2, 10)
    assert row.commit_step == (1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
    table = torch.zeros(8, V_BLOCK)
    for position, token, sharpness in [(4, 7, 20.0), (5, EOS_BLOCK, 12.0), (6, 8, 8.0), (7, 9, 5.0)]:
        table[position, token] = sharpness
    one_a_step = dataclasses.replace(LLADA2, confidence_threshold=1.0)
    early = alone(table, [1] * 4, dataclasses.replace(one_a_step, eos_early_stop=True), 4)
    assert early.token_ids == [7, EOS_BLOCK] and early.commit_step == (1, 2)


def test_llada21_records_the_last_retake_and_counts_the_edits():
    """The first step fills the block, the second re-takes three tokens, the third changes nothing."""
    cfg = dataclasses.replace(LLADA2, edit_threshold=0.5, max_post_edit_steps=4)
    (row,) = decode(RecomputeNetwork(next_filled_logits), [[1] * 4], cfg, gen=4).rows
    assert row.token_ids == [34, 35, 36, 27] and row.commit_step == (2, 2, 2, 1) and row.edits == 3
    (plain,) = decode(RecomputeNetwork(next_filled_logits), [[1] * 4], dataclasses.replace(cfg, edit_threshold=None),
                      gen=4).rows
    assert plain.commit_step == (1, 1, 1, 1) and plain.edits is None


def test_refusion_commits_a_slot_per_plan_and_verify():
    """slot_threshold 1: the best slot each round (1, 3, 2, 0), each round a plan and a verify forward."""
    p, net = 4, scripted(20)
    for j, confidence in enumerate([0.5, 0.8, 0.6, 0.7]):
        net.plan_conf[p + 4 * j] = confidence
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net, slot_threshold=1.0,
                                                                                  token_threshold=0.9))
    assert out.commit_step == (8,) * 4 + (2,) * 4 + (6,) * 4 + (4,) * 4


# ---- a static batch gives each row its record alone --------------------------------------------------------------
def batch_and_alone(decoder: Any, network: torch.nn.Module, config: Any, seeds: tuple[int, ...] | None) -> None:
    """PROMPTS left-padded into one batch: each row's tokens and commit steps are its decode alone's."""
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    batch = decoder.generate(network, ids, mask, config, **({} if seeds is None else {"row_seeds": seeds}))
    for i, prompt in enumerate(PROMPTS):
        extra = {} if seeds is None else {"row_seeds": (seeds[i],)}
        (alone,) = decoder.generate(network, torch.tensor([prompt]), None, config, **extra).rows
        assert (batch.rows[i].token_ids, batch.rows[i].commit_step) == (alone.token_ids, alone.commit_step), i
        assert len(alone.commit_step) == len(alone.token_ids) and min(alone.commit_step) >= 1


@pytest.mark.parametrize("name", list(LLADAS))
def test_llada_batch_rows_commit_as_alone(name):
    config = LLADAS[name]
    batch_and_alone(LLADA, stub("rope"), config, SEEDS if config.temperature > 0 or config.remasking == "random"
                    else None)


@pytest.mark.parametrize("name", list(DREAMS))
def test_dream_batch_rows_commit_as_alone(name):
    config = DREAMS[name]
    samples = config.temperature > 0 or config.alg == "origin" or bool(config.alg_temp)
    batch_and_alone(DREAM, stub("absolute"), config, SEEDS if samples else None)


# A sampling row of a Fast-dLLM static batch also draws in the steps it idles through (its block done, another's
# not), so its tokens are not its alone's; its rows in flight are (test_diffusion_stream).
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("name", ["top-k", "threshold"])
def test_fastdllm_llada_batch_rows_commit_as_alone(cache, name):
    """With a threshold a batch steps each block until its slowest row is done: the others' idle steps are not
    theirs."""
    batch_and_alone(FAST_LLADA, native(tiny_llada_config(V)), dataclasses.replace(FAST_LLADAS[name], cache=cache),
                    None)


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("name", ["entropy", "threshold", "one-token-blocks"])
def test_fastdllm_dream_batch_rows_commit_as_alone(cache, name):
    batch_and_alone(FAST_DREAM, native(tiny_dream_config(V)), dataclasses.replace(FAST_DREAMS[name], cache=cache),
                    None)
