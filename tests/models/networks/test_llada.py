"""Native LLaDA network against docs/networks.md §1: stored names/shapes, a naive float64 re-derivation of the forward
written here from the spec formulas, padding, KV cache, loading and its errors."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from models.networks.common import apply_rope, rms_norm, rope_angles, rope_inv_freq
from models.networks.kv_buffer import Reservation
from models.networks.llada import LLaDANetworkConfig, LLaDANetwork, tiny_llada_config
from models.networks.loading import CheckpointError, build_network, load_network, save_network

V = 96

# config.json of LLaDA-8B-Instruct as listed in docs/networks.md §1 (with its unused fields)
REAL_CONFIG = {
    "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
    "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM"},
    "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": 4096,
    "embedding_dropout": 0.0, "embedding_size": 126464, "eos_token_id": 126081, "flash_attention": False,
    "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None, "init_device": "meta",
    "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False, "layer_norm_type": "rms",
    "layer_norm_with_affine": True, "mask_token_id": 126336, "max_sequence_length": 4096, "mlp_hidden_size": 12288,
    "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": None, "n_heads": 32, "n_kv_heads": 32,
    "n_layers": 32, "pad_token_id": 126081, "precision": "amp_bf16", "residual_dropout": 0.0, "rms_norm_eps": 1e-05,
    "rope": True, "rope_full_precision": True, "rope_theta": 500000.0, "scale_logits": False,
    "transformers_version": "4.46.3", "use_cache": False, "vocab_size": 126464, "weight_tying": False,
}


# ---- independent float64 reference, written from docs/networks.md §1 ---------------------------------------------


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


def ref_forward(sd: dict, cfg: LLaDANetworkConfig, ids: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head loops, explicit softmax; positions = buffer index; pad keys get -inf for every query."""
    sd = {k: v.double() for k, v in sd.items()}
    b_, length = ids.shape
    nh, nkv, hd = cfg.n_heads, cfg.kv_heads, cfg.head_dim
    pos = torch.arange(length)
    tr = "model.transformer."
    h = sd[tr + "wte.weight"][ids]
    for i in range(cfg.n_layers):
        p = f"{tr}blocks.{i}."
        a = ref_rms(h, sd[p + "attn_norm.weight"], cfg.rms_norm_eps)
        q, k, v = (a @ sd[p + n + ".weight"].T for n in ("q_proj", "k_proj", "v_proj"))
        out = torch.zeros(b_, length, nh * hd, dtype=torch.float64)
        for b in range(b_):
            for j in range(nh):
                g = j // (nh // nkv)
                qj = ref_rope(q[b, :, j * hd:(j + 1) * hd], pos, cfg.rope_theta)
                kj = ref_rope(k[b, :, g * hd:(g + 1) * hd], pos, cfg.rope_theta)
                s = qj @ kj.T / math.sqrt(hd)
                if key_mask is not None:
                    s[:, ~key_mask[b].bool()] = -math.inf
                out[b, :, j * hd:(j + 1) * hd] = torch.softmax(s, -1) @ v[b, :, g * hd:(g + 1) * hd]
        h = h + out @ sd[p + "attn_out.weight"].T
        m = ref_rms(h, sd[p + "ff_norm.weight"], cfg.rms_norm_eps)
        gate, up = m @ sd[p + "ff_proj.weight"].T, m @ sd[p + "up_proj.weight"].T
        h = h + (gate * torch.sigmoid(gate) * up) @ sd[p + "ff_out.weight"].T
    return ref_rms(h, sd[tr + "ln_f.weight"], cfg.rms_norm_eps) @ sd[tr + "ff_out.weight"].T


def spec_table() -> dict[str, list[int]]:
    """docs/networks.md §1, written out."""
    d, f, v = 4096, 12288, 126464
    t = {"model.transformer.wte.weight": [v, d], "model.transformer.ln_f.weight": [d],
         "model.transformer.ff_out.weight": [v, d]}
    for i in range(32):
        p = f"model.transformer.blocks.{i}."
        t |= {p + "attn_norm.weight": [d], p + "q_proj.weight": [d, d], p + "k_proj.weight": [d, d],
              p + "v_proj.weight": [d, d], p + "attn_out.weight": [d, d], p + "ff_norm.weight": [d],
              p + "ff_proj.weight": [f, d], p + "up_proj.weight": [f, d], p + "ff_out.weight": [d, f]}
    return t


