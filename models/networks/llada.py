"""Native torch LLaDA-8B network (docs/networks.md §1): loads the released safetensors by their stored names and
reproduces the reference forward with the L-new attention-mask semantics (pad keys masked for every query).

Forward returns the logits tensor [B, L, embedding_size] in the parameter dtype, unshifted (position i scores
token i). RoPE positions default to the key-buffer index, as the reference; left padding is exact only up to
float rounding because RoPE is relative.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from models.networks.common import (
    AttentionPlan,
    BidirectionalNetwork,
    RMSNorm,
    apply_rope,
    attend,
    config_from_dict,
    config_to_dict,
    inv_freq_on,
    merge_heads,
    rope_angles,
    rope_inv_freq,
    split_heads,
    swiglu,
)
from models.networks.kv_buffer import KVBuffer


@dataclass(frozen=True)
class LLaDANetworkConfig:
    """config.json of LLaDA (OLMo field names). Defaults are the reference ``ModelConfig`` defaults (GPT-2-like,
    not LLaDA's), so a config.json read here means what it means to the reference; unsupported values fail in
    ``__post_init__``. Fields this network does not use are kept verbatim in ``extra``."""

    d_model: int = 768
    n_heads: int = 12
    n_kv_heads: int | None = None
    n_layers: int = 12
    mlp_ratio: int = 4
    mlp_hidden_size: int | None = None
    activation_type: str = "swiglu"
    block_type: str = "sequential"
    block_group_size: int = 1
    alibi: bool = False
    rope: bool = False
    rope_full_precision: bool = True
    rope_theta: float = 10000.0
    multi_query_attention: bool | None = None
    attention_layer_norm: bool = False
    input_emb_norm: bool = False
    layer_norm_type: str = "default"
    layer_norm_with_affine: bool = True
    rms_norm_eps: float = 1e-5
    max_sequence_length: int = 1024
    include_qkv_bias: bool | None = False
    include_bias: bool = False
    bias_for_layer_norm: bool | None = None
    scale_logits: bool = False
    vocab_size: int = 50257
    embedding_size: int | None = 50304
    weight_tying: bool = True
    eos_token_id: int | None = 50256
    pad_token_id: int | None = 50256
    mask_token_id: int | None = 50256
    model_type: str = "llada"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        required = {
            "block_type": "llama",
            "activation_type": "silu",
            "layer_norm_type": "rms",
            "layer_norm_with_affine": True,
            "rope": True,
            "alibi": False,
            "attention_layer_norm": False,
            "include_bias": False,
            "include_qkv_bias": False,
            "weight_tying": False,
            "scale_logits": False,
            "input_emb_norm": False,
            "block_group_size": 1,
        }
        for name, want in required.items():
            if getattr(self, name) != want:
                raise ValueError(f"LLaDA config: {name}={getattr(self, name)!r} is not supported (the native network needs {want!r})")
        if self.bias_for_layer_norm:
            raise ValueError("LLaDA config: bias_for_layer_norm=True is not supported (the released model has none)")
        if self.d_model % self.n_heads:
            raise ValueError(f"LLaDA config: d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"LLaDA config: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.kv_heads}")
        if self.rows < self.vocab_size:
            raise ValueError(f"LLaDA config: embedding_size {self.rows} is smaller than vocab_size {self.vocab_size}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """The reference's ``effective_n_kv_heads``."""
        if self.n_kv_heads is None:
            return 1 if self.multi_query_attention else self.n_heads
        if self.multi_query_attention is not None and self.n_kv_heads != (1 if self.multi_query_attention else self.n_heads):
            raise ValueError("LLaDA config: multi_query_attention and n_kv_heads disagree")
        return self.n_kv_heads

    @property
    def hidden(self) -> int:
        return self.mlp_hidden_size if self.mlp_hidden_size is not None else self.mlp_ratio * self.d_model

    @property
    def rows(self) -> int:
        """Embedding and LM-head rows (``embedding_size or vocab_size``); logits have this many columns."""
        return self.embedding_size or self.vocab_size

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LLaDANetworkConfig":
        return config_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)


def tiny_llada_config(vocab_size: int) -> LLaDANetworkConfig:
    """A 2-layer, 64-wide LLaDA with the real architecture flags (MHA like the 8B), for offline tests."""
    return LLaDANetworkConfig(
        d_model=64, n_heads=4, n_kv_heads=4, n_layers=2, mlp_hidden_size=96, activation_type="silu",
        block_type="llama", rope=True, rope_theta=500000.0, layer_norm_type="rms", rms_norm_eps=1e-5,
        max_sequence_length=256, include_qkv_bias=False, bias_for_layer_norm=False, vocab_size=vocab_size,
        embedding_size=vocab_size, weight_tying=False, eos_token_id=None, pad_token_id=None, mask_token_id=None,
        extra={"architectures": ["LLaDAModelLM"]},
    )


