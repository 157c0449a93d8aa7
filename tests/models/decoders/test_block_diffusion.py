"""The block-diffusion decoder against independent computations: scripted logits with known answers, a full
recompute (no cache, block-causal mask over the whole sequence) against the cached native networks, and every row
of a left-padded batch, and of rows in flight, against the row decoded alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from block_stubs import RecomputeNetwork, native_logits, table_logits

from models.decoders.block_diffusion import (BlockDiffusionConfig, BlockStrategy, block_diffusion_generate,
                                             block_diffusion_stream, block_strategy, commit_rule, propose,
                                             transfer_schedule, validate_block_diffusion_config)
from models.decoders.block_diffusion.rules import COMMIT_RULES, Proposal, RowWants
from models.decoders.block_diffusion.strategy import REMASKING, Editing
from models.decoders.contract import ConfigError
from models.decoders.sampling import Draws
from models.networks.dream import DreamNetwork, tiny_dream_config
from models.networks.qwen3 import Qwen3Network, Qwen3NetworkConfig
from models.registry import MODELS

V, MASK, EOS = 48, 47, 46
SDAR = BlockDiffusionConfig(block_length=4, denoising_steps=4, remasking="low_confidence_static", temperature=0,
                            mask_id=MASK, eos_ids=(EOS,))
V2 = dataclasses.replace(SDAR, block_length=8, sub_block_length=4, remasking="threshold_plus_best",
                         confidence_threshold=0.9, logit_shift=True, first_token_from_commit=True,
                         commit_finished_block=False)


def one_hot(targets: list[int], high: float = 8.0) -> torch.Tensor:
    table = torch.zeros(len(targets), V)
    table[torch.arange(len(targets)), torch.tensor(targets)] = high
    return table


def decode(network, prompts: list[list[int]], cfg: BlockDiffusionConfig, gen: int, row_seeds=None):
    """Left-pad the prompts into one batch and decode it."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return block_diffusion_generate(network, ids, mask, dataclasses.replace(cfg, gen_length=gen), row_seeds)


def qwen3(seed: int = 0) -> Qwen3Network:
    torch.manual_seed(seed)
    config = Qwen3NetworkConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    return Qwen3Network(config).eval()


def qwen2(seed: int = 0) -> DreamNetwork:
    torch.manual_seed(seed)
    return DreamNetwork(tiny_dream_config(V)).eval()


# ---- scripted logits: answers known by hand ------------------------------------------------------------------
def test_schedule_splits_the_block_front_loaded():
    assert transfer_schedule(4, 4) == [1, 1, 1, 1]
    assert transfer_schedule(8, 3) == [3, 3, 2]


def test_static_four_by_four_is_four_tokens_per_five_forwards():
    """Prompt of two whole blocks: one prefill, then per block four peeks (one token each) and one commit."""
    targets = list(range(20))
    net = RecomputeNetwork(table_logits(one_hot(targets)))
    out = decode(net, [[1] * 8], SDAR, gen=12)
    assert out.rows[0].token_ids == targets[8:20]
    assert out.nfe == 1 + 3 * 5
    assert [bool(written) for _, _, written in net.calls] == [True] + ([False] * 4 + [True]) * 3
    assert net.calls[0] == (0, 8, 8)  # the prefill covers the prompt's whole blocks in one forward


def test_static_commits_the_most_confident_mask_first():
    """Confidences rise along the block, so the last position is committed first (seen in the peek inputs)."""
    table = torch.zeros(8, V)
    for i in range(8):
        table[i, i] = 2.0 + i  # sharper further right
    net = RecomputeNetwork(table_logits(table))
    seen = []
    inner = net.block_forward

    def recording(ids, positions, cache, size, write):
        seen.append(ids[0].tolist())
        return inner(ids, positions, cache, size, write)

    net.block_forward = recording
    decode(net, [[1] * 4], SDAR, gen=4)
    assert seen[1:5] == [[MASK] * 4, [MASK, MASK, MASK, 7], [MASK, MASK, 6, 7], [MASK, 5, 6, 7]]


def test_unaligned_prompt_shares_its_last_block_with_masks():
    """A 6-token prompt: its one whole block is prefilled, then block [4, 8) holds two prompt tokens and two masks,
    decoded in two steps; the prompt tokens are never replaced."""
    targets = list(range(16))
    net = RecomputeNetwork(table_logits(one_hot(targets)))
    prompt = [9, 9, 9, 9, 5, 5]
    out = decode(net, [prompt], dataclasses.replace(SDAR, block_length=4, denoising_steps=2), gen=6)
    assert out.rows[0].token_ids == targets[6:12]
    assert net.calls[0] == (0, 4, 4)
    assert out.tokens.shape == (1, 6)


