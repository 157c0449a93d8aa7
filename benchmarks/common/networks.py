"""The networks benchmarks decode on, in one place: tiny random networks of the real architectures at a chosen
width (``tiny_network``, ``transformers_qwen3``), the registry's tiny-refusion checkpoint loaded both ways, and the
wrappers that make a random network behave as a case needs (``EndsAt``: answers end where a prompt's length puts
them; ``ConfidentNetwork``: every ReFusion slot accepted). ReFusion's acceptance regimes live in ``regimes`` (torch
only, for the published code's worker)."""

from __future__ import annotations

import dataclasses

import torch

from benchmarks.common.regimes import Biased, biased
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.llada2 import tiny_llada2_config
from models.networks.loading import build_network, load_network
from models.networks.qwen3 import Qwen3NetworkConfig
from models.tiny import materialize

KINDS = ("qwen3", "qwen2", "llada", "dream", "llada2")


def tiny_network(kind: str, vocab: int, hidden: int | None = None, layers: int | None = None, mlp: int | None = None,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, **fields) -> torch.nn.Module:
    """A seeded random native network: ``qwen3`` (SDAR's and ReFusion's layout, 4 heads, 2 KV heads), ``qwen2``
    (Dream's layout, which Fast-dLLM v2 shares), ``llada``, ``dream`` or the ``llada2`` MoE (the tiny recipe's 8
    experts, each a quarter of ``mlp``). ``hidden``, ``layers`` and ``mlp`` (the MLP width) default to the tiny
    config's; ``fields`` set any other config field."""
    if kind == "qwen3":
        config = Qwen3NetworkConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp,
                                    num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=hidden // 4)
    elif kind == "llada":
        config = tiny_llada_config(vocab)
        config = dataclasses.replace(config, **_set(d_model=hidden, n_layers=layers, mlp_hidden_size=mlp))
    elif kind in ("dream", "qwen2"):
        config = dataclasses.replace(tiny_dream_config(vocab), **_set(hidden_size=hidden, num_hidden_layers=layers,
                                                                       intermediate_size=mlp))
    elif kind == "llada2":
        config = dataclasses.replace(tiny_llada2_config(vocab), **_set(
            hidden_size=hidden, num_hidden_layers=layers, intermediate_size=mlp,
            moe_intermediate_size=None if mlp is None else mlp // 4, head_dim=None if hidden is None else hidden // 4))
    else:
        raise ValueError(f"unknown network kind {kind!r}; valid: {', '.join(KINDS)}")
    return build_network(dataclasses.replace(config, **fields), device=device, dtype=dtype, seed=0)


def _set(**fields) -> dict:
    return {k: v for k, v in fields.items() if v is not None}


def transformers_qwen3(vocab: int, hidden: int, layers: int, mlp: int, max_positions: int,
                       device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """transformers' own Qwen3ForCausalLM, seeded, of the ``qwen3`` shape above (the AR baseline's network, as the
    harness's AR adapter runs it)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
                         max_position_embeddings=max_positions)
    return Qwen3ForCausalLM(config).to(device=device, dtype=dtype).eval()


def refusion_checkpoint(regime: str, max_pos: int, device: str | torch.device, dtype: torch.dtype | str,
                        period: int | None = None) -> tuple[Biased, Biased, int]:
    """The registry's tiny-refusion checkpoint loaded natively and through transformers, both wrapped in one
    acceptance regime, and its mask id."""
    from transformers import Qwen3ForCausalLM
    from transformers.utils import logging

    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    folder = materialize("tiny-refusion")
    logging.disable_progress_bar()
    hf = Qwen3ForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    native = load_network(folder, "qwen3", dtype=dtype).to(device)
    vocab, mask_id = hf.config.vocab_size, hf.config.mask_token_id
    wrapped = (biased(network, regime, max_pos, vocab, mask_id, period) for network in (native, hf))
    return (*wrapped, mask_id)


class ConfidentNetwork(torch.nn.Module):
    """Adds ``bias`` to a fixed answer's logit so argmax is that answer and its probability is ~1."""

    def __init__(self, inner: torch.nn.Module, mask_id: int, bias: float = 60.0):
        super().__init__()
        self.inner, self.mask_id, self.bias, self.config = inner, mask_id, bias, inner.config

    def answer(self, positions: torch.Tensor) -> torch.Tensor:
        return (7 * positions + 3) % (self.mask_id - 1)  # never the mask id (vocab-1) or vocab-2

    def forward(self, input_ids, position_ids, **kwargs):
        out = self.inner(input_ids=input_ids, position_ids=position_ids, **kwargs)
        n = out.logits.shape[1]
        ids, pos = input_ids[:, -n:], position_ids[:, -n:]
        target = torch.where(ids == self.mask_id, self.answer(pos), self.answer(pos + 1))
        bias = torch.full_like(out.logits[..., :1], self.bias)
        out.logits = out.logits.scatter_add(-1, target[..., None], bias)
        return out


class EndsAt(torch.nn.Module):
    """The native network with a large bias on ``eos`` at every position >= ``stop``, for the calls the decoders
    make: ``causal_forward`` (AR), ``block_forward`` (block diffusion) and the native ``forward`` (ReFusion)."""

    def __init__(self, inner: torch.nn.Module, eos: int, stop: int, bias: float = 60.0) -> None:
        super().__init__()
        self.inner, self.eos, self.stop, self.bias = inner, eos, stop, bias

    def new_cache(self, batch: int, capacity: int):
        return self.inner.new_cache(batch, capacity)

    def _ended(self, logits: torch.Tensor, positions: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        """``logits`` of the entries at ``positions`` [B, L] (at its flat cells ``read`` when given) biased."""
        positions = positions if read is None else positions.flatten().index_select(0, read)
        logits[..., self.eos] += self.bias * (positions >= self.stop).to(logits.dtype)
        return logits

    def causal_forward(self, input_ids, cache, read=None):
        device = input_ids.device
        positions = torch.as_tensor(cache.lengths, device=device)[:, None] + torch.arange(input_ids.shape[1],
                                                                                          device=device)
        return self._ended(self.inner.causal_forward(input_ids, cache, read=read), positions, read)

    def block_forward(self, input_ids, position_ids, cache, block_length, write, read=None):
        positions = torch.arange(position_ids.start, position_ids.stop, device=input_ids.device)[None] \
            if isinstance(position_ids, range) else position_ids
        logits = self.inner.block_forward(input_ids, position_ids, cache, block_length, write, read=read)
        return self._ended(logits, positions.expand_as(input_ids), read)

    def forward(self, input_ids, position_ids, ragged=None, **kwargs):
        logits = self.inner(input_ids, position_ids=position_ids, ragged=ragged, **kwargs)
        positions = position_ids.expand_as(input_ids)
        return self._ended(logits, ragged.take(positions) if ragged is not None else positions)
