"""The ReFusion adapter: a Qwen3 fine-tune decoded by slot-level plan-and-infill, on the native Qwen3 network by
default (``network="transformers"`` keeps transformers' ``Qwen3ForCausalLM`` for comparison)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import torch

from models.ar import CausalLMAdapter
from models.base import ConfigError, DecodeResult, PreparedBatch
from models.diffusion import load_tokenizer
from models.decoders.refusion import RefusionConfig, refusion_generate_batch, validate_refusion_config
from models.networks.loading import CheckpointError, load_network

_ADAPTER_ONLY = ("enable_thinking", "network", "compile")


@dataclass(frozen=True)
class RefusionOptions:
    slot_size: int = 8
    serial_num_blocks: int = 2
    slot_threshold: float = 0.9
    token_threshold: float = 0.9
    temperature: float = 0.0
    seed: int | None = None
    enable_thinking: bool | None = True  # as ReFusion was trained and evaluated (no think block in the prompt)
    network: str = "native"  # "native" (models/networks/qwen3.py) or "transformers" (Qwen3ForCausalLM)
    compile: bool = False  # torch.compile the native network's forward


def refusion_config(options: RefusionOptions, canvas: int, **token_ids: int) -> RefusionConfig:
    """The decoder's config: every option but the adapter's own switches, the canvas, and the checkpoint's ids."""
    shared = {k: v for k, v in dataclasses.asdict(options).items() if k not in _ADAPTER_ONLY}
    return RefusionConfig(gen_length=canvas, **shared, **token_ids)


class RefusionAdapter(CausalLMAdapter):
    """A batch decodes together on the native network (one buffer row per prompt); row by row on transformers."""

    kind = "refusion"
    config_class = RefusionOptions

    def validate_config(self, config: RefusionOptions) -> None:
        """Field checks now, with a canvas of one slot per serial block; the real canvas is checked per batch."""
        if config.network not in ("native", "transformers"):
            raise ConfigError(f"refusion: network must be 'native' or 'transformers', got {config.network!r}")
        if not isinstance(config.compile, bool):
            raise ConfigError(f"refusion: compile must be true or false, got {config.compile!r}")
        if config.compile and config.network != "native":
            raise ConfigError("refusion: compile=true needs network=native (the transformers path is not compiled)")
        validate_refusion_config(refusion_config(config, max(config.slot_size, 1) * max(config.serial_num_blocks, 1)))

    @cached_property
    def tokenizer(self):
        """The tokenizer alone, so the native path never loads transformers' network."""
        return load_tokenizer(self.source)

    @cached_property
    def native_network(self):
        try:
            return load_network(self.source.path, "qwen3", dtype=self.dtype, device=self.device,
                                revision=self.source.revision)
        except CheckpointError as error:
            raise ConfigError(str(error)) from None

    @cached_property
    def compiled_forward(self):
        return torch.compile(self.native_network, dynamic=True)

    def eos_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        options: RefusionOptions = batch.config
        cfg = refusion_config(options, batch.requests[0].canvas_tokens, mask_id=self.token_id("<|mask|>"),
                              eos_id=self.tokenizer.eos_token_id)
        prompts = [row[mask.bool()] for row, mask in zip(batch.input_ids, batch.attention_mask)]
        if options.network == "native":
            forward = self.compiled_forward if options.compile else None
            outputs = refusion_generate_batch(self.native_network, prompts, cfg, forward=forward)
        else:
            outputs = refusion_generate_batch(self.network, prompts, cfg)
        return [out.to_decode_result() for out in outputs]
