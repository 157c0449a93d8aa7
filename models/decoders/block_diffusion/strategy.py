"""The block-diffusion config, and the choices it makes resolved and checked once (``block_strategy``): the decoders
(``lockstep``, ``stream``) branch on these named choices, not on combinations of the config's flags. The flags stay
the config's fields as they are: they are user options and part of every stored sample's key."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, get_args

from models.decoders.contract import ConfigError, canvas_field, token_id_field

Remasking = Literal["low_confidence_static", "low_confidence_dynamic", "entropy_bounded", "sequential",
                    "threshold_plus_best"]
REMASKING = get_args(Remasking)


@dataclass(frozen=True)
class BlockDiffusionConfig:
    """One block-diffusion decode. SDAR's rules are ``low_confidence_static`` (a fixed count per step from the
    schedule), ``low_confidence_dynamic`` (every mask above ``confidence_threshold``, else the schedule's count) and
    ``entropy_bounded`` (the lowest-entropy masks whose entropies sum to ``eb_threshold``, at least one), plus
    ``sequential``; Fast-dLLM v2's is ``threshold_plus_best`` (every mask above the threshold and always the most
    confident one) over sub-blocks of ``sub_block_length`` decoded left to right, with its one-token logit shift and
    the next block's first token from the commit pass.

    temperature 0 is greedy (argmax, confidence = its softmax probability); above 0 the logits are divided by it,
    truncated by ``top_k`` / ``top_p`` and sampled, confidence being the sampled token's probability under that
    truncated distribution (SDAR's sampler; SDAR's own "greedy" is temperature 1 with top_k 1).
    """

    gen_length: int | None = canvas_field()
    block_length: int = 4
    denoising_steps: int = 4
    remasking: Remasking = "low_confidence_static"
    confidence_threshold: float = 0.85
    eb_threshold: float = 0.35
    sub_block_length: int | None = None  # None: the whole block is one sub-block
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    logit_shift: bool = False  # position i scored by the logits at i - 1 (Fast-dLLM v2)
    first_token_from_commit: bool = False  # a block's first token is the argmax of the previous forward's last logit
    commit_finished_block: bool = True  # False: no commit forward once every row of the batch has finished
    fused_commit: bool = False  # finished blocks are written by the next block's first peek (LLaDA2)
    eos_early_stop: bool = False  # a row stops mid-block once its tokens up to an end of sequence are all filled
    edit_threshold: float | None = None  # LLaDA2.1's token editing: a filled token whose proposal differs re-takes it
    max_post_edit_steps: int = 16  # editing steps once the block holds no mask
    seed: int = 0
    mask_id: int | None = token_id_field()
    eos_ids: tuple[int, ...] | None = token_id_field()


def block_diffusion_at_canvas(cfg: BlockDiffusionConfig, canvas: int) -> BlockDiffusionConfig:
    return dataclasses.replace(cfg, gen_length=canvas)


# How a finished block's K/V reach the cache: a commit forward after every block (SDAR); the same, skipped once every
# row of the batch has stopped (Fast-dLLM v2); or no forward of its own, the next block's first peek feeding and
# writing it, as the prompt's whole blocks (LLaDA2, whose published loop recomputes the prefix every step).
CacheWrite = Literal["commit", "commit_while_running", "fused"]
# How a block's positions are scored: each by its own logits, or (Fast-dLLM v2) by the logits one position before,
# the block's first token being the previous forward's last argmax (its commit pass, or the prefill).
Scoring = Literal["aligned", "shifted"]
# When a row stops: after a block that holds an end of sequence, or (LLaDA2) at the step that commits one with
# nothing masked before the first.
Stop = Literal["block_end", "eos_filled"]


@dataclass(frozen=True)
class Editing:
    """LLaDA2.1's token editing: a filled token whose proposal differs with confidence above ``threshold`` is re-taken;
    at most ``max_post_steps`` steps once the block holds no mask."""

    threshold: float
    max_post_steps: int


@dataclass(frozen=True)
class BlockStrategy:
    """What a config makes the decoder do, built once per decode by ``block_strategy``."""

    window: int  # the columns a step commits in: a sub-block, or the whole block
    masks_known: bool  # the static rule commits exactly the schedule's count, so the host knows the masks left
    cache_write: CacheWrite
    scoring: Scoring
    stop: Stop
    editing: Editing | None  # None: masks only, by the commit rule

    def commit_forward(self, every_row_stopped: bool) -> bool:
        """Whether a finished block gets a forward of its own that writes its K/V."""
        return self.cache_write == "commit" or (self.cache_write == "commit_while_running" and not every_row_stopped)


def block_strategy(cfg: BlockDiffusionConfig) -> BlockStrategy:
    """The config's choices; one line for each setting the decoder cannot run, or whose flags mean nothing together."""
    _check_values(cfg)
    if cfg.logit_shift != cfg.first_token_from_commit:
        raise ConfigError("logit_shift and first_token_from_commit are one choice (a shifted block's first token comes "
                          "from the forward before it): set both or neither")
    if cfg.logit_shift and cfg.fused_commit:
        raise ConfigError("logit_shift takes a block's first token from a commit forward, which fused_commit does not "
                          "run: unset one")
    if cfg.edit_threshold is not None and (cfg.eos_early_stop or cfg.sub_block_length or cfg.temperature
                                           or cfg.logit_shift):
        raise ConfigError("token editing (edit_threshold) runs whole blocks greedily on aligned logits: unset "
                          "eos_early_stop, sub_block_length, temperature and logit_shift, or edit_threshold")
    return BlockStrategy(
        window=cfg.sub_block_length or cfg.block_length,
        masks_known=cfg.remasking == "low_confidence_static",
        cache_write="fused" if cfg.fused_commit else "commit" if cfg.commit_finished_block else "commit_while_running",
        scoring="shifted" if cfg.logit_shift else "aligned",
        stop="eos_filled" if cfg.eos_early_stop else "block_end",
        editing=None if cfg.edit_threshold is None else Editing(cfg.edit_threshold, cfg.max_post_edit_steps))


