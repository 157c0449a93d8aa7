"""Native Qwen3 network against transformers' ``Qwen3ForCausalLM`` (an independent implementation): logits within
1e-5 in fp32 on the tiny checkpoints and on scaled-down real Qwen3 shapes (head_dim 128, GQA, qk-norm, tied and
untied), with position ids, a 4-D mask and the index-written KV buffer; strict loading by name and shape."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import DynamicCache, Qwen3ForCausalLM
from transformers import Qwen3Config as HFQwen3Config

from models.networks.loading import CheckpointError, load_network, save_network
from models.networks.kv_buffer import KVBuffer
from models.networks.ragged import RaggedBatch
from models.networks.common import additive_mask
from models.networks.qwen3 import Qwen3Network, causal_mask, causal_triangle, grouped_query_attention
from models.tiny import materialize

torch.set_num_threads(2)

# Qwen3-8B's config.json (the ReFusion checkpoint keeps it) with only the sizes scaled down: head_dim 128, 4:1 GQA,
# intermediate/hidden 3, untied; and Qwen3-0.6B's proportions (heads*head_dim != hidden, tied embeddings).
SCALED_8B = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=1, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
                 max_position_embeddings=40960, tie_word_embeddings=False, attention_bias=False, vocab_size=300)
SCALED_06B = dict(SCALED_8B, hidden_size=128, intermediate_size=384, num_attention_heads=2, tie_word_embeddings=True)


def hf_checkpoint(tmp_path, name: str, **cfg) -> tuple[Qwen3ForCausalLM, str]:
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(HFQwen3Config(initializer_range=0.1, **cfg)).eval()
    with torch.no_grad():  # norms away from 1 so a missing or misplaced norm shows
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.2 * torch.randn_like(p))
    folder = tmp_path / name
    model.save_pretrained(folder)
    return model, str(folder)


@pytest.fixture(scope="module", params=["tiny-refusion", "tiny-qwen3", "scaled-8b", "scaled-0.6b"])
def pair(request, tmp_path_factory):
    if request.param.startswith("tiny"):
        folder = str(materialize(request.param))
        hf = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    else:
        cfg = SCALED_8B if request.param == "scaled-8b" else SCALED_06B
        hf, folder = hf_checkpoint(tmp_path_factory.mktemp("q3"), request.param, **cfg)
    return hf, load_network(folder, "qwen3", dtype=torch.float32)


def ids_for(hf, b: int, n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, hf.config.vocab_size, (b, n), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_full_forward_matches_transformers(pair):
    hf, net = pair
    ids = ids_for(hf, 2, 11, 1)
    theirs = hf(input_ids=ids).logits
    mine = net(ids)
    assert mine.shape == theirs.shape
    assert (mine - theirs).abs().max() < 1e-5


@torch.no_grad()
def test_position_ids_and_4d_mask_match_transformers(pair):
    hf, net = pair
    ids = ids_for(hf, 1, 9, 2)
    pos = torch.tensor([[0, 1, 2, 7, 8, 3, 4, 12, 13]])
    visible = torch.ones(9, 9).tril().bool()
    visible[5:7, 3:5] = False  # a second window that does not see the first
    additive = torch.zeros(9, 9).masked_fill(~visible, torch.finfo(torch.float32).min)[None, None]
    theirs = hf(input_ids=ids, position_ids=pos, attention_mask=visible[None, None]).logits
    for mask in (visible[None, None], additive):
        mine = net(ids, position_ids=pos, attention_mask=mask)
        assert (mine - theirs).abs().max() < 1e-5
    plain = net(ids, position_ids=pos)
    assert (plain - theirs).abs().max() > 1e-4  # the mask mattered


@torch.no_grad()
def test_kv_buffer_append_truncate_select_match_transformers_cache(pair):
    hf, net = pair
    ids = ids_for(hf, 1, 14, 3)
    pos = torch.tensor([[0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 20, 21]])
    cache = net.new_cache(batch=1, capacity=32)
    hf_cache = DynamicCache(config=hf.config)
    net(ids[:, :4], position_ids=pos[:, :4], cache=cache)
    hf(input_ids=ids[:, :4], position_ids=pos[:, :4], cache=hf_cache, use_cache=True)
    net(ids[:, 4:10], position_ids=pos[:, 4:10], cache=cache)  # fed, then partly dropped again
    cache.truncate(0, 4)
    for lo, hi in [(4, 8), (8, 12)]:
        net(ids[:, lo:hi], position_ids=pos[:, lo:hi], cache=cache)
        hf(input_ids=ids[:, lo:hi], position_ids=pos[:, lo:hi], cache=hf_cache, use_cache=True)
    mine = net(ids[:, 12:], position_ids=pos[:, 12:], cache=cache)
    theirs = hf(input_ids=ids[:, 12:], position_ids=pos[:, 12:], cache=hf_cache, use_cache=True).logits
    assert cache.lengths == [14] and (mine - theirs).abs().max() < 1e-5
    for (k, v), layer in zip(cache.row_kv(0), hf_cache.layers):
        assert (k - layer.keys).abs().max() < 1e-5 and (v - layer.values).abs().max() < 1e-5
    # keep_tail: entries 4.. reordered by index equal a cache built in that order
    cache.keep_tail(0, 4, [4, 5, 6, 7, 0, 1, 2, 3])
    ref = net.new_cache(batch=1, capacity=32)
    order = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7]
    net(ids[:, order[:8]], position_ids=pos[:, order[:8]], cache=ref)
    kv_a, kv_b = cache.row_kv(0), ref.row_kv(0)
    assert cache.lengths == [12]
    assert (kv_a[0][0][:, :, :8] - kv_b[0][0]).abs().max() < 1e-5  # layer 0 keys depend on the token alone


@torch.no_grad()
def test_batched_rows_of_different_lengths_match_single_rows(pair):
    """Padded rows change GEMM shapes, so this compares at 3e-5 (logits of size ~5), not the 1e-5 parity bound."""
    hf, net = pair
    prompts = [ids_for(hf, 1, n, 10 + n) for n in (3, 7, 5)]
    cache = net.new_cache(batch=3, capacity=24)
    width = max(p.shape[1] for p in prompts)
    padded = torch.cat([torch.cat([p, p.new_zeros(1, width - p.shape[1])], 1) for p in prompts])
    net(padded, cache=cache)
    for row, p in enumerate(prompts):
        cache.truncate(row, p.shape[1])
    step = ids_for(hf, 3, 2, 4)
    pos = torch.tensor([[p.shape[1], p.shape[1] + 1] for p in prompts])
    mine = net(step, position_ids=pos, cache=cache)
    for row, p in enumerate(prompts):
        full = hf(input_ids=torch.cat([p, step[row:row + 1]], 1)).logits[0, -2:]
        assert (mine[row] - full).abs().max() < 3e-5
    cache.select_rows([2, 0])
    assert cache.lengths == [prompts[2].shape[1] + 2, prompts[0].shape[1] + 2]
    nxt = net(step[[2, 0], :1], cache=cache)
    for row, src in enumerate((2, 0)):
        full = hf(input_ids=torch.cat([prompts[src], step[src:src + 1], step[src:src + 1, :1]], 1)).logits[0, -1]
        assert (nxt[row, 0] - full).abs().max() < 3e-5


@torch.no_grad()
def test_ragged_batch_computes_real_tokens_and_read_cells_only(pair):
    """A ``RaggedBatch``: rows of 5, 2 and 4 new tokens on caches of different lengths, packed (no pad computed)
    and the head at chosen cells only, repeats included, against each row alone through transformers' network."""
    hf, net = pair
    prompts = [ids_for(hf, 1, n, 20 + n) for n in (4, 9, 6)]
    new = [ids_for(hf, 1, n, 30 + n) for n in (5, 2, 4)]
    width = max(t.shape[1] for t in new)
    cache = net.new_cache(batch=3, capacity=32)
    for row, p in enumerate(prompts):  # each row's prompt through its own forward: different cache lengths
        one = net.new_cache(batch=1, capacity=32)
        net(p, cache=one)
        cache.kv[:, :, row] = one.kv[:, :, 0]
        cache.lengths[row] = p.shape[1]
    ids = torch.cat([torch.cat([t, t.new_zeros(1, width - t.shape[1])], 1) for t in new])
    pos = torch.tensor([[p.shape[1] + j for j in range(width)] for p in prompts])
    cells = [(0, 0), (0, 4), (1, 1), (2, 3), (1, 0), (0, 4)]  # (row, new token), read twice at (0, 4)
    starts = [0, 5, 7]
    real = torch.tensor([row * width + j for row, t in enumerate(new) for j in range(t.shape[1])])
    read = torch.tensor([starts[row] + j for row, j in cells])
    logits = net(ids, position_ids=pos, cache=cache, ragged=RaggedBatch(real, read))
    assert logits.shape == (len(cells), hf.config.vocab_size)
    for (row, j), got in zip(cells, logits):
        full = hf(input_ids=torch.cat([prompts[row], new[row]], 1)).logits[0, prompts[row].shape[1] + j]
        assert (got - full).abs().max() < 3e-5
    for row, (p, t) in enumerate(zip(prompts, new)):  # the real tokens' entries cached as a lone row's forward
        cache.truncate(row, p.shape[1] + t.shape[1])
        one = net.new_cache(batch=1, capacity=32)
        net(torch.cat([p, t], 1), cache=one)
        n = p.shape[1] + t.shape[1]
        assert (cache.kv[:, :, row, :, :n] - one.kv[:, :, 0, :, :n]).abs().max() < 3e-5
    # no pads: the batch used as it is, the cells flat indices into it (the head's GEMM has fewer rows than the
    # plain forward's, so its float rounding may differ)
    unpacked = net(ids[:1], position_ids=pos[:1], cache=net.new_cache(1, 32), ragged=RaggedBatch(None, read[:2]))
    plain = net(ids[:1], position_ids=pos[:1], cache=net.new_cache(1, 32))
    assert (unpacked - plain[0, read[:2]]).abs().max() < 1e-5