def test_capped_count_never_overwrites_the_prompt():
    """Block 8, 2 steps (4 per step), 7 prompt tokens in the first block: the one mask is committed and nothing
    else (the published top-k over all positions would also replace three prompt tokens)."""
    net = RecomputeNetwork(table_logits(one_hot(list(range(16)))))
    cfg = dataclasses.replace(SDAR, block_length=8, denoising_steps=2)
    out = decode(net, [[3, 3, 3, 3, 3, 3, 3]], cfg, gen=9)
    assert out.rows[0].token_ids == list(range(7, 16))
    assert net.calls[:3] == [(0, 8, 0), (0, 8, 8), (8, 8, 0)]


def test_dynamic_commits_every_confident_mask_at_once():
    net = RecomputeNetwork(table_logits(one_hot(list(range(12)), high=20.0)))
    cfg = dataclasses.replace(SDAR, remasking="low_confidence_dynamic", confidence_threshold=0.9)
    out = decode(net, [[1] * 4], cfg, gen=8)
    assert out.rows[0].token_ids == list(range(4, 12))
    assert out.nfe == 1 + 2 * 2  # per block one peek commits all four, then the commit


def test_entropy_bounded_takes_the_lowest_entropy_masks_up_to_the_bound():
    """Two sharp positions (entropy ~0) and two flat ones: a bound of 0.5 takes the sharp ones in the first step."""
    table = torch.zeros(4, V)
    table[0, 10] = table[2, 12] = 30.0
    proposal = propose(table[None], dataclasses.replace(SDAR, temperature=0), Draws(None, None), None)
    masked = torch.ones(1, 4, dtype=torch.bool)
    chosen = commit_rule(dataclasses.replace(SDAR, remasking="entropy_bounded", eb_threshold=0.5), proposal,
                         masked, 1)
    assert chosen.tolist() == [[True, False, True, False]]
    flat = commit_rule(dataclasses.replace(SDAR, remasking="entropy_bounded", eb_threshold=1e-9), proposal,
                       masked & torch.tensor([[False, True, False, True]]), 1)
    assert flat.sum() == 1  # at least one, even when none fits under the bound


def test_threshold_plus_best_and_sequential():
    confidence_logits = torch.log(torch.tensor([[0.2, 0.95, 0.5, 0.97]]))
    logits = torch.full((1, 4, V), -30.0)
    for i, c in enumerate(confidence_logits[0]):
        logits[0, i, i] = 0.0
        logits[0, i, V - 1] = torch.log(1 - c.exp()) if c.exp() < 1 else -30.0
    proposal = propose(logits, SDAR, Draws(None, None), None)
    masked = torch.tensor([[True, True, True, False]])
    v2 = commit_rule(dataclasses.replace(V2, confidence_threshold=0.9), proposal, masked, 1)
    assert v2.tolist() == [[False, True, False, False]]  # above 0.9 among masks; 0.97 is not a mask
    low = commit_rule(dataclasses.replace(V2, confidence_threshold=0.99), proposal, masked, 1)
    assert low.tolist() == [[False, True, False, False]]  # none above: the most confident mask alone
    seq = commit_rule(dataclasses.replace(SDAR, remasking="sequential"), proposal, masked, 2)
    assert seq.tolist() == [[True, True, False, False]]


def test_end_of_sequence_stops_after_its_block():
    targets = [0] * 4 + [5, EOS, 7, 8] + list(range(8, 16))
    net = RecomputeNetwork(table_logits(one_hot(targets)))
    out = decode(net, [[1] * 4], SDAR, gen=12)
    assert out.rows[0].token_ids == [5, EOS]
    assert not out.rows[0].hit_max_tokens
    assert out.nfe == 1 + 5  # prefill, one block (4 peeks + its commit), then stop


def test_fastdllm_v2_first_token_comes_from_the_commit_pass_and_logits_shift():
    """Logits at position p point at token p + 1 (the shift makes position p read them from p - 1): the block's
    first token is the commit pass's last logit, every other position its predecessor's."""
    table = one_hot([(p + 1) % 40 for p in range(40)], high=20.0)
    net = RecomputeNetwork(table_logits(table))
    out = decode(net, [[1] * 8], V2, gen=16)
    assert out.rows[0].token_ids == list(range(8, 24))
    # prefill, then per 8-block: one peek per 4-sub-block (all confident) and the commit
    assert out.nfe == 1 + 2 * 3


