"""The native LLaDA2 MoE network (models/networks/llada2.py) on tiny random checkpoints in fp32, each check against an
independent computation: block-causal forwards against a KVBuffer against one plain forward under a block-causal
mask; the grouped experts and the router against a per-token float64 re-derivation; the stored names against the
released layout; and, given a reference environment, the logits and router choices against the published modeling
code (benchmarks/reference/llada2_reference.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from llada2_reference import llada2_reference
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from models.networks.kv_buffer import KVBuffer
from models.networks.llada2 import (LLaDA2Network, LLaDA2NetworkConfig, Router, mix_experts, tiny_llada2_config)
from models.networks.loading import init_random_

torch.set_num_threads(2)

BLOCK = 4
TOL = 2e-5
VOCAB = 300
WORKER = Path(__file__).resolve().parents[3] / "benchmarks" / "reference" / "llada2_reference.py"


def tiny_network(config: LLaDA2NetworkConfig, seed: int) -> LLaDA2Network:
    """Random weights that all matter, expert biases included (they only steer the choice of experts)."""
    net = LLaDA2Network(config)
    init_random_(net, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, Router):
                module.expert_bias.copy_(0.3 * torch.randn(module.expert_bias.shape, generator=gen))
    return net.requires_grad_(False).eval()


@pytest.fixture(scope="module")
def net() -> LLaDA2Network:
    return tiny_network(tiny_llada2_config(VOCAB), seed=5)


def tokens(rows: int, n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, n), generator=torch.Generator().manual_seed(seed))


def block_causal(pos: torch.Tensor) -> torch.Tensor:
    """[B, 1, L, L] bool: key j visible to query i iff pos_j // BLOCK <= pos_i // BLOCK."""
    blocks = pos // BLOCK
    return (blocks[:, None, :] <= blocks[:, :, None])[:, None]


@torch.no_grad()
def recompute(net: LLaDA2Network, ids: torch.Tensor) -> torch.Tensor:
    pos = torch.arange(ids.shape[1])[None]
    return net(ids, position_ids=pos, attention_mask=block_causal(pos))


def positions(start: int, end: int) -> torch.Tensor:
    return torch.arange(start, end)[None]


def live(cache: KVBuffer) -> list:
    return [cache.row_kv(row) for row in range(cache.batch)]


# ---- block-causal forwards against a cache ------------------------------------------------------------------------


@torch.no_grad()
def test_prefill_peeks_and_commits_equal_a_full_block_causal_recompute(net):
    rows, prefill, n_blocks = 2, 2 * BLOCK, 2
    final = tokens(rows, prefill + n_blocks * BLOCK, 1)
    cache = net.new_cache(rows, final.shape[1])
    out = net.block_forward(final[:, :prefill], positions(0, prefill), cache, BLOCK, write=True)
    assert (out - recompute(net, final[:, :prefill])).abs().max() < TOL
    for block in range(n_blocks):
        start, end = prefill + block * BLOCK, prefill + (block + 1) * BLOCK
        for peek in range(2):
            draft = final[:, :end].clone()
            draft[:, start:end] = tokens(rows, BLOCK, 100 * block + peek)
            lengths, entries = list(cache.lengths), live(cache)
            out = net.block_forward(draft[:, start:end], positions(start, end), cache, BLOCK, write=False)
            assert (out - recompute(net, draft)[:, start:end]).abs().max() < TOL
            assert cache.lengths == lengths  # a peek leaves every row's cache as it was
            for before, after in zip(entries, live(cache)):
                assert all(torch.equal(k0, k1) and torch.equal(v0, v1) for (k0, v0), (k1, v1) in zip(before, after))
        out = net.block_forward(final[:, start:end], positions(start, end), cache, BLOCK, write=True)
        assert (out - recompute(net, final[:, :end])[:, start:end]).abs().max() < TOL
        assert cache.lengths == [end] * rows


@torch.no_grad()
def test_batch_rows_equal_each_row_alone(net):
    """Rows route apart, so a row's experts see other rows' tokens only in the grouped products."""
    ids = tokens(3, 3 * BLOCK, 4)
    cache = net.new_cache(3, 3 * BLOCK)
    net.block_forward(ids[:, :2 * BLOCK], positions(0, 2 * BLOCK), cache, BLOCK, write=True)
    peek = net.block_forward(ids[:, 2 * BLOCK:], positions(2 * BLOCK, 3 * BLOCK), cache, BLOCK, write=False)
    plain = net(ids)
    for row in range(3):
        alone = ids[row:row + 1]
        assert (peek[row:row + 1] - recompute(net, alone)[:, 2 * BLOCK:]).abs().max() < TOL
        assert (plain[row:row + 1] - net(alone)).abs().max() < TOL


