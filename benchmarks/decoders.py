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

    python benchmarks/decoders.py [--device cuda] [--dtype bfloat16] [--canvas 128 256 512 1024] [--prompts 3]
                                  [--rounds 3]

LLaDA and Dream, plain and with Fast-dLLM's prefix cache, dual cache and threshold (block 32), run as further rows
at ``--diffusion-canvas`` (512) on native networks of the same size, compared with the same AR baseline; so do the
block-diffusion rows, SDAR/TraDo on the native Qwen3 network and Fast-dLLM v2 on the native Qwen2 one, at batch 1
and at batch 8 (the prompt and seven rotations of it, decoded together), whose ratio is printed; and DiffusionGemma
(tiny-diffusiongemma through transformers' own generate and its adapter) at batch 1 and 8. On the CPU
the script runs one torch thread, so other load on the machine moves both sides of each share alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from ar_baseline import print_ar_baseline
from decoder_timing import DecoderRow, Measurement, measure, print_table
from diffusion_gemma_speed import diffusion_gemma_speed, print_rows
from fastdllm_modes import fastdllm_generate, mode_config
from harness.timing.clock import timed
from models.decoders.ar import ARConfig, ar_generate
from models.networks.hf_causal import TransformersCausalLM
from models.decoders.block_diffusion import BlockDiffusionConfig, block_diffusion_generate
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.llada2 import tiny_llada2_config
from models.networks.loading import build_network
from models.networks.qwen3 import Qwen3NetworkConfig
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row

OUTSIDE_SHARE_TARGET = 0.20
DIFFUSION_OUTSIDE_TARGET = 0.10
FLAT_RATIO_TARGET = 1.5
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---- networks ---------------------------------------------------------------------------------------------------
def build_tiny_refusion(args: argparse.Namespace) -> torch.nn.Module:
    """A random causal Qwen3 the size of the harness's tiny test models (stand-in for the registry's tiny-refusion)."""
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=args.hidden // 4, max_position_embeddings=args.prompt_len + max(args.canvas) + 8)
    return Qwen3ForCausalLM(cfg).to(device=args.device, dtype=args.dtype).eval()


class ConfidentNetwork(torch.nn.Module):
    """Adds ``bias`` to a fixed answer's logit so argmax is that answer and its probability is ~1."""

    def __init__(self, inner: torch.nn.Module, mask_id: int, bias: float = 60.0):
        super().__init__()
        self.inner, self.mask_id, self.bias, self.config = inner, mask_id, bias, inner.config

    def answer(self, positions: torch.Tensor) -> torch.Tensor:
        return (7 * positions + 3) % (self.mask_id - 1)  # never the mask id (vocab-1) or vocab-2

    def forward(self, input_ids, position_ids, **kwargs):
        out = self.inner(input_ids=input_ids, position_ids=position_ids, **kwargs)
        n = out.logits.shape[1]
        ids, pos = input_ids[:, -n:], position_ids[:, -n:]
        target = torch.where(ids == self.mask_id, self.answer(pos), self.answer(pos + 1))
        bias = torch.full_like(out.logits[..., :1], self.bias)
        out.logits = out.logits.scatter_add(-1, target[..., None], bias)
        return out


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


def build_tiny_diffusion(kind: str, args: argparse.Namespace) -> torch.nn.Module:
    """A random native LLaDA or Dream network with the same width, depth and vocabulary as the Qwen3 above."""
    config = (tiny_llada_config if kind == "llada" else tiny_dream_config)(args.vocab)
    config = dataclasses.replace(config, **({"d_model": args.hidden, "n_layers": args.layers,
                                             "mlp_hidden_size": 3 * args.hidden} if kind == "llada" else
                                            {"hidden_size": args.hidden, "num_hidden_layers": args.layers,
                                             "intermediate_size": 3 * args.hidden}))
    return build_network(config, device=args.device, dtype=args.dtype, seed=0)


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


def build_block_network(kind: str, args: argparse.Namespace) -> torch.nn.Module:
    """A random native Qwen3 (SDAR's layout), Qwen2 (Fast-dLLM v2's) or LLaDA2 MoE network of the size of the ones
    above (the MoE: the tiny recipe's 8 experts, top 2 of 2 groups, its experts a quarter as wide)."""
    if kind == "llada2":
        config = dataclasses.replace(tiny_llada2_config(args.vocab), hidden_size=args.hidden,
                                     num_hidden_layers=args.layers, intermediate_size=3 * args.hidden,
                                     moe_intermediate_size=3 * args.hidden // 4, head_dim=args.hidden // 4)
    elif kind == "qwen3":
        config = Qwen3NetworkConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                                    num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=args.hidden // 4)
    else:
        config = dataclasses.replace(tiny_dream_config(args.vocab), hidden_size=args.hidden,
                                     num_hidden_layers=args.layers, intermediate_size=3 * args.hidden)
    return build_network(config, device=args.device, dtype=args.dtype, seed=0)


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
def print_moe_cost(network: torch.nn.Module, args: argparse.Namespace) -> None:
    """The MoE network's cost per token fed: one 32-token block peeked against a cache of the diffusion canvas, at
    batch 1 and 8, in interleaved rounds (median, min-max)."""
    block, context = 32, args.diffusion_canvas
    seconds: dict[int, list[float]] = {1: [], BLOCK_BATCH: []}
    caches = {}
    for batch in seconds:
        ids = torch.randint(0, args.vocab - 1, (batch, context + block), generator=torch.Generator().manual_seed(7))
        caches[batch] = (network.new_cache(batch, context + block), ids.to(args.device))
        network.block_forward(caches[batch][1][:, :context], torch.arange(context, device=args.device)[None],
                              caches[batch][0], block, True)
    positions = torch.arange(context, context + block, device=args.device)[None]
    for _ in range(max(3, args.rounds) + 1):
        for batch, (cache, ids) in caches.items():
            _, elapsed = timed(args.device, lambda: network.block_forward(ids[:, context:], positions, cache, block,
                                                                          False))
            seconds[batch].append(elapsed / (batch * block))
    one, many = (statistics.median(v[1:]) for v in seconds.values())  # the first round warms up
    span = {b: f"{1e6 * min(v[1:]):.1f}-{1e6 * max(v[1:]):.1f}" for b, v in seconds.items()}
    print(f"INFO llada2 MoE forward, one {block}-token block against {context} cached: {1e6 * one:.1f} us per token at"
          f" batch 1 [{span[1]}], {1e6 * many:.1f} at batch {BLOCK_BATCH} [{span[BLOCK_BATCH]}]: {one / many:.2f}x"
          " cheaper per token")


# ---- measurement ------------------------------------------------------------------------------------------------

def print_targets(results: list[Measurement]) -> None:
    by_key = {(m.network, m.canvas, m.decoder): m for m in results}
    for network in ("random", "confident"):
        m = by_key.get((network, 512, "refusion"))
        if m is None:
            print(f"SKIP outside-forward share ({network}): canvas 512 not measured")
            continue
        verdict = "PASS" if m.outside_share < OUTSIDE_SHARE_TARGET else "FAIL"
        print(f"{verdict} refusion/{network} canvas 512: {m.outside_share:.1%} of decode time outside network forwards"
              f" (target < {OUTSIDE_SHARE_TARGET:.0%})")
    for m in results:
        if m.network in ("llada", "dream", "qwen3", "qwen2", "llada2"):
            verdict = "PASS" if m.outside_share < DIFFUSION_OUTSIDE_TARGET else "FAIL"
            print(f"{verdict} {m.decoder} canvas {m.canvas}: {m.outside_share:.1%} of decode time outside network"
                  f" forwards (target < {DIFFUSION_OUTSIDE_TARGET:.0%})")
    for name in BLOCK_FAMILIES:
        one, many = ([m for m in results if m.decoder == f"{name} b{b}"] for b in (1, BLOCK_BATCH))
        if one and many:
            print(f"INFO {name}: batch {BLOCK_BATCH} vs 1, {many[0].tokens_per_second / one[0].tokens_per_second:.2f}x"
                  f" the tokens/s ({many[0].forwards_per_token:.3f} vs {one[0].forwards_per_token:.3f} forwards"
                  " per token)")
    lo, hi = by_key.get(("confident", 128, "refusion")), by_key.get(("confident", 1024, "refusion"))
    if lo is None or hi is None:
        print("SKIP per-token cost flatness: canvases 128 and 1024 not both measured")
        return
    ratio = hi.ms_per_token / lo.ms_per_token
    verdict = "PASS" if ratio <= FLAT_RATIO_TARGET else "FAIL"
    print(f"{verdict} refusion/confident time per token, canvas 1024 vs 128: {ratio:.2f}x"
          f" ({hi.ms_per_token:.3f} vs {lo.ms_per_token:.3f} ms; target <= {FLAT_RATIO_TARGET})")


# ---- the autoregressive baseline on the native network ----------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    parser.add_argument("--networks", nargs="*", default=["random", "confident"], choices=["random", "confident"],
                        help="the ReFusion and AR rows' networks (none: only the diffusion rows)")
    parser.add_argument("--ar-canvas", type=int, default=256, help="canvas of the native AR vs generate rows")
    parser.add_argument("--ar-refusion-canvas", type=int, nargs="*", default=[512, 1024],
                        help="canvases of ReFusion against AR on the same native network")
    parser.add_argument("--diffusion-canvas", type=int, default=512, help="canvas of the LLaDA/Dream rows (0: skip)")
    parser.add_argument("--diffusion-block", type=int, default=32, help="Fast-dLLM block length")
    parser.add_argument("--families", nargs="+", default=["ar", "llada", "dream", "block", "diffusiongemma"],
                        choices=["ar", "llada", "dream", "block", "diffusiongemma"],
                        help="which diffusion rows run at --diffusion-canvas")
    args = parser.parse_args()
    args.device = torch.device(args.device)
    args.dtype = DTYPES[args.dtype or ("bfloat16" if args.device.type == "cuda" else "float32")]
    if args.device.type == "cpu":
        torch.set_num_threads(1)

    base = build_tiny_refusion(args)
    networks = {"random": base, "confident": ConfidentNetwork(base, mask_id=args.vocab - 1)}
    generator = torch.Generator().manual_seed(1234)
    prompts = [torch.randint(0, args.vocab - 2, (1, args.prompt_len), generator=generator).to(args.device)
               for _ in range(args.prompts)]
    rows = decoder_rows(args)
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
            network = build_tiny_diffusion(kind, args)
            results += measure(kind, network, diffusion_rows(kind, args), prompts, args.diffusion_canvas,
                               args.device, args.rounds)
        for kind in ("qwen3", "qwen2", "llada2") if "block" in args.families else ():
            results += measure(kind, build_block_network(kind, args), block_rows(kind, args), prompts,
                               args.diffusion_canvas, args.device, args.rounds)
    print_table(results, rows)
    print_targets(results)
    if "ar" in args.families:
        print_ar_baseline(base, prompts, rows, args)
    if args.diffusion_canvas and "block" in args.families:
        print_moe_cost(build_block_network("llada2", args), args)
    if args.diffusion_canvas and "diffusiongemma" in args.families:
        # transformers' own generate on tiny-diffusiongemma, timed through its adapter as a run times it (no target:
        # most of its time outside forwards is transformers' sampler; docs/benchmarks.md)
        print(f"diffusiongemma (tiny-diffusiongemma, transformers' generate) at canvas {args.diffusion_canvas}:")
        print_rows(diffusion_gemma_speed(args.device, args.dtype, canvas=args.diffusion_canvas, batches=(1, 8),
                                         prompts=8, rounds=args.rounds))


if __name__ == "__main__":
    main()