def test_fastdllm_v2_skips_the_commit_once_every_row_has_stopped():
    table = one_hot([(p + 1) % 40 if p != 10 else EOS for p in range(40)], high=20.0)
    out = decode(RecomputeNetwork(table_logits(table)), [[1] * 8], V2, gen=16)
    assert out.rows[0].token_ids == [8, 9, 10, EOS]
    assert out.nfe == 1 + 2  # prefill and the block's two sub-block peeks; no commit after the stop


LLADA2 = dataclasses.replace(SDAR, remasking="low_confidence_dynamic", confidence_threshold=0.95, fused_commit=True)


def test_fused_commit_spends_one_forward_per_step():
    """LLaDA2's reference recomputes the prefix every step: here each block's first peek also writes what is not
    yet cached (the prompt's whole blocks, then the previous block), so the forwards are exactly the steps."""
    net = RecomputeNetwork(table_logits(one_hot(list(range(16)), high=20.0)))
    out = decode(net, [[1, 1, 1, 1, 1, 1]], LLADA2, gen=10)
    assert out.rows[0].token_ids == list(range(6, 16))
    assert net.calls == [(0, 8, 4), (4, 8, 4), (8, 8, 4)]  # (first position, length fed, entries written)


def test_eos_early_stop_ends_mid_block_once_everything_before_it_is_filled():
    """The step that commits the end of sequence (second) finds nothing open before it, so the row stops there,
    with two masks of the block left; as the reference, only a step that commits one checks."""
    table = torch.zeros(8, V)
    for position, token, sharpness in [(4, 7, 20.0), (5, EOS, 12.0), (6, 8, 8.0), (7, 9, 5.0)]:
        table[position, token] = sharpness
    cfg = dataclasses.replace(LLADA2, confidence_threshold=1.0)  # one token a step, the most confident first
    early = decode(RecomputeNetwork(table_logits(table)), [[1] * 4], dataclasses.replace(cfg, eos_early_stop=True),
                   gen=4)
    late = decode(RecomputeNetwork(table_logits(table)), [[1] * 4], cfg, gen=4)
    assert early.rows[0].token_ids == late.rows[0].token_ids == [7, EOS]
    assert (early.nfe, late.nfe) == (2, 4)


def test_a_proposed_mask_id_gives_way_to_the_next_likeliest_token():
    """An untrained network may prefer the mask id itself; committing it would leave the mask forever. The decode
    ends, and those positions get their second choice."""
    table = one_hot([MASK, 11, MASK, 13, MASK, 15, 16, 17])
    table[[0, 2, 4], [30, 31, 32]] = 4.0  # the second choice where the mask id is the first
    out = decode(RecomputeNetwork(table_logits(table)), [[1, 1]], dataclasses.replace(SDAR, block_length=2,
                                                                                  denoising_steps=1), gen=6)
    assert out.rows[0].token_ids == [31, 13, 32, 15, 16, 17]


