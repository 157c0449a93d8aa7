"""Shared loading for the diffusion networks implemented in ``models/networks`` (LLaDA, Dream)."""

from __future__ import annotations

from functools import cached_property

from models.adapters.resident import ResidentWeights
from models.base import ModelAdapter
from models.decoders.contract import ConfigError
from models.loading import ModelSource, hub_error
from models.networks.loading import CheckpointError, load_network


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


class NativeNetworkAdapter(ResidentWeights, ModelAdapter):
    """An adapter whose network is one of ``models/networks`` (``network_kind``); weights load on first decode."""

    network_kind: str
    loaded_fields = ("tokenizer", "network")

    @property
    def loader(self) -> str:  # type: ignore[override]
        return f"native:{self.network_kind}"

    @cached_property
    def tokenizer(self):
        return load_tokenizer(self.source)

    @cached_property
    def network(self):
        try:
            return load_network(self.source.path, self.network_kind, dtype=self.dtype, device=self.device,
                                revision=self.source.revision)
        except CheckpointError as error:
            raise ConfigError(str(error)) from None