@torch.no_grad()
def test_prompt_on_an_empty_cache_attends_causal_without_a_mask(pair, monkeypatch):
    """New tokens on an empty cache (rows padded at the end) go to SDPA as ``is_causal`` with no mask, so the kernel
    skips the blocks above the diagonal; the logits and cached entries are those of an explicit causal mask over the
    same columns and of transformers' network, and the next forward (a filled cache) takes a mask again."""
    hf, net = pair
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal", False)))
        return sdpa(*args, **kwargs)

    ids = ids_for(hf, 2, 9, 5)
    cache, masked_cache = net.new_cache(2, 16), net.new_cache(2, 16)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    logits = net(ids, cache=cache)
    assert calls and all(call == (True, True) for call in calls)
    calls.clear()
    masked = net(ids, attention_mask=torch.ones(9, 9, dtype=torch.bool).tril()[None, None], cache=masked_cache)
    assert calls and not any(causal for _, causal in calls)
    assert (logits - masked).abs().max() < 1e-6
    assert (cache.kv[..., :9, :] - masked_cache.kv[..., :9, :]).abs().max() < 1e-6
    for row in range(2):
        assert (logits[row] - hf(input_ids=ids[row:row + 1]).logits[0]).abs().max() < 3e-5
    calls.clear()
    net(ids[:, :1], cache=cache)
    assert calls and all(not causal for _, causal in calls)


