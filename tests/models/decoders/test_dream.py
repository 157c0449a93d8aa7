"""Dream sampler invariants (docs/decoders.md §3) on scripted and tiny networks."""

from __future__ import annotations

import dataclasses
import math

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
from models.decoders.dream import (
    DreamConfig,
    dream_at_canvas,
    dream_generate,
    padding_inputs,
    validate_dream_config,
)

V, MASK, EOS = 16, 15, 14
BASE = DreamConfig(max_new_tokens=8, steps=4, mask_id=MASK, eos_ids=(EOS,))


def cfg(**changes) -> DreamConfig:
    return dataclasses.replace(BASE, **changes)


def commit_counts(net, prompt: torch.Tensor, tokens: torch.Tensor) -> list[list[int]]:
    final = torch.cat([net.calls[0].x[:, : prompt.shape[1]], tokens], dim=1)
    return [c.sum(1).tolist() for c in commits_per_call(net.calls, final, MASK)]


def expected_floor_schedule(masks: int, steps: int, eps: float) -> list[int]:
    """floor(remaining * (1 - s/t)) on linspace(1, eps, steps+1), computed in float64; the last step takes the rest."""
    grid = [1 + (eps - 1) * k / steps for k in range(steps + 1)]
    counts, remaining = [], masks
    for i in range(steps):
        if i == steps - 1:
            n = remaining
        else:
            exact = remaining * (1 - grid[i + 1] / grid[i])
            assert abs(exact - round(exact)) > 1e-4 or exact < 1e-4, "pick sizes away from float32 rounding edges"
            n = math.floor(exact)
        counts.append(n)
        remaining -= n
    return counts


# ---- configuration -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes,message",
    [
        ({"alg": "confidence_threshold"}, "unknown alg 'confidence_threshold'"),
        ({"steps": 0}, "steps must be >= 1"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"temperature": -0.1}, "temperature"),
        ({"alg_temp": -1.0}, "alg_temp"),
        ({"eps": 1.0}, "eps"),
    ],
)
def test_bad_configs_raise_one_line_errors(changes, message):
    with pytest.raises(ConfigError, match=message) as info:
        validate_dream_config(cfg(**changes))
    assert "\n" not in str(info.value)


def test_token_ids_are_never_silent_defaults_and_the_canvas_sets_steps():
    default = DreamConfig()
    assert (default.max_new_tokens, default.mask_id, default.eos_ids, default.eps) == (None, None, None, 1e-3)
    with pytest.raises(ConfigError, match="max_new_tokens is not set"):
        validate_dream_config(default)
    resolved = dream_at_canvas(default, 512)
    assert (resolved.max_new_tokens, resolved.steps) == (512, 512)
    validate_dream_config(resolved)
    assert dream_at_canvas(dataclasses.replace(default, steps=64), 256).steps == 64
    net = ScriptedNet(per_position_logits(one_hot_table([0, 5, 6, 7], V)))
    with pytest.raises(ConfigError, match="mask_id is not set") as info:
        dream_generate(net, torch.tensor([[1]]), None, dataclasses.replace(resolved, max_new_tokens=3, steps=3))
    assert "\n" not in str(info.value)


# ---- alignment -----------------------------------------------------------------------------------------------------
def test_logits_are_shifted_right_over_the_whole_sequence():
    f = [(5 * i + 3) % 13 for i in range(3 + 8)]
    net = ScriptedNet(per_position_logits(one_hot_table(f, V)), wrap=True)
    out = dream_generate(net, torch.tensor([[1, 2, 3]]), None, cfg())
    assert out.tokens.tolist() == [f[2:10]]  # generated position 3 + j is scored by L[2 + j]


def test_position_zero_uses_its_own_logits():
    f = [(5 * i + 3) % 13 for i in range(6)]
    net = ScriptedNet(per_position_logits(one_hot_table(f, V)))
    out = dream_generate(net, torch.zeros(1, 0, dtype=torch.long), None, cfg(max_new_tokens=6, steps=3))
    assert out.tokens.tolist() == [[f[0]] + f[:5]]


# ---- schedules -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gen,steps", [(10, 4), (7, 3), (4, 9)])
def test_commit_counts_follow_the_floor_schedule(gen, steps):
    net = TinyBidirectionalNet(V, positional="absolute", banned=(MASK,), seed=1)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = dream_generate(net, prompt, None, cfg(max_new_tokens=gen, steps=steps, alg="maskgit_plus"))
    expected = expected_floor_schedule(gen, steps, 1e-3)
    assert commit_counts(net, prompt, out.tokens) == [[n, n] for n in expected]
    assert sum(expected) == gen and (out.tokens != MASK).all() and out.nfe == steps


