"""DiffusionGemma's decoding: transformers' own ``generate`` on ``DiffusionGemmaForBlockDiffusion``, as a decoder.

DiffusionGemma is uniform-state block diffusion: a causal encoder pass writes the prompt (later: each committed
canvas) into the cache, and a bidirectional decoder pass refines a canvas of ``canvas_length`` tokens (256 in the
release) that starts from random tokens; no mask token. Each denoising step samples every position at a temperature
falling linearly from ``t_max`` to ``t_min``, accepts the lowest-entropy positions within the entropy bound, renoises
the rest and feeds its logits back as self-conditioning; a canvas stops early once it is stable and confident, and
the output is whole canvases. It always samples.

The algorithm is transformers'; nothing of it is re-implemented here. This module adds what the harness needs around
the one ``generate`` call: typed options, one seed set before each call (docs/decoders.md §8), the output truncated
to the request's canvas and cut at end of sequence, and counts of the encoder and decoder passes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, canvas_field, cut_after_eos,
                                      require_filled, token_id_field)
from models.decoders.sampling import check_inputs, row_seed


@dataclass(frozen=True)
class DiffusionGemmaOptions:
    """The options of transformers' ``DiffusionGemmaGenerationConfig`` the harness sets, with the release's values
    (its generation_config.json) as defaults. ``max_new_tokens`` is the request's canvas; generate fills whole
    canvases of the checkpoint's ``canvas_length`` and the output is cut back to it."""

    max_new_tokens: int | None = canvas_field()
    max_denoising_steps: int = 48  # per canvas, an upper bound: a canvas stops early once stable and confident
    entropy_bound: float = 0.1  # EntropyBoundSamplerConfig.entropy_bound: larger accepts more tokens per step
    t_min: float = 0.4  # sampling temperature at the last step ...
    t_max: float = 0.8  # ... and at the first
    stability_threshold: int = 1  # steps the argmax canvas must stay the same to stop early (0: no stability check)
    confidence_threshold: float = 0.005  # mean entropy below which a canvas counts as confident
    do_sample: bool = True  # always: recorded so that results and the gate read this model as sampled, not greedy
    seed: int | None = None  # the run seed; each call is seeded from the rows' own seeds (row_seeds)
    eos_ids: tuple[int, ...] | None = token_id_field()  # the generation config's (<eos>, <turn|>, <|tool_response>)
    pad_id: int | None = token_id_field()  # transformers writes it after a row's end of sequence


def validate_options(cfg: DiffusionGemmaOptions) -> None:
    """One line for settings transformers would refuse, or that cannot mean what they say, found at planning."""
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.max_denoising_steps < 1:
        raise ConfigError(f"max_denoising_steps must be >= 1, got {cfg.max_denoising_steps}")
    if cfg.entropy_bound <= 0:
        raise ConfigError(f"entropy_bound must be > 0, got {cfg.entropy_bound}")
    if cfg.t_min < 0 or cfg.t_max <= cfg.t_min:
        raise ConfigError(f"the temperature schedule needs 0 <= t_min < t_max, got t_min={cfg.t_min} "
                          f"t_max={cfg.t_max}")
    if cfg.stability_threshold < 0:
        raise ConfigError(f"stability_threshold must be >= 0, got {cfg.stability_threshold}")
    if cfg.confidence_threshold <= 0:
        raise ConfigError(f"confidence_threshold must be > 0, got {cfg.confidence_threshold}")
    if not cfg.do_sample:
        raise ConfigError("do_sample must be true: DiffusionGemma always samples (random canvas, sampled proposals); "
                          "there is no greedy mode")


def options_at_canvas(cfg: DiffusionGemmaOptions, canvas: int) -> DiffusionGemmaOptions:
    return dataclasses.replace(cfg, max_new_tokens=canvas)


def generation_config(cfg: DiffusionGemmaOptions, prompt_width: int | None = None) -> Any:
    """transformers' generation config from the options. For a call (``prompt_width`` given) every field the output
    depends on is set, so nothing falls back to the checkpoint's generation_config.json: ``max_length`` too, which
    transformers prefers when ``max_new_tokens`` is 256, its own default."""
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (DiffusionGemmaGenerationConfig,
                                                                                EntropyBoundSamplerConfig)

    return DiffusionGemmaGenerationConfig(
        max_new_tokens=cfg.max_new_tokens,
        max_length=None if prompt_width is None else prompt_width + cfg.max_new_tokens,
        max_denoising_steps=cfg.max_denoising_steps,
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=float(cfg.entropy_bound)),
        t_min=float(cfg.t_min), t_max=float(cfg.t_max), stability_threshold=int(cfg.stability_threshold),
        confidence_threshold=float(cfg.confidence_threshold),
        eos_token_id=list(cfg.eos_ids), pad_token_id=cfg.pad_id)