def test_strict_loading_names_and_shapes(tmp_path):
    _, folder = hf_checkpoint(tmp_path, "ok", **SCALED_8B)
    net = load_network(folder, "qwen3", dtype=torch.float32)
    assert "lm_head.weight" in net.state_dict() and not net.config.tie_word_embeddings
    state = load_file(f"{folder}/model.safetensors")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    state.pop("model.layers.0.self_attn.q_norm.weight")
    state["model.layers.1.mlp.up_proj.weight"] = state["model.layers.1.mlp.up_proj.weight"][:-1]
    state["model.extra.weight"] = torch.zeros(1)
    save_file(state, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_network(bad, "qwen3", dtype=torch.float32)
    msg = str(err.value)
    assert "missing model.layers.0.self_attn.q_norm.weight" in msg and "unexpected model.extra.weight" in msg
    assert "mis-shaped model.layers.1.mlp.up_proj.weight" in msg and "\n" not in msg
    # a Dream checkpoint is not a Qwen3 one, and unsupported config values fail with one line
    cfg = json.loads((tmp_path / "ok" / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "model_type": "Dream"}))
    with pytest.raises(CheckpointError, match="not Qwen3"):
        load_network(bad, "qwen3")
    (bad / "config.json").write_text(json.dumps({**cfg, "use_sliding_window": True}))
    with pytest.raises(ValueError, match="use_sliding_window"):
        load_network(bad, "qwen3")