def next_filled_logits(ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Position p proposes 20 + p while position p + 1 is a mask (or beyond the input), 30 + p once it is filled."""
    following = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], MASK)], dim=1)
    target = positions.view(-1)[None] + torch.where(following == MASK, 20, 30)
    return torch.zeros(*ids.shape, V).scatter(-1, target[..., None], 10.0)


def test_token_editing_retakes_a_filled_token_whose_proposal_changed():
    """LLaDA2.1's joint threshold: the first step fills the block at once (proposals made while the next position was
    masked); the second re-takes the three whose proposal changed once their neighbour was filled; the third changes
    nothing, and the block is done. Without editing the first proposals stay."""
    cfg = dataclasses.replace(LLADA2, edit_threshold=0.5, max_post_edit_steps=4)
    edited = decode(RecomputeNetwork(next_filled_logits), [[1] * 4], cfg, gen=4)
    plain = decode(RecomputeNetwork(next_filled_logits), [[1] * 4], dataclasses.replace(cfg, edit_threshold=None),
                   gen=4)
    assert plain.rows[0].token_ids == [24, 25, 26, 27] and plain.nfe == 1
    assert edited.rows[0].token_ids == [34, 35, 36, 27] and edited.nfe == 3
    capped = decode(RecomputeNetwork(next_filled_logits), [[1] * 4], dataclasses.replace(cfg, max_post_edit_steps=0),
                    gen=4)
    assert capped.rows[0].token_ids == [24, 25, 26, 27] and capped.nfe == 2  # no editing step once the block is full


@pytest.mark.parametrize("remasking", REMASKING)
def test_rows_at_different_counts_commit_as_each_row_alone(remasking):
    """One call over rows each wanting its own count (rows in flight at different steps of their schedules) commits
    in every row what the row alone with its count commits, ties included (repeated logits tie the confidences)."""
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 4, V, generator=generator) * 3
    logits = torch.cat([logits, logits], dim=1)  # every confidence twice: ties at each top-k's edge
    masked = torch.rand(6, 8, generator=generator) < 0.7
    wants = [1, 3, 2, 3, 1, 2]
    cfg = dataclasses.replace(SDAR, remasking=remasking, confidence_threshold=0.2, eb_threshold=3.0)
    proposal = propose(logits, cfg, Draws(None, None), None)
    together = commit_rule(cfg, proposal, masked, RowWants(torch.tensor(wants), tuple(sorted(set(wants)))))
    for row, want in enumerate(wants):
        alone = Proposal(*(field[row:row + 1] for field in (proposal.tokens, proposal.confidence, proposal.probs)))
        assert together[row].tolist() == commit_rule(cfg, alone, masked[row:row + 1], want)[0].tolist(), f"row {row}"
    assert len({int(n) for n in together.sum(dim=1)}) > 1


def test_every_remasking_option_has_its_commit_rule():
    assert set(COMMIT_RULES) == set(REMASKING)


def test_bad_settings_fail_in_one_line():
    for changes, words in [({"remasking": "greedy"}, "unknown remasking"), ({"denoising_steps": 9}, "denoising_steps"),
                           ({"sub_block_length": 3}, "sub_block_length"), ({"temperature": -1}, "temperature"),
                           ({"edit_threshold": 0.5, "eos_early_stop": True}, "token editing"),
                           ({"logit_shift": True}, "set both or neither"),
                           ({"first_token_from_commit": True}, "set both or neither"),
                           ({"logit_shift": True, "first_token_from_commit": True, "fused_commit": True},
                            "fused_commit"),
                           ({"logit_shift": True, "first_token_from_commit": True, "edit_threshold": 0.5},
                            "token editing")]:
        with pytest.raises(ConfigError, match=words) as error:
            validate_block_diffusion_config(dataclasses.replace(SDAR, gen_length=8, **changes))
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("model, expected", [
    ("sdar-8b", BlockStrategy(4, True, "commit", "aligned", "block_end", None)),
    ("trado-8b", BlockStrategy(4, False, "commit", "aligned", "block_end", None)),
    ("fastdllm-v2-7b", BlockStrategy(8, False, "commit_while_running", "shifted", "block_end", None)),
    ("llada2-mini", BlockStrategy(32, False, "fused", "aligned", "eos_filled", None)),
    ("llada2.1-mini", BlockStrategy(32, False, "fused", "aligned", "block_end", Editing(0.5, 16))),
])
def test_each_familys_defaults_build_its_strategy(model, expected):
    """The registry's decoding defaults, as a run builds its config, resolve to the choices the family makes."""
    fields = {f.name for f in dataclasses.fields(BlockDiffusionConfig)}
    options = {k: v for k, v in MODELS[model].defaults.items() if k in fields}
    assert block_strategy(BlockDiffusionConfig(**options, gen_length=64)) == expected


# ---- the cached native networks against a full recompute, and batches against rows alone ----------------------
SETTINGS = {
    "sdar-static": (qwen3, SDAR),
    "sdar-dynamic": (qwen3, dataclasses.replace(SDAR, remasking="low_confidence_dynamic", confidence_threshold=0.1)),
    "sdar-sampled": (qwen3, dataclasses.replace(SDAR, temperature=1.0, top_k=8, top_p=0.9, seed=3)),
    "sdar-uneven": (qwen3, dataclasses.replace(SDAR, denoising_steps=3)),  # counts 2, 1, 1: rows want different k
    "sdar-sequential": (qwen3, dataclasses.replace(SDAR, remasking="sequential", denoising_steps=3)),
    "sdar-entropy": (qwen3, dataclasses.replace(SDAR, remasking="entropy_bounded", eb_threshold=8.0)),
    "v2": (qwen2, dataclasses.replace(V2, confidence_threshold=0.05)),
    "llada2-rules": (qwen3, dataclasses.replace(LLADA2, confidence_threshold=0.1, eos_early_stop=True)),
    "llada2.1-editing": (qwen3, dataclasses.replace(LLADA2, confidence_threshold=0.1, edit_threshold=0.05,
                                                    max_post_edit_steps=3)),
}
PROMPTS = [[3, 4, 5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27, 28]]


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_cached_path_equals_a_full_recompute(name):
    build, cfg = SETTINGS[name]
    network = build()
    for prompt in PROMPTS:
        cached = decode(network, [prompt], cfg, gen=13)
        recomputed = decode(RecomputeNetwork(native_logits(network)), [prompt], cfg, gen=13)
        assert cached.tokens.tolist() == recomputed.tokens.tolist()
        assert cached.nfe == recomputed.nfe


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_row_of_a_batch_equals_the_row_alone(name):
    build, cfg = SETTINGS[name]
    network = build()
    seeds = [11, 12, 13] if cfg.temperature > 0 else None
    batch = decode(network, PROMPTS, cfg, gen=13, row_seeds=seeds)
    for i, prompt in enumerate(PROMPTS):
        alone = decode(network, [prompt], cfg, gen=13, row_seeds=None if seeds is None else [seeds[i]])
        assert batch.rows[i].token_ids == alone.rows[0].token_ids, f"row {i}"
        assert (batch.rows[i].commit_step, batch.rows[i].edits) == (alone.rows[0].commit_step, alone.rows[0].edits)
    assert batch.nfe < sum(decode(network, [p], cfg, gen=13).nfe for p in PROMPTS)


