"""Native torch Dream-v0-7B network (docs/networks.md §2): Qwen2.5 layout with bidirectional attention, loaded by the
released parameter names.

Forward returns the logits tensor [B, L, vocab_size] in the parameter dtype, **unshifted**: the sampler applies
Dream's right shift (position i-1 scores token i). With left padding and no explicit position_ids the positions are
Dream's tok_idx (cumsum(mask) - 1, pads at 1), so a padded row equals the unpadded run.

Fast-dLLM v2 (a Qwen2.5-Instruct fine-tune, the same names) is this network under block-causal attention against a
``KVBuffer`` (``block_forward``, docs/networks.md §4); its config is ``FastDLLMv2Config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.networks.block_forward import BlockForward
from models.networks.common import (
    AttentionPlan,
    BidirectionalNetwork,
    GatedMLP,
    QwenFamilyConfig,
    RMSNorm,
    apply_rope,
    attend,
    merge_heads,
    inv_freq_on,
    rope_angles,
    split_heads,
)
from models.networks.kv_buffer import KVBuffer, Reservation


@dataclass(frozen=True)
class DreamNetworkConfig(QwenFamilyConfig):
    """config.json of Dream (Qwen2 field names). Defaults are the reference ``DreamConfig`` defaults; unsupported
    values fail in ``__post_init__``. Other fields are kept verbatim in ``extra``."""

    family: ClassVar[str] = "Dream"
    tied_supported: ClassVar[bool] = False  # the released Dream is untied; Fast-dLLM v2 1.5B is tied
    attention_dropout: float = 0.0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = 151643
    mask_token_id: int | None = 151666
    model_type: str = "Dream"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tie_word_embeddings and not self.tied_supported:
            raise ValueError(f"{self.family} config: tie_word_embeddings=True is not supported "
                             "(the released model is untied)")
        if self.use_sliding_window:
            raise ValueError(f"{self.family} config: use_sliding_window=True is not supported "
                             "(attention is full and bidirectional)")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"{self.family} config: hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.extra.get("head_dim") not in (None, self.head_dim):
            raise ValueError(f"{self.family} config: head_dim {self.extra['head_dim']} differs from "
                             f"hidden_size/num_attention_heads {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.dim_per_head


@dataclass(frozen=True)
class FastDLLMv2Config(DreamNetworkConfig):
    """config.json of Fast-dLLM v2 (Efficient-Large-Model/Fast_dLLM_v2_7B, _1.5B): the Qwen2.5-Instruct config it was
    fine-tuned from plus ``bd_size``, the block length its decoder defaults to. The 1.5B ties its embeddings, as
    Qwen2.5-1.5B does. The released config.json names no mask or pad id; the defaults are the tokenizer's
    ``|<MASK>|`` (151665) and ``<|im_end|>`` (151645)."""

    family: ClassVar[str] = "Fast-dLLM v2"
    tied_supported: ClassVar[bool] = True
    bd_size: int = 32
    eos_token_id: int | None = 151645
    pad_token_id: int | None = 151645
    mask_token_id: int | None = 151665
    model_type: str = "Fast_dLLM_Qwen"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bd_size < 1:
            raise ValueError(f"{self.family} config: bd_size {self.bd_size} must be >= 1")


@dataclass(frozen=True)
class Qwen2NetworkConfig(DreamNetworkConfig):
    """config.json of a Qwen2 / Qwen2.5 causal LM: Dream's layout (Dream is a Qwen2.5 fine-tune), decoded causally
    (``causal_forward``) by the autoregressive baseline. The small ones tie their embeddings."""

    family: ClassVar[str] = "Qwen2"
    tied_supported: ClassVar[bool] = True
    pad_token_id: int | None = None
    mask_token_id: int | None = None
    model_type: str = "qwen2"


# 2 layers, 64 wide, grouped-query attention (4 q heads on 2 kv heads, as the 7B has 28 on 4)
_TINY_SIZE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0)


def tiny_dream_config(vocab_size: int) -> DreamNetworkConfig:
    """A tiny Dream of the 7B's layout (``_TINY_SIZE``)."""
    return DreamNetworkConfig(
        vocab_size=vocab_size, **_TINY_SIZE, max_position_embeddings=256,
        tie_word_embeddings=False, pad_token_id=None, mask_token_id=None, extra={"architectures": ["DreamModel"]},
    )


def tiny_fastdllm_v2_config(vocab_size: int, tied: bool = False) -> FastDLLMv2Config:
    """A tiny Fast-dLLM v2 of the 7B's layout (untied) or, ``tied``, the 1.5B's; the released architecture name."""
    return FastDLLMv2Config(
        vocab_size=vocab_size, **_TINY_SIZE, max_position_embeddings=4096, tie_word_embeddings=tied,
        extra={"architectures": ["Fast_dLLM_QwenForCausalLM"]},
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

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVBuffer | None,
                layer: int, plan: Any) -> Tensor:
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(x), self.n_kv)
        v = split_heads(self.v_proj(x), self.n_kv)
        q, k = apply_rope(q, cos, sin, q.dtype), apply_rope(k, cos, sin, k.dtype)
        if cache is not None:
            k, v = cache.store(layer, plan.reservation, k, v)
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

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVBuffer | None,
                layer: int, plan: Any) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer, plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class DreamNetwork(BlockForward, BidirectionalNetwork):
    """Dream-v0-7B as stored: ``model.{embed_tokens, layers.{i}.*, norm}`` and ``lm_head`` (none when the config ties
    it to the embedding). Positions default to Dream's tok_idx at the query columns (padding-aware: a left-padded row
    equals the row alone); the padding mask is boolean, as the reference passes it to SDPA."""

    padding_aware_positions = True
    bool_mask = True

    def __init__(self, config: DreamNetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList(DreamLayer(config) for _ in range(config.num_hidden_layers))
        self.model.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._inv_freq: dict[torch.device, Tensor] = {}

    def parts(self) -> tuple[nn.Module, nn.ModuleList, nn.Module, Callable[[Tensor], Tensor]]:
        head = self._tied_head if self.config.tie_word_embeddings else self.lm_head
        return self.model.embed_tokens, self.model.layers, self.model.norm, head

    def _tied_head(self, x: Tensor) -> Tensor:
        return F.linear(x, self.model.embed_tokens.weight)

    def cached_logits(self, input_ids: Tensor, positions: Tensor, mask: Tensor | None, cache: KVBuffer,
                      plan: Reservation, read: Tensor | None = None) -> Tensor:
        """``BlockForward``'s layers: Dream's own forward with the bool mask and the buffer's reservation."""
        attention = AttentionPlan(positions.expand(input_ids.shape), None, plan.key_len, reservation=plan)
        return self.run(input_ids, attention, mask, cache, explicit_positions=True, read=read)

    def rope(self, plan: AttentionPlan, explicit_positions: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """fp32 angles on the device, then cast to the model dtype (as the reference)."""
        positions = plan.positions
        inv_freq = inv_freq_on(self._inv_freq, positions.device, self.config.head_dim, self.config.rope_theta)
        ang = rope_angles(positions, inv_freq)
        return ang.cos().to(dtype).unsqueeze(1), ang.sin().to(dtype).unsqueeze(1)
