"""Pieces shared by the native networks: RMSNorm, rotate-half RoPE, SwiGLU, SDPA attention with an optional KV
cache, the per-forward bookkeeping (key length, query positions, padding mask), and config.json handling (the fields the Qwen-family configs share, read
and written by name).

The networks follow docs/networks.md; where their numerics differ (RoPE precision, mask form) the caller picks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.networks.kv_buffer import KVBuffer, Reservation


# ---- norms, rope, mlp -------------------------------------------------------------------------------------------


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """weight * (x / sqrt(mean(x^2) + eps)); statistics in fp32, cast back before the weight (docs/networks.md §1)."""
    r = x.float()
    r = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps)
    return weight * r.to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a weight and no bias; the one parameter is stored as ``weight``."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


def rope_inv_freq(head_dim: int, theta: float) -> Tensor:
    """inv_freq[k] = 1 / theta^(2k/head_dim) in fp32, always computed on CPU as both references do at init."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head dim, got {head_dim}")
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim
    return 1.0 / (theta ** exponent)


def inv_freq_on(store: dict[torch.device, Tensor], device: torch.device, head_dim: int, theta: float) -> Tensor:
    """``rope_inv_freq`` on ``device``, kept in ``store`` from the first call on: a forward reads it there instead of
    copying it from the CPU each time (a copy a CUDA graph of a compiled step cannot hold)."""
    if device not in store:
        store[device] = rope_inv_freq(head_dim, theta).to(device)
    return store[device]


def rope_angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles cat(p*inv_freq, p*inv_freq) in fp32: [..., L] positions -> [..., L, head_dim] (rotate-half layout)."""
    freqs = positions.to(torch.float32).unsqueeze(-1) * inv_freq.to(positions.device)
    return torch.cat((freqs, freqs), dim=-1)


def rotate_half(x: Tensor) -> Tensor:
    """[x1 | x2] -> [-x2 | x1] over the last dim (NeoX layout, not interleaved pairs)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, compute_dtype: torch.dtype) -> Tensor:
    """x*cos + rotate_half(x)*sin evaluated in ``compute_dtype`` (fp32 for LLaDA, model dtype for Dream)."""
    xc = x.to(compute_dtype)
    out = xc * cos.to(compute_dtype) + rotate_half(xc) * sin.to(compute_dtype)
    return out.to(x.dtype)


def swiglu(x: Tensor, gate: nn.Linear, up: nn.Linear, down: nn.Linear) -> Tensor:
    """down(SiLU(gate(x)) * up(x)); SiLU goes on the gate projection, up is the linear multiplier."""
    return down(F.silu(gate(x)) * up(x))