# ---- rows in flight against rows alone --------------------------------------------------------------------------
FLIGHT_PROMPTS = [[3, 4], [10, 11, 12, 13], [20, 21, 22, 23, 24, 25, 26], [5, 6, 7, 8, 9, 10, 11, 12],
                  [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40], [41, 42, 43]]  # shorter than, one, two and more blocks
MANY_PROMPTS = [[(7 * i + j) % 40 + 1 for j in range(1 + (5 * i) % 12)] for i in range(40)]  # lengths 1 .. 12
FLIGHTS = {"6 prompts, 2 rows": (FLIGHT_PROMPTS, 2), "40 prompts, 32 rows": (MANY_PROMPTS, 32)}
SLOW_FLIGHTS = ("40 prompts, 32 rows",)


def varied_end(network, cfg: BlockDiffusionConfig, prompts: list[list[int]], seeds) -> int:
    """The token whose first place among the prompts' outputs alone (no end of sequence) varies most: as the end of
    sequence it ends some rows early, some late and leaves some running to the canvas's end."""
    never = dataclasses.replace(cfg, eos_ids=(V,))
    outputs = [decode(network, [p], never, gen=13, row_seeds=None if seeds is None else [seeds[i]]).rows[0].token_ids
               for i, p in enumerate(prompts)]
    def places(token: int) -> set[int]:
        return {out.index(token) if token in out else len(out) for out in outputs}
    return max(range(V - 2), key=lambda token: (len(places(token)), -token))


@pytest.mark.parametrize("flight", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_FLIGHTS else f
                                    for f in FLIGHTS])
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_rows_in_flight_equal_rows_alone(name, flight):
    """Prompts of mixed lengths through fewer rows than prompts: each row's tokens, forwards and commit steps are
    its decode alone's, whenever it was admitted and whatever its neighbours' blocks and phases."""
    build, cfg = SETTINGS[name]
    prompts, max_rows = FLIGHTS[flight]
    network = build()
    seeds = [21 + i for i in range(len(prompts))] if cfg.temperature > 0 else None
    cfg = dataclasses.replace(cfg, eos_ids=(varied_end(network, cfg, prompts, seeds),), gen_length=13)
    alone = [decode(network, [p], cfg, gen=13, row_seeds=None if seeds is None else [seeds[i]]).rows[0]
             for i, p in enumerate(prompts)]
    steps = list(block_diffusion_stream(network, [torch.tensor(p) for p in prompts], cfg, max_rows, seeds))
    flown = dict(item for step in steps for item in step.finished)
    assert sorted(flown) == list(range(len(prompts)))
    for i, row in enumerate(alone):
        assert (flown[i].token_ids, flown[i].forwards) == (row.token_ids, row.forwards), f"prompt {i}"
        assert flown[i].hit_max_tokens == row.hit_max_tokens
        assert (flown[i].commit_step, flown[i].edits) == (row.commit_step, row.edits), f"prompt {i}"
    assert len({len(row.token_ids) for row in alone}) >= 3  # rows end early, late and at the canvas's end
    assert all(step.rows <= max_rows for step in steps) and sum(len(step.admitted) for step in steps) == len(prompts)
    assert max(step.rows for step in steps) == max_rows
    assert sum(row.nfe for row in flown.values()) < sum(row.forwards for row in alone)  # forwards shared
