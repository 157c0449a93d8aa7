"""The autoregressive baseline on the native network, against transformers' ``generate`` on the same weights, and
ReFusion against it on that network (``benchmarks/decoders.py --families ar``)."""

from __future__ import annotations

import argparse
import statistics

import torch

from decoder_timing import DecoderRow, measure, print_table
from harness.timing.clock import timed
from models.decoders.ar import ARConfig, ar_generate
from models.networks.loading import build_network
from models.networks.qwen3 import Qwen3NetworkConfig

AR_BATCHES = (1, 8)
AR_TARGET = 1.0  # native AR tokens/s over transformers' generate, at each batch


def native_copy(hf: torch.nn.Module) -> torch.nn.Module:
    """The native Qwen3 network with ``hf``'s weights (the stored names are the same)."""
    network = build_network(Qwen3NetworkConfig.from_dict(hf.config.to_dict()), device=hf.device, dtype=hf.dtype)
    network.load_state_dict(hf.state_dict(), strict=True)
    return network.eval()


def ragged_batch(prompts: list[torch.Tensor], batch: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` prompts of different lengths (each cut by a few tokens more than the last), left-padded."""
    rows = [prompts[i % len(prompts)][0, : prompts[0].shape[1] - 3 * i] for i in range(batch)]
    width = max(len(r) for r in rows)
    ids = torch.full((batch, width), pad, dtype=torch.long, device=rows[0].device)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):], mask[i, width - len(r):] = r, 1
    return ids, mask


def print_ar_baseline(hf: torch.nn.Module, prompts: list[torch.Tensor], rows: list[DecoderRow],
                      args: argparse.Namespace) -> None:
    """The native AR decoder against transformers' ``generate`` (greedy, its own cache) on the same weights, at
    batch 1 and 8 on ragged prompts: tokens compared, tokens/s side by side in interleaved rounds (order flipped
    every other round); then ReFusion against AR on that same native network at canvas 512 and 1024."""
    native, no_eos, canvas = native_copy(hf), args.vocab, args.ar_canvas
    cfg = ARConfig(max_new_tokens=canvas, eos_ids=(no_eos,), pad_id=0)
    print(f"AR baseline, canvas {canvas}: native network (KVBuffer) vs transformers' generate (DynamicCache), "
          f"median tokens/s of {args.rounds} interleaved rounds [min-max]")
    for batch in AR_BATCHES:
        ids, mask = ragged_batch(prompts, batch, 0)
        sides = {
            "native": lambda: [r.token_ids for r in ar_generate(native, ids, mask, cfg).rows],
            "generate": lambda: hf.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=canvas,
                                            min_new_tokens=canvas, eos_token_id=no_eos, pad_token_id=0
                                            )[:, ids.shape[1]:].tolist(),
        }
        same = sides["native"]() == sides["generate"]()  # also the warm-up
        rates: dict[str, list[float]] = {name: [] for name in sides}
        for round_ in range(args.rounds):
            for name in (list(sides) if round_ % 2 == 0 else list(sides)[::-1]):
                _, seconds = timed(args.device, sides[name])
                rates[name].append(batch * canvas / seconds)
        median = {name: statistics.median(r) for name, r in rates.items()}
        ratio = median["native"] / median["generate"]
        verdict = "PASS" if same and ratio >= AR_TARGET else "FAIL"
        spread = {name: f"[{min(r):.0f}-{max(r):.0f}]" for name, r in rates.items()}
        print(f"{verdict} batch {batch}: native {median['native']:.0f} tok/s {spread['native']}, generate "
              f"{median['generate']:.0f} tok/s {spread['generate']}, ratio {ratio:.2f}x (target >= {AR_TARGET}), "
              f"tokens {'identical' if same else 'DIFFER'}")
    print("ReFusion and AR on the same native network (batch 1):")
    print_table([m for c in args.ar_refusion_canvas
                 for m in measure("native", native, rows, prompts, c, args.device, args.rounds)], rows)