@torch.no_grad()
def test_no_mask_is_full_attention_and_a_bad_mask_fails(net):
    ids = tokens(1, 9, 3)
    everything = torch.ones(1, 1, 9, 9, dtype=torch.bool)
    assert (net(ids) - net(ids, attention_mask=everything)).abs().max() < TOL
    assert (net(ids) - recompute(net, ids)).abs().max() > 1e-3  # the mask matters
    with pytest.raises(ValueError, match=r"attention_mask must be \[B\|1, 1, 9, 9\]"):
        net(ids, attention_mask=everything[0])


# ---- experts and router against a per-token re-derivation ---------------------------------------------------------


def naive_route(router: Router, x: torch.Tensor) -> tuple[list[list[int]], list[list[float]]]:
    """Token by token in float64: groups by the sum of their two best biased scores, the best topk_group groups,
    the top k biased scores inside them; weights are the unbiased scores normalised, times the scale."""
    scores = torch.sigmoid(x.double() @ router.weight.double().T)
    biased = scores + router.expert_bias.double()
    size = biased.shape[1] // router.n_group
    all_ids, all_weights = [], []
    for s, c in zip(scores.tolist(), biased.tolist()):
        group_score = [sum(sorted(c[g * size:(g + 1) * size])[-2:]) for g in range(router.n_group)]
        groups = sorted(range(router.n_group), key=lambda g: -group_score[g])[:router.topk_group]
        candidates = [e for g in groups for e in range(g * size, (g + 1) * size)]
        ids = sorted(candidates, key=lambda e: -c[e])[:router.top_k]
        total = sum(s[e] for e in ids)
        all_ids.append(sorted(ids))
        all_weights.append([s[e] / total * router.scale for e in sorted(ids)])
    return all_ids, all_weights


def test_router_equals_a_per_token_derivation(net):
    router = net.model.layers[1].mlp.gate
    x = torch.randn(40, net.config.hidden_size, generator=torch.Generator().manual_seed(7))
    ids, weights = router(x)
    order = ids.argsort(dim=-1)
    want_ids, want_weights = naive_route(router, x)
    assert ids.gather(1, order).tolist() == want_ids
    assert torch.allclose(weights.gather(1, order).double(), torch.tensor(want_weights, dtype=torch.float64),
                          atol=1e-6)


def test_grouped_experts_equal_a_per_token_sum(net):
    moe = net.model.layers[2].mlp
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(37, net.config.hidden_size, generator=gen)
    ids = torch.randint(0, len(moe.experts), (37, 2), generator=gen)
    ids[:, 1] = (ids[:, 0] + 1 + ids[:, 1] % 7) % 8  # two different experts per token; some experts idle
    ids[ids == 5] = 6
    weights = torch.rand(37, 2, generator=gen)
    got = mix_experts(x, moe.experts, ids, weights)
    want = torch.zeros(37, net.config.hidden_size, dtype=torch.float64)
    for t in range(37):
        for j in range(2):
            e = moe.experts[int(ids[t, j])]
            h = x[t].double()
            inner = F.silu(e.gate_proj.weight.double() @ h) * (e.up_proj.weight.double() @ h)
            want[t] += float(weights[t, j]) * (e.down_proj.weight.double() @ inner)
    assert (got.double() - want).abs().max() < 1e-5


# ---- config and stored layout -------------------------------------------------------------------------------------


# LLaDA2.0-mini's config.json fields (the release's values)
MINI = {
    "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe", "num_hidden_layers": 20, "hidden_size": 2048,
    "intermediate_size": 5120, "first_k_dense_replace": 1, "hidden_act": "silu", "max_position_embeddings": 16384,
    "moe_intermediate_size": 512, "norm_topk_prob": True, "num_experts_per_tok": 8, "norm_head": False,
    "num_attention_heads": 16, "num_experts": 256, "num_key_value_heads": 4, "rope_theta": 600000,
    "rope_scaling": None, "tie_word_embeddings": False, "use_bias": False, "use_rmsnorm": True, "rms_norm_eps": 1e-06,
    "head_dim": 128, "num_shared_experts": 1, "use_qkv_bias": False, "vocab_size": 157184, "rotary_dim": 64,
    "router_dtype": "fp32", "moe_router_enable_expert_bias": True, "routed_scaling_factor": 2.5, "n_group": 8,
    "topk_group": 4, "score_function": "sigmoid", "pad_token_id": 156892, "partial_rotary_factor": 0.5,
    "use_sliding_window": False, "use_qk_norm": True,
}