def test_steps_equal_to_length_wastes_the_first_step_and_doubles_the_last():
    net = TinyBidirectionalNet(V, positional="absolute", banned=(MASK,), seed=2)
    prompt = torch.tensor([[1, 2]])
    out = dream_generate(net, prompt, None, cfg(max_new_tokens=6, steps=6, alg="entropy"))
    assert commit_counts(net, prompt, out.tokens) == [[0], [1], [1], [1], [1], [2]]


# ---- confidences ---------------------------------------------------------------------------------------------------
G_TAIL = [0.38 / 13] * 13
DISTS = {
    "M": [0.6, 0.15, 0.1, 0.08, 0.07],  # highest max-prob
    "G": [0.58, 0.04] + G_TAIL,  # highest margin (0.54)
    "E": [0.55, 0.45],  # lowest entropy
    "C": [0.1] * 10,  # least sure by every measure
}


def _confidence_net() -> ScriptedNet:
    """Prompt of 2; generated positions 0..3 hold M, G, E, C. Rows are placed at i-1 (Dream's shift)."""
    rows = [log_probs_row([1.0], V)] + [log_probs_row(DISTS[k], V) for k in "MGEC"] + [log_probs_row([1.0], V)]
    return ScriptedNet(per_position_logits(torch.stack(rows)))


@pytest.mark.parametrize(
    "changes,first",
    [
        ({"alg": "maskgit_plus"}, 0),
        ({"alg": "topk_margin"}, 1),
        ({"alg": "entropy"}, 2),
        ({"alg": "maskgit_plus", "top_k": 2}, 1),  # M: .6/.75 = .8 < G: .58/.62 = .935
        ({"alg": "maskgit_plus", "top_p": 0.66}, 1),  # M keeps 2: .8 < G keeps 4 (crossing one included): .855
        ({"alg": "maskgit_plus", "alg_temp": 0.0}, 0),
    ],
)
def test_first_commit_follows_the_confidence(changes, first):
    net = _confidence_net()
    prompt = torch.tensor([[1, 2]])
    out = dream_generate(net, prompt, None, cfg(max_new_tokens=4, steps=2, **changes))
    step0 = commits_per_call(net.calls, torch.cat([prompt, out.tokens], 1), MASK)[0][0, 2:]
    assert step0.nonzero().flatten().tolist() == [first]
    assert out.tokens.tolist() == [[0, 0, 0, 0]]


def test_alg_temp_draws_only_masked_positions_and_is_seeded():
    net = TinyBidirectionalNet(V, positional="absolute", banned=(MASK,), seed=3)
    prompt = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    runs = []
    for seed in (0, 0, 1):
        net.calls.clear()
        out = dream_generate(net, prompt, None, cfg(max_new_tokens=10, steps=4, alg_temp=0.5, seed=seed))
        states = [c.x for c in net.calls] + [torch.cat([prompt, out.tokens], 1)]
        for before, after in zip(states[:-1], states[1:]):
            changed = before != after
            assert (before[changed] == MASK).all()
        assert torch.equal(states[-1][:, :4], prompt)
        runs.append([(s == MASK).tolist() for s in states])
    assert runs[0] == runs[1] != runs[2]


# ---- origin --------------------------------------------------------------------------------------------------------
def test_origin_is_seeded_and_the_last_step_unmasks_everything():
    f = [(3 * i + 1) % 13 for i in range(14)]
    patterns = []
    for seed in (4, 4, 5):
        net = ScriptedNet(per_position_logits(one_hot_table(f, V)))
        c = cfg(max_new_tokens=12, steps=3, alg="origin", seed=seed)
        out = dream_generate(net, torch.tensor([[1, 2]]), None, c)
        assert out.tokens.tolist() == [f[1:13]]
        assert (net.calls[-1].x == MASK).any()  # still masks before the last step
        patterns.append([(c.x == MASK).tolist() for c in net.calls])
    assert patterns[0] == patterns[1] != patterns[2]


