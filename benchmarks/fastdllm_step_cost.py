"""Cost of one Fast-dLLM denoising step without a cache, with the prefix cache and with the dual cache, side by side,
plus decoding speed of the plain, cached and threshold modes, on tiny random LLaDA and Dream networks.

Part 1, canvas 512 / block 32: the in-block step (full canvas vs x[:, start:] vs the block alone) averaged over
every block position, and the amortised step at one token per step (a block's full forward + 31 window steps).
Target: prefix and dual each measurably cheaper than no cache (ratio no-cache / mode > 1).
Part 2, canvas 256 / block 32: tokens/s and forwards per token of each decoding mode (fastdllm_modes.BENCH_MODES).
A random network is not confident, so its LM head is scaled (--head-scale) to let a 0.9 threshold pass sometimes;
tokens are counted over the whole canvas (a random network has no meaningful end-of-sequence).

    python -m benchmarks fastdllm_step_cost [--device cuda] [--dtype bf16] [--hidden 256] [--layers 4]
    (a quick CPU look: --decode-canvas 128 --decode-repeats 1; under load from other processes, single runs swing)
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any, Callable

import torch

from benchmarks.common.fastdllm_modes import BENCH_MODES, benchmark_decoders
from benchmarks.common.networks import tiny_network
from benchmarks.common.table import Table, columns
from benchmarks.common.timing import Spread
from benchmarks.common.verdict import Report
from harness.timing.clock import timed as timed_once
from models.decoders.fastdllm.core import Padding, full_forward, window_forward
from models.networks.loading import resolve_dtype

TARGET = 1.0  # in-block step without a cache over the step with it: each cache must be cheaper
STEP_TABLE = Table(columns(("mode", -8), ("in-block step", 14), ("vs none", 8), ("amortised step", 15), ("vs none", 8)),
                   indent="  ")
DECODE_TABLE = Table(columns(("decoder", -22), ("tok/s", 10), ("fwd/tok", 8), ("vs baseline", 12)), indent="  ")


def make_network(kind: str, args: argparse.Namespace) -> torch.nn.Module:
    """A random network of the requested size with the real architecture flags (GQA 2:1 for Dream, as 7:1 in 7B)."""
    max_len = args.prompt + max(args.canvas, args.decode_canvas)
    fields = (dict(n_heads=args.heads, n_kv_heads=args.heads, max_sequence_length=max_len) if kind == "llada" else
              dict(num_attention_heads=args.heads, num_key_value_heads=args.heads // 2,
                   max_position_embeddings=max_len))
    network = tiny_network(kind, args.vocab, args.hidden, args.layers, 3 * args.hidden, args.device, args.dtype,
                           **fields)
    head = network.model.transformer.ff_out if kind == "llada" else network.lm_head
    head.weight.mul_(args.head_scale)
    return network


def timed(fn: Callable[[], Any], device: torch.device, repeats: int = 1) -> tuple[float, Any]:
    """Median wall time of ``fn`` over ``repeats`` runs (device synchronised around each) and its last result."""
    runs = [timed_once(device, fn) for _ in range(repeats)]
    return Spread.of([s for _, s in runs]).median, runs[-1][0]


@torch.no_grad()
def step_costs(network: torch.nn.Module, args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """Seconds per in-block step in each cache mode, averaged over every block of the canvas. The caches are built
    untimed by the block's full forward, as the sampler builds them; the three modes are timed in alternation, so
    load from other processes hits them alike, and the median of ``repeats`` rounds is kept."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab - 1, (1, args.prompt + args.canvas), generator=gen).to(device)
    padding = Padding()
    full_forward(network, x, padding, None)  # warm-up
    costs: dict[str, list[float]] = {"none": [], "prefix": [], "dual": []}
    for start in range(args.prompt, args.prompt + args.canvas, args.block):
        end = start + args.block
        prefix, dual = network.new_cache(1, x.shape[1]), network.new_cache(1, x.shape[1])
        full_forward(network, x, padding, prefix)
        prefix.truncate_all(start)
        full_forward(network, x, padding, dual)
        steps = {
            "none": lambda: full_forward(network, x, padding, None),
            "prefix": lambda: window_forward(network, x, start, end, "prefix", padding, prefix),
            "dual": lambda: window_forward(network, x, start, end, "dual", padding, dual),
        }
        rounds = [{mode: timed(step, device)[0] for mode, step in steps.items()} for _ in range(args.repeats)]
        for mode in steps:
            costs[mode].append(statistics.median(r[mode] for r in rounds))
    return {mode: statistics.mean(values) for mode, values in costs.items()}


