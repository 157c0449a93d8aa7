"""Dream checkpoints (Dream-v0-Instruct, Dream-Coder) on the native network: plain Dream or Fast-dLLM decoding."""

from __future__ import annotations

from typing import Any

from models.adapters.native import NativeNetworkAdapter
from models.decoders.dream import DREAM
from models.decoders.fastdllm.dream_sampler import FAST_DREAM


class DreamAdapter(NativeNetworkAdapter):
    """Generation ends at ``<|endoftext|>`` or the chat's ``<|im_end|>``, whichever comes first."""

    kind = "dream"
    network_kind = "dream"
    decoder = DREAM

    def eos_ids(self) -> list[int]:
        return [self.token_id("<|endoftext|>"), self.token_id("<|im_end|>")]

    def token_ids(self) -> dict[str, Any]:
        return {"mask_id": self.token_id("<|mask|>"), "eos_ids": tuple(self.eos_ids())}


class FastDreamAdapter(DreamAdapter):
    kind = "dream-fastdllm"
    decoder = FAST_DREAM
