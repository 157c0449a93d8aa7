"""The ReFusion adapter: a Qwen3 fine-tune decoded by slot-level plan-and-infill, on the native Qwen3 network by
default (``network=transformers`` keeps transformers' ``Qwen3ForCausalLM``, for comparison)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal


from models.adapters.causal import CausalLMAdapter
from models.adapters.native import NativeRuntime, load_native_network, load_tokenizer
from models.base import ModelConfig, TemplateOptions
from models.decoders.contract import ConfigError
from models.decoders.refusion.decoder import REFUSION
from models.networks.compiled import CompiledNetwork


@dataclass(frozen=True)
class RefusionRuntime(NativeRuntime):
    """Which network runs the decoder, and whether the native one is compiled (the native adapters' option). They
    compute the same function; float rounding differs, so a near-tie may resolve differently, which is why these
    stay in the sample key (``compile`` always, as it has since ReFusion had it)."""

    network: Literal["native", "transformers"] = "native"  # models/networks/qwen3.py, or Qwen3ForCausalLM
    compile: bool = False


class RefusionAdapter(CausalLMAdapter):
    """A batch decodes together on the native network (one cache row per prompt); row by row on transformers."""

    kind = "refusion"
    decoder = REFUSION
    template = TemplateOptions(enable_thinking=True)  # as ReFusion was trained and evaluated (no think block)
    runtime = RefusionRuntime()

    def make_config(self, overrides: dict[str, Any] | None = None, canvas: int | None = None,
                    seed: int | None = None) -> ModelConfig:
        config = super().make_config(overrides, canvas, seed)
        if config.runtime.compile and config.runtime.network != "native":
            raise ConfigError(f"{self.name}: compile=true needs network=native (the transformers path is not "
                              "compiled)")
        return config

    @cached_property
    def tokenizer(self):
        """The tokenizer alone, so the native path never loads transformers' network."""
        return load_tokenizer(self.source)

    @cached_property
    def native_network(self):
        return load_native_network(self.source, "qwen3", self.dtype, self.device)

    @cached_property
    def compiled_network(self) -> CompiledNetwork:
        return CompiledNetwork(self.native_network)

    def network_for(self, runtime: RefusionRuntime) -> Any:
        if runtime.network == "transformers":
            return self.network
        return self.compiled_network if runtime.compile else self.native_network

    def network_implementation(self, runtime: RefusionRuntime) -> str:
        return runtime.network

    def eos_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    def token_ids(self) -> dict[str, Any]:
        return {"mask_id": self.token_id("<|mask|>"), "eos_id": self.tokenizer.eos_token_id}
