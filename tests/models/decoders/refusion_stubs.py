"""Scripted networks and tiny random Qwen3 models for the ReFusion decoder tests.

``ScriptedLM`` mimics the HF call (``input_ids, position_ids, cache, use_cache``) and encodes ReFusion's two reading
conventions in its logits, so a decoder that shifts the wrong pass gets a different, predictable answer:
  * a MASK at position p predicts ``target[p]`` (unshifted, the MDM head) with probability ``plan_conf[p]``;
  * a token equal to ``target[p]`` at position p predicts ``target[p+1]`` (next token, the AR head) with probability
    ``ar_conf[p+1]``; any other token predicts the uniform distribution;
  * the mask id itself is never predicted.
Its cache is a real ``DynamicCache`` with one layer whose keys hold token ids and values hold positions, so every
cache operation of the decoder acts on it, and each call checks the cache: no mask id inside, no position twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM


@dataclass
class Call:
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cache_len: int


def _row(vocab: int, token: int | None, prob: float, never: int) -> torch.Tensor:
    """Logits whose softmax gives ``token`` probability ``prob``, spreads the rest evenly, and never proposes ``never``."""
    if token is None:
        row = torch.zeros(vocab)
    elif prob >= 1.0:
        row = torch.full((vocab,), -80.0)
        row[token] = 0.0
    else:
        row = torch.full((vocab,), math.log((1.0 - prob) / (vocab - 2)))
        row[token] = math.log(prob)
    row[never] = -80.0
    return row


class ScriptedLM(torch.nn.Module):
    def __init__(self, vocab: int, mask_id: int, target: list[int], plan_conf: list[float], ar_conf: list[float]):
        super().__init__()
        if not (len(target) == len(plan_conf) == len(ar_conf)):
            raise ValueError("target, plan_conf and ar_conf must cover the same positions")
        self.vocab, self.mask_id = vocab, mask_id
        self.target, self.plan_conf, self.ar_conf = list(target), list(plan_conf), list(ar_conf)
        self.calls: list[Call] = []

    def row_logits(self, token: int, position: int) -> torch.Tensor:
        if token == self.mask_id:
            return _row(self.vocab, self.target[position], self.plan_conf[position], self.mask_id)
        if token == self.target[position] and position + 1 < len(self.target):
            return _row(self.vocab, self.target[position + 1], self.ar_conf[position + 1], self.mask_id)
        return _row(self.vocab, None, 0.0, self.mask_id)

    def forward(self, input_ids, position_ids, cache=None, use_cache=True, logits_to_keep=0, **_):
        if cache is None:
            cache = DynamicCache()
        past = cache.get_seq_length()
        self.calls.append(Call(input_ids.clone(), position_ids.clone(), past))
        batch, n = input_ids.shape
        if past:
            cached_tokens = cache.layers[0].keys[:, 0, :, 0].long()
            cached_pos = cache.layers[0].values[:, 0, :, 0].long()
            if cached_tokens.shape[0] != batch:
                raise AssertionError(f"cache has {cached_tokens.shape[0]} rows, input {batch}")
            if (cached_tokens == self.mask_id).any():
                raise AssertionError("a mask id was left in the cache")
            seen = torch.cat([cached_pos, position_ids], dim=1)
        else:
            seen = position_ids
        for r in range(batch):
            if seen[r].unique().numel() != seen.shape[1]:
                raise AssertionError(f"position seen twice in cache + input: {sorted(seen[r].tolist())}")
        cache.update(input_ids.float()[:, None, :, None], position_ids.float()[:, None, :, None], 0)
        logits = torch.stack([
            torch.stack([self.row_logits(int(t), int(p)) for t, p in zip(ids, pos)])
            for ids, pos in zip(input_ids.tolist(), position_ids.tolist())
        ])
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits, cache=cache)


def tiny_qwen(vocab: int = 96, seed: int = 0, sharpness: float = 25.0, layers: int = 2) -> Qwen3ForCausalLM:
    """A random fp32 Qwen3 whose output head is scaled so probabilities spread over (0, 1) instead of ~1/vocab."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                      tie_word_embeddings=False)
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    return model


class NudgedLM(torch.nn.Module):
    """A real network whose logits get ``strength`` added at a scripted answer: ``target[p]`` for a mask at p and
    ``target[p+1]`` for a token at p. The network's own noise decides the rest, so verification sometimes accepts
    whole slots and sometimes not, while the cache semantics stay those of the real network."""

    def __init__(self, inner: torch.nn.Module, mask_id: int, target: list[int], strength: float):
        super().__init__()
        self.inner, self.mask_id, self.strength = inner, mask_id, strength
        self.register_buffer("target", torch.tensor(target + [target[-1]]), persistent=False)  # moves with .to()
        self.config = inner.config

    def nudge(self, logits: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """``logits`` with the nudge at the cells whose ids and positions are ``ids``/``pos`` (its shape less vocab)."""
        after = self.target[(pos + 1).clamp_max(len(self.target) - 1)]
        answer = torch.where(ids == self.mask_id, self.target[pos], after)
        return logits.scatter_add(-1, answer[..., None], torch.full_like(logits[..., :1], self.strength))

    def forward(self, input_ids, position_ids, **kwargs):
        out = self.inner(input_ids=input_ids, position_ids=position_ids, **kwargs)
        n = out.logits.shape[1]
        out.logits = self.nudge(out.logits, input_ids[:, -n:], position_ids[:, -n:])
        return out


def native_copy(model: Qwen3ForCausalLM):
    """The native Qwen3 network with the same weights (the stored names are the same), for the native decoder path."""
    from models.networks.qwen3 import Qwen3NetworkConfig as NativeConfig, Qwen3Network

    net = Qwen3Network(NativeConfig.from_dict(model.config.to_dict()))
    net.load_state_dict(model.state_dict(), strict=True)
    return net.eval()


class NudgedNative(NudgedLM):
    """``NudgedLM`` for a native network (``new_cache`` and the native forward signature)."""

    def new_cache(self, batch: int, capacity: int):
        return self.inner.new_cache(batch, capacity)

    def forward(self, input_ids, position_ids, attention_mask=None, cache=None, logits_to_keep=0, ragged=None):
        logits = self.inner(input_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache,
                            logits_to_keep=logits_to_keep, ragged=ragged)
        if ragged is not None:  # logits [M, V] at the read cells
            return self.nudge(logits, ragged.take(input_ids), ragged.take(position_ids.expand_as(input_ids)))
        n = logits.shape[1]
        return self.nudge(logits, input_ids[:, -n:], position_ids[:, -n:])
