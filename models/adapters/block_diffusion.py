"""Block-diffusion checkpoints on the native networks: SDAR and TraDo (Qwen3) and Fast-dLLM v2 (Qwen2.5), both
decoded by ``models/decoders/block_diffusion.py``; the families differ only in their tokens and decoding defaults."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from models.adapters.native import NativeNetworkAdapter, NativeRuntime, NetworkCalls
from models.decoders.block_diffusion import BLOCK_DIFFUSION
from models.decoders.contract import ConfigError
from models.networks.loading import CheckpointError, read_config
from models.sources import ModelSource


class BlockDiffusionAdapter(NativeNetworkAdapter):
    """Generation ends at the first of ``eos_tokens``; masks are ``mask_token``. Both are read by token string, so a
    checkpoint without them fails with one line."""

    decoder = BLOCK_DIFFUSION
    loaded_fields = NativeNetworkAdapter.loaded_fields + ("calls", "compiled_calls")
    mask_token: str
    eos_tokens: tuple[str, ...]

    @cached_property
    def calls(self) -> NetworkCalls:
        return NetworkCalls(self.network)

    @cached_property
    def compiled_calls(self) -> NetworkCalls:
        return NetworkCalls(self.compiled_network)

    def network_for(self, runtime: NativeRuntime) -> NetworkCalls:
        return self.compiled_calls if runtime.compile else self.calls

    def eos_ids(self) -> list[int]:
        return [self.token_id(token) for token in self.eos_tokens]

    def token_ids(self) -> dict[str, Any]:
        return {"mask_id": self.token_id(self.mask_token), "eos_ids": tuple(self.eos_ids())}


class SDARAdapter(BlockDiffusionAdapter):
    """SDAR and TraDo: Qwen3's tokenizer with ``<|MASK|>``; a turn ends at ``<|im_end|>``, the text at
    ``<|endoftext|>``."""

    kind = "sdar"
    network_kind = "sdar"
    mask_token = "<|MASK|>"
    eos_tokens = ("<|endoftext|>", "<|im_end|>")


class FastDLLMv2Adapter(BlockDiffusionAdapter):
    """Fast-dLLM v2: Qwen2.5's tokenizer with ``|<MASK>|``; eos is ``<|im_end|>`` (``<|endoftext|>`` also ends, as
    in Qwen2.5's generation config). The block length defaults to the checkpoint's ``bd_size``, the block
    it was trained with, when its config.json is already on disk."""

    kind = "fastdllm-v2"
    network_kind = "fastdllm-v2"
    mask_token = "|<MASK>|"
    eos_tokens = ("<|im_end|>", "<|endoftext|>")

    def __init__(self, name: str, source: ModelSource, device: torch.device, dtype: torch.dtype,
                 defaults: dict[str, Any] | None = None):
        trained = trained_block_length(name, source)
        block = {} if trained is None else {"block_length": trained}
        super().__init__(name, source, device, dtype, {**(defaults or {}), **block})


class LLaDA2Adapter(BlockDiffusionAdapter):
    """LLaDA2.0 / LLaDA2.1 (MoE, ``models/networks/llada2.py``): Ling 2.0's tokenizer, masks ``<|mask|>``, the text
    ends at ``<|endoftext|>`` (the published generate's eos_id 156892 and mask_id 156895). Decoded with fused commits
    (every forward is one step of the published generate) and its early stop at the first filled end of sequence."""

    kind = "llada2"
    network_kind = "llada2"
    mask_token = "<|mask|>"
    eos_tokens = ("<|endoftext|>",)


def local_config_folder(source: ModelSource) -> Path | None:
    """The folder holding the checkpoint's config.json without any download: a local (or tiny) folder, or the hub
    cache's snapshot; None when it is not there yet."""
    folder = Path(source.path)
    if (folder / "config.json").is_file():
        return folder
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(source.path, "config.json", revision=source.revision)
    except ValueError:  # not a hub id
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def trained_block_length(name: str, source: ModelSource) -> int | None:
    """Fast-dLLM v2's ``bd_size`` from config.json when it is on disk (cheap, before any weight loads); a config that
    is not Fast-dLLM v2's fails here with one line, at planning."""
    folder = local_config_folder(source)
    if folder is None:
        return None
    try:
        return read_config(folder, "fastdllm-v2").bd_size
    except (CheckpointError, ValueError) as error:
        raise ConfigError(f"{name}: {error}") from None
