"""The autoregressive baseline on the native network, against transformers' ``generate`` on the same weights, and
ReFusion against it on that network. Target: native tokens/s over ``generate``'s >= 1.0 at batch 1 and 8, tokens
identical.

    python -m benchmarks ar_baseline [--ar-canvas 256] [--ar-refusion-canvas 512 1024] [--rounds 3] [--device cuda]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common.timing import Spread, interleaved
from benchmarks.common.verdict import Report
from benchmarks.decoder_timing import DecoderRow, measure, print_table
from benchmarks.decoders import add_network_arguments, setting_up
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_network_arguments(parser)
    parser.add_argument("--ar-canvas", type=int, default=256, help="canvas of the native AR vs generate rows")
    parser.add_argument("--ar-refusion-canvas", type=int, nargs="*", default=[512, 1024],
                        help="canvases of ReFusion against AR on the same native network")


def run(args: argparse.Namespace, report: Report) -> None:
    args.canvas = [max([*args.canvas, args.ar_canvas, *args.ar_refusion_canvas])]  # the network's positions
    hf, prompts, rows = setting_up(args)
    print_ar_baseline(hf, prompts, rows, args, report)


def print_ar_baseline(hf: torch.nn.Module, prompts: list[torch.Tensor], rows: list[DecoderRow],
                      args: argparse.Namespace, report: Report) -> None:
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
        timed = interleaved(sides, args.rounds, args.device, warm_up=False)
        rates = {name: Spread.of([batch * canvas / s for _, s in runs]) for name, runs in timed.items()}
        ratio = rates["native"].median / rates["generate"].median
        report.check(f"batch {batch}: native over generate tokens/s, tokens identical", ratio, ">=", AR_TARGET,
                     f"batch {batch}: native {rates['native'].median:.0f} tok/s {rates['native'].bracket(0)}, generate "
                     f"{rates['generate'].median:.0f} tok/s {rates['generate'].bracket(0)}, ratio {ratio:.2f}x (target "
                     f">= {AR_TARGET}), tokens {'identical' if same else 'DIFFER'}", also=same)
    print("ReFusion and AR on the same native network (batch 1):")
    print_table([m for c in args.ar_refusion_canvas
                 for m in measure("native", native, rows, prompts, c, args.device, args.rounds)], rows)
