"""The autoregressive adapter: Qwen3 and Qwen2 checkpoints on the native networks (the ones the diffusion models
run on, with the same preallocated cache and the ``compile`` option), any other causal LM transformers loads (Llama
3, ...) through transformers behind the same cache protocol; greedy unless asked."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from models.adapters.causal import (CausalLMAdapter, checkpoint_generation_config, checkpoint_model_type,
                                    generation_eos_ids)
from models.adapters.native import NativeRuntime, NetworkCalls, load_native_network, load_tokenizer
from models.base import ModelConfig, TemplateOptions
from models.decoders.ar import AR
from models.decoders.contract import ConfigError
from models.networks.compiled import CompiledNetwork
from models.networks.hf_causal import TransformersCausalLM

# config.json model_type -> the native network kind that runs it causally
NATIVE_KINDS = {"qwen3": "qwen3", "qwen2": "qwen2"}


@dataclass(frozen=True)
class ARRuntime(NativeRuntime):
    """Which implementation runs the network. ``auto``: the native one where the checkpoint's model_type has one
    (``NATIVE_KINDS``), else transformers'. They compute the same function; float rounding differs, so a near-tie
    may resolve differently, which is why this stays in the sample key."""

    network: Literal["auto", "native", "transformers"] = "auto"


class ARAdapter(CausalLMAdapter):
    kind = "ar"
    decoder = AR
    template = TemplateOptions(enable_thinking=False)  # Qwen3's baseline runs without a think block
    runtime = ARRuntime()
    loaded_fields = ("_loaded", "tokenizer", "native_network", "calls", "compiled_calls", "transformers_network")

    def make_config(self, overrides: dict[str, Any] | None = None, canvas: int | None = None,
                    seed: int | None = None) -> ModelConfig:
        config = super().make_config(overrides, canvas, seed)
        if config.runtime.compile and config.runtime.network == "transformers":
            raise ConfigError(f"{self.name}: compile=true needs the native network (network=native or auto)")
        return config

    @cached_property
    def tokenizer(self):
        """The tokenizer alone, so the native path never loads transformers' network."""
        return load_tokenizer(self.source)

    @cached_property
    def native_kind(self) -> str | None:
        """The native network kind of the checkpoint's model_type, None where there is none."""
        return NATIVE_KINDS.get(checkpoint_model_type(self.source))

    @cached_property
    def native_network(self):
        return load_native_network(self.source, self.native_kind, self.dtype, self.device)

    @cached_property
    def calls(self) -> NetworkCalls:
        return NetworkCalls(self.native_network)

    @cached_property
    def compiled_calls(self) -> NetworkCalls:
        return NetworkCalls(CompiledNetwork(self.native_network))

    @cached_property
    def transformers_network(self) -> TransformersCausalLM:
        return TransformersCausalLM(self.network)

    def network_implementation(self, runtime: ARRuntime) -> str:
        """``native`` or ``transformers``: what ``auto`` means for this checkpoint (a native request on a checkpoint
        without a native network is one line)."""
        if runtime.network == "transformers":
            return "transformers"
        if self.native_kind is None:
            if runtime.network == "native":
                raise ConfigError(f"{self.name}: no native network runs this checkpoint's model_type (native: "
                                  f"{', '.join(NATIVE_KINDS)}); use network=transformers or auto")
            return "transformers"
        return "native"

    def network_for(self, runtime: ARRuntime) -> Any:
        if self.network_implementation(runtime) == "transformers":
            if runtime.compile:
                raise ConfigError(f"{self.name}: compile=true needs a native network; this checkpoint has none")
            return self.transformers_network
        return self.compiled_calls if runtime.compile else self.calls

    @cached_property
    def _eos_ids(self) -> list[int]:
        return generation_eos_ids(checkpoint_generation_config(self.source), self.tokenizer)

    def eos_ids(self) -> list[int]:
        return self._eos_ids

    def token_ids(self) -> dict[str, Any]:
        return {"eos_ids": tuple(self.eos_ids()), "pad_id": self.pad_id()}
