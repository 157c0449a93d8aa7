"""Native torch Qwen3 causal network (the architecture of ReFusion and of the Qwen3 AR baselines), loaded by the
stored parameter names of a transformers ``Qwen3ForCausalLM`` checkpoint.

Qwen3 differs from the Dream/Qwen2 layout in three places: per-head RMSNorm on q and k before RoPE (``q_norm``,
``k_norm``), no q/k/v bias (unless ``attention_bias``), and a head_dim that need not be hidden/heads. RoPE angles are
fp32 and cast to the model dtype, as transformers does. Forward returns unshifted logits [B, L, vocab].

The cache is a ``KVBuffer`` (preallocated, written by index), so a decode step allocates no cache memory; the
attention mask is a 4-D [B|1, 1, L, K] bool (True = may attend) or additive float mask over the K = cached + new keys.
SDAR and TraDo are this network under block-causal attention (``block_forward``, docs/networks.md §4).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.networks.block_forward import BlockForward
from models.networks.common import (GatedMLP, QwenFamilyConfig, RMSNorm, additive_mask, inv_freq_on, merge_heads,
                                     rms_norm, rope_angles)
from models.networks.grouped_attention import (GroupedPlan, GroupedWindows, dense_mask, grouped_attention,
                                               grouping_pays, plan_grouped)
from models.networks.kv_buffer import KVBuffer, Reservation
from models.networks.ragged import RaggedBatch


@dataclass(frozen=True)
class Qwen3NetworkConfig(QwenFamilyConfig):
    """config.json of a Qwen3 causal LM (transformers field names, its defaults); unsupported values fail early."""

    family: ClassVar[str] = "Qwen3"
    head_dim: int | None = 128
    attention_bias: bool = False
    model_type: str = "qwen3"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.use_sliding_window:
            raise ValueError("Qwen3 config: use_sliding_window=True is not supported "
                             "(buffer reordering needs full attention)")
        if self.dim_per_head % 2:
            raise ValueError(f"Qwen3 config: head_dim {self.dim_per_head} must be even for RoPE")

    @property
    def dim_per_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class AlignedCausal:
    """Each new token sees the keys up to its own index: no cache, or an empty one. SDPA computes that with
    ``is_causal`` and no mask, so its kernels skip the blocks above the diagonal (a prompt's forward, on every
    device), where a mask would have them score every key and hide half."""


# What every layer attends with: an additive mask, a grouped plan, aligned causal, or None (every key).
Attention = Tensor | GroupedPlan | AlignedCausal | None


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: Qwen3NetworkConfig) -> None:
        super().__init__()
        d, hd = cfg.hidden_size, cfg.dim_per_head
        self.n_heads, self.n_kv, self.hd = cfg.num_attention_heads, cfg.kv_heads, hd
        self.q_proj = nn.Linear(d, self.n_heads * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(d, self.n_kv * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(d, self.n_kv * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.n_heads * hd, d, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)  # over each head's hd features, before RoPE
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def forward(self, x: Tensor, rope: "Rope", mask: Attention, cache: KVBuffer | None,
                layer: int, plan: Reservation | None, packed: RaggedBatch | None = None) -> Tensor:
        """x: [B, L, hidden], or with a ``packed`` batch its real tokens alone [N, hidden] (widened to [B, L] after
        the projections, for attention and the cache, and packed again before ``o_proj``)."""
        b, length = rope.cos.shape[0], rope.cos.shape[2]  # the batch's shape (x may be packed): one table per cell
        # q, k and v heads side by side, so the per-head norms and RoPE of q and k run as one op each (elementwise
        # per head: the same numbers as normalising and rotating them apart) and a packed batch widens in one copy
        heads = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        if packed is not None:
            heads = packed.unpack(heads, b, length)
        heads = heads.view(b, length, self.n_heads + 2 * self.n_kv, self.hd)
        norm_weight = torch.cat([self.q_norm.weight.expand(self.n_heads, self.hd),
                                 self.k_norm.weight.expand(self.n_kv, self.hd)])
        qk = rope.apply(rms_norm(heads[:, :, :self.n_heads + self.n_kv], norm_weight, self.q_norm.eps).transpose(1, 2))
        q, k = qk[:, :self.n_heads], qk[:, self.n_heads:]
        v = heads[:, :, self.n_heads + self.n_kv:].transpose(1, 2)
        if cache is not None:
            k, v = cache.store(layer, plan, k, v)
        if isinstance(mask, GroupedPlan):
            out = grouped_attention(q, k, v, mask)
        else:
            causal = isinstance(mask, AlignedCausal)
            out = grouped_query_attention(q, k, v, None if causal else mask, causal=causal,
                                          fused=q.device.type == "cpu")
        out = merge_heads(out)
        return self.o_proj(out if packed is None else packed.pack(out))


@dataclass(frozen=True)
class Rope:
    """One forward's RoPE tables [B, 1, L, head_dim] in the model dtype: ``cos`` and ``sin`` with the sign of
    rotate-half folded in (-sin on the first half), so x*cos + rotate_half(x)*sin is x*cos + roll(x)*signed_sin:
    two fewer ops per call, and bitwise the same numbers (negating a factor or the product is exact)."""

    cos: Tensor
    signed_sin: Tensor

    @classmethod
    def at(cls, angles: Tensor, dtype: torch.dtype) -> "Rope":
        half = angles.shape[-1] // 2
        sin = angles.sin()
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        return cls(angles.cos().to(dtype).unsqueeze(1), sin.to(dtype).unsqueeze(1))

    def apply(self, x: Tensor) -> Tensor:
        return x * self.cos + x.roll(x.shape[-1] // 2, dims=-1) * self.signed_sin


def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                            fused: bool) -> Tensor:
    """SDPA where q-head j uses kv head j // (n_heads / n_kv), without a copy of the keys and values per q head.

    ``fused``: SDPA matches the heads itself (``enable_gqa``), what the CPU does. CUDA's fused kernels do not take
    enable_gqa together with a mask (SDPA would fall back to its math kernel), so there each kv head's q heads are
    stacked along the query axis and the mask is repeated to match: rep x queries x keys entries, against rep copies
    of the whole cache per layer when the kv heads are repeated. All three forms are bitwise equal on the CPU
    (tested). A causal call without a mask keeps query i aligned with key i, so it repeats the kv heads; a call with
    neither (every query sees every key) is one the fused kernels take with enable_gqa."""
    n_heads, n_kv = q.shape[1], k.shape[1]
    if fused or n_heads == n_kv or (mask is None and not causal):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=n_heads != n_kv)
    rep = n_heads // n_kv
    if mask is None:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    b, _, length, d = q.shape
    stacked = q.reshape(b, n_kv, rep * length, d)  # kv head g's q heads g*rep .. g*rep+rep-1, one after another
    out = F.scaled_dot_product_attention(stacked, k, v, attn_mask=mask.repeat(1, 1, rep, 1))
    return out.view(b, n_heads, length, d)


class Qwen3Layer(nn.Module):
    def __init__(self, cfg: Qwen3NetworkConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Qwen3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: Tensor, rope: Rope, mask: Attention, cache: KVBuffer | None, layer: int,
                plan: Reservation | None, packed: RaggedBatch | None = None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, mask, cache, layer, plan, packed)
        return x + self.mlp(self.post_attention_layernorm(x))


def causal_triangle(size: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """[size, size] additive: row c is the causal mask of the entry at column c (0 at columns <= c, -inf after)."""
    return additive_mask(torch.ones(size, size, dtype=torch.bool, device=device).tril(), dtype)


def causal_mask(triangle: Tensor, plan: Reservation, n_new: int) -> Tensor:
    """[B|1, 1, Q, K] additive: row b's new entry i (column lengths[b] + i) sees columns 0 .. lengths[b] + i, its
    cache and its new entries up to itself. Rows of a ``causal_triangle`` (at least K x K): a view when every row
    has the same length, one gather otherwise, instead of a compare and a select over every entry per forward."""
    if plan.uniform is not None:
        return triangle[plan.uniform:plan.uniform + n_new, :plan.key_len][None, None]
    return triangle[plan.index, :plan.key_len][:, None]


class Qwen3Network(BlockForward, nn.Module):
    """Qwen3ForCausalLM as stored: ``model.{embed_tokens, layers.{i}.*, norm}`` and ``lm_head`` unless tied (SDAR's
    ``SDARForCausalLM`` stores the same names)."""

    def __init__(self, config: Qwen3NetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList(Qwen3Layer(config) for _ in range(config.num_hidden_layers))
        self.model.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._inv_freq: dict[torch.device, Tensor] = {}
        self._triangles: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def _rope(self, positions: Tensor, dtype: torch.dtype) -> Rope:
        inv_freq = inv_freq_on(self._inv_freq, positions.device, self.config.dim_per_head, self.config.rope_theta)
        return Rope.at(rope_angles(positions, inv_freq), dtype)

    def _triangle(self, size: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """The ``causal_triangle`` the default mask reads, at least [size, size], built once per device and dtype
        (size = a cache's capacity, for ReFusion prompt + 2 x canvas + slot: 6.6M entries for a 512-token prompt and
        a 1024 canvas)."""
        triangle = self._triangles.get((device, dtype))
        if triangle is None or triangle.shape[0] < size:
            triangle = self._triangles[device, dtype] = causal_triangle(size, device, dtype)
        return triangle

    def _attention(self, attention_mask: Tensor | GroupedWindows | None, cache: KVBuffer | None,
                   plan: Reservation | None, length: int, dtype: torch.dtype, device: torch.device,
                   static: bool) -> Attention:
        """What every layer attends with: an additive mask (the caller's widened to a static plan's columns, the
        free ones hidden), a grouped plan (not in a static call: its integers would shape the compiled step), or
        aligned causal (the default with no cache or an empty one; a static plan reads every column, so it takes
        the mask)."""
        if isinstance(attention_mask, GroupedWindows):
            if not static and grouping_pays(attention_mask, self.config.num_attention_heads, device):
                return plan_grouped(attention_mask, self.config.num_attention_heads, self.config.kv_heads, dtype,
                                    device)
            attention_mask = dense_mask(attention_mask, device)
        if attention_mask is not None:
            mask = additive_mask(attention_mask, dtype)
            free = 0 if plan is None else plan.key_len - mask.shape[-1]
            return F.pad(mask, (0, free), value=float("-inf")) if free else mask
        if cache is not None and plan.uniform != 0:
            return causal_mask(self._triangle(cache.capacity, device, dtype), plan, length)
        return AlignedCausal()

    def forward(self, input_ids: Tensor, position_ids: Tensor | None = None,
                attention_mask: Tensor | GroupedWindows | None = None, cache: KVBuffer | None = None,
                logits_to_keep: int = 0, ragged: RaggedBatch | None = None) -> Tensor:
        """Logits [B, L, vocab] (only the last ``logits_to_keep`` positions when > 0), or with ``ragged`` [M, vocab]
        at its read cells (its real tokens alone computed when packed).

        position_ids: [B|1, L] RoPE positions; default = each row's key column (its cache length + 0..L-1).
        attention_mask: 4-D [B|1, 1, L, K] over the K = max(cache lengths) + L keys, bool or additive, or, with a
        cache, a ``GroupedWindows`` layout of it (attended group by group where that is cheaper); default is causal
        over each row's own entries. cache: new k/v are written at each row's length (see ``KVBuffer``).
        """
        with self.forward_call(input_ids, position_ids, attention_mask, cache, logits_to_keep, ragged) as step:
            return self.forward_step(*step)

    @contextmanager
    def forward_call(self, input_ids: Tensor, position_ids: Tensor | None = None,
                     attention_mask: Tensor | GroupedWindows | None = None, cache: KVBuffer | None = None,
                     logits_to_keep: int = 0, ragged: RaggedBatch | None = None,
                     static: bool = False) -> Iterator[tuple[Any, ...]]:
        """``forward``'s host half: the inputs checked, the cache's columns claimed (``static`` as a compiled step
        takes them, ``KVBuffer.reserve``) and the mask built; yields ``forward_step``'s arguments."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [B, L], got shape {list(input_ids.shape)}")
        b, length = input_ids.shape
        claim = nullcontext()
        if cache is not None:
            if cache.batch != b:
                raise ValueError(f"KV buffer has {cache.batch} rows, input {b}")
            if isinstance(attention_mask, GroupedWindows) and (attention_mask.lengths != tuple(cache.lengths)
                                                                or attention_mask.width != length):
                raise ValueError(f"the grouped layout describes rows of {list(attention_mask.lengths)} cached entries "
                                 f"and {attention_mask.width} new tokens, the input {list(cache.lengths)} and {length}")
            if position_ids is None:
                position_ids = torch.tensor(cache.lengths, device=input_ids.device)[:, None] + torch.arange(
                    length, device=input_ids.device)
            claim = cache.claim(length, keep=length, static=static)
        elif position_ids is None:
            position_ids = torch.arange(length, device=input_ids.device)[None]
        elif isinstance(attention_mask, GroupedWindows):
            raise ValueError("a grouped attention layout needs the cache it describes")
        key_len = length if cache is None else max(cache.lengths) + length
        if isinstance(attention_mask, Tensor) and (attention_mask.dim() != 4
                                                   or attention_mask.shape[-2:] != (length, key_len)):
            raise ValueError(f"attention_mask must be [B|1, 1, {length}, {key_len}], got {list(attention_mask.shape)}")
        positions = position_ids.reshape(-1, length).expand(b, length)
        weight = self.model.embed_tokens.weight
        with claim as plan:
            mask = self._attention(attention_mask, cache, plan, length, weight.dtype, weight.device, static)
            yield input_ids, positions, mask, cache, plan, logits_to_keep, ragged

    def cached_logits(self, input_ids: Tensor, positions: Tensor, mask: Tensor | None, cache: KVBuffer,
                      plan: Reservation, read: Tensor | None = None) -> Tensor:
        """``BlockForward``'s layers: the bool mask made additive once, as ``forward`` does."""
        if mask is not None:
            mask = additive_mask(mask, self.model.embed_tokens.weight.dtype)
        ragged = None if read is None else RaggedBatch(None, read)
        return self.forward_step(input_ids, positions.expand(input_ids.shape), mask, cache, plan, ragged=ragged)

    def forward_step(self, input_ids: Tensor, positions: Tensor, mask: Attention,
                     cache: KVBuffer | None, plan: Reservation | None, logits_to_keep: int = 0,
                     ragged: RaggedBatch | None = None) -> Tensor:
        """``forward``'s device half, tensor work only with a static ``plan``: embed, the layers at ``positions``
        [B, L] with ``mask`` (None: every key), final norm and head."""
        packed = ragged if ragged is not None and ragged.real is not None else None  # the layers' packed batch
        x = self.model.embed_tokens(input_ids if packed is None else packed.pack(input_ids))
        rope = self._rope(positions, x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, rope, mask, cache, i, plan, packed)
        if ragged is not None:
            x = (x.flatten(0, 1) if packed is None else x).index_select(0, ragged.read)
        elif logits_to_keep:
            x = x[:, -logits_to_keep:]
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return F.linear(x, head)
