"""The ReFusion adapter: a Qwen3 fine-tune loaded by transformers, decoded by slot-level plan-and-infill."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.ar import CausalLMAdapter
from models.base import DecodeResult, PreparedBatch
from models.decoders.refusion import RefusionConfig, refusion_generate, validate_refusion_config


@dataclass(frozen=True)
class RefusionOptions:
    slot_size: int = 8
    serial_num_blocks: int = 2
    slot_threshold: float = 0.9
    token_threshold: float = 0.9
    temperature: float = 0.0
    seed: int | None = None
    enable_thinking: bool | None = True  # as ReFusion was trained and evaluated (no think block in the prompt)


def refusion_config(options: RefusionOptions, canvas: int, **token_ids: int) -> RefusionConfig:
    """The decoder's config: every option but the template switch, the canvas, and the checkpoint's token ids."""
    shared = {k: v for k, v in dataclasses.asdict(options).items() if k != "enable_thinking"}
    return RefusionConfig(gen_length=canvas, **shared, **token_ids)


class RefusionAdapter(CausalLMAdapter):
    """Batch 1 by design (the reference hard-codes it); a larger batch is decoded row by row."""

    kind = "refusion"
    config_class = RefusionOptions

    def validate_config(self, config: RefusionOptions) -> None:
        """Field checks now, with a canvas of one slot per serial block; the real canvas is checked per batch."""
        validate_refusion_config(refusion_config(config, max(config.slot_size, 1) * max(config.serial_num_blocks, 1)))

    def eos_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        cfg = refusion_config(batch.config, batch.requests[0].canvas_tokens, mask_id=self.token_id("<|mask|>"),
                              eos_id=self.tokenizer.eos_token_id)
        results = []
        for row, mask in zip(batch.input_ids, batch.attention_mask):
            prompt = row[mask.bool()][None]
            results.append(refusion_generate(self.network, prompt, cfg).to_decode_result())
        return results
