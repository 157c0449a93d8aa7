"""LLaDA checkpoints (LLaDA-8B-Instruct, LLaDA-1.5) on the native network: plain LLaDA or Fast-dLLM decoding."""

from __future__ import annotations

from typing import Any

from models.adapters.native import NativeNetworkAdapter
from models.decoders.fastdllm.llada_sampler import FAST_LLADA
from models.decoders.llada import LLADA


class LLaDAAdapter(NativeNetworkAdapter):
    """Generation ends at ``<|endoftext|>`` or the chat's ``<|eot_id|>``, whichever comes first."""

    kind = "llada"
    network_kind = "llada"
    decoder = LLADA

    def eos_ids(self) -> list[int]:
        return [self.token_id("<|endoftext|>"), self.token_id("<|eot_id|>")]

    def token_ids(self) -> dict[str, Any]:
        eos, eot = self.eos_ids()
        return {"mask_id": self.token_id("<|mdm_mask|>"), "eos_id": eos, "eot_id": eot}


class FastLLaDAAdapter(LLaDAAdapter):
    kind = "llada-fastdllm"
    decoder = FAST_LLADA