class LLaDABlock(nn.Module):
    """``LLaDALlamaBlock``: pre-norm attention then SwiGLU MLP (ff_proj is the gate, ff_out the down projection)."""

    def __init__(self, cfg: LLaDANetworkConfig) -> None:
        super().__init__()
        d, hd = cfg.d_model, cfg.head_dim
        self.n_heads, self.n_kv = cfg.n_heads, cfg.kv_heads
        self.rope_dtype = torch.float32 if cfg.rope_full_precision else None
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv * hd, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv * hd, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.ff_proj = nn.Linear(d, cfg.hidden, bias=False)
        self.up_proj = nn.Linear(d, cfg.hidden, bias=False)
        self.ff_out = nn.Linear(cfg.hidden, d, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVBuffer | None,
                layer: int, plan: Any) -> Tensor:
        a = self.attn_norm(x)
        q = split_heads(self.q_proj(a), self.n_heads)
        k = split_heads(self.k_proj(a), self.n_kv)
        v = split_heads(self.v_proj(a), self.n_kv)
        rope_dtype = self.rope_dtype or q.dtype
        q, k = apply_rope(q, cos, sin, rope_dtype), apply_rope(k, cos, sin, rope_dtype)
        if cache is not None:
            k, v = cache.store(layer, plan.reservation, k, v)
        x = x + self.attn_out(merge_heads(attend(q, k, v, mask)))
        return x + swiglu(self.ff_norm(x), self.ff_proj, self.up_proj, self.ff_out)


class LLaDANetwork(BidirectionalNetwork):
    """LLaDA-8B as stored: ``model.transformer.{wte, blocks.{i}.*, ln_f, ff_out}`` (ff_out at the top is the LM head).
    Logits have ``rows`` columns; positions default to each input's key column (buffer index), as the reference; the
    padding mask is additive."""

    padding_aware_positions = False
    bool_mask = False

    def __init__(self, config: LLaDANetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.model = nn.Module()
        self.model.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.rows, config.d_model),
                blocks=nn.ModuleList(LLaDABlock(config) for _ in range(config.n_layers)),
                ln_f=RMSNorm(config.d_model, config.rms_norm_eps),
                ff_out=nn.Linear(config.d_model, config.rows, bias=False),
            )
        )
        self._rope_tables: dict[torch.device, tuple[Tensor, Tensor]] = {}
        self._inv_freq: dict[torch.device, Tensor] = {}

    def new_cache(self, batch: int, capacity: int) -> KVBuffer:
        """An empty preallocated cache for ``batch`` rows of up to ``capacity`` entries, in the network's dtype.
        Keys are stored after RoPE: Fast-dLLM stores them before and rotates them again at the same positions each
        call, which gives the same tensors."""
        w, c = self.model.transformer.wte.weight, self.config
        return KVBuffer(c.n_layers, batch, capacity, c.kv_heads, c.head_dim, w.dtype, w.device)

    def parts(self) -> tuple[nn.Module, nn.ModuleList, nn.Module, nn.Module]:
        t = self.model.transformer
        return t.wte, t.blocks, t.ln_f, t.ff_out

    def rope(self, plan: AttentionPlan, explicit_positions: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Gathered from an fp32 table built on CPU (as the reference builds it) and kept per device; the table grows
        when a position beyond it is asked for."""
        positions = plan.positions
        if explicit_positions and torch.compiler.is_compiling():
            return self._rope_at(positions)
        needed = plan.key_len
        if explicit_positions:
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0:
                raise ValueError(f"position_ids must be >= 0, got {lo}")
            needed = hi + 1
        device = positions.device
        table = self._rope_tables.get(device)
        if table is None or table[0].shape[0] < needed:
            length = max(needed, self.config.max_sequence_length, 2 * (table[0].shape[0] if table else 0))
            ang = rope_angles(torch.arange(length), rope_inv_freq(self.config.head_dim, self.config.rope_theta))
            table = (ang.cos().to(device), ang.sin().to(device))
            self._rope_tables[device] = table
        return table[0][positions].unsqueeze(1), table[1][positions].unsqueeze(1)

    def _rope_at(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos/sin of the fp32 angles at ``positions`` themselves, for a compiled step: the table's values up to the
        device's rounding of cos/sin, without the host read of the positions' range that sizes the table."""
        inv_freq = inv_freq_on(self._inv_freq, positions.device, self.config.head_dim, self.config.rope_theta)
        ang = rope_angles(positions, inv_freq)
        return ang.cos().unsqueeze(1), ang.sin().unsqueeze(1)