def step_rows(costs: dict[str, float], block: int) -> list[str]:
    """In-block step and amortised step (one full forward + block-1 window steps per block) per mode."""
    full = costs["none"]
    rows = [STEP_TABLE.header()]
    for mode, cost in costs.items():
        amortised = cost if mode == "none" else (full + (block - 1) * cost) / block
        rows.append(STEP_TABLE.line([mode, f"{cost * 1e3:.2f} ms", f"{full / cost:.2f}x", f"{amortised * 1e3:.2f} ms",
                                     f"{full / amortised:.2f}x"]))
    return rows


def decode_rows(kind: str, network: torch.nn.Module, args: argparse.Namespace, device: torch.device) -> list[str]:
    """tokens/s and forwards per token of each benchmark mode: after a small warm-up, ``decode_repeats`` rounds
    that each run every mode once (so load from other processes hits them alike); the median time is kept."""
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, args.vocab - 1, (1, args.prompt), generator=gen).to(device)
    ids = dict(mask_id=args.vocab - 1) | (dict(eos_ids=(0,)) if kind == "dream" else dict(eos_id=0, eot_id=1))
    for run in benchmark_decoders(kind, network, prompt, args.block, args.block, **ids).values():
        run()
    decoders = benchmark_decoders(kind, network, prompt, args.decode_canvas, args.block, BENCH_MODES, **ids)
    rounds = [{name: timed(run, device) for name, run in decoders.items()} for _ in range(args.decode_repeats)]
    rows, baseline = [DECODE_TABLE.header()], None
    for name in decoders:
        seconds = statistics.median(r[name][0] for r in rounds)
        nfe = rounds[-1][name][1].nfe
        tps = args.decode_canvas / seconds
        baseline = baseline or tps
        rows.append(DECODE_TABLE.line([name, f"{tps:.1f}", f"{nfe / args.decode_canvas:.3f}",
                                       f"{tps / baseline:.2f}x"]))
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="fp32", help="fp32 | bf16 | fp16")
    parser.add_argument("--models", default="llada,dream")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens before the canvas")
    parser.add_argument("--canvas", type=int, default=512, help="canvas of the step-cost part")
    parser.add_argument("--decode-canvas", type=int, default=256, help="canvas of the decoding part")
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per step (median kept)")
    parser.add_argument("--decode-repeats", type=int, default=3, help="timed rounds per decoder (median kept)")
    parser.add_argument("--head-scale", type=float, default=8.0, help="LM-head scale that makes the random net confident")
    parser.add_argument("--skip-decode", action="store_true")


def run(args: argparse.Namespace, report: Report) -> None:
    args.dtype = resolve_dtype(args.dtype)
    device = torch.device(args.device)
    print(f"device {device}, dtype {args.dtype}, hidden {args.hidden}, layers {args.layers}, heads {args.heads}, "
          f"vocab {args.vocab}, prompt {args.prompt}, threads {torch.get_num_threads()}")
    for kind in args.models.split(","):
        network = make_network(kind, args)
        print(f"\n{kind}: one denoising step, canvas {args.canvas}, block {args.block} (mean over its "
              f"{args.canvas // args.block} blocks)")
        costs = step_costs(network, args, device)
        print("\n".join(step_rows(costs, args.block)))
        for mode in ("prefix", "dual"):
            ratio = costs["none"] / costs[mode]
            report.check(f"{kind}: in-block step without a cache over the {mode} cache's", ratio, ">", TARGET,
                         f"{kind}: the {mode} cache's in-block step {ratio:.2f}x cheaper than none (target > {TARGET})")
        if not args.skip_decode:
            print(f"{kind}: decoding, canvas {args.decode_canvas}, block {args.block}, threshold 0.9 in the parallel modes")
            print("\n".join(decode_rows(kind, network, args, device)))
