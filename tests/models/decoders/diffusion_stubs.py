"""Scripted networks for the diffusion decoder tests: known answers, recorded calls, and a tiny real attention net."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class Call:
    """What one network call received (copies, so later in-place edits cannot rewrite history)."""

    x: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None


@dataclass
class ScriptedNet:
    """Returns ``logits_fn(x)`` and records every call; ``wrap`` returns an object with ``.logits`` instead."""

    logits_fn: Callable[[torch.Tensor], torch.Tensor]
    wrap: bool = False
    calls: list[Call] = field(default_factory=list)

    def __call__(self, x, attention_mask=None, position_ids=None):
        self.calls.append(
            Call(
                x.clone(),
                None if attention_mask is None else attention_mask.clone(),
                None if position_ids is None else position_ids.clone(),
            )
        )
        logits = self.logits_fn(x)
        if self.wrap:
            return type("Output", (), {"logits": logits})()
        return logits


def per_position_logits(table: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """A network whose logits at buffer index i are ``table[i]`` whatever the tokens ([L, V] -> [B, L, V])."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return table[: x.shape[1]].unsqueeze(0).expand(x.shape[0], -1, -1).clone()

    return fn


def one_hot_table(targets: list[int], vocab: int, high: float = 10.0) -> torch.Tensor:
    """[L, V] logits with ``high`` at targets[i] and 0 elsewhere."""
    table = torch.zeros(len(targets), vocab)
    table[torch.arange(len(targets)), torch.tensor(targets)] = high
    return table


def log_probs_row(probs: list[float], vocab: int) -> torch.Tensor:
    """A logits row whose softmax is ``probs`` padded with zeros (zero mass = -inf logit)."""
    p = torch.zeros(vocab)
    p[: len(probs)] = torch.tensor(probs)
    return torch.log(p / p.sum())


def commits_per_call(calls: list[Call], final: torch.Tensor, mask_id: int) -> list[torch.Tensor]:
    """For each call, the bool [B, L] of positions that went from mask to a token after that call's step."""
    states = [c.x for c in calls] + [final]
    return [(a == mask_id) & (b != mask_id) for a, b in zip(states[:-1], states[1:])]


def rotate_half(t: torch.Tensor) -> torch.Tensor:
    half = t.shape[-1] // 2
    return torch.cat([-t[..., half:], t[..., :half]], dim=-1)


class TinyBidirectionalNet(torch.nn.Module):
    """Two bidirectional attention layers (shared weights, no residual, RMS-normalised), fp32.

    ``positional="rope"``: rotary positions from ``position_ids`` (default buffer index), so a left-padded row with
    masked pad keys gives the same real-position logits as the unpadded row (LLaDA's setting).
    ``positional="absolute"``: learned absolute positions, so padding is only harmless if the caller passes
    padding-aware ``position_ids`` (Dream's setting). Pad keys (mask 0) are never attended. ``banned`` ids get a
    very low logit so the net never proposes the mask token. No residual keeps outputs context-dependent.
    """

    def __init__(
        self, vocab: int, dim: int = 32, positional: str = "rope", banned: tuple[int, ...] = (), seed: int = 0
    ):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.vocab, self.dim, self.positional = vocab, dim, positional
        self.embed = torch.nn.Parameter(torch.randn(vocab, dim, generator=gen))
        self.pos = torch.nn.Parameter(torch.randn(256, dim, generator=gen))
        self.wq, self.wk, self.wv, self.wo = (
            torch.nn.Parameter(torch.randn(dim, dim, generator=gen) / math.sqrt(dim)) for _ in range(4)
        )
        self.head = torch.nn.Parameter(torch.randn(dim, vocab, generator=gen) / math.sqrt(dim) * 3)
        self.banned = list(banned)
        self.calls: list[Call] = []

    def _rope(self, t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        inv_freq = 1.0 / (100.0 ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim))
        angles = positions.float().unsqueeze(-1) * inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        return t * angles.cos() + rotate_half(t) * angles.sin()

    @torch.no_grad()
    def forward(self, x, attention_mask=None, position_ids=None):
        self.calls.append(
            Call(
                x.clone(),
                None if attention_mask is None else attention_mask.clone(),
                None if position_ids is None else position_ids.clone(),
            )
        )
        batch, length = x.shape
        positions = position_ids if position_ids is not None else torch.arange(length).expand(batch, length)
        h = self.embed[x]
        if self.positional == "absolute":
            h = h + self.pos[positions]
        for _ in range(2):
            q, k, v = 3 * h @ self.wq, h @ self.wk, h @ self.wv
            if self.positional == "rope":
                q, k = self._rope(q, positions), self._rope(k, positions)
            scores = q @ k.transpose(1, 2) / math.sqrt(self.dim)
            if attention_mask is not None:
                scores = scores.masked_fill(attention_mask[:, None, :] == 0, float("-inf"))
            h = torch.softmax(scores, dim=-1) @ v @ self.wo
            h = h / h.norm(dim=-1, keepdim=True) * math.sqrt(self.dim)
        logits = h @ self.head
        if self.banned:
            logits[..., self.banned] = -1e4
        return logits
