"""Decoder speed side by side: tokens/s, forwards per token and the share of decode time spent outside the network.

Every decoder row runs on the same networks and prompts, for several canvas lengths:
  * ``random``: a tiny random Qwen3 shaped like ReFusion (causal, mask id = last vocab id). It is never confident, so
    ReFusion falls back to one slot per round and completes it token by token: its worst case.
  * ``confident``: the same network with a large bias on a fixed answer (a mask at p -> f(p), a token at p -> f(p+1)),
    so every slot is chosen and accepted by the first verification: ReFusion's best case, 2 forwards per serial block.
Canvases are filled completely (the end-of-sequence id is one the network cannot produce), one warm-up decode per
(network, canvas, decoder) is excluded, the rows of one network and canvas run in ``--rounds`` interleaved rounds
(figures are medians, with the min-max of time per token), and the device is synchronised around every network call
so time inside and outside the network can be told apart.

Targets (printed as PASS/FAIL):
  * ReFusion spends < 20% of its decode time outside network forwards at canvas 512;
  * every LLaDA and Dream row (plain and Fast-dLLM) and every block-diffusion row (SDAR static, TraDo dynamic,
    Fast-dLLM v2, each at batch 1 and 8) spends < 10% outside network forwards at the diffusion canvas;
  * on the confident network ReFusion's time per generated token is flat across canvas lengths
    (time/token at 1024 over time/token at 128 <= 1.5).

    python -m benchmarks decoders [--device cuda] [--dtype bfloat16] [--canvas 128 256 512 1024] [--prompts 3]
                                  [--rounds 3]

LLaDA and Dream, plain and with Fast-dLLM's prefix cache, dual cache and threshold (block 32), run as further rows
at ``--diffusion-canvas`` (512) on native networks of the same size, compared with the same AR baseline; so do the
block-diffusion rows, SDAR/TraDo on the native Qwen3 network and Fast-dLLM v2 on the native Qwen2 one, at batch 1
and at batch 8 (the prompt and seven rotations of it, decoded together), whose ratio is printed; and DiffusionGemma
(tiny-diffusiongemma through transformers' own generate and its adapter) at batch 1 and 8. On the CPU
the benchmark runs one torch thread, so other load on the machine moves both sides of each share alike. The native AR
loop against transformers' ``generate`` is the ``ar_baseline`` benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from benchmarks.common.fastdllm_modes import fastdllm_generate, mode_config
from benchmarks.common.networks import ConfidentNetwork, tiny_network, transformers_qwen3
from benchmarks.common.timing import DTYPES, Spread, interleaved, torch_settings
from benchmarks.common.verdict import Report
from benchmarks.decoder_timing import DecoderRow, Measurement, measure, print_table
from benchmarks.diffusion_gemma import diffusion_gemma_speed, print_rows
from models.decoders.ar import ARConfig, ar_generate
from models.decoders.block_diffusion import BlockDiffusionConfig, block_diffusion_generate
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row
from models.networks.hf_causal import TransformersCausalLM

OUTSIDE_SHARE_TARGET = 0.20
DIFFUSION_OUTSIDE_TARGET = 0.10
FLAT_RATIO_TARGET = 1.5


# ---- networks ---------------------------------------------------------------------------------------------------
def build_tiny_refusion(args: argparse.Namespace) -> torch.nn.Module:
    """A random causal Qwen3 the size of the harness's tiny test models (stand-in for the registry's tiny-refusion)."""
    return transformers_qwen3(args.vocab, args.hidden, args.layers, 3 * args.hidden,
                              args.prompt_len + max(args.canvas) + 8, args.device, args.dtype)


def build_network(kind: str, args: argparse.Namespace) -> torch.nn.Module:
    """A random native network of the size above: LLaDA, Dream, Qwen3 (SDAR's layout), Qwen2 (Fast-dLLM v2's) or
    the LLaDA2 MoE (the tiny recipe's 8 experts, top 2 of 2 groups, its experts a quarter as wide)."""
    return tiny_network(kind, args.vocab, args.hidden, args.layers, 3 * args.hidden, args.device, args.dtype)


# ---- decoders ---------------------------------------------------------------------------------------------------
def decoder_rows(args: argparse.Namespace) -> list[DecoderRow]:
    mask_id, no_eos = args.vocab - 1, args.vocab  # an id outside the vocabulary: canvases are always filled

    def refusion(network: torch.nn.Module, prompt: torch.Tensor, canvas: int) -> int:
        block = min(args.block_length, canvas)
        cfg = RefusionConfig(gen_length=canvas, slot_size=args.slot_size, serial_num_blocks=canvas // block,
                             slot_threshold=0.9, token_threshold=0.9, mask_id=mask_id, eos_id=no_eos)
        return len(refusion_decode_row(network, prompt, cfg).token_ids)

    def ar_greedy(network: torch.nn.Module, prompt: torch.Tensor, canvas: int) -> int:
        cfg = ARConfig(max_new_tokens=canvas, eos_ids=(no_eos,), pad_id=0)
        causal = network if hasattr(network, "causal_forward") else TransformersCausalLM(network)
        return len(ar_generate(causal, prompt, torch.ones_like(prompt), cfg).rows[0].token_ids)

    return [DecoderRow("refusion", refusion), DecoderRow("ar-greedy", ar_greedy)]


DIFFUSION_MODES = ("baseline", "prefix", "dual", "parallel", "dual+parallel")


def diffusion_rows(kind: str, args: argparse.Namespace) -> list[DecoderRow]:
    """LLaDA / Dream plain and with Fast-dLLM's caches and threshold (block 32), as rows named "<kind> <mode>"."""
    ids = {"mask_id": args.vocab - 1} | ({"eos_ids": (args.vocab,)} if kind == "dream" else
                                         {"eos_id": args.vocab, "eot_id": args.vocab + 1})

    def row(mode: str) -> DecoderRow:
        def decode(network: torch.nn.Module, prompt: torch.Tensor, canvas: int) -> int:
            cfg = mode_config(kind, mode, canvas, args.diffusion_block, **ids)
            return fastdllm_generate(network, prompt, None, cfg).tokens.numel()

        return DecoderRow(f"{kind} {mode}", decode)

    return [row(mode) for mode in DIFFUSION_MODES]


BLOCK_FAMILIES = {  # row name -> (network kind, decoder settings), the registry's defaults for each family
    "sdar static": ("qwen3", BlockDiffusionConfig(block_length=4, denoising_steps=4, temperature=0)),
    "trado dynamic": ("qwen3", BlockDiffusionConfig(block_length=4, denoising_steps=4, temperature=0,
                                                    remasking="low_confidence_dynamic", confidence_threshold=0.9)),
    "fastdllm-v2": ("qwen2", BlockDiffusionConfig(block_length=32, sub_block_length=8, temperature=0,
                                                  remasking="threshold_plus_best", confidence_threshold=0.9,
                                                  logit_shift=True, first_token_from_commit=True,
                                                  commit_finished_block=False)),
}
BLOCK_FAMILIES["llada2"] = ("llada2", BlockDiffusionConfig(block_length=32, denoising_steps=32, temperature=0,
                                                           remasking="low_confidence_dynamic",
                                                           confidence_threshold=0.95, fused_commit=True,
                                                           eos_early_stop=True))
BLOCK_BATCH = 8


def block_rows(kind: str, args: argparse.Namespace) -> list[DecoderRow]:
    """The block-diffusion families on ``kind``'s network, each at batch 1 and at batch ``BLOCK_BATCH``."""
    def row(name: str, cfg: BlockDiffusionConfig, batch: int) -> DecoderRow:
        def decode(network: torch.nn.Module, prompt: torch.Tensor, canvas: int) -> int:
            prompts = torch.cat([prompt.roll(i, dims=1) for i in range(batch)])
            filled = dataclasses.replace(cfg, gen_length=canvas, mask_id=args.vocab - 1, eos_ids=(args.vocab,))
            return block_diffusion_generate(network, prompts, None, filled).tokens.numel()

        return DecoderRow(f"{name} b{batch}", decode)

    return [row(name, cfg, batch) for name, (network, cfg) in BLOCK_FAMILIES.items() if network == kind
            for batch in (1, BLOCK_BATCH)]


@torch.inference_mode()
def print_moe_cost(network: torch.nn.Module, args: argparse.Namespace, report: Report) -> None:
    """The MoE network's cost per token fed: one 32-token block peeked against a cache of the diffusion canvas, at
    batch 1 and 8, in interleaved rounds (median, min-max)."""
    block, context = 32, args.diffusion_canvas
    calls = {}
    positions = torch.arange(context, context + block, device=args.device)[None]
    for batch in (1, BLOCK_BATCH):
        ids = torch.randint(0, args.vocab - 1, (batch, context + block), generator=torch.Generator().manual_seed(7))
        cache, ids = network.new_cache(batch, context + block), ids.to(args.device)
        network.block_forward(ids[:, :context], torch.arange(context, device=args.device)[None], cache, block, True)
        calls[batch] = lambda ids=ids, cache=cache: network.block_forward(ids[:, context:], positions, cache, block,
                                                                          False)
    timed = interleaved(calls, max(3, args.rounds), args.device)
    per_token = {b: Spread.of([s / (b * block) for _, s in runs]).scaled(1e6) for b, runs in timed.items()}
    one, many = per_token[1], per_token[BLOCK_BATCH]
    report.info("llada2 MoE forward, batch 8 over batch 1 cost per token", one.median / many.median,
                f"INFO llada2 MoE forward, one {block}-token block against {context} cached: {one.median:.1f} us per "
                f"token at batch 1 [{one.low:.1f}-{one.high:.1f}], {many.median:.1f} at batch {BLOCK_BATCH} "
                f"[{many.low:.1f}-{many.high:.1f}]: {one.median / many.median:.2f}x cheaper per token")


# ---- targets ----------------------------------------------------------------------------------------------------

def report_targets(results: list[Measurement], report: Report) -> None:
    by_key = {(m.network, m.canvas, m.decoder): m for m in results}
    for network in ("random", "confident"):
        m = by_key.get((network, 512, "refusion"))
        name = f"refusion/{network} canvas 512: share of decode time outside network forwards"
        if m is None:
            report.info(name, None, f"SKIP outside-forward share ({network}): canvas 512 not measured")
            continue
        report.check(name, m.outside_share, "<", OUTSIDE_SHARE_TARGET,
                     f"refusion/{network} canvas 512: {m.outside_share:.1%} of decode time outside network forwards"
                     f" (target < {OUTSIDE_SHARE_TARGET:.0%})")
    for m in results:
        if m.network in ("llada", "dream", "qwen3", "qwen2", "llada2"):
            report.check(f"{m.decoder} canvas {m.canvas}: share of decode time outside network forwards",
                         m.outside_share, "<", DIFFUSION_OUTSIDE_TARGET,
                         f"{m.decoder} canvas {m.canvas}: {m.outside_share:.1%} of decode time outside network"
                         f" forwards (target < {DIFFUSION_OUTSIDE_TARGET:.0%})")
    for name in BLOCK_FAMILIES:
        one, many = ([m for m in results if m.decoder == f"{name} b{b}"] for b in (1, BLOCK_BATCH))
        if one and many:
            gain = many[0].tokens_per_second / one[0].tokens_per_second
            report.info(f"{name}: batch {BLOCK_BATCH} over batch 1 tokens/s", gain,
                        f"INFO {name}: batch {BLOCK_BATCH} vs 1, {gain:.2f}x the tokens/s "
                        f"({many[0].forwards_per_token:.3f} vs {one[0].forwards_per_token:.3f} forwards per token)")
    lo, hi = by_key.get(("confident", 128, "refusion")), by_key.get(("confident", 1024, "refusion"))
    name = "refusion/confident time per token, canvas 1024 over 128"
    if lo is None or hi is None:
        report.info(name, None, "SKIP per-token cost flatness: canvases 128 and 1024 not both measured")
        return
    ratio = hi.ms_per_token / lo.ms_per_token
    report.check(name, ratio, "<=", FLAT_RATIO_TARGET,
                 f"refusion/confident time per token, canvas 1024 vs 128: {ratio:.2f}x"
                 f" ({hi.ms_per_token:.3f} vs {lo.ms_per_token:.3f} ms; target <= {FLAT_RATIO_TARGET})")


FAMILIES = ("llada", "dream", "block", "diffusiongemma")


def add_network_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the networks and prompts the ReFusion and AR rows decode (shared with ``ar_baseline``)."""
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: bfloat16 on cuda, else float32")
    parser.add_argument("--canvas", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are their medians")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--slot-size", type=int, default=8)
    parser.add_argument("--block-length", type=int, default=128, help="serial block length (canvas // blocks)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_network_arguments(parser)
    parser.add_argument("--networks", nargs="*", default=["random", "confident"], choices=["random", "confident"],
                        help="the ReFusion and AR rows' networks (none: only the diffusion rows)")
    parser.add_argument("--diffusion-canvas", type=int, default=512, help="canvas of the LLaDA/Dream rows (0: skip)")
    parser.add_argument("--diffusion-block", type=int, default=32, help="Fast-dLLM block length")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES,
                        help="which diffusion rows run at --diffusion-canvas")


def setting_up(args: argparse.Namespace) -> tuple[torch.nn.Module, list[torch.Tensor], list[DecoderRow]]:
    """The device and dtype settled (one thread on the CPU), the random Qwen3, the prompts and the ReFusion and AR
    rows."""
    args.device, args.dtype = torch_settings(args.device, args.dtype)
    base = build_tiny_refusion(args)
    generator = torch.Generator().manual_seed(1234)
    prompts = [torch.randint(0, args.vocab - 2, (1, args.prompt_len), generator=generator).to(args.device)
               for _ in range(args.prompts)]
    return base, prompts, decoder_rows(args)


def run(args: argparse.Namespace, report: Report) -> None:
    base, prompts, rows = setting_up(args)
    networks = {"random": base, "confident": ConfidentNetwork(base, mask_id=args.vocab - 1)}
    print(f"device {args.device}, dtype {args.dtype}, network vocab {args.vocab} hidden {args.hidden} layers "
          f"{args.layers}, prompts {args.prompts} x {args.prompt_len} tokens, slot {args.slot_size}, serial block "
          f"{args.block_length}, thresholds 0.9/0.9; baseline = models.decoders.ar.ar_generate (greedy, KV cache); "
          f"medians of {args.rounds} interleaved rounds")
    results = []
    for name in args.networks:
        for canvas in args.canvas:
            results += measure(name, networks[name], rows, prompts, canvas, args.device, args.rounds)
    if args.diffusion_canvas:
        for kind in [k for k in ("llada", "dream") if k in args.families]:
            results += measure(kind, build_network(kind, args), diffusion_rows(kind, args), prompts,
                               args.diffusion_canvas, args.device, args.rounds)
        for kind in ("qwen3", "qwen2", "llada2") if "block" in args.families else ():
            results += measure(kind, build_network(kind, args), block_rows(kind, args), prompts,
                               args.diffusion_canvas, args.device, args.rounds)
    print_table(results, rows)
    report_targets(results, report)
    if args.diffusion_canvas and "block" in args.families:
        print_moe_cost(build_network("llada2", args), args, report)
    if args.diffusion_canvas and "diffusiongemma" in args.families:
        # transformers' own generate on tiny-diffusiongemma, timed through its adapter as a run times it (no target:
        # most of its time outside forwards is transformers' sampler; docs/benchmarks.md)
        print(f"diffusiongemma (tiny-diffusiongemma, transformers' generate) at canvas {args.diffusion_canvas}:")
        print_rows(diffusion_gemma_speed(args.device, args.dtype, canvas=args.diffusion_canvas, batches=(1, 8),
                                         prompts=8, rounds=args.rounds))