def validate_block_diffusion_config(cfg: BlockDiffusionConfig) -> None:
    """The decoder's check before a run (``Decoder.validate``): the strategy builds."""
    block_strategy(cfg)


def _check_values(cfg: BlockDiffusionConfig) -> None:
    """One line for each value out of its range."""
    if cfg.remasking not in REMASKING:
        raise ConfigError(f"unknown remasking {cfg.remasking!r}; valid: {', '.join(REMASKING)}")
    if cfg.max_post_edit_steps < 0:
        raise ConfigError(f"max_post_edit_steps must be >= 0, got {cfg.max_post_edit_steps}")
    if cfg.block_length < 1:
        raise ConfigError(f"block_length must be >= 1, got {cfg.block_length}")
    if not 1 <= cfg.denoising_steps <= cfg.block_length:
        raise ConfigError(f"denoising_steps must be in 1..block_length ({cfg.block_length}), got {cfg.denoising_steps}")
    sub = cfg.sub_block_length
    if sub is not None and (sub < 1 or cfg.block_length % sub):
        raise ConfigError(f"sub_block_length {sub} must divide block_length {cfg.block_length}")
    if cfg.gen_length is not None and cfg.gen_length < 1:
        raise ConfigError(f"gen_length must be >= 1, got {cfg.gen_length}")
    if not cfg.temperature >= 0:
        raise ConfigError(f"temperature must be >= 0, got {cfg.temperature}")
    if cfg.top_k < 0 or not 0 < cfg.top_p <= 1:
        raise ConfigError(f"top_k must be >= 0 and top_p in (0, 1], got {cfg.top_k} and {cfg.top_p}")
    for name in ("confidence_threshold", "eb_threshold"):
        if math.isnan(getattr(cfg, name)):
            raise ConfigError(f"{name} must be a number")
