"""What every section of benchmarks/refusion.py decodes with: the tiny-refusion checkpoint, loaded natively and
through transformers, wrapped in an acceptance regime (benchmarks/refusion_cases.py); and how a timing prints."""

from __future__ import annotations

import statistics

import torch

from models.networks.loading import load_network
from models.tiny import materialize
from refusion_cases import biased


def networks(regime: str, max_pos: int, args, period: int | None = None):
    folder = materialize("tiny-refusion")
    from transformers import Qwen3ForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    dtype = getattr(torch, args.dtype)
    hf = Qwen3ForCausalLM.from_pretrained(folder, dtype=dtype).to(args.device).eval()
    native = load_network(folder, "qwen3", dtype=dtype).to(args.device)
    vocab, mask_id = hf.config.vocab_size, hf.config.mask_token_id
    return (biased(native, regime, max_pos, vocab, mask_id, period), biased(hf, regime, max_pos, vocab, mask_id, period),
            mask_id)


def summary(times: list[float]) -> str:
    return f"{statistics.median(times):8.3f}s [{min(times):.3f}-{max(times):.3f}]"