# ---- seeds ------------------------------------------------------------------------------------------------------
def call_seed(row_seeds: Sequence[int] | None, seed: int | None) -> int | None:
    """The seed set before one call. transformers draws the whole batch's numbers from one stream, so a row's draws
    depend on its batch: a batch of one takes its row's own seed (it equals the row alone), a larger batch a seed
    hashed from its rows' seeds in order (the same batch gives the same tokens)."""
    if row_seeds is None:
        return seed
    if len(row_seeds) == 1:
        return int(row_seeds[0])
    return row_seed(len(row_seeds), ",".join(str(int(s)) for s in row_seeds))


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """torch's global stream (which generate draws from) seeded for one call and restored after it, so the call
    leaves nothing else the process draws changed. Unseeded: the stream as it is."""
    if seed is None:
        yield
        return
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


# ---- counting ---------------------------------------------------------------------------------------------------
@dataclass
class PassCount:
    """Network passes of one call, each over the whole batch (finished rows keep computing in a batch)."""

    encoder: int = 0
    decoder: int = 0


def pass_modules(network: Any) -> dict[str, torch.nn.Module]:
    """The modules whose calls are the passes: generate calls the encoder directly and the decoder through the
    model's forward, never the top-level network, so hooks on it would see nothing."""
    return {"encoder": network.model.encoder, "decoder": network.model.decoder}


@contextlib.contextmanager
def counted_passes(network: Any) -> Iterator[PassCount]:
    """Encoder and decoder calls while the block runs, by forward hooks removed on the way out."""
    count = PassCount()

    def counter(name: str):
        return lambda module, args, output: setattr(count, name, getattr(count, name) + 1)

    handles = [module.register_forward_hook(counter(name)) for name, module in pass_modules(network).items()]
    try:
        yield count
    finally:
        for handle in handles:
            handle.remove()


@dataclass(frozen=True)
class PassCounts:
    """What a sample records beside ``nfe``, which is the batch's encoder and decoder calls over its batch size."""

    encoder_calls: int  # encoder passes of the batch: the prompt, then one per committed canvas
    decoder_calls: int  # denoising passes of the batch
    decoder_steps: int | None  # this row's own denoising passes, as transformers counts them (none after it stopped)
    tokens_per_decoder_step: float | None  # transformers' tokens_per_forward for this row (whole canvases, no pads)
    sampling_seed: int | None  # the seed set before the call that decoded this row


@dataclass(frozen=True)
class DiffusionGemmaResult(PassCounts, DecodeResult):
    """A row as every decoder returns it, plus what the adapter records beside ``nfe``."""


def row_steps(new_tokens: Sequence[int], pad_id: int | None, tokens_per_step: float) -> int | None:
    """The row's denoising passes, recovered from transformers' tokens_per_forward (its non-pad tokens over its
    passes); unknown when the row kept no token."""
    kept = sum(1 for t in new_tokens if t != pad_id) if pad_id is not None else len(new_tokens)
    return round(kept / tokens_per_step) if tokens_per_step > 0 else None


def rows_from_output(new_tokens: torch.Tensor, tokens_per_step: torch.Tensor, cfg: DiffusionGemmaOptions,
                     count: PassCount, seed: int | None) -> tuple[DiffusionGemmaResult, ...]:
    """Each row truncated to the request's canvas, then cut after its first end of sequence."""
    batch = new_tokens.shape[0]
    rows = []
    for ids, tpf in zip(new_tokens.tolist(), tokens_per_step.tolist()):
        kept, found = cut_after_eos(ids[: cfg.max_new_tokens], cfg.eos_ids)
        rows.append(DiffusionGemmaResult(
            token_ids=kept, nfe=(count.encoder + count.decoder) / batch, hit_max_tokens=not found,
            forwards=count.encoder + count.decoder,
            encoder_calls=count.encoder, decoder_calls=count.decoder, decoder_steps=row_steps(ids, cfg.pad_id, tpf),
            tokens_per_decoder_step=float(tpf), sampling_seed=seed))
    return tuple(rows)


@torch.inference_mode()
def diffusion_gemma_generate(network: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                             cfg: DiffusionGemmaOptions, row_seeds: Sequence[int] | None = None) -> DecodeOutput:
    """One call of transformers' generate on a left-padded batch, seeded, counted and cut."""
    require_filled(cfg, "diffusiongemma")
    validate_options(cfg)
    check_inputs(input_ids, attention_mask)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    seed = call_seed(row_seeds, cfg.seed)
    with counted_passes(network) as count, seeded(seed, input_ids.device):
        out = network.generate(input_ids, attention_mask=attention_mask,
                               generation_config=generation_config(cfg, input_ids.shape[1]))
    new_tokens = out.sequences[:, input_ids.shape[1]:]
    rows = rows_from_output(new_tokens, out.tokens_per_forward, cfg, count, seed)
    return DecodeOutput(rows=rows, nfe=count.encoder + count.decoder, tokens=new_tokens)


DIFFUSION_GEMMA = Decoder("diffusiongemma", DiffusionGemmaOptions, diffusion_gemma_generate, options_at_canvas,
                          validate_options, version=1)
