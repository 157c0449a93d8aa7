"""The autoregressive adapter: any causal LM transformers can load (Qwen3, Llama 3, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from models.base import ConfigError, DecodeResult, ModelAdapter, PreparedBatch
from models.decoders.ar import SamplingConfig, ar_generate
from models.loading import ModelSource, hub_error


@dataclass(frozen=True)
class ARConfig:
    enable_thinking: bool | None = False  # Qwen3-style templates only; None leaves the template's default
    do_sample: bool = False  # greedy unless asked, whatever the checkpoint's generation_config says
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None


def load_causal_lm(source: ModelSource, device: torch.device, dtype: torch.dtype):
    """Tokenizer and network through transformers' own loaders, the same for a hub id, a folder or a tiny model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path, revision=source.revision)
        # Straight onto the device: an 8B checkpoint never takes a detour through host memory.
        network = AutoModelForCausalLM.from_pretrained(source.path, revision=source.revision, dtype=dtype,
                                                       device_map={"": str(device)})
    except (OSError, ValueError) as error:
        raise hub_error(source.ref, error) from None
    return tokenizer, network.eval()


def generation_eos_ids(network, tokenizer) -> list[int]:
    """End-of-sequence ids from the generation config (Qwen3 has two), else the tokenizer's."""
    eos = getattr(network.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos)
    if not ids:
        raise ConfigError("the model defines no end-of-sequence id (set eos_token_id in generation_config.json)")
    return ids


class CausalLMAdapter(ModelAdapter):
    """Any network transformers loads as a causal LM; the tokenizer and weights load on first use."""

    @cached_property
    def _loaded(self):
        return load_causal_lm(self.source, self.device, self.dtype)

    @property
    def tokenizer(self):
        return self._loaded[0]

    @property
    def network(self):
        return self._loaded[1]

    def eos_ids(self) -> list[int]:
        return generation_eos_ids(self.network, self.tokenizer)


class ARAdapter(CausalLMAdapter):
    kind = "ar"
    config_class = ARConfig

    def validate_config(self, config: ARConfig) -> None:
        if config.do_sample and config.temperature <= 0:
            raise ConfigError(f"{self.name}: temperature must be > 0 when do_sample is on")
        if not 0 < config.top_p <= 1:
            raise ConfigError(f"{self.name}: top_p must be in (0, 1], got {config.top_p}")

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        config: ARConfig = batch.config
        sampling = SamplingConfig(config.do_sample, config.temperature, config.top_p, config.top_k, config.seed)
        return ar_generate(self.network, batch.input_ids, batch.attention_mask,
                           max_new_tokens=batch.requests[0].canvas_tokens, eos_ids=self.eos_ids(),
                           pad_id=self.pad_id(), sampling=sampling)
