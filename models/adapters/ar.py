"""The autoregressive adapter: any causal LM transformers can load (Qwen3, Llama 3, ...), greedy unless asked."""

from __future__ import annotations

from typing import Any

from models.adapters.causal import CausalLMAdapter, generation_eos_ids
from models.base import TemplateOptions
from models.decoders.ar import AR


class ARAdapter(CausalLMAdapter):
    kind = "ar"
    decoder = AR
    template = TemplateOptions(enable_thinking=False)  # Qwen3's baseline runs without a think block

    def eos_ids(self) -> list[int]:
        return generation_eos_ids(self.network, self.tokenizer)

    def token_ids(self) -> dict[str, Any]:
        return {"eos_ids": tuple(self.eos_ids()), "pad_id": self.pad_id()}
