"""DiffusionGemma (google/diffusiongemma-26B-A4B-it) on transformers' model and its own ``generate``.

The decoding (options, seeds, counts, the cut) is ``models.decoders.diffusion_gemma``; this adapter loads the
tokenizer through ``AutoTokenizer`` and the network through ``DiffusionGemmaForBlockDiffusion``, fills the
checkpoint's ids from its generation config, tells the forward timer which modules are the passes, and records each
sample's pass counts and seed beside the usual fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from models.adapters.causal import CausalLMAdapter, generation_eos_ids
from models.base import Generation, PreparedBatch, TemplateOptions
from models.decoders.contract import DecodeResult
from models.decoders.diffusion_gemma import DIFFUSION_GEMMA, PassCounts, pass_modules


@dataclass(frozen=True)
class DiffusionGemmaGeneration(PassCounts, Generation):
    """A generation with its pass counts and seed, so they reach the store and the sample records."""


class DiffusionGemmaAdapter(CausalLMAdapter):
    """Tokenizer through ``AutoTokenizer`` (the Gemma-4 processor would import torchvision), network through
    ``DiffusionGemmaForBlockDiffusion``; the same code for the release and for ``tiny-diffusiongemma``."""

    kind = "diffusiongemma"
    decoder = DIFFUSION_GEMMA
    template = TemplateOptions(enable_thinking=False)  # the Gemma-4 template's own default, recorded
    loader = "diffusiongemma"
    model_class = "DiffusionGemmaForBlockDiffusion"

    def eos_ids(self) -> list[int]:
        return generation_eos_ids(self.network.generation_config, self.tokenizer)

    def token_ids(self) -> dict[str, Any]:
        pad = getattr(self.network.generation_config, "pad_token_id", None)
        return {"eos_ids": tuple(self.eos_ids()), "pad_id": self.pad_id() if pad is None else pad}

    def forward_modules(self, network: Any) -> tuple[torch.nn.Module, ...]:
        """The encoder and decoder passes and the head the decoder's logits come from (the forward timer's view)."""
        return (*pass_modules(network).values(), network.lm_head)

    def finish(self, batch: PreparedBatch, results: Sequence[DecodeResult]) -> list[Generation]:
        counts = [field.name for field in dataclasses.fields(PassCounts)]
        return [DiffusionGemmaGeneration(**dataclasses.asdict(generation),
                                         **{name: getattr(result, name) for name in counts})
                for generation, result in zip(super().finish(batch, results), results)]
