"""Block diffusion with exact KV reuse (SDAR/TraDo, Fast-dLLM v2, LLaDA2.x): ``strategy`` (the config and the choices
it makes, checked once), ``rules`` (proposals, commit rules and one-step updates), ``lockstep`` (a static batch, rows
on absolute blocks together, as the published batched code runs them) and ``stream`` (rows in flight: one round
batched tensor work over a slot pool: ``flight_rows`` the rows' control state on the host, ``flight_plan`` a round
planned on the host, ``flight_state`` the rows' tokens on the device)."""

from models.decoders.block_diffusion.lockstep import block_diffusion_generate
from models.decoders.block_diffusion.rules import commit_rule, propose, transfer_schedule
from models.decoders.block_diffusion.strategy import (BlockDiffusionConfig, BlockStrategy, block_diffusion_at_canvas,
                                                      block_strategy, validate_block_diffusion_config)
from models.decoders.block_diffusion.stream import block_diffusion_stream
from models.decoders.contract import Decoder

BLOCK_DIFFUSION = Decoder("block-diffusion", BlockDiffusionConfig, block_diffusion_generate,
                          block_diffusion_at_canvas, validate_block_diffusion_config, stream=block_diffusion_stream,
                          version=1)

__all__ = ["BLOCK_DIFFUSION", "BlockDiffusionConfig", "BlockStrategy", "block_diffusion_generate",
           "block_diffusion_stream", "block_strategy", "commit_rule", "propose", "transfer_schedule",
           "validate_block_diffusion_config"]
