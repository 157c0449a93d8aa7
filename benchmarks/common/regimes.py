"""ReFusion's acceptance regimes, shared by the project side (the ``refusion`` and ``step_ops`` benchmarks, the
decoder tests) and the published decoder's worker (benchmarks/reference/refusion_worker.py, which runs in the
published code's own environment): torch only, so it imports there.

A network is wrapped so the acceptance rate is known: ``all`` adds a large bias at a fixed answer for both heads
(every slot accepted by the first verification), ``90%`` leaves the next-token bias off at a seeded 10% of
positions (those tokens fail global verification and go through in-slot completion), ``random`` has no bias (one
slot per round, token by token: the worst case). The end-of-sequence id is one the network cannot produce, so
canvases fill completely.
"""

from __future__ import annotations

import torch

NO_EOS = 10**6
REGIMES = ("all", "90%", "random")


class Biased(torch.nn.Module):
    """Adds ``bias`` at answer(p) for a mask at p (plan head) and at answer(p+1) for a token at p (next-token head),
    except the next-token bias at the positions in ``reject``. Works for the native and the transformers-style call."""

    def __init__(self, inner: torch.nn.Module, mask_id: int, vocab: int, bias: float, reject: torch.Tensor):
        super().__init__()
        self.inner, self.mask_id, self.vocab, self.bias, self.reject = inner, mask_id, vocab, bias, reject
        if hasattr(inner, "new_cache"):
            self.new_cache = inner.new_cache
        self.config = getattr(inner, "config", None)

    @property
    def device(self) -> torch.device:  # the published decoder reads model.device
        return next(self.inner.parameters()).device

    def _nudge(self, logits, ids, pos):
        """In place at the cells of ``ids``/``pos`` (shaped as ``logits`` without its vocab axis)."""
        is_mask = ids == self.mask_id
        target_pos = torch.where(is_mask, pos, pos + 1)
        answer = (target_pos * 7 + 3) % (self.vocab - 1)
        strength = torch.where(is_mask | ~self.reject[target_pos.clamp_max(len(self.reject) - 1)], self.bias, 0.0)
        # In place: the logits are the network's fresh output. An out-of-place copy took 5-7% of a batch-1 decode,
        # scaffolding cost that is not the decoders' (the same wrapper runs on both sides).
        return logits.scatter_add_(-1, answer[..., None], strength[..., None].to(logits.dtype))

    def forward(self, input_ids, position_ids, **kwargs):
        if hasattr(self.inner, "new_cache"):
            out = self.inner(input_ids, position_ids=position_ids, **kwargs)
        else:
            out = self.inner(input_ids=input_ids, position_ids=position_ids, **kwargs)
        logits = out if isinstance(out, torch.Tensor) else out.logits
        ragged = kwargs.get("ragged")
        if ragged is not None:  # the native network's logits at the read cells alone
            ids, pos = ragged.take(torch.stack([input_ids, position_ids.expand_as(input_ids)], -1)).unbind(-1)
        else:
            n = logits.shape[1]
            ids, pos = input_ids[:, -n:], position_ids[:, -n:]
        self._nudge(logits, ids, pos)
        return out


def biased(inner: torch.nn.Module, regime: str, max_pos: int, vocab: int, mask_id: int,
           period: int | None = None) -> Biased:
    """``inner`` wrapped for an acceptance regime (the same seeded rejections on either side). With ``period`` the
    rejections repeat every ``period`` positions, so serial blocks of that length all see the same pattern and a
    longer canvas changes only the cache the rounds work beside, not their mix of forwards."""
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; valid: {', '.join(REGIMES)}")
    bias = 0.0 if regime == "random" else 60.0
    draws = torch.rand(period or max_pos, generator=torch.Generator().manual_seed(0))
    reject = (draws < (0.1 if regime == "90%" else 0.0)).repeat(-(-max_pos // draws.numel()))[:max_pos]
    return Biased(inner, mask_id, vocab, bias, reject.to(next(inner.parameters()).device))


def make_prompts(n: int, device: str = "cpu", vocab: int = 500) -> list[torch.Tensor]:
    """n prompts of 12..51 ids, the same for every caller (seeded on the CPU)."""
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (int(12 + 17 * i % 40),), generator=g).to(device) for i in range(n)]
