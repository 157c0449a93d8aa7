"""Native Dream network against docs/networks.md §2: stored names/shapes, a naive float64 re-derivation of the forward
written here from the spec formulas, padding with tok_idx positions, position_ids, KV cache, loading and its errors."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from models.networks.common import apply_rope, rope_angles, rope_inv_freq
from models.networks.dream import DreamNetworkConfig, DreamNetwork, tiny_dream_config
from models.networks.loading import CheckpointError, build_network, load_network, save_network

V = 80

# config.json of Dream-v0-Instruct-7B as listed in docs/networks.md §2
REAL_CONFIG = {
    "architectures": ["DreamModel"], "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "mask_token_id": 151666,
    "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "Dream", "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "pad_token_id": 151643, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.46.2", "use_cache": True, "use_mrope": False,
    "use_sliding_window": False, "vocab_size": 152064,
}


# ---- independent float64 reference, written from docs/networks.md §2 ---------------------------------------------


def ref_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def ref_rope(t: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate dim k together with dim k + hd/2 by angle pos * theta^(-2k/hd). t: [L, hd], pos: [L]."""
    hd = t.shape[-1]
    half = hd // 2
    inv = theta ** (-(2.0 * torch.arange(half, dtype=torch.float64)) / hd)
    ang = pos.double()[:, None] * inv[None, :]
    t1, t2 = t[:, :half], t[:, half:]
    return torch.cat((t1 * ang.cos() - t2 * ang.sin(), t2 * ang.cos() + t1 * ang.sin()), dim=-1)