def test_the_release_config_reads_and_its_names_and_shapes_are_the_released_ones():
    config = LLaDA2NetworkConfig.from_dict(MINI)
    assert config.extra["pad_token_id"] == 156892 and config.rope_dim == 64
    assert LLaDA2NetworkConfig.from_dict(config.to_dict()) == config
    with torch.device("meta"):  # three of the 20 layers: the dense one and two MoE layers
        network = LLaDA2Network(dataclasses.replace(config, num_hidden_layers=3))
    shapes = {name: list(t.shape) for name, t in network.state_dict().items()}
    assert shapes["model.word_embeddings.weight"] == [157184, 2048] and shapes["lm_head.weight"] == [157184, 2048]
    assert shapes["model.layers.0.attention.query_key_value.weight"] == [(16 + 2 * 4) * 128, 2048]
    assert shapes["model.layers.0.attention.query_layernorm.weight"] == [128]
    assert shapes["model.layers.0.attention.dense.weight"] == [2048, 2048]
    assert shapes["model.layers.0.mlp.gate_proj.weight"] == [5120, 2048]
    assert shapes["model.layers.2.mlp.gate.weight"] == [256, 2048]
    assert shapes["model.layers.2.mlp.gate.expert_bias"] == [256]
    assert shapes["model.layers.2.mlp.experts.255.down_proj.weight"] == [2048, 512]
    assert shapes["model.layers.1.mlp.shared_experts.up_proj.weight"] == [512, 2048]
    assert shapes["model.norm.weight"] == [2048]
    # per layer: 2 norms, qkv, 2 qk norms, dense; layer 0: 3 MLP weights; MoE: gate + bias + 256 x 3 + 3 shared
    assert len(shapes) == 3 + 3 * 6 + 3 + 2 * (2 + 256 * 3 + 3)