@pytest.fixture(scope="module")
def net() -> LLaDANetwork:
    return build_network(tiny_llada_config(V), seed=0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, net) -> object:
    return save_network(net, tmp_path_factory.mktemp("tiny_llada"))


def ids(b: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (b, length), generator=torch.Generator().manual_seed(seed))


# ---- pieces ---------------------------------------------------------------------------------------------------------


def test_rms_norm_puts_eps_inside_the_root_and_weights_after():
    x = torch.randn(3, 5, 64, dtype=torch.float64) * 1e-3  # mean(x^2) ~ 1e-6, comparable to eps 1e-5
    w = 1 + 0.1 * torch.randn(64, dtype=torch.float64)
    torch.testing.assert_close(rms_norm(x, w, 1e-5), ref_rms(x, w, 1e-5), rtol=1e-6, atol=1e-7)  # fp32 statistics
    wrong = x / (torch.sqrt((x * x).mean(-1, keepdim=True)) + 1e-5) * w
    assert (rms_norm(x, w, 1e-5) - wrong).abs().max() > 1e-2


def test_rope_is_rotate_half_not_interleaved():
    hd, theta, length = 128, 500000.0, 4096
    pos = torch.arange(length)
    ang = rope_angles(pos, rope_inv_freq(hd, theta))
    half = torch.arange(hd // 2, dtype=torch.float64)
    ref_ang = pos.double()[:, None] * theta ** (-(2 * half) / hd)
    torch.testing.assert_close(ang.double(), torch.cat((ref_ang, ref_ang), -1), rtol=1e-6, atol=1e-3)
    t = torch.randn(length, hd)
    got = apply_rope(t[None, None], ang.cos()[None, None], ang.sin()[None, None], torch.float32)[0, 0]
    torch.testing.assert_close(got.double(), ref_rope(t.double(), pos, theta), atol=2e-3, rtol=0)
    # an interleaved-pairs RoPE (dims 2k, 2k+1) gives something else
    t1, t2 = t.double()[:, 0::2], t.double()[:, 1::2]
    c, s = ref_ang.cos(), ref_ang.sin()
    inter = torch.stack((t1 * c - t2 * s, t2 * c + t1 * s), -1).flatten(-2)
    assert (got.double() - inter).abs().max() > 0.1


def test_rope_runs_in_fp32_for_bf16_inputs():
    hd = 16
    ang = rope_angles(torch.arange(40), rope_inv_freq(hd, 500000.0))
    t = torch.randn(1, 2, 40, hd).bfloat16()
    got = apply_rope(t, ang.cos()[None, None], ang.sin()[None, None], torch.float32)
    exact = (t.float() * ang.cos() + torch.cat((-t.float()[..., 8:], t.float()[..., :8]), -1) * ang.sin()).bfloat16()
    assert got.dtype == torch.bfloat16 and torch.equal(got, exact)


# ---- structure --------------------------------------------------------------------------------------------------


def test_full_size_names_and_shapes_match_the_released_checkpoint():
    cfg = LLaDANetworkConfig.from_dict(REAL_CONFIG)
    with torch.device("meta"):
        full = LLaDANetwork(cfg)
    got = {n: list(t.shape) for n, t in full.state_dict().items()}
    assert got == spec_table()
    assert len(got) == 291
    assert sum(math.prod(s) for s in got.values()) == 8_015_581_184
    assert cfg.kv_heads == 32 and cfg.head_dim == 128 and cfg.rows == 126464


def test_config_round_trips_and_rejects_unsupported_flags():
    cfg = LLaDANetworkConfig.from_dict(REAL_CONFIG)
    assert cfg.to_dict() == REAL_CONFIG
    assert LLaDANetworkConfig.from_dict(cfg.to_dict()) == cfg
    tiny = tiny_llada_config(V)
    assert LLaDANetworkConfig.from_dict(json.loads(json.dumps(tiny.to_dict()))) == tiny
    with pytest.raises(ValueError, match="block_type") as e:
        LLaDANetworkConfig.from_dict({**REAL_CONFIG, "block_type": "sequential"})
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="weight_tying"):
        LLaDANetworkConfig.from_dict({k: v for k, v in REAL_CONFIG.items() if k != "weight_tying"})  # reference default: tied