def ref_forward(sd: dict, cfg: DreamNetworkConfig, ids: torch.Tensor, key_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head loops, explicit softmax, q/k/v biases; pad keys get -inf; positions default to 0..L-1."""
    sd = {k: v.double() for k, v in sd.items()}
    b_, length = ids.shape
    nh, nkv, hd = cfg.num_attention_heads, cfg.kv_heads, cfg.head_dim
    positions = torch.arange(length).expand(b_, length) if positions is None else positions
    h = sd["model.embed_tokens.weight"][ids]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        a = ref_rms(h, sd[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q, k, v = (a @ sd[f"{p}self_attn.{n}.weight"].T + sd[f"{p}self_attn.{n}.bias"] for n in ("q_proj", "k_proj", "v_proj"))
        out = torch.zeros(b_, length, nh * hd, dtype=torch.float64)
        for b in range(b_):
            for j in range(nh):
                g = j // (nh // nkv)
                qj = ref_rope(q[b, :, j * hd:(j + 1) * hd], positions[b], cfg.rope_theta)
                kj = ref_rope(k[b, :, g * hd:(g + 1) * hd], positions[b], cfg.rope_theta)
                s = qj @ kj.T / math.sqrt(hd)
                if key_mask is not None:
                    s[:, ~key_mask[b].bool()] = -math.inf
                out[b, :, j * hd:(j + 1) * hd] = torch.softmax(s, -1) @ v[b, :, g * hd:(g + 1) * hd]
        h = h + out @ sd[p + "self_attn.o_proj.weight"].T
        m = ref_rms(h, sd[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        gate, up = m @ sd[p + "mlp.gate_proj.weight"].T, m @ sd[p + "mlp.up_proj.weight"].T
        h = h + (gate * torch.sigmoid(gate) * up) @ sd[p + "mlp.down_proj.weight"].T
    return ref_rms(h, sd["model.norm.weight"], cfg.rms_norm_eps) @ sd["lm_head.weight"].T


def spec_table() -> dict[str, list[int]]:
    """docs/networks.md §2, written out."""
    d, f, v, kv = 3584, 18944, 152064, 512
    t = {"model.embed_tokens.weight": [v, d], "model.norm.weight": [d], "lm_head.weight": [v, d]}
    for i in range(28):
        p = f"model.layers.{i}."
        t |= {p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d],
              p + "self_attn.q_proj.weight": [d, d], p + "self_attn.q_proj.bias": [d],
              p + "self_attn.k_proj.weight": [kv, d], p + "self_attn.k_proj.bias": [kv],
              p + "self_attn.v_proj.weight": [kv, d], p + "self_attn.v_proj.bias": [kv],
              p + "self_attn.o_proj.weight": [d, d], p + "mlp.gate_proj.weight": [f, d],
              p + "mlp.up_proj.weight": [f, d], p + "mlp.down_proj.weight": [d, f]}
    return t


def tok_idx(mask: torch.Tensor) -> torch.Tensor:
    """Dream's sampler positions (docs/decoders.md §3), written out: count of real tokens before, pads at 1."""
    out = torch.ones_like(mask)
    for b in range(mask.shape[0]):
        n = 0
        for i in range(mask.shape[1]):
            if mask[b, i]:
                out[b, i] = n
                n += 1
    return out


@pytest.fixture(scope="module")
def net() -> DreamNetwork:
    return build_network(tiny_dream_config(V), seed=0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, net) -> object:
    return save_network(net, tmp_path_factory.mktemp("tiny_dream"))


def ids(b: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (b, length), generator=torch.Generator().manual_seed(seed))


# ---- pieces and structure -------------------------------------------------------------------------------------


def test_rope_table_for_theta_1e6():
    hd, theta = 128, 1e6
    pos = torch.arange(4096)
    ang = rope_angles(pos, rope_inv_freq(hd, theta))
    t = torch.randn(4096, hd)
    got = apply_rope(t[None, None], ang.cos()[None, None], ang.sin()[None, None], torch.float32)[0, 0]
    torch.testing.assert_close(got.double(), ref_rope(t.double(), pos, theta), atol=2e-3, rtol=0)


def test_full_size_names_and_shapes_match_the_released_checkpoint():
    cfg = DreamNetworkConfig.from_dict(REAL_CONFIG)
    with torch.device("meta"):
        full = DreamNetwork(cfg)
    got = {n: list(t.shape) for n, t in full.state_dict().items()}
    assert got == spec_table()
    assert len(got) == 339
    assert sum(math.prod(s) for s in got.values()) == 7_615_616_512


def test_config_round_trips_and_rejects_unsupported_values():
    cfg = DreamNetworkConfig.from_dict(REAL_CONFIG)
    assert cfg.to_dict() == REAL_CONFIG
    assert cfg.kv_heads == 4 and cfg.head_dim == 128
    tiny = tiny_dream_config(V)
    assert DreamNetworkConfig.from_dict(json.loads(json.dumps(tiny.to_dict()))) == tiny
    assert tiny.num_attention_heads > tiny.kv_heads  # GQA, as the 7B
    v5 = {k: v for k, v in REAL_CONFIG.items() if k != "rope_theta"} | {"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}
    assert DreamNetworkConfig.from_dict(v5).rope_theta == 1e6
    for bad, word in (({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling"),
                      ({"hidden_act": "gelu"}, "hidden_act"), ({"tie_word_embeddings": True}, "tie_word_embeddings")):
        with pytest.raises(ValueError, match=word) as e:
            DreamNetworkConfig.from_dict(REAL_CONFIG | bad)
        assert "\n" not in str(e.value)


# ---- forward --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 7, 33])
def test_forward_matches_the_spec_formulas(net, length):
    x = ids(2, length)
    got = net(x)
    assert got.shape == (2, length, V) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref_forward(net.state_dict(), net.config, x), atol=1e-4, rtol=1e-4)


def test_mha_variant_matches_too():
    cfg = dataclasses.replace(tiny_dream_config(V), num_key_value_heads=4)
    model = build_network(cfg, seed=2)
    x = ids(2, 9)
    torch.testing.assert_close(model(x).double(), ref_forward(model.state_dict(), cfg, x), atol=1e-4, rtol=1e-4)


def test_attention_is_bidirectional(net):
    x = ids(1, 10)
    y = x.clone()
    y[0, -1] = (x[0, -1] + 1) % V
    assert (net(x)[0, 0] - net(y)[0, 0]).abs().max() > 1e-3


def test_left_padding_uses_tok_idx_and_equals_unpadded_run(net):
    x = ids(2, 9, seed=4)
    pad = 3
    padded = torch.cat((torch.full((2, pad), 7), x), dim=1)
    mask = torch.ones(2, 9 + pad, dtype=torch.long)
    mask[0, :pad] = 0
    padded[1, :pad] = x[1, :pad]
    out = net(padded, attention_mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, pad:], net(x[:1])[0], atol=1e-5, rtol=0)
    want = ref_forward(net.state_dict(), net.config, padded, key_mask=mask, positions=tok_idx(mask))
    real = mask.bool()
    torch.testing.assert_close(out[real].double(), want[real], atol=1e-4, rtol=1e-4)
    # explicit tok_idx positions give the same result as the default
    assert torch.equal(net(padded, attention_mask=mask, position_ids=tok_idx(mask)), out)


def test_position_ids(net):
    x = ids(2, 8)
    base = net(x)
    assert torch.equal(net(x, position_ids=torch.arange(8).expand(2, 8)), base)
    # RoPE is relative: a uniform shift only moves rounding
    torch.testing.assert_close(net(x, position_ids=torch.arange(8) + 5), base, atol=1e-4, rtol=0)
    gap = torch.arange(8) + (torch.arange(8) >= 4) * 3
    assert (net(x, position_ids=gap) - base).abs().max() > 1e-3
    want = ref_forward(net.state_dict(), net.config, x, positions=gap.expand(2, 8))
    torch.testing.assert_close(net(x, position_ids=gap).double(), want, atol=1e-4, rtol=1e-4)


def test_bool_and_float_attention_bias(net):
    x = ids(1, 6)
    allow = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    assert torch.equal(net(x, attention_bias=allow), net(x))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    additive = torch.zeros(1, 1, 6, 6).masked_fill(~causal, float("-inf"))
    a, b = net(x, attention_bias=causal), net(x, attention_bias=additive)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    y = x.clone()
    y[0, -1] = (x[0, -1] + 1) % V
    torch.testing.assert_close(net(y, attention_bias=causal)[0, :-1], a[0, :-1], atol=1e-6, rtol=0)


# ---- KV cache -------------------------------------------------------------------------------------------------


def test_prefix_cache_with_padding_equals_full_forward_rows(net):
    x = ids(2, 12, seed=5)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :2] = 0
    full = net(x, attention_mask=mask)
    cache = net.new_cache(2, 12)
    assert torch.equal(net(x, attention_mask=mask, cache=cache, reservation=cache.reserve(12)), full)
    cache.truncate_all(6)
    with cache.claim(6, keep=0) as reservation:
        suffix = net(x[:, 6:], attention_mask=mask, cache=cache, reservation=reservation)
    torch.testing.assert_close(suffix, full[:, 6:], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="attention_mask"), cache.claim(6, keep=0) as reservation:
        net(x[:, 6:], attention_mask=mask[:, 6:], cache=cache, reservation=reservation)  # the mask covers cached keys
    assert cache.lengths == [6, 6]


def test_dual_cache_replaces_the_block_slice_in_place(net):
    x = ids(2, 12, seed=7)
    s, e = 8, 12
    full = net(x)
    cache = net.new_cache(2, 12)
    net(x, cache=cache, reservation=cache.reserve(12))
    old = [k.clone() for k in cache.keys]
    dual = net(x[:, s:e], cache=cache, reservation=cache.overwrite(s, e - s))
    torch.testing.assert_close(dual, full[:, s:e], atol=1e-5, rtol=0)
    x2 = x.clone()
    x2[:, s:e] = (x[:, s:e] + 1) % V
    net(x2[:, s:e], cache=cache, reservation=cache.overwrite(s, e - s))
    fresh = net.new_cache(2, 12)
    net(x2, cache=fresh, reservation=fresh.reserve(12))
    for layer in range(2):
        assert torch.equal(cache.keys[layer][:, :, :s], old[layer][:, :, :s])
        assert (cache.keys[layer][:, :, s:e] - old[layer][:, :, s:e]).abs().max() > 1e-3
    torch.testing.assert_close(cache.keys[0], fresh.keys[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(cache.values[0], fresh.values[0], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="reservation"):  # more inputs than the overwritten columns hold
        net(x2[:, s - 1:e], cache=cache, reservation=cache.overwrite(s, e - s))


# ---- loading --------------------------------------------------------------------------------------------------


def test_save_load_round_trip_and_dtypes(net, saved):
    x = ids(2, 9)
    loaded = load_network(saved, "dream", dtype="fp32")
    assert isinstance(loaded, DreamNetwork) and loaded.config == net.config
    assert torch.equal(loaded(x), net(x))
    bf16 = load_network(str(saved), "dream", dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    out = bf16(x)
    assert out.dtype == torch.bfloat16
    assert (out.float() - net(x)).abs().max() < 0.05 * net(x).abs().max()
    with pytest.raises(ValueError, match="unknown dtype"):
        load_network(saved, "dream", dtype="int8")


def test_mismatched_checkpoints_are_named_in_one_line(saved, tmp_path):
    sd = load_file(str(saved / "model.safetensors"))
    k = "model.layers.0.self_attn.k_proj.bias"
    cases = {
        "missing": ({n: t for n, t in sd.items() if n != k}, f"missing {k}"),
        "unexpected": ({**sd, "model.layers.0.self_attn.o_proj.bias": torch.zeros(64)},
                       "unexpected model.layers.0.self_attn.o_proj.bias"),
        "misshaped": ({**sd, k: torch.zeros(64)}, f"mis-shaped {k} [64] vs expected [32]"),
    }
    for name, (state, needle) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text((saved / "config.json").read_text())
        save_file(state, str(folder / "model.safetensors"))
        with pytest.raises(CheckpointError) as e:
            load_network(folder, "dream", dtype="fp32")
        msg = str(e.value)
        assert needle in msg and "\n" not in msg and "does not match Dream" in msg, msg
