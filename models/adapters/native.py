"""Shared loading for the networks implemented in ``models/networks`` (LLaDA, Dream, and ReFusion's Qwen3), and
their one runtime option: ``compile``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torch import nn

from models.adapters.resident import ResidentWeights
from models.base import ModelAdapter, RuntimeOptions
from models.decoders.contract import ConfigError
from models.options import added_field
from models.sources import ModelSource, hub_error
from models.networks.compiled import CompiledNetwork
from models.networks.loading import CheckpointError, load_network


@dataclass(frozen=True)
class NativeRuntime(RuntimeOptions):
    """How a native network runs. A compiled step computes the same function as eager; float rounding differs
    (fused kernels, the padding mask always applied), so a near-tie may resolve differently: it stays in the sample
    key."""

    compile: bool = added_field(False)  # torch.compile the network's decode step (models/networks/compiled.py)


def load_tokenizer(source: ModelSource):
    """The checkpoint's tokenizer without remote code (Dream ships a custom class; its tokenizer.json suffices)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        try:
            return AutoTokenizer.from_pretrained(source.path, revision=source.revision, trust_remote_code=False)
        except ValueError:
            return PreTrainedTokenizerFast.from_pretrained(source.path, revision=source.revision)
    except (OSError, ValueError) as error:
        raise hub_error(source.ref, error) from None


def load_native_network(source: ModelSource, kind: str, dtype: torch.dtype, device: torch.device):
    """A network of ``models/networks`` from a checkpoint, with the source's LoRA adapter merged; a checkpoint that
    does not match is one line."""
    try:
        return load_network(source.path, kind, dtype=dtype, device=device, revision=source.revision,
                            adapter=source.adapter)
    except CheckpointError as error:
        raise ConfigError(str(error)) from None


class NetworkCalls(nn.Module):
    """The network as a cached decoder sees it (``new_cache``, ``block_forward``, ``causal_forward``), each forward
    one module call: the forward timer hooks module calls, and those calls are methods beside the network's
    ``forward``."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def new_cache(self, batch: int, capacity: int) -> Any:
        return self.network.new_cache(batch, capacity)

    def block_forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self("block_forward", *args, **kwargs)

    def causal_forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self("causal_forward", *args, **kwargs)

    def forward(self, method: str, *args: Any, **kwargs: Any) -> torch.Tensor:
        return getattr(self.network, method)(*args, **kwargs)


class NativeNetworkAdapter(ResidentWeights, ModelAdapter):
    """An adapter whose network is one of ``models/networks`` (``network_kind``); weights load on first decode."""

    network_kind: str
    runtime = NativeRuntime()
    loaded_fields = ("tokenizer", "network", "compiled_network")

    @property
    def loader(self) -> str:  # type: ignore[override]
        return f"native:{self.network_kind}"

    @cached_property
    def tokenizer(self):
        return load_tokenizer(self.source)

    @cached_property
    def network(self):
        return load_native_network(self.source, self.network_kind, self.dtype, self.device)

    @cached_property
    def compiled_network(self) -> CompiledNetwork:
        return CompiledNetwork(self.network)

    def network_for(self, runtime: NativeRuntime) -> Any:
        return self.compiled_network if runtime.compile else self.network

    def network_implementation(self, runtime: NativeRuntime) -> str:
        return "native"
