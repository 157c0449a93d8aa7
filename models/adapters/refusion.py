"""The ReFusion adapter: a Qwen3 fine-tune loaded by transformers, decoded by slot-level plan-and-infill."""

from __future__ import annotations

from typing import Any

from models.adapters.causal import CausalLMAdapter
from models.base import TemplateOptions
from models.decoders.refusion import REFUSION


class RefusionAdapter(CausalLMAdapter):
    """Batch 1 by design (the reference hard-codes it); the decoder runs a larger batch row by row."""

    kind = "refusion"
    decoder = REFUSION
    template = TemplateOptions(enable_thinking=True)  # as ReFusion was trained and evaluated (no think block)

    def eos_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    def token_ids(self) -> dict[str, Any]:
        return {"mask_id": self.token_id("<|mask|>"), "eos_id": self.tokenizer.eos_token_id}
