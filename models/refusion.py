"""The ReFusion adapter: a Qwen3 fine-tune loaded by transformers, decoded by slot-level plan-and-infill."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.ar import CausalLMAdapter
from models.base import ConfigError, DecodeResult, PreparedBatch
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


class RefusionAdapter(CausalLMAdapter):
    """Batch 1 by design (the reference hard-codes it); a larger batch is decoded row by row."""

    kind = "refusion"
    config_class = RefusionOptions

    def decoder_config(self, options: RefusionOptions, canvas: int) -> RefusionConfig:
        fields = {f.name for f in dataclasses.fields(RefusionConfig)}
        shared = {k: v for k, v in dataclasses.asdict(options).items() if k in fields}
        mask_id = self.tokenizer.convert_tokens_to_ids("<|mask|>")
        if mask_id is None or mask_id == self.tokenizer.unk_token_id:
            raise ConfigError(f"{self.name}: the tokenizer has no <|mask|> token (is this a ReFusion checkpoint?)")
        return RefusionConfig(gen_length=canvas, mask_id=mask_id, eos_id=self.tokenizer.eos_token_id, **shared)

    def validate_config(self, config: RefusionOptions) -> None:
        """Field checks now, with a canvas of one slot per serial block; the real canvas is checked per batch."""
        canvas = max(config.slot_size, 1) * max(config.serial_num_blocks, 1)
        validate_refusion_config(RefusionConfig(gen_length=canvas, **{
            k: v for k, v in dataclasses.asdict(config).items() if k != "enable_thinking"}))

    def eos_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    def decode(self, batch: PreparedBatch) -> list[DecodeResult]:
        cfg = self.decoder_config(batch.config, batch.requests[0].canvas_tokens)
        validate_refusion_config(cfg)
        results = []
        for row, mask in zip(batch.input_ids, batch.attention_mask):
            prompt = row[mask.bool()][None]
            results.append(refusion_generate(self.network, prompt, cfg).to_decode_result())
        return results