class GatedMLP(nn.Module):
    """The Qwen-family MLP (``gate_proj``, ``up_proj``, ``down_proj``, no biases): down(SiLU(gate(x)) * up(x))."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return swiglu(x, self.gate_proj, self.up_proj, self.down_proj)


# ---- attention --------------------------------------------------------------------------------------------------


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """The mask as SDPA applies it (bool: 0 where allowed, -inf elsewhere, exactly its own conversion), made once per
    forward instead of once per layer: at batch 8 that conversion was a sixth of a tiny network's forward."""
    if mask.is_floating_point():
        return mask.to(dtype)
    zero, blocked = (torch.tensor(v, dtype=dtype, device=mask.device) for v in (0.0, float("-inf")))
    return torch.where(mask, zero, blocked)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Bidirectional SDPA; kv heads are repeat_interleaved so q-head j uses kv head j // (n_heads / n_kv_heads)."""
    n_rep = q.shape[1] // k.shape[1]
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """[B, L, n*hd] -> [B, n, L, hd]; head j owns the contiguous columns j*hd ... (j+1)*hd - 1."""
    b, length, width = x.shape
    return x.view(b, length, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """[B, n, L, hd] -> [B, L, n*hd], heads concatenated in order."""
    b, n, length, hd = x.shape
    return x.transpose(1, 2).reshape(b, length, n * hd)


# ---- per-forward bookkeeping ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionPlan:
    """What one forward needs besides the weights, computed once and shared by every layer.

    positions: [B, Lq] absolute RoPE positions of the queries (and of the new keys).
    key_mask: [B, K] bool, True = real key, or None when every key is real.
    key_len: K, the number of keys each query attends to.
    reservation: where the ``KVBuffer`` cache takes the new keys (``reserve``, ``claim``, ``overwrite``); None
    without a cache.
    """

    positions: Tensor
    key_mask: Tensor | None
    key_len: int
    reservation: Reservation | None = None


def padding_mask(attention_mask: Tensor) -> Tensor | None:
    """The [B, K] bool padding mask (True = real key), or None when every key is real, so SDPA takes no mask. A
    compiled step keeps the mask even then: the all-real test and the no-real-token check are host reads."""
    mask = attention_mask != 0
    if torch.compiler.is_compiling():
        return mask
    if bool(mask.all()):
        return None
    if not bool(mask.any(dim=1).all()):
        raise ValueError("attention_mask has a row with no real token")
    return mask


def key_columns(input_ids: Tensor, cache: KVBuffer | None, reservation: Reservation | None,
                n_layers: int) -> tuple[int, Tensor]:
    """K, the keys a forward attends to, and the [B|1, L] key columns of its L queries: 0 .. L-1 without a cache,
    else the columns ``reservation`` writes their K/V to (checked against the cache and the input)."""
    b, length = input_ids.shape
    if cache is None:
        if reservation is not None:
            raise ValueError("a reservation needs the KV cache it was taken from")
        return length, torch.arange(length, device=input_ids.device)[None]
    if reservation is None:
        raise ValueError("a KV cache needs the reservation of this call's columns (KVBuffer.reserve, claim, "
                         "overwrite)")
    if cache.n_layers != n_layers or cache.batch != b:
        raise ValueError(f"KV cache of {cache.n_layers} layers and {cache.batch} rows, the network has {n_layers} "
                         f"layers and the input {b} rows")
    if reservation.uniform is None:
        if tuple(reservation.index.shape) != (b, length):
            raise ValueError(f"the reservation's columns {list(reservation.index.shape)} are not the input's "
                             f"[{b}, {length}]")
        return reservation.key_len, reservation.index
    if reservation.uniform + length > reservation.key_len:
        raise ValueError(f"the reservation of columns {reservation.uniform}.. of {reservation.key_len} cannot hold the "
                         f"{length} input positions")
    first = reservation.uniform
    return reservation.key_len, torch.arange(first, first + length, device=input_ids.device)[None]


def plan_forward(
    input_ids: Tensor,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    cache: KVBuffer | None,
    reservation: Reservation | None,
    n_layers: int,
    padding_aware_positions: bool,
    attention_bias: Tensor | None = None,
) -> AttentionPlan:
    """Validate the forward inputs and work out key length, query positions and the padding mask.

    ``attention_mask`` ([B, K], 1 = real, 0 = pad) covers every key the call attends to: the L new tokens without a
    cache, else the ``reservation.key_len`` first columns of the cache (live + new entries). Query i sits at key
    column c_i (``key_columns``: i, or where the reservation writes it). Default positions are c_i, or, when
    ``padding_aware_positions``, cumsum(mask) - 1 at c_i with pads set to 1 (Dream's tok_idx, docs/decoders.md §3).
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, L], got shape {list(input_ids.shape)}")
    b, length = input_ids.shape
    if length == 0:
        raise ValueError("input_ids has no positions")
    key_len, columns = key_columns(input_ids, cache, reservation, n_layers)
    columns = columns.expand(b, length)

    if attention_bias is not None and (attention_bias.dim() != 4 or tuple(attention_bias.shape[-2:]) != (length, key_len)):
        raise ValueError(f"attention_bias must be [B|1, H|1, {length}, {key_len}], got shape {list(attention_bias.shape)}")
    key_mask = None
    if attention_mask is not None:
        if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (b, key_len):
            raise ValueError(
                f"attention_mask must be [B, K] = [{b}, {key_len}] (1 = real, 0 = pad, over cached + new keys), "
                f"got shape {list(attention_mask.shape)}"
            )
        key_mask = padding_mask(attention_mask.to(input_ids.device))

    if position_ids is not None:
        if tuple(position_ids.shape) not in ((b, length), (1, length), (length,)):
            raise ValueError(f"position_ids must be [B, L] = [{b}, {length}], got shape {list(position_ids.shape)}")
        positions = position_ids.to(input_ids.device).long().reshape(-1, length).expand(b, length)
    elif padding_aware_positions and key_mask is not None:
        tok_idx = key_mask.long().cumsum(dim=1) - 1
        tok_idx = tok_idx.masked_fill(~key_mask, 1)
        positions = tok_idx.gather(1, columns)
    else:
        positions = columns
    return AttentionPlan(positions, key_mask, key_len, reservation)


def sdpa_mask(
    key_mask: Tensor | None, attention_bias: Tensor | None, dtype: torch.dtype, as_bool: bool
) -> Tensor | None:
    """The SDPA ``attn_mask`` from the padding mask (keys only, so no query row is ever fully masked) and an optional
    caller bias [B|1, H|1, Lq, K] (bool/int: 1 = may attend; float: additive).

    ``as_bool`` gives a bool mask (Dream's form); otherwise an additive float mask in ``dtype`` with finfo.min for
    masked keys (LLaDA's form, which casts fp32.min to the model dtype and replaces the resulting -inf by finfo.min).
    """
    allowed = None if key_mask is None else key_mask[:, None, None, :]
    additive = None
    if attention_bias is not None:
        if attention_bias.dtype in (torch.bool, torch.int8, torch.uint8, torch.int32, torch.int64):
            bias_allowed = attention_bias != 0
            allowed = bias_allowed if allowed is None else allowed & bias_allowed
        else:
            additive = attention_bias
    if allowed is None and additive is None:
        return None
    if additive is None and as_bool:
        return allowed
    neg = torch.finfo(dtype).min
    device = (allowed if allowed is not None else additive).device
    out = torch.zeros((), dtype=dtype, device=device) if additive is None else additive.to(dtype)
    if allowed is not None:
        out = torch.where(allowed, out, torch.tensor(neg, dtype=dtype, device=device))
    return out.clamp_min(neg)


class BidirectionalNetwork(nn.Module):
    """The forward LLaDA and Dream share: plan the keys and positions once, embed, run the layers with RoPE and the
    padding mask, then the final norm and the LM head. A subclass supplies its stored module tree through
    ``parts()`` and its RoPE tables through ``rope(plan, explicit_positions, dtype)``; ``padding_aware_positions``
    and ``bool_mask`` are the two places where the references' numerics differ (docs/networks.md)."""

    padding_aware_positions: ClassVar[bool]
    bool_mask: ClassVar[bool]
    reads_cells: ClassVar[bool] = True  # ``forward(..., read=cells)`` runs the LM head at those cells alone

    def parts(self) -> tuple[nn.Module, nn.ModuleList, nn.Module, Callable[[Tensor], Tensor]]:
        """(embedding, layers, final norm, LM head) as stored."""
        raise NotImplementedError

    def rope(self, plan: AttentionPlan, explicit_positions: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos/sin [B, 1, L, head_dim] at ``plan.positions``."""
        raise NotImplementedError

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: KVBuffer | None = None,
        reservation: Reservation | None = None,
        attention_bias: Tensor | None = None,
        read: Tensor | None = None,
    ) -> Tensor:
        """Logits [B, L, vocab] for ``input_ids`` [B, L], unshifted (position i's output is at i); with ``read`` (flat
        cells of [B * L]) [M, vocab] at those cells, the LM head computed there alone (a decoder that reads one block
        of a canvas needs no [B, L, vocab] tensor; the head's float rounding may then differ from the full one's).

        attention_mask: [B, K] 1 = real, 0 = pad over every key attended (see ``plan_forward``); pad keys are masked
        for every query, pad query rows still see the real keys (whose output nobody reads). position_ids: absolute
        RoPE positions of the L inputs; the default is the family's (see the subclass). cache: a ``KVBuffer``
        (``new_cache``), keys stored after RoPE; reservation: the columns of it this call's K/V take, which the caller
        claims: ``reserve(L)`` keeps them (append), ``claim(L, keep=0)`` attends to them and drops them after (a read
        against a prefix), ``overwrite(s, L)`` writes them over columns s .. s+L-1 (Fast-dLLM's dual cache); the
        queries sit at those columns. attention_bias: optional [B|1, H|1, L, K] bool (1 = may attend) or additive
        float bias, combined with the padding mask.
        """
        embed, layers, _, _ = self.parts()
        plan = plan_forward(input_ids, attention_mask, position_ids, cache, reservation, len(layers),
                            padding_aware_positions=self.padding_aware_positions, attention_bias=attention_bias)
        mask = sdpa_mask(plan.key_mask, attention_bias, embed.weight.dtype, as_bool=self.bool_mask)
        return self.run(input_ids, plan, mask, cache, explicit_positions=position_ids is not None, read=read)

    def run(self, input_ids: Tensor, plan: AttentionPlan, mask: Tensor | None, cache: KVBuffer | None,
            explicit_positions: bool, read: Tensor | None = None) -> Tensor:
        """Embed, the layers with RoPE at ``plan.positions`` and the SDPA ``mask``, final norm and LM head (at the
        flat cells ``read`` alone, when given)."""
        embed, layers, norm, head = self.parts()
        x = embed(input_ids)
        cos, sin = self.rope(plan, explicit_positions, x.dtype)
        for i, layer in enumerate(layers):
            x = layer(x, cos, sin, mask, cache, i, plan)
        if read is not None:
            x = x.flatten(0, 1).index_select(0, read)
        return head(norm(x))


def config_from_dict(cls: type, d: dict[str, Any]) -> Any:
    """A network config dataclass from a checkpoint's config.json: known fields by name, the rest kept in ``extra``;
    a transformers-5 ``rope_parameters`` dict is accepted in place of ``rope_theta``/``rope_scaling``."""
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    known = {k: v for k, v in d.items() if k in names}
    extra = {k: v for k, v in d.items() if k not in names and k != "extra"}
    rope_parameters = d.get("rope_parameters")
    if isinstance(rope_parameters, dict):
        known.setdefault("rope_theta", rope_parameters.get("rope_theta", cls.rope_theta))
        if rope_parameters.get("rope_type", "default") != "default":
            known.setdefault("rope_scaling", rope_parameters)
    return cls(**known, extra=extra)


def config_to_dict(config: Any) -> dict[str, Any]:
    """The inverse of ``config_from_dict``: the unknown fields first, the known ones over them."""
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "extra"}
    return {**config.extra, **out}


@dataclass(frozen=True)
class QwenFamilyConfig:
    """The config.json fields Qwen2 (Dream) and Qwen3 share, with transformers' names and defaults, and the checks
    they share: the native networks implement SiLU and the default RoPE only, and q heads share kv heads evenly.
    A subclass adds its own fields and names its family for the error messages."""

    family: ClassVar[str] = "Qwen"
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

    def __post_init__(self) -> None:
        if self.hidden_act != "silu":
            raise ValueError(f"{self.family} config: hidden_act={self.hidden_act!r} is not supported "
                             "(the native network needs 'silu')")
        scaling = self.rope_scaling or {}
        if scaling.get("rope_type", scaling.get("type", "default")) != "default":
            raise ValueError(f"{self.family} config: rope_scaling={self.rope_scaling!r} is not supported "
                             "(only the default RoPE)")
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(f"{self.family} config: num_attention_heads {self.num_attention_heads} is not a multiple "
                             f"of num_key_value_heads {self.kv_heads}")

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads if self.num_key_value_heads is not None else self.num_attention_heads

    @property
    def dim_per_head(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        return config_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)
