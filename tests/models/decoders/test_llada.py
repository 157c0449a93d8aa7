"""LLaDA sampler invariants (docs/decoders.md §2) on scripted and tiny networks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from scipy.stats import chisquare

from diffusion_stubs import (
    ScriptedNet,
    TinyBidirectionalNet,
    commits_per_call,
    log_probs_row,
    one_hot_table,
    per_position_logits,
)
from models.decoders.contract import ConfigError, DecodeResult
from models.decoders.llada import LLaDAConfig, llada_at_canvas, llada_generate, validate_llada_config

V, MASK, EOS, EOT = 16, 15, 14, 13
BASE = LLaDAConfig(gen_length=8, steps=8, block_length=8, mask_id=MASK, eos_id=EOS, eot_id=EOT)


def cfg(**changes) -> LLaDAConfig:
    return dataclasses.replace(BASE, **changes)


def peaked_table(length: int, tokens: list[int], heights: list[float]) -> torch.Tensor:
    """Logits whose row i peaks at tokens[i] with height heights[i] (higher = more confident), 0 elsewhere."""
    table = torch.zeros(length, V)
    for i, (tok, h) in enumerate(zip(tokens, heights)):
        table[i, tok] = h
    return table


def commit_order(net: ScriptedNet, tokens: torch.Tensor, prompt_len: int) -> list[list[int]]:
    """Per call, the generated-region indices committed in row 0."""
    final = torch.cat([net.calls[0].x[:, :prompt_len], tokens], dim=1)
    return [(c[0].nonzero().flatten() - prompt_len).tolist() for c in commits_per_call(net.calls, final, MASK)]


# ---- configuration -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes,message",
    [
        ({"gen_length": 10, "block_length": 4}, "multiple of block_length"),
        ({"gen_length": 8, "block_length": 4, "steps": 3}, "multiple of the number of blocks"),
        ({"steps": 0}, "positive multiple"),
        ({"remasking": "top_prob"}, "unknown remasking 'top_prob'"),
        ({"temperature": -1.0}, "temperature"),
        ({"cfg_scale": -0.5}, "cfg_scale"),
        ({"gen_length": 0}, "gen_length must be >= 1"),
    ],
)
def test_bad_configs_raise_one_line_errors(changes, message):
    with pytest.raises(ConfigError, match=message) as info:
        validate_llada_config(cfg(**changes))
    assert "\n" not in str(info.value)


def test_token_ids_are_never_silent_defaults_and_the_canvas_sets_steps():
    default = LLaDAConfig()
    assert (default.gen_length, default.mask_id, default.eos_id, default.eot_id) == (None, None, None, None)
    with pytest.raises(ConfigError, match="gen_length is not set"):
        validate_llada_config(default)
    resolved = llada_at_canvas(default, 512)
    assert (resolved.gen_length, resolved.steps, resolved.block_length) == (512, 512, 512)
    validate_llada_config(resolved)
    assert llada_at_canvas(dataclasses.replace(default, steps=64, block_length=32), 256).steps == 64
    net = ScriptedNet(per_position_logits(one_hot_table([0, 5, 6, 7], V)))
    with pytest.raises(ConfigError, match="mask_id is not set") as info:
        llada_generate(net, torch.tensor([[1]]), None, dataclasses.replace(resolved, gen_length=3, steps=3,
                                                                           block_length=3))
    assert "\n" not in str(info.value)


# ---- alignment and schedule ----------------------------------------------------------------------------------------
def test_no_logit_shift_token_i_comes_from_logits_i():
    prompt = torch.tensor([[3, 4, 5]])
    f = [(7 * i + 2) % 12 for i in range(3 + 8)]
    net = ScriptedNet(per_position_logits(one_hot_table(f, V)), wrap=True)
    out = llada_generate(net, prompt, None, cfg(steps=4, block_length=4))
    assert out.tokens.tolist() == [f[3:]]


def test_one_block_steps_equal_length_is_one_token_per_forward():
    prompt = torch.tensor([[1, 2]])
    table = peaked_table(10, [0, 0] + list(range(8)), [1.0] * 2 + [float(h) for h in (3, 8, 1, 6, 2, 7, 4, 5)])
    net = ScriptedNet(per_position_logits(table))
    out = llada_generate(net, prompt, None, cfg())
    assert out.nfe == 8 and len(net.calls) == 8
    order = commit_order(net, out.tokens, 2)
    assert all(len(step) == 1 for step in order)
    # low-confidence remasking commits the most confident mask first
    assert [step[0] for step in order] == [1, 5, 3, 7, 6, 0, 4, 2]
    assert out.tokens.tolist() == [list(range(8))]


def test_blocks_counts_and_frozen_tokens():
    """Block b is finished after its steps, later blocks stay masked, each step commits k[i], nothing is rewritten."""
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=1)
    prompt = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    c = cfg(gen_length=12, block_length=4, steps=9)  # 3 steps per block over 4 masks: k = [2, 1, 1]
    out = llada_generate(net, prompt, None, c)
    assert out.nfe == 9 and len(net.calls) == 9
    states = [call.x for call in net.calls] + [torch.cat([prompt, out.tokens], 1)]
    commits = commits_per_call(net.calls, states[-1], MASK)
    for call_index, (before, after, committed) in enumerate(zip(states[:-1], states[1:], commits)):
        block, step = divmod(call_index, 3)
        start, end = 4 + 4 * block, 8 + 4 * block
        assert committed.sum(1).tolist() == [[2, 1, 1][step]] * 2
        assert not committed[:, end:].any() and not committed[:, :start].any()
        assert (after[:, end:] == MASK).all()
        decoded = before != MASK
        assert torch.equal(after[decoded], before[decoded])
        if step == 2:
            assert (after[:, start:end] != MASK).all()
    assert (out.tokens != MASK).all()


def test_transfer_counts_are_per_row_with_uneven_split():
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=2)
    out = llada_generate(net, torch.tensor([[1, 2], [3, 4]]), None, cfg(gen_length=5, block_length=5, steps=3))
    commits = commits_per_call(net.calls, torch.cat([net.calls[0].x[:, :2], out.tokens], 1), MASK)
    assert [c.sum(1).tolist() for c in commits] == [[2, 2], [2, 2], [1, 1]]


def test_zero_temperature_is_deterministic_and_ignores_seed():
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=3)
    prompt = torch.tensor([[1, 5, 9]])
    a = llada_generate(net, prompt, None, cfg(seed=1))
    b = llada_generate(net, prompt, None, cfg(seed=2))
    assert torch.equal(a.tokens, b.tokens)


# ---- temperature and remasking -------------------------------------------------------------------------------------
def test_temperature_sampling_follows_softmax_over_temperature():
    logits = torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5] + [-1e9] * (V - 5))
    table = torch.stack([torch.zeros(V), logits])
    net = ScriptedNet(per_position_logits(table))
    n, temperature = 4000, 0.8
    out = llada_generate(net, torch.zeros(n, 1, dtype=torch.long), None, cfg(gen_length=1, steps=1, block_length=1,
                                                                             temperature=temperature, seed=11))
    counts = torch.bincount(out.tokens.flatten(), minlength=V).double()
    assert counts[5:].sum() == 0
    expected = torch.softmax(logits[:5].double() / temperature, -1) * n
    assert chisquare(counts[:5].numpy(), expected.numpy()).pvalue > 1e-3


def test_seeded_sampling_is_reproducible():
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=4)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    runs = [llada_generate(net, prompt, None, cfg(temperature=1.0, seed=s)).tokens for s in (7, 7, 8)]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_random_remasking_is_seeded_and_ignores_confidence():
    heights = [float(h) for h in (8, 7, 6, 5, 4, 3, 2, 1)]
    table = peaked_table(9, [0] + list(range(8)), [1.0] + heights)
    orders = []
    for seed in (0, 0, 1):
        net = ScriptedNet(per_position_logits(table))
        out = llada_generate(net, torch.tensor([[3]]), None, cfg(remasking="random", seed=seed))
        assert out.tokens.tolist() == [list(range(8))]
        orders.append(commit_order(net, out.tokens, 1))
    assert orders[0] == orders[1] != orders[2]
    assert orders[0] != [[i] for i in range(8)]  # the confidence order would be 0, 1, 2, ...


# ---- classifier-free guidance --------------------------------------------------------------------------------------
def test_cfg_doubles_the_batch_masks_the_prompt_and_mixes_logits():
    cond = torch.tensor([3.0, 2.0, 0.0] + [-5.0] * (V - 3))
    uncond = torch.tensor([3.5, 1.0, 0.0] + [-5.0] * (V - 3))
    # u + (s+1)(c-u) with s = 1: [2.5, 3.0, 0.0]: token 1 wins, though token 0 wins in both c and u

    def logits_fn(x: torch.Tensor) -> torch.Tensor:
        prompt_masked = (x[:, :2] == MASK).all(dim=1)
        rows = torch.where(prompt_masked[:, None], uncond, cond)
        return rows[:, None, :].expand(-1, x.shape[1], -1).clone()

    net = ScriptedNet(logits_fn)
    prompt = torch.tensor([[9, 4, 6], [0, 7, 8]])
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    out = llada_generate(net, prompt, mask, cfg(gen_length=4, steps=4, block_length=4, cfg_scale=1.0))
    assert out.tokens.tolist() == [[1] * 4, [1] * 4]
    assert len(net.calls) == 4 and out.nfe == 4
    for call in net.calls:
        assert call.x.shape == (4, 7)
        assert torch.equal(call.x[2:, :3], torch.full((2, 3), MASK))  # pads are masked too, as in the reference
        assert torch.equal(call.x[2:, 3:], call.x[:2, 3:])
        assert torch.equal(call.attention_mask, torch.cat([mask, torch.ones(2, 4, dtype=torch.long)], 1).repeat(2, 1))


# ---- end-of-sequence options ---------------------------------------------------------------------------------------
def test_logits_eos_inf_forbids_eos_but_not_eot():
    table = torch.zeros(5, V)
    table[:, EOS] = 9.0
    table[:, 4] = 5.0
    table[4, EOT] = 12.0
    net = ScriptedNet(per_position_logits(table))
    c = cfg(gen_length=4, steps=4, block_length=4, logits_eos_inf=True)
    out = llada_generate(net, torch.tensor([[1]]), None, c)
    assert out.tokens.tolist() == [[4, 4, 4, EOT]]
    plain = llada_generate(ScriptedNet(per_position_logits(table)), torch.tensor([[1]]), None,
                           cfg(gen_length=4, steps=4, block_length=4))
    assert plain.tokens.tolist() == [[EOS, EOS, EOS, EOT]]


def _eos_eot_table() -> torch.Tensor:
    """Gen position 0 is a sure EOS, position 1 a sure EOT, positions 2..5 ordinary tokens of falling confidence."""
    rows = [log_probs_row([1.0], V)]  # prompt
    rows.append(torch.full((V,), -20.0).index_fill(0, torch.tensor([EOS]), 0.0))
    rows.append(torch.full((V,), -20.0).index_fill(0, torch.tensor([EOT]), 0.0))
    for p in (0.9, 0.8, 0.7, 0.6):
        row = torch.full((V,), -20.0)
        row[2] = 0.0
        row[3] = float(torch.log(torch.tensor((1 - p) / p)))
        rows.append(row)
    return torch.stack(rows)


def test_confidence_eos_eot_inf_at_zero_temperature_defers_both_eos_and_eot():
    net = ScriptedNet(per_position_logits(_eos_eot_table()))
    out = llada_generate(net, torch.tensor([[1]]), None,
                         cfg(gen_length=6, steps=6, block_length=6, confidence_eos_eot_inf=True))
    assert out.tokens.tolist() == [[EOS, EOT, 2, 2, 2, 2]]
    order = [step[0] for step in commit_order(net, out.tokens, 1)]
    assert order[:4] == [2, 3, 4, 5] and sorted(order[4:]) == [0, 1]
    # without the option the sure EOS/EOT go first
    net = ScriptedNet(per_position_logits(_eos_eot_table()))
    out = llada_generate(net, torch.tensor([[1]]), None, cfg(gen_length=6, steps=6, block_length=6))
    assert sorted(step[0] for step in commit_order(net, out.tokens, 1)[:2]) == [0, 1]


def test_confidence_eos_eot_inf_at_positive_temperature_defers_only_eot():
    """The reference's aliasing quirk: with T > 0 the -inf on EOS lands on a discarded copy."""
    net = ScriptedNet(per_position_logits(_eos_eot_table()))
    c = cfg(gen_length=6, steps=6, block_length=6, confidence_eos_eot_inf=True, temperature=1e-3, seed=0)
    out = llada_generate(net, torch.tensor([[1]]), None, c)
    assert out.tokens.tolist() == [[EOS, EOT, 2, 2, 2, 2]]
    order = [step[0] for step in commit_order(net, out.tokens, 1)]
    assert order == [0, 2, 3, 4, 5, 1]