@pytest.mark.parametrize("change, message", [
    ({"n_group": 3}, "num_experts 8 must split into n_group 3 groups"),
    ({"topk_group": 5}, "topk_group 5 must be in 1..n_group 4"),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok 5 must be in 1..4"),
    ({"partial_rotary_factor": 0.2}, "rotated width of 3"),
    ({"num_key_value_heads": 3}, "num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
    ({"num_key_value_heads": 0}, "num_key_value_heads must be >= 1"),
    ({"intermediate_size": None}, "the dense layers need an intermediate_size, got None"),
    ({"moe_intermediate_size": None}, "the experts need a moe_intermediate_size, got None"),
    ({"score_function": "softmax"}, "score_function='softmax' is not supported"),
    ({"norm_topk_prob": False}, "norm_topk_prob=False is not supported"),
    ({"use_qk_norm": False}, "use_qk_norm=False is not supported"),
    ({"num_shared_experts": 0}, "num_shared_experts 0 is not supported"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu' is not supported"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling="),
])
def test_bad_config_values_fail_in_one_line(change, message):
    with pytest.raises(ValueError, match="^LLaDA2 config: ") as error:
        dataclasses.replace(tiny_llada2_config(VOCAB), **change)
    assert message in str(error.value) and "\n" not in str(error.value)


def write_checkpoint(net: LLaDA2Network, folder: Path) -> Path:
    """config.json and model.safetensors with the released names, as the release stores them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(net.config.to_dict(), indent=2) + "\n")
    state = {name: t.detach().contiguous() for name, t in net.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@torch.no_grad()
def test_a_state_dict_round_trip_by_name_gives_the_same_logits(net, tmp_path):
    folder = write_checkpoint(net, tmp_path / "ckpt")
    config = LLaDA2NetworkConfig.from_dict(json.loads((folder / "config.json").read_text()))
    with torch.device("meta"):
        fresh = LLaDA2Network(config)
    fresh.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True, assign=True)
    ids = tokens(2, 11, 9)
    assert torch.equal(fresh.eval()(ids), net(ids))


# ---- the published modeling code ----------------------------------------------------------------------------------


def tie_routes(net: LLaDA2Network) -> None:
    """Layers 2 and 3 of a 4-layer tiny network route with exact ties that decide the choice (identical router rows,
    equal biases): in layer 2 experts 2 and 3 (one group) tie for the second place behind expert 6; in layer 3 groups
    0 and 2 tie (experts 0/4 and 1/5 identical) for the place beside group 3, so one of experts 0 and 4 joins 7."""
    with torch.no_grad():
        gate = net.model.layers[2].mlp.gate
        gate.weight[3] = gate.weight[2]
        gate.expert_bias.zero_()
        gate.expert_bias[[2, 3, 6]] = torch.tensor([2.0, 2.0, 3.0])
        gate = net.model.layers[3].mlp.gate
        gate.weight[4], gate.weight[5] = gate.weight[0], gate.weight[1]
        gate.expert_bias.zero_()
        gate.expert_bias[[0, 4, 7]] = torch.tensor([2.0, 2.0, 5.0])


def routes_of(net: LLaDA2Network, ids: torch.Tensor, **kwargs) -> tuple[torch.Tensor, list[torch.Tensor]]:
    routes: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: routes.append(out[0])) for m in net.modules()
             if isinstance(m, Router)]
    try:
        logits = net(ids, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return logits, routes


def reference_cases() -> list[dict]:
    batch_positions = torch.stack([torch.arange(12), torch.arange(12), torch.arange(5, 17)])
    return [
        {"name": "full", "input_ids": tokens(1, 13, 20).tolist(), "position_ids": None, "block_length": None},
        {"name": "block", "input_ids": tokens(1, 22, 21).tolist(), "position_ids": None, "block_length": BLOCK},
        {"name": "offset", "input_ids": tokens(1, 10, 22).tolist(), "position_ids": [list(range(7, 17))],
         "block_length": BLOCK},
        {"name": "batch", "input_ids": tokens(3, 12, 23).tolist(), "position_ids": batch_positions.tolist(),
         "block_length": BLOCK},
    ]


def published(net: LLaDA2Network, cases: list[dict], folder: Path, checkout: str, python: str) -> float:
    """Run the worker on ``net`` saved in the released layout; assert the routers chose as ours did (every MoE
    layer, every token) and the released path ran; return the largest logit difference."""
    write_checkpoint(net, folder / "ckpt")
    (folder / "cases.json").write_text(json.dumps({"cases": cases}))
    out = folder / "logits.safetensors"
    done = subprocess.run([python, str(WORKER), f"--reference={checkout}", f"--checkpoint={folder / 'ckpt'}",
                           f"--cases={folder / 'cases.json'}", f"--out={out}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = load_file(str(out))
    n_moe = sum(net.config.is_moe(i) for i in range(net.config.num_hidden_layers))
    with safe_open(str(out), framework="pt") as f:  # the released layout's path ran: moe_infer per MoE layer
        assert int(f.metadata()["moe_infer_calls"]) == n_moe * len(cases)
    worst = 0.0
    for case in cases:
        ids = torch.tensor(case["input_ids"])
        pos = torch.arange(ids.shape[1])[None] if case["position_ids"] is None else torch.tensor(case["position_ids"])
        mask = None if case["block_length"] is None else block_causal(pos)
        logits, routes = routes_of(net, ids, position_ids=pos, attention_mask=mask)
        worst = max(worst, (logits - theirs[case["name"]]).abs().max().item())
        for i, mine in enumerate(routes):
            assert torch.equal(mine.sort(-1).values, theirs[f"{case['name']}/route/{i}"].sort(-1).values), (case, i)
    return worst


@torch.no_grad()
def test_logits_equal_the_published_modeling_code(tmp_path):
    checkout, python = llada2_reference("modeling code")
    tiny = tiny_llada2_config(VOCAB)
    release = tiny_network(dataclasses.replace(tiny, num_hidden_layers=4), seed=11)
    tie_routes(release)
    # what no release uses but the config allows: biases, tied embeddings, no dense layer or shared expert, full RoPE
    variant = tiny_network(dataclasses.replace(tiny, num_hidden_layers=2, first_k_dense_replace=0, use_bias=True,
                                               use_qkv_bias=True, tie_word_embeddings=True, num_shared_experts=None,
                                               partial_rotary_factor=1.0), seed=12)
    variant.model.word_embeddings.weight.mul_(0.125)  # tied logits of N(0, 1) rows would be ~8x the others' size
    cases = reference_cases()
    errors = {name: published(net, cases, tmp_path / name, checkout, python)
              for name, net in (("release", release), ("variant", variant))}
    for case in cases:  # the ties were at stake and went the published way: experts {2|3, 6} and {0|4, 7}
        _, routes = routes_of(release, torch.tensor(case["input_ids"]))
        second, third = routes[1].sort(-1).values, routes[2].sort(-1).values
        assert set(second[:, 0].tolist()) <= {2, 3} and (second[:, 1] == 6).all()
        assert set(third[:, 0].tolist()) <= {0, 4} and (third[:, 1] == 7).all()
    print("max |logits - published|:", ", ".join(f"{name} {error:.3g}" for name, error in errors.items()))
    assert max(errors.values()) <= 1e-5
