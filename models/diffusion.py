"""Adapters for the masked diffusion models that run on the harness's native networks: LLaDA and Dream.

The user-facing configuration holds only decoding choices; the canvas comes from the request (or a preset's
``gen_length``), and the special token ids come from the checkpoint's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from models.base import ConfigError, DecodeResult, ModelAdapter, PreparedBatch
from models.decoders import dream as dream_decoder
from models.decoders import llada as llada_decoder
from models.decoders.sampling import rows_to_results
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


def token_id(tokenizer, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    if found is None or found == tokenizer.unk_token_id:
        raise ConfigError(f"the tokenizer has no {token} token (is this the right checkpoint?)")
    return found


class NativeDiffusionAdapter(ModelAdapter):
    """Shared loading for networks implemented in ``models/networks``; weights load on first decode."""

    kind: str  # "llada" | "dream"
    config_class: type

    def __init__(self, name: str, source: ModelSource, device: torch.device, dtype: torch.dtype,
                 defaults: dict[str, Any] | None = None):
        self.name = name
        self.source = source
        self.device = device
        self.dtype = dtype
        self._defaults = self.config_class(**(defaults or {}))

    @cached_property
    def tokenizer(self):
        return load_tokenizer(self.source)

    @cached_property
    def network(self):
        try:
            return load_network(self.source.path, self.kind, dtype=self.dtype, device=self.device,
                                revision=self.source.revision)
        except CheckpointError as error:
            raise ConfigError(str(error)) from None

    def default_config(self):
        return self._defaults

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "ref": self.source.ref, "fingerprint": self.source.fingerprint,
                "dtype": str(self.dtype).removeprefix("torch."), "kind": self.kind}


@dataclass(frozen=True)
class LLaDAOptions:
    steps: int | None = None  # None: one token per step (steps = canvas), as LLaDA's instruct evaluation
    block_length: int | None = None  # None: one block over the whole canvas
    temperature: float = 0.0
    cfg_scale: float = 0.0
    remasking: str = "low_confidence"
    logits_eos_inf: bool = False
    confidence_eos_eot_inf: bool = False
    seed: int | None = None


def llada_config(options: LLaDAOptions, canvas: int, **token_ids: int) -> llada_decoder.LLaDAConfig:
    return llada_decoder.LLaDAConfig(
        gen_length=canvas, steps=options.steps or canvas, block_length=options.block_length or canvas,
        temperature=options.temperature, cfg_scale=options.cfg_scale, remasking=options.remasking,
        logits_eos_inf=options.logits_eos_inf, confidence_eos_eot_inf=options.confidence_eos_eot_inf,
        seed=options.seed, **token_ids,
    )


class LLaDAAdapter(NativeDiffusionAdapter):
    kind = "llada"
    config_class = LLaDAOptions

    def validate_config(self, config: LLaDAOptions) -> None:
        """Field checks now; whether steps and blocks divide the canvas is checked when the canvas is known."""
        llada_decoder.validate_llada_config(llada_config(config, config.block_length or config.steps or 512))

    def eos_ids(self) -> list[int]:
        return [token_id(self.tokenizer, "<|endoftext|>"), token_id(self.tokenizer, "<|eot_id|>")]

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        eos, eot = self.eos_ids()
        cfg = llada_config(batch.config, batch.requests[0].canvas_tokens, eos_id=eos, eot_id=eot,
                           mask_id=token_id(self.tokenizer, "<|mdm_mask|>"))
        llada_decoder.validate_llada_config(cfg)
        output = llada_decoder.llada_generate(self.network, batch.input_ids, batch.attention_mask, cfg)
        return rows_to_results(output.tokens, output.nfe, self.eos_ids())


@dataclass(frozen=True)
class DreamOptions:
    steps: int | None = None  # None: one step per token (steps = canvas), as Dream's evaluation
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    alg: str = "entropy"
    alg_temp: float | None = None
    eps: float = 1e-3
    seed: int | None = None


def dream_config(options: DreamOptions, canvas: int, **token_ids: int) -> dream_decoder.DreamConfig:
    return dream_decoder.DreamConfig(
        max_new_tokens=canvas, steps=options.steps or canvas, temperature=options.temperature, top_p=options.top_p,
        top_k=options.top_k, alg=options.alg, alg_temp=options.alg_temp, eps=options.eps, seed=options.seed,
        **token_ids,
    )


class DreamAdapter(NativeDiffusionAdapter):
    """Dream-v0-Instruct. Generation ends at ``<|endoftext|>`` or the chat's ``<|im_end|>``, whichever comes first."""

    kind = "dream"
    config_class = DreamOptions

    def validate_config(self, config: DreamOptions) -> None:
        dream_decoder.validate_dream_config(dream_config(config, config.steps or 512))

    def eos_ids(self) -> list[int]:
        return [token_id(self.tokenizer, "<|endoftext|>"), token_id(self.tokenizer, "<|im_end|>")]

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        cfg = dream_config(batch.config, batch.requests[0].canvas_tokens,
                           mask_id=token_id(self.tokenizer, "<|mask|>"), eos_id=self.eos_ids()[0])
        dream_decoder.validate_dream_config(cfg)
        output = dream_decoder.dream_generate(self.network, batch.input_ids, batch.attention_mask, cfg)
        return rows_to_results(output.tokens, output.nfe, self.eos_ids())