# ---- batching ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("changes", [{}, {"block_length": 4, "steps": 6}, {"cfg_scale": 0.5}])
def test_left_padding_equals_unpadded_runs(changes):
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=5)
    c = cfg(**changes)
    short, long = [3, 7, 2], [4, 1, 8, 8, 6, 5]
    batch = torch.tensor([[EOS] * 3 + short, long])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1] * 6])
    together = llada_generate(net, batch, mask, c)
    alone = [llada_generate(net, torch.tensor([p]), None, c).tokens[0] for p in (short, long)]
    assert torch.equal(together.tokens, torch.stack(alone))
    # the stub is padding-sensitive: without the mask the padded row changes
    unmasked = llada_generate(net, batch, None, c)
    assert not torch.equal(unmasked.tokens[0], alone[0])


def test_decode_results_cut_after_eos_or_eot_and_split_nfe():
    table = one_hot_table([0, 5, EOT, 6, EOS, 7, 8], V)
    net = ScriptedNet(per_position_logits(table))
    out = llada_generate(net, torch.tensor([[1], [2]]), None, cfg(gen_length=6, steps=6, block_length=6))
    orderless = [dataclasses.replace(r, commit_step=None) for r in out.rows]  # the one-hot table ties: test_commit_step
    assert orderless == [DecodeResult([5, EOT], 3.0, False, forwards=6)] * 2
    no_eos = llada_generate(ScriptedNet(per_position_logits(one_hot_table([0, 5, 6, 7], V))), torch.tensor([[1]]),
                            None, cfg(gen_length=3, steps=3, block_length=3))
    assert [dataclasses.replace(r, commit_step=None) for r in no_eos.rows] == [DecodeResult([5, 6, 7], 3.0, True,
                                                                                         forwards=3)]