# ---- forward --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 7, 33])
@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_forward_matches_the_spec_formulas(length, n_kv_heads):
    cfg = dataclasses.replace(tiny_llada_config(V), n_kv_heads=n_kv_heads)
    model = build_network(cfg, seed=3)
    x = ids(2, length)
    got = model(x)
    assert got.shape == (2, length, V) and got.dtype == torch.float32
    want = ref_forward(model.state_dict(), cfg, x)
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)


def test_attention_is_bidirectional(net):
    x = ids(1, 10)
    y = x.clone()
    y[0, -1] = (x[0, -1] + 1) % V
    assert (net(x)[0, 0] - net(y)[0, 0]).abs().max() > 1e-3


def test_left_padding_with_mask_equals_unpadded_run(net):
    x = ids(2, 9, seed=4)
    pad = 3
    padded = torch.cat((torch.full((2, pad), 5), x), dim=1)
    padded[1, :pad] = x[1, :pad]  # row 1: no padding, different real tokens at the front
    mask = torch.ones(2, 9 + pad, dtype=torch.long)
    mask[0, :pad] = 0
    out = net(padded, attention_mask=mask)
    torch.testing.assert_close(out[0, pad:], net(x[:1])[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1], net(padded[1:])[0], atol=1e-5, rtol=0)
    want = ref_forward(net.state_dict(), net.config, padded, key_mask=mask)
    torch.testing.assert_close(out.double(), want, atol=1e-4, rtol=1e-4)  # pad query rows see real keys
    assert (net(padded)[0, pad:] - out[0, pad:]).abs().max() > 1e-3  # without the mask the pads are seen


def test_all_ones_mask_is_no_mask(net):
    x = ids(2, 8)
    assert torch.equal(net(x, attention_mask=torch.ones(2, 8)), net(x))


def test_bad_inputs_fail_in_one_line(net):
    x = ids(2, 8)
    for kwargs in ({"attention_mask": torch.ones(2, 7)}, {"position_ids": torch.arange(3)},
                   {"cache": net.new_cache(2, 8)}, {"reservation": Reservation(None, 8, 0)},
                   {"cache": net.new_cache(1, 8), "reservation": Reservation(None, 8, 0)}):
        with pytest.raises(ValueError) as e:
            net(x, **kwargs)
        assert "\n" not in str(e.value)


# ---- KV cache -------------------------------------------------------------------------------------------------


def test_prefix_cache_suffix_equals_full_forward_rows(net):
    x = ids(2, 12, seed=5)
    full = net(x)
    cache = net.new_cache(2, 12)
    assert torch.equal(net(x, cache=cache, reservation=cache.reserve(12)), full)
    assert cache.n_layers == 2 and cache.lengths == [12, 12] and cache.keys[0].shape == (2, 4, 12, 16)
    cache.truncate_all(5)
    with cache.claim(7, keep=0) as reservation:
        suffix = net(x[:, 5:], cache=cache, reservation=reservation)
    torch.testing.assert_close(suffix, full[:, 5:], atol=1e-5, rtol=0)
    assert cache.lengths == [5, 5]  # reading does not keep
    with pytest.raises(ValueError):
        cache.truncate_all(6)


def test_cached_keys_are_rotated_at_absolute_positions(net):
    x = ids(1, 6, seed=6)
    cache = net.new_cache(1, 6)
    net(x, cache=cache, reservation=cache.reserve(6))
    sd = {k: v.double() for k, v in net.state_dict().items()}
    p = "model.transformer.blocks.0."
    a = ref_rms(sd["model.transformer.wte.weight"][x[0]], sd[p + "attn_norm.weight"], 1e-5)
    k = a @ sd[p + "k_proj.weight"].T
    head1 = ref_rope(k[:, 16:32], torch.arange(6), 500000.0)
    torch.testing.assert_close(cache.keys[0][0, 1].double(), head1, atol=1e-5, rtol=0)


