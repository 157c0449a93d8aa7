"""Native torch Dream-v0-7B network (docs/networks.md §2): Qwen2.5 layout with bidirectional attention, loaded by the
released parameter names.

Forward returns the logits tensor [B, L, vocab_size] in the parameter dtype, **unshifted**: the sampler applies
Dream's right shift (position i-1 scores token i). With left padding and no explicit position_ids the positions are
Dream's tok_idx (cumsum(mask) - 1, pads at 1), so a padded row equals the unpadded run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from models.networks.common import (
    GatedMLP,
    KVCache,
    RMSNorm,
    apply_rope,
    attend,
    check_silu_and_default_rope,
    config_from_dict,
    config_to_dict,
    merge_heads,
    merge_kv,
    plan_forward,
    rope_angles,
    rope_inv_freq,
    sdpa_mask,
    split_heads,
)


@dataclass(frozen=True)
class DreamNetworkConfig:
    """config.json of Dream (Qwen2 field names). Defaults are the reference ``DreamConfig`` defaults; unsupported
    values fail in ``__post_init__``. Other fields are kept verbatim in ``extra``."""

    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = 32
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    tie_word_embeddings: bool = False
    use_sliding_window: bool = False
    attention_dropout: float = 0.0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = 151643
    mask_token_id: int | None = 151666
    model_type: str = "Dream"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_silu_and_default_rope(self, "Dream")
        if self.tie_word_embeddings:
            raise ValueError("Dream config: tie_word_embeddings=True is not supported (the released model is untied)")
        if self.use_sliding_window:
            raise ValueError("Dream config: use_sliding_window=True is not supported (attention is full and bidirectional)")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"Dream config: hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}")
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(f"Dream config: num_attention_heads {self.num_attention_heads} is not a multiple of num_key_value_heads {self.kv_heads}")
        if self.extra.get("head_dim") not in (None, self.head_dim):
            raise ValueError(f"Dream config: head_dim {self.extra['head_dim']} differs from hidden_size/num_attention_heads {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads if self.num_key_value_heads is not None else self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DreamNetworkConfig":
        return config_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)


def tiny_dream_config(vocab_size: int) -> DreamNetworkConfig:
    """A 2-layer, 64-wide Dream with grouped-query attention (4 q heads on 2 kv heads, as the 7B has 28 on 4)."""
    return DreamNetworkConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=False, pad_token_id=None, mask_token_id=None, extra={"architectures": ["DreamModel"]},
    )


class DreamAttention(nn.Module):
    """q/k/v with bias, o_proj without; RoPE in the model dtype (docs/networks.md §2)."""

    def __init__(self, cfg: DreamNetworkConfig) -> None:
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.kv_heads
        self.q_proj = nn.Linear(d, self.n_heads * hd, bias=True)
        self.k_proj = nn.Linear(d, self.n_kv * hd, bias=True)
        self.v_proj = nn.Linear(d, self.n_kv * hd, bias=True)
        self.o_proj = nn.Linear(self.n_heads * hd, d, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVCache | None,
                layer: int, plan: Any) -> Tensor:
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(x), self.n_kv)
        v = split_heads(self.v_proj(x), self.n_kv)
        q, k = apply_rope(q, cos, sin, q.dtype), apply_rope(k, cos, sin, k.dtype)
        k, v = merge_kv(cache, layer, k, v, plan)
        if mask is not None and q.device.type == "cuda":  # as the reference, for its SDPA kernel choice
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        return self.o_proj(merge_heads(attend(q, k, v, mask)))


class DreamLayer(nn.Module):
    def __init__(self, cfg: DreamNetworkConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DreamAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVCache | None,
                layer: int, plan: Any) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer, plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class DreamNetwork(nn.Module):
    """Dream-v0-7B as stored: ``model.{embed_tokens, layers.{i}.*, norm}`` and ``lm_head``."""

    def __init__(self, config: DreamNetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList(DreamLayer(config) for _ in range(config.num_hidden_layers))
        self.model.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._inv_freq: dict[torch.device, Tensor] = {}

    def _rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos/sin [B, 1, L, hd]: fp32 angles on the device, then cast to the model dtype (as the reference)."""
        inv_freq = self._inv_freq.get(positions.device)
        if inv_freq is None:
            inv_freq = rope_inv_freq(self.config.head_dim, self.config.rope_theta).to(positions.device)
            self._inv_freq[positions.device] = inv_freq
        ang = rope_angles(positions, inv_freq)
        return ang.cos().to(dtype).unsqueeze(1), ang.sin().to(dtype).unsqueeze(1)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KVCache | None = None,
        store_cache: bool = False,
        replace_range: tuple[int, int] | None = None,
        attention_bias: Tensor | None = None,
    ) -> Tensor:
        """Logits [B, L, vocab_size] for ``input_ids`` [B, L] (unshifted).

        attention_mask: [B, K] 1 = real, 0 = pad over every key attended (see ``plan_forward``). Pad keys are masked
        for every query; pad query rows see the real keys (the reference masks those rows completely, which only
        changes pad rows, whose output nobody reads). position_ids: default = Dream's tok_idx at the query columns.
        cache / store_cache / replace_range: see ``KVCache``. attention_bias: optional [B|1, H|1, L, K] bool
        (1 = may attend) or additive float bias, combined with the padding mask.
        """
        m = self.model
        plan = plan_forward(input_ids, attention_mask, position_ids, cache, store_cache, replace_range,
                            len(m.layers), padding_aware_positions=True, attention_bias=attention_bias)
        x = m.embed_tokens(input_ids)
        cos, sin = self._rope(plan.positions, x.dtype)
        mask = sdpa_mask(plan.key_mask, attention_bias, x.dtype, as_bool=True)
        for i, layer in enumerate(m.layers):
            x = layer(x, cos, sin, mask, cache, i, plan)
        return self.lm_head(m.norm(x))