def test_origin_unmasks_each_mask_with_probability_one_minus_s_over_t():
    net = ScriptedNet(per_position_logits(one_hot_table([1] * 21, V)))
    rows, gen, steps = 400, 20, 4
    out = dream_generate(net, torch.ones(rows, 1, dtype=torch.long), None,
                         cfg(max_new_tokens=gen, steps=steps, alg="origin", seed=0))
    unmasked_first = (net.calls[1].x[:, 1:] != MASK).float().mean().item()
    t1 = 1 + (1e-3 - 1) / steps
    assert abs(unmasked_first - (1 - t1)) < 0.02
    assert (out.tokens == 1).all()


# ---- temperature ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alg", ["entropy", "origin"])
def test_temperature_sampling_follows_the_truncated_softmax(alg):
    logits = torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5] + [-30.0] * (V - 5))
    net = ScriptedNet(per_position_logits(torch.stack([logits, logits])))
    n, temperature = 3000, 0.7
    out = dream_generate(net, torch.zeros(n, 1, dtype=torch.long), None,
                         cfg(max_new_tokens=1, steps=1, temperature=temperature, top_k=3, alg=alg, seed=9))
    counts = torch.bincount(out.tokens.flatten(), minlength=V).double()
    kept = [2, 0, 4]
    assert counts.sum() == counts[kept].sum()
    expected = torch.softmax(logits[kept].double() / temperature, -1) * n
    assert chisquare(counts[kept].numpy(), expected.numpy()).pvalue > 1e-3


def test_zero_temperature_is_deterministic():
    net = TinyBidirectionalNet(V, positional="absolute", banned=(MASK,), seed=4)
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    a = dream_generate(net, prompt, None, cfg(seed=1))
    b = dream_generate(net, prompt, None, cfg(seed=2))
    assert torch.equal(a.tokens, b.tokens)


# ---- batching ------------------------------------------------------------------------------------------------------
def test_padding_inputs_positions_and_mask():
    mask, positions = padding_inputs(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]), 3)
    assert mask.tolist() == [[0, 0, 1, 1, 1, 1, 1], [1] * 7]
    assert positions.tolist() == [[1, 1, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6]]
    assert padding_inputs(torch.ones(2, 4, dtype=torch.long), 3) == (None, None)
    assert padding_inputs(None, 3) == (None, None)
    bool_mask, bool_positions = padding_inputs(torch.tensor([[False, True]]), 1)
    assert bool_mask.tolist() == [[False, True, True]] and bool_positions.tolist() == [[1, 0, 1]]


@pytest.mark.parametrize("changes", [{}, {"alg": "maskgit_plus", "top_p": 0.9}, {"alg": "topk_margin", "steps": 8}])
def test_left_padding_equals_unpadded_runs(changes):
    net = TinyBidirectionalNet(V, positional="absolute", banned=(MASK,), seed=5)
    c = cfg(**changes)
    short, long = [3, 7, 2], [4, 1, 8, 8, 6, 5]
    batch = torch.tensor([[EOS] * 3 + short, long])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1] * 6])
    together = dream_generate(net, batch, mask, c)
    padded_call = net.calls[0]
    alone = [dream_generate(net, torch.tensor([p]), None, c).tokens[0] for p in (short, long)]
    assert torch.equal(together.tokens, torch.stack(alone))
    assert padded_call.position_ids[0].tolist() == [1, 1, 1] + list(range(11))
    assert net.calls[-1].position_ids is None and net.calls[-1].attention_mask is None
    # the stub is position-sensitive: the padded row's logits need the padding-aware positions
    unaware = net(padded_call.x, attention_mask=padded_call.attention_mask)
    aware = net(padded_call.x, attention_mask=padded_call.attention_mask, position_ids=padded_call.position_ids)
    assert not torch.allclose(unaware[0, 3:], aware[0, 3:])


def test_decode_results_cut_after_eos_and_split_nfe():
    f = [0, 5, 6, EOS, 7, EOS, 8]
    net = ScriptedNet(per_position_logits(one_hot_table(f, V)))
    out = dream_generate(net, torch.tensor([[1], [2]]), None, cfg(max_new_tokens=6, steps=3))
    orderless = [dataclasses.replace(r, commit_step=None) for r in out.rows]  # the one-hot table ties: test_commit_step
    assert orderless == [DecodeResult([0, 5, 6, EOS], 1.5, False, forwards=3)] * 2
    no_eos = dream_generate(ScriptedNet(per_position_logits(one_hot_table([0, 5, 6, 7], V))), torch.tensor([[1]]),
                            None, cfg(max_new_tokens=3, steps=2))
    assert [dataclasses.replace(r, commit_step=None) for r in no_eos.rows] == [DecodeResult([0, 5, 6], 2.0, True,
                                                                                         forwards=2)]