def test_dual_cache_replaces_the_block_slice_in_place(net):
    x = ids(1, 12, seed=7)
    s, e = 4, 8
    full = net(x)
    cache = net.new_cache(1, 12)
    net(x, cache=cache, reservation=cache.reserve(12))
    old = cache.row_kv(0)
    # same block tokens: the block's logits equal the full forward's rows
    dual = net(x[:, s:e], cache=cache, reservation=cache.overwrite(s, e - s))
    torch.testing.assert_close(dual, full[:, s:e], atol=1e-5, rtol=0)
    x2 = x.clone()
    x2[0, s:e] = (x[0, s:e] + 1) % V
    net(x2[:, s:e], cache=cache, reservation=cache.overwrite(s, e - s))
    assert cache.lengths == [12]
    fresh = net.new_cache(1, 12)
    net(x2, cache=fresh, reservation=fresh.reserve(12))
    for layer in range(2):
        for got, before in zip(cache.kv[layer], old[layer]):
            assert got.shape == before.shape
            assert torch.equal(got[:, :, :s], before[:, :, :s]) and torch.equal(got[:, :, e:], before[:, :, e:])
            assert (got[:, :, s:e] - before[:, :, s:e]).abs().max() > 1e-3
    # layer 0 keys depend only on the token and its position: they equal a fresh forward's
    torch.testing.assert_close(cache.keys[0][:, :, s:e], fresh.keys[0][:, :, s:e], atol=1e-6, rtol=0)
    torch.testing.assert_close(cache.values[0][:, :, s:e], fresh.values[0][:, :, s:e], atol=1e-6, rtol=0)


# ---- loading --------------------------------------------------------------------------------------------------


def test_save_load_round_trip_fp32(net, saved):
    loaded = load_network(saved, "llada", dtype=torch.float32)
    assert isinstance(loaded, LLaDANetwork) and loaded.config == net.config
    assert all(not p.requires_grad and p.dtype == torch.float32 for p in loaded.parameters())
    x = ids(2, 9)
    assert torch.equal(loaded(x), net(x))


@pytest.mark.parametrize("dtype", ["bf16", torch.float16])
def test_dtype_choice(net, saved, dtype):
    loaded = load_network(saved, "llada", dtype=dtype, device="cpu")
    want = torch.bfloat16 if dtype == "bf16" else torch.float16
    assert {p.dtype for p in loaded.parameters()} == {want}
    x = ids(1, 9)
    out = loaded(x)
    assert out.dtype == want
    ref = net(x)
    assert (out.float() - ref).abs().max() < 0.05 * ref.abs().max()


def test_sharded_checkpoint_with_index_loads(net, saved, tmp_path):
    sd = load_file(str(saved / "model.safetensors"))
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, part in shards.items():
        save_file({n: sd[n] for n in part}, str(tmp_path / file))
    index = {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n in part}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_text((saved / "config.json").read_text())
    x = ids(1, 7)
    assert torch.equal(load_network(tmp_path, "llada", dtype="fp32")(x), net(x))


def _write(folder, saved, sd):
    folder.mkdir()
    (folder / "config.json").write_text((saved / "config.json").read_text())
    save_file(sd, str(folder / "model.safetensors"))


def test_mismatched_checkpoints_are_named_in_one_line(saved, tmp_path):
    sd = load_file(str(saved / "model.safetensors"))
    cases = {
        "missing": ({k: v for k, v in sd.items() if k != "model.transformer.blocks.1.q_proj.weight"},
                    "missing model.transformer.blocks.1.q_proj.weight"),
        "unexpected": ({**sd, "model.transformer.blocks.0.q_proj.bias": torch.zeros(64)},
                       "unexpected model.transformer.blocks.0.q_proj.bias"),
        "misshaped": ({**sd, "model.transformer.wte.weight": torch.zeros(100, 64)},
                      "mis-shaped model.transformer.wte.weight [100, 64] vs expected [96, 64]"),
    }
    for name, (state, needle) in cases.items():
        _write(tmp_path / name, saved, state)
        with pytest.raises(CheckpointError) as e:
            load_network(tmp_path / name, "llada", dtype="fp32")
        msg = str(e.value)
        assert needle in msg and "\n" not in msg and "does not match LLaDA" in msg, msg
    with pytest.raises(CheckpointError, match="not LLaDA"):
        load_network(_dream_folder(tmp_path), "llada")
    with pytest.raises(CheckpointError, match="no checkpoint folder"):
        load_network(tmp_path / "nowhere", "llada")


def _dream_folder(tmp_path):
    from models.networks.dream import tiny_dream_config

    return save_network(build_network(tiny_dream_config(V), seed=0), tmp_path / "dream")