def test_save_and_reload_round_trip(tmp_path):
    _, folder = hf_checkpoint(tmp_path, "src", **SCALED_06B)
    net = load_network(folder, "qwen3", dtype=torch.float32)
    assert isinstance(net, Qwen3Network) and "lm_head.weight" not in net.state_dict()
    again = load_network(save_network(net, tmp_path / "copy"), "qwen3", dtype=torch.float32)
    ids = torch.randint(0, 300, (1, 6))
    with torch.no_grad():
        assert torch.equal(net(ids), again(ids))


@pytest.mark.parametrize("lengths", [[3, 7, 0], [5, 5]])
def test_causal_mask_is_causal_over_each_rows_own_entries(lengths):
    """Rows of different cache lengths (a gather) and of one length (a view): query i of row b sees columns
    0 .. lengths[b] + i, additive as SDPA takes it; evaluated entry by entry."""
    n_new = 4
    cache = KVBuffer(1, len(lengths), 16, 1, 2, torch.float32, "cpu")
    cache.lengths = list(lengths)
    plan = cache.reserve(n_new)
    mask = causal_mask(causal_triangle(cache.capacity, torch.device("cpu"), torch.float32), plan, n_new)
    key_len = max(lengths) + n_new
    allowed = torch.tensor([[[c <= n + i for c in range(key_len)] for i in range(n_new)] for n in lengths])[:, None]
    expected = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    assert torch.equal(mask.expand(expected.shape), expected)
    assert torch.equal(mask.expand(expected.shape), additive_mask(allowed, torch.float32))


@pytest.mark.parametrize("n_kv", [1, 2, 4])
def test_grouped_query_attention_forms_agree(n_kv):
    """The stacked-query form CUDA takes equals SDPA's own grouped heads and plainly repeated kv heads, with a mask
    over a longer key axis (a cache) and causal without one."""
    g = torch.Generator().manual_seed(n_kv)
    q = torch.randn(2, 7, 4, 16, generator=g).transpose(1, 2)  # strided like the network's queries
    k, v = (torch.randn(2, n_kv, 19, 16, generator=g) for _ in range(2))
    mask = additive_mask(torch.rand(2, 1, 7, 19, generator=g) > 0.3, torch.float32)
    rep = 4 // n_kv
    repeated = [k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)]
    expected = F.scaled_dot_product_attention(q, *repeated, attn_mask=mask)
    for fused in (True, False):
        assert torch.equal(grouped_query_attention(q, k, v, mask, causal=False, fused=fused), expected)
    square_k, square_v = k[:, :, :7], v[:, :, :7]
    expected = F.scaled_dot_product_attention(q, square_k.repeat_interleave(rep, 1), square_v.repeat_interleave(rep, 1),
                                              is_causal=True)
    for fused in (True, False):
        assert torch.equal(grouped_query_attention(q, square_k, square_v, None, causal=True, fused=fused), expected)
