"""Native torch LLaDA2 MoE network (inclusionAI/LLaDA2.0-mini, LLaDA2.1-mini; docs/networks.md §5), loaded by the
stored parameter names of the released ``LLaDA2MoeModelLM`` checkpoints (one tensor per expert).

A Ling/Bailing-style decoder: fused ``query_key_value``, per-head RMSNorm on q and k, RoPE on the first half of each
head only (``partial_rotary_factor``), grouped-query attention; the first ``first_k_dense_replace`` layers have a
dense MLP, the rest a mixture of experts with a sigmoid router, group-limited top-k, an expert bias used only to
choose experts, and one always-on shared expert. Numerics follow the published modeling code: RMSNorm statistics in
fp32, RoPE tables fp32 cast to the model dtype, the router in fp32, the experts' weighted sum in fp32.

Attention is whatever mask the caller gives: none means full (bidirectional) attention, what the published model
does without a mask; block diffusion drives it block-causally through ``new_cache`` / ``block_forward``.
Forward returns unshifted logits [B, L, vocab] in the model dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.networks.block_forward import BlockForward
from models.networks.common import (GatedMLP, QwenFamilyConfig, RMSNorm, additive_mask, apply_rope, inv_freq_on,
                                     merge_heads, rms_norm, rope_angles)
from models.networks.kv_buffer import KVBuffer, Reservation
from models.networks.qwen3 import grouped_query_attention

# config.json fields the published code reads but never acts on: it always computes the value here. A checkpoint
# that says otherwise was made for code that does something else, so it fails instead of being silently misread.
_FIXED = {"use_qk_norm": True, "norm_topk_prob": True, "score_function": "sigmoid", "router_dtype": "fp32",
          "moe_router_enable_expert_bias": True, "norm_head": False, "use_sliding_window": False}


@dataclass(frozen=True)
class LLaDA2NetworkConfig(QwenFamilyConfig):
    """config.json of a LLaDA2 MoE release, with the published ``LLaDA2MoeConfig``'s field names and defaults, so a
    config.json read here means what it means to the published code (the releases set every field that matters;
    ``tiny_llada2_config`` and docs/networks.md §5 give LLaDA2.0-mini's values). The fields of ``_FIXED`` default to
    what the code computes. Unsupported values, and defaults the published code cannot run (no kv heads, no
    intermediate sizes), fail in ``__post_init__`` with one line. Fields the network does not use (pad_token_id,
    rotary_dim, ...) stay in ``extra``: the rotated width is int(head_dim * partial_rotary_factor), as published."""

    family: ClassVar[str] = "LLaDA2"
    vocab_size: int = 30592
    hidden_size: int = 1024
    intermediate_size: int | None = None
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    num_key_value_heads: int | None = 0
    max_position_embeddings: int = 16384
    rms_norm_eps: float = 1e-5
    head_dim: int | None = None
    partial_rotary_factor: float = 0.5
    use_qkv_bias: bool = False
    use_bias: bool = True
    num_experts: int | None = 16
    num_shared_experts: int | None = 0
    num_experts_per_tok: int = 2
    n_group: int = 8
    topk_group: int = 4
    moe_intermediate_size: int | None = None
    first_k_dense_replace: int = 0
    routed_scaling_factor: float = 2.5
    use_qk_norm: bool = True
    norm_topk_prob: bool = True
    score_function: str = "sigmoid"
    router_dtype: str = "fp32"
    moe_router_enable_expert_bias: bool = True
    norm_head: bool = False
    model_type: str = "llada2_moe"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in _FIXED.items():
            if getattr(self, name) != value:
                raise ValueError(f"LLaDA2 config: {name}={getattr(self, name)!r} is not supported "
                                 f"(the published modeling code computes {name}={value!r})")
        if self.num_key_value_heads is not None and self.num_key_value_heads < 1:
            raise ValueError(f"LLaDA2 config: num_key_value_heads must be >= 1, got {self.num_key_value_heads}")
        super().__post_init__()
        if self.rope_dim < 2 or self.rope_dim % 2 or self.rope_dim > self.dim_per_head:
            raise ValueError(f"LLaDA2 config: partial_rotary_factor {self.partial_rotary_factor} gives a rotated "
                             f"width of {self.rope_dim}, which must be even and within head_dim {self.dim_per_head}")
        if self.first_k_dense_replace < 0:
            raise ValueError(f"LLaDA2 config: first_k_dense_replace must be >= 0, got {self.first_k_dense_replace}")
        if not self.intermediate_size and not all(self.is_moe(i) for i in range(self.num_hidden_layers)):
            raise ValueError(f"LLaDA2 config: the dense layers need an intermediate_size, got {self.intermediate_size}")
        if self.num_experts is not None and self.num_hidden_layers > self.first_k_dense_replace:
            self._check_moe()

    def _check_moe(self) -> None:
        e, groups = self.num_experts, self.n_group
        if groups < 1 or e % groups or e // groups < 2:
            raise ValueError(f"LLaDA2 config: num_experts {e} must split into n_group {groups} groups of at least "
                             "2 experts (a group scores by its top 2)")
        if not 1 <= self.topk_group <= groups:
            raise ValueError(f"LLaDA2 config: topk_group {self.topk_group} must be in 1..n_group {groups}")
        if not 1 <= self.num_experts_per_tok <= self.topk_group * (e // groups):
            raise ValueError(f"LLaDA2 config: num_experts_per_tok {self.num_experts_per_tok} must be in 1.."
                             f"{self.topk_group * (e // groups)} (the experts of topk_group groups)")
        if not self.moe_intermediate_size:
            raise ValueError("LLaDA2 config: the experts need a moe_intermediate_size, "
                             f"got {self.moe_intermediate_size}")
        if self.num_shared_experts is not None and self.num_shared_experts < 1:
            raise ValueError(f"LLaDA2 config: num_shared_experts {self.num_shared_experts} is not supported "
                             "(use null for no shared expert)")

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads  # as published: 0 or null -> derived

    @property
    def rope_dim(self) -> int:
        """The rotated leading width of each head, as the published code truncates it."""
        return int(self.dim_per_head * self.partial_rotary_factor)

    def is_moe(self, layer: int) -> bool:
        return self.num_experts is not None and layer >= self.first_k_dense_replace


def tiny_llada2_config(vocab_size: int) -> LLaDA2NetworkConfig:
    """A tiny LLaDA2 of the mini's layout: 3 layers (the first dense), 4 q / 2 kv heads of 16 with 8 rotated
    features, 8 experts in 4 groups, top-2 from 2 groups, one shared expert; the last id is the padding id (the
    published code builds its embedding with one)."""
    return LLaDA2NetworkConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=600000.0,
        use_bias=False, num_experts=8, num_shared_experts=1, num_experts_per_tok=2, n_group=4, topk_group=2,
        moe_intermediate_size=32, first_k_dense_replace=1,
        extra={"architectures": ["LLaDA2MoeModelLM"], "pad_token_id": vocab_size - 1},
    )


class LLaDA2Attention(nn.Module):
    """Fused q/k/v projection, per-head q/k RMSNorm, partial RoPE, grouped-query SDPA, output ``dense``."""

    def __init__(self, cfg: LLaDA2NetworkConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.hd = cfg.num_attention_heads, cfg.kv_heads, cfg.dim_per_head
        self.query_key_value = nn.Linear(cfg.hidden_size, (self.n_heads + 2 * self.n_kv) * self.hd,
                                         bias=cfg.use_qkv_bias)
        self.query_layernorm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.key_layernorm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.dense = nn.Linear(self.n_heads * self.hd, cfg.hidden_size, bias=cfg.use_bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVBuffer | None,
                layer: int, plan: Reservation | None) -> Tensor:
        b, length, _ = x.shape
        heads = self.query_key_value(x).view(b, length, -1, self.hd).transpose(1, 2)  # [B, q | k | v heads, L, hd]
        # q and k heads are adjacent, so their norms and RoPE run as one op each (elementwise per head)
        n_qk = self.n_heads + self.n_kv
        norm_weight = torch.cat([self.query_layernorm.weight.expand(self.n_heads, 1, self.hd),
                                 self.key_layernorm.weight.expand(self.n_kv, 1, self.hd)])
        qk = partial_rope(rms_norm(heads[:, :n_qk], norm_weight, self.query_layernorm.eps), cos, sin)
        q, k, v = qk[:, :self.n_heads], qk[:, self.n_heads:], heads[:, n_qk:]
        if cache is not None:
            k, v = cache.store(layer, plan, k, v)
        out = grouped_query_attention(q, k, v, mask, causal=False, fused=q.device.type == "cpu")
        return self.dense(merge_heads(out))


def partial_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE on the first cos.shape[-1] features of each head, in x's dtype; the rest pass unchanged."""
    width = cos.shape[-1]
    return torch.cat([apply_rope(x[..., :width], cos, sin, x.dtype), x[..., width:]], dim=-1)


class Router(nn.Linear):
    """``mlp.gate``: a bias-free linear (``weight`` [experts, hidden]) plus ``expert_bias`` [experts], a stored
    buffer. Scores are sigmoid(logits) in fp32; the bias shifts them only to choose experts (groups by the sum of
    their top 2, the best ``topk_group`` groups, the top k experts in those), and the chosen experts' unbiased
    scores, normalised to sum to 1, times ``routed_scaling_factor``, weight their outputs. The ops (and so the
    choice among tied scores) are the published code's."""

    def __init__(self, cfg: LLaDA2NetworkConfig) -> None:
        super().__init__(cfg.hidden_size, cfg.num_experts, bias=False)
        self.register_buffer("expert_bias", torch.zeros(cfg.num_experts))
        self.top_k, self.n_group, self.topk_group = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
        self.scale = cfg.routed_scaling_factor

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [N, hidden] -> (expert ids [N, k] long, weights [N, k] fp32)."""
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        choice = scores + self.expert_bias
        n = choice.shape[0]
        group_scores = choice.view(n, self.n_group, -1).topk(2, dim=-1).values.sum(dim=-1)
        groups = group_scores.topk(self.topk_group, dim=-1, sorted=False).indices
        kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, groups, True)
        kept = kept.unsqueeze(-1).expand(n, self.n_group, choice.shape[1] // self.n_group).reshape(n, -1)
        ids = choice.masked_fill(~kept, float("-inf")).topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if self.top_k > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return ids, weights * self.scale


def mix_experts(x: Tensor, experts: nn.ModuleList, ids: Tensor, weights: Tensor) -> Tensor:
    """sum_j weights[:, j] * experts[ids[:, j]](x), grouped: the N*k (token, expert) pairs sorted by expert, one
    product per active expert over its contiguous rows. One host read of the per-expert counts per call (the slice
    bounds); the weighted sum is in fp32, as published."""
    n, k = ids.shape
    order = ids.reshape(-1).argsort(stable=True)
    counts = torch.bincount(ids.reshape(-1), minlength=len(experts)).tolist()
    rows = x[order // k].split(counts)
    outs = torch.cat([experts[e](part) for e, part in enumerate(rows) if counts[e]])
    unsorted = torch.empty_like(outs).index_copy_(0, order, outs)  # pair i*k + j back at its place
    return (unsorted.view(n, k, -1).float() * weights.unsqueeze(-1)).sum(dim=1).to(x.dtype)


def mix_experts_dense(x: Tensor, experts: nn.ModuleList, ids: Tensor, weights: Tensor) -> Tensor:
    """``mix_experts`` without a host read, for a compiled step: every expert on every token, then each token's k
    chosen outputs gathered and summed in the same order and precision. It costs num_experts / k times the routed
    FLOPs (32x on LLaDA2.0-mini) and a [num_experts, N, hidden] intermediate. Where a step's tokens choose most
    experts anyway (N * k >= num_experts: one 32-token block on the mini) the grouped form reads nearly every
    expert's weights too, so on a GPU the extra products are cheap next to that read; a long prefill pays the
    factor in full."""
    outs = torch.stack([expert(x) for expert in experts])  # [E, N, hidden]
    chosen = outs[ids, torch.arange(ids.shape[0], device=ids.device)[:, None]]  # [N, k, hidden]
    return (chosen.float() * weights.unsqueeze(-1)).sum(dim=1).to(x.dtype)


class LLaDA2MoE(nn.Module):
    """``mlp`` of a MoE layer: ``gate`` (the router), ``experts.{e}`` and ``shared_experts`` (gated MLPs)."""

    def __init__(self, cfg: LLaDA2NetworkConfig) -> None:
        super().__init__()
        self.gate = Router(cfg)
        self.experts = nn.ModuleList(GatedMLP(cfg.hidden_size, cfg.moe_intermediate_size)
                                     for _ in range(cfg.num_experts))
        self.shared_experts = (None if cfg.num_shared_experts is None else
                               GatedMLP(cfg.hidden_size, cfg.moe_intermediate_size * cfg.num_shared_experts))

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        mix = mix_experts_dense if torch.compiler.is_compiling() else mix_experts
        y = mix(flat, self.experts, *self.gate(flat)).view(x.shape)
        return y if self.shared_experts is None else y + self.shared_experts(x)


class LLaDA2Layer(nn.Module):
    def __init__(self, cfg: LLaDA2NetworkConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attention = LLaDA2Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LLaDA2MoE(cfg) if cfg.is_moe(layer) else GatedMLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVBuffer | None, layer: int,
                plan: Reservation | None) -> Tensor:
        x = x + self.attention(self.input_layernorm(x), cos, sin, mask, cache, layer, plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class LLaDA2Network(BlockForward, nn.Module):
    """``LLaDA2MoeModelLM`` as stored: ``model.{word_embeddings, layers.{i}.*, norm}`` and ``lm_head`` unless
    tied."""

    def __init__(self, config: LLaDA2NetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.model = nn.Module()
        self.model.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList(LLaDA2Layer(config, i) for i in range(config.num_hidden_layers))
        self.model.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._inv_freq: dict[torch.device, Tensor] = {}

    def new_cache(self, batch: int, capacity: int) -> KVBuffer:
        """An empty cache for ``batch`` rows of up to ``capacity`` entries (keys after norm and RoPE)."""
        w = self.model.word_embeddings.weight
        return KVBuffer(self.config.num_hidden_layers, batch, capacity, self.config.kv_heads,
                        self.config.dim_per_head, w.dtype, w.device)

    def forward(self, input_ids: Tensor, position_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Logits [B, L, vocab] without a cache. position_ids: [B|1, L] (default 0..L-1). attention_mask: 4-D
        [B|1, 1, L, L], bool (True = may attend) or additive; None = every position sees every other, as the
        published model (SDPA attention) does without a mask."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [B, L], got shape {list(input_ids.shape)}")
        b, length = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(length, device=input_ids.device)[None]
        if attention_mask is not None:
            if attention_mask.dim() != 4 or attention_mask.shape[-2:] != (length, length):
                raise ValueError(f"attention_mask must be [B|1, 1, {length}, {length}], "
                                 f"got {list(attention_mask.shape)}")
            attention_mask = additive_mask(attention_mask, self.model.word_embeddings.weight.dtype)
        positions = position_ids.to(input_ids.device).reshape(-1, length).expand(b, length)
        return self._logits(input_ids, positions, attention_mask, None, None)

    def cached_logits(self, input_ids: Tensor, positions: Tensor, mask: Tensor | None, cache: KVBuffer,
                      plan: Reservation, read: Tensor | None = None) -> Tensor:
        """``BlockForward``'s layers: the bool block-causal mask made additive once for all layers."""
        if mask is not None:
            mask = additive_mask(mask, self.model.word_embeddings.weight.dtype)
        return self._logits(input_ids, positions.expand(input_ids.shape), mask, cache, plan, read)

    def _logits(self, input_ids: Tensor, positions: Tensor, mask: Tensor | None, cache: KVBuffer | None,
                plan: Reservation | None, read: Tensor | None = None) -> Tensor:
        x = self.model.word_embeddings(input_ids)
        cos, sin = self._rope(positions, x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, cache, i, plan)
        if read is not None:
            x = x.flatten(0, 1).index_select(0, read)
        head = self.model.word_embeddings.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return F.linear(self.model.norm(x), head)

    def _rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos/sin [B, 1, L, rope_dim] at ``positions`` [B, L]: frequencies made on the CPU and angles in fp32, cast
        to the model dtype, as published."""
        inv_freq = inv_freq_on(self._inv_freq, positions.device, self.config.rope_dim, self.config.rope_theta)
        angles = rope_angles(positions, inv_freq)
        return angles.cos().to(dtype).unsqueeze(1), angles.sin().to(dtype).unsqueeze(1)
