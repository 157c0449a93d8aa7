"""Adapters for the masked diffusion models that run on the harness's native networks: LLaDA and Dream.

The user-facing configuration holds only decoding choices; the canvas comes from the request (or a preset's
``gen_length``), and the special token ids come from the checkpoint's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from models.base import ConfigError, DecodeResult, ModelAdapter, PreparedBatch
from models.decoders import dream as dream_decoder
from models.decoders import llada as llada_decoder
from models.decoders.fastdllm_dream import FastDreamConfig, fastdllm_dream_generate, validate_fast_dream_config
from models.decoders.fastdllm_llada import FastLLaDAConfig, fastdllm_llada_generate, validate_fast_llada_config
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


class NativeDiffusionAdapter(ModelAdapter):
    """Shared loading for networks implemented in ``models/networks``; weights load on first decode."""

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


def fast_mode(options) -> bool:
    """Fast-dLLM decoding is on when a confidence threshold or a KV cache is asked for."""
    return options.threshold is not None or options.cache != "none"


@dataclass(frozen=True)
class LLaDAOptions:
    steps: int | None = None  # None: one token per step (steps = canvas), as LLaDA's instruct evaluation
    block_length: int | None = None  # None: one block over the whole canvas
    temperature: float = 0.0
    cfg_scale: float = 0.0
    remasking: str = "low_confidence"
    logits_eos_inf: bool = False
    confidence_eos_eot_inf: bool = False
    threshold: float | None = None  # Fast-dLLM: commit every mask at least this confident (top-1 always)
    cache: str = "none"  # Fast-dLLM: "none" | "prefix" | "dual"
    seed: int | None = None


def llada_config(options: LLaDAOptions, canvas: int, **token_ids: int):
    """The plain LLaDA sampler's config, or Fast-dLLM's when a threshold or a cache is set."""
    common = dict(gen_length=canvas, steps=options.steps or canvas, block_length=options.block_length or canvas,
                  temperature=options.temperature, remasking=options.remasking, seed=options.seed, **token_ids)
    if not fast_mode(options):
        return llada_decoder.LLaDAConfig(**common, cfg_scale=options.cfg_scale, logits_eos_inf=options.logits_eos_inf,
                                         confidence_eos_eot_inf=options.confidence_eos_eot_inf)
    if options.cfg_scale or options.logits_eos_inf or options.confidence_eos_eot_inf:
        raise ConfigError("Fast-dLLM decoding (threshold or cache set) has no cfg_scale, logits_eos_inf or "
                          "confidence_eos_eot_inf; unset them or use plain decoding (threshold=None, cache=none)")
    return FastLLaDAConfig(**common, threshold=options.threshold, cache=options.cache)


class LLaDAAdapter(NativeDiffusionAdapter):
    kind = "llada"
    config_class = LLaDAOptions

    def validate_config(self, config: LLaDAOptions) -> None:
        """Field checks now; whether steps and blocks divide the canvas is checked when the canvas is known."""
        validate_llada(llada_config(config, config.block_length or config.steps or 512))

    def eos_ids(self) -> list[int]:
        return [self.token_id("<|endoftext|>"), self.token_id("<|eot_id|>")]

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        eos, eot = self.eos_ids()
        cfg = llada_config(batch.config, batch.requests[0].canvas_tokens, eos_id=eos, eot_id=eot,
                           mask_id=self.token_id("<|mdm_mask|>"))
        generate = fastdllm_llada_generate if isinstance(cfg, FastLLaDAConfig) else llada_decoder.llada_generate
        output = generate(self.network, batch.input_ids, batch.attention_mask, cfg)
        return rows_to_results(output.tokens, output.nfe, self.eos_ids())


def validate_llada(cfg) -> None:
    if isinstance(cfg, FastLLaDAConfig):
        validate_fast_llada_config(cfg)
    else:
        llada_decoder.validate_llada_config(cfg)


@dataclass(frozen=True)
class DreamOptions:
    steps: int | None = None  # None: one step per token, or one nominal step per block with a threshold
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    alg: str = "entropy"
    alg_temp: float | None = None
    eps: float = 1e-3
    block_length: int = 32  # Fast-dLLM's cached paths only
    threshold: float | None = None  # Fast-dLLM: commit every mask at least this confident (top-1 always)
    cache: str = "none"  # Fast-dLLM: "none" | "prefix" | "dual"
    seed: int | None = None


def dream_config(options: DreamOptions, canvas: int, **token_ids: int):
    """The plain Dream sampler's config, or Fast-dLLM's when a threshold or a cache is set."""
    common = dict(max_new_tokens=canvas, temperature=options.temperature, top_p=options.top_p, top_k=options.top_k,
                  alg=options.alg, alg_temp=options.alg_temp, eps=options.eps, seed=options.seed, **token_ids)
    if not fast_mode(options):
        return dream_decoder.DreamConfig(**common, steps=options.steps or canvas)
    default_steps = max(canvas // options.block_length, 1) if options.threshold is not None else canvas
    return FastDreamConfig(**common, steps=options.steps or default_steps, block_length=options.block_length,
                           threshold=options.threshold, cache=options.cache)


def validate_dream(cfg) -> None:
    if isinstance(cfg, FastDreamConfig):
        validate_fast_dream_config(cfg)
    else:
        dream_decoder.validate_dream_config(cfg)


class DreamAdapter(NativeDiffusionAdapter):
    """Dream-v0-Instruct. Generation ends at ``<|endoftext|>`` or the chat's ``<|im_end|>``, whichever comes first."""

    kind = "dream"
    config_class = DreamOptions

    def validate_config(self, config: DreamOptions) -> None:
        validate_dream(dream_config(config, config.steps or 512))

    def eos_ids(self) -> list[int]:
        return [self.token_id("<|endoftext|>"), self.token_id("<|im_end|>")]

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        cfg = dream_config(batch.config, batch.requests[0].canvas_tokens,
                           mask_id=self.token_id("<|mask|>"), eos_id=self.eos_ids()[0])
        generate = fastdllm_dream_generate if isinstance(cfg, FastDreamConfig) else dream_decoder.dream_generate
        output = generate(self.network, batch.input_ids, batch.attention_mask, cfg)
        return rows_to_results(output.tokens, output.nfe, self.eos_ids())
