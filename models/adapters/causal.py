"""Networks transformers loads as causal LMs (Qwen3, Llama 3, ReFusion's Qwen3 fine-tune): loading and end ids."""

from __future__ import annotations

from functools import cached_property

import torch

from models.adapters.resident import ResidentWeights
from models.base import ModelAdapter
from models.decoders.contract import ConfigError
from models.sources import ModelSource, hub_error


def load_causal_lm(source: ModelSource, device: torch.device, dtype: torch.dtype,
                   model_class: str = "AutoModelForCausalLM"):
    """Tokenizer and network through transformers' own loaders, the same for a hub id, a folder or a tiny model;
    ``model_class`` names transformers' class for a family no auto class loads as a causal LM (DiffusionGemma). The
    source's LoRA adapter is merged into the network's weights (models/networks/lora.py)."""
    import transformers
    from transformers import AutoTokenizer

    from models.networks.lora import merge_adapter

    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path, revision=source.revision)
        # Straight onto the device: an 8B checkpoint never takes a detour through host memory.
        network = getattr(transformers, model_class).from_pretrained(source.path, revision=source.revision,
                                                                     dtype=dtype, device_map={"": str(device)})
    except (OSError, ValueError) as error:
        raise hub_error(source.ref, error) from None
    if source.adapter is not None:
        merge_adapter(network, source.adapter)
    return tokenizer, network.eval()


def generation_eos_ids(generation_config, tokenizer) -> list[int]:
    """End-of-sequence ids from the generation config (Qwen3 has two), else the tokenizer's."""
    eos = getattr(generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos)
    if not ids:
        raise ConfigError("the model defines no end-of-sequence id (set eos_token_id in generation_config.json)")
    return ids


def checkpoint_generation_config(source: ModelSource):
    """The checkpoint's generation_config.json without loading its network; None when it ships none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(source.path, revision=source.revision)
    except OSError:
        return None


def checkpoint_model_type(source: ModelSource) -> str:
    """config.json's model_type, lower-cased, without loading the network."""
    from transformers import AutoConfig

    try:
        return str(AutoConfig.from_pretrained(source.path, revision=source.revision).model_type).lower()
    except (OSError, ValueError) as error:
        raise hub_error(source.ref, error) from None


class CausalLMAdapter(ResidentWeights, ModelAdapter):
    """Any network transformers loads as a causal LM; the tokenizer and weights load on first use."""

    loaded_fields = ("_loaded",)
    loader = "causal"
    model_class = "AutoModelForCausalLM"  # the transformers class the network loads through

    @cached_property
    def _loaded(self):
        return load_causal_lm(self.source, self.device, self.dtype, self.model_class)

    @property
    def tokenizer(self):
        return self._loaded[0]

    @property
    def network(self):
        return self._loaded[1]
