"""Section 2 of the ``refusion`` benchmark: time per generated token and per forward by canvas, ReFusion beside the
AR decoder on the same checkpoint in the same acceptance regime."""

from __future__ import annotations

import statistics
from typing import Callable

import torch

from benchmarks.common.networks import refusion_checkpoint
from benchmarks.common.regimes import NO_EOS, REGIMES, make_prompts
from benchmarks.common.timing import Spread, round_order
from harness.timing.clock import timed
from harness.timing.forward_timer import ForwardTimer
from models.decoders.ar import ARConfig, ar_generate
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row
from models.networks.hf_causal import TransformersCausalLM

ROWS = ("refusion", "ar")  # section 2's fixed-block table: ReFusion and the AR decoder, alternated within a round


def fixed_block_config(canvas: int, args, mask_id: int) -> RefusionConfig | None:
    """ReFusion at ``canvas`` in serial blocks of ``--serial-block`` tokens, or None where the canvas does not split
    into whole blocks."""
    if canvas % args.serial_block:
        return None
    return RefusionConfig(gen_length=canvas, slot_size=8, serial_num_blocks=canvas // args.serial_block,
                          mask_id=mask_id, eos_id=NO_EOS)


def cell(times: list[float], digits: int = 3) -> str:
    return Spread.of(times).cell(3, 9, digits)


def section_canvas(args) -> dict[str, float | None]:
    """Batch 1, one prompt, each regime: ReFusion with the serial block size held fixed (a longer canvas adds serial
    blocks) and the AR decoder on transformers' network from the same checkpoint, in the same regime wrapper, at the
    same canvases; then ReFusion in two serial blocks at every canvas (a longer canvas means larger blocks). Every
    decode of a regime is timed in the same interleaved rounds (canvases and decoders alternate; the order of the
    decoders flips every other round). Forwards are counted on the warm-up decode (greedy decodes: the same every
    round). Returns the ratios the targets read: time per forward at the largest canvas over the smallest, ReFusion's
    (fixed blocks) over AR's, by regime; and the two-block per-token growth at 90%."""
    device = torch.device(args.device)
    lo, hi = min(args.canvas), max(args.canvas)
    fixed = [c for c in args.canvas if c % args.serial_block == 0]
    ratios: dict[str, float | None] = {}
    tables: dict[str, dict[tuple[str, int], tuple[int, list[float]]]] = {}
    decoder_own: dict[str, dict[tuple[str, int], float]] = {}  # time outside network forwards per forward
    prompt = make_prompts(1, args.device)[0][None]
    ones = torch.ones_like(prompt)
    for regime in REGIMES:  # rejections repeat every serial block: each block has the same mix of forwards
        native, hf, mask_id = refusion_checkpoint(regime, 4096, args.device, args.dtype, period=args.serial_block)
        runs: dict[tuple[str, int], tuple[torch.nn.Module, Callable[[], list[int]]]] = {}
        for c in args.canvas:
            two = RefusionConfig(gen_length=c, slot_size=8, serial_num_blocks=2, mask_id=mask_id, eos_id=NO_EOS)
            runs["two blocks", c] = native, lambda cfg=two: refusion_decode_row(native, prompt, cfg).token_ids
            cfg = fixed_block_config(c, args, mask_id)
            if cfg is None:
                continue
            runs["refusion", c] = native, lambda cfg=cfg: refusion_decode_row(native, prompt, cfg).token_ids
            ar_cfg = ARConfig(max_new_tokens=c, eos_ids=(NO_EOS,), pad_id=0)
            runs["ar", c] = hf, lambda cfg=ar_cfg: ar_generate(TransformersCausalLM(hf), prompt, ones,
                                                                cfg).rows[0].token_ids
        forwards = {}
        for (row, c), (network, decode) in runs.items():  # warm-up, counting the network's calls
            with ForwardTimer(network.inner, device) as counter:
                filled = len(decode())
            if filled != c:
                raise RuntimeError(f"section 2, {regime}, {row}: {filled} tokens at canvas {c} (NO_EOS fills it)")
            forwards[row, c] = counter.calls
        times: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
        outside: dict[tuple[str, int], list[float]] = {key: [] for key in runs}  # the decoder's own time
        for r in range(args.rounds):
            order = round_order(ROWS + ("two blocks",), r)
            for c in args.canvas:
                for row in order:
                    if (row, c) in runs:
                        network, decode = runs[row, c]
                        with ForwardTimer(network, device) as inside:  # the wrapper counts as network
                            seconds = timed(device, decode)[1]
                        times[row, c].append(seconds)
                        outside[row, c].append(seconds - inside.seconds())
        tables[regime] = {key: (forwards[key], times[key]) for key in runs}
        decoder_own[regime] = {key: statistics.median(t) / forwards[key] for key, t in outside.items()}
        per_forward = {key: statistics.median(t) / forwards[key] for key, t in times.items()}
        if len(fixed) >= 2:
            growth = {row: per_forward[row, max(fixed)] / per_forward[row, min(fixed)] for row in ROWS}
            ratios[f"fixed {regime}"] = growth["refusion"] / growth["ar"]
        else:
            ratios[f"fixed {regime}"] = None
        if regime == "90%":
            ratios["two blocks 90%"] = statistics.median(times["two blocks", hi]) / hi / (
                statistics.median(times["two blocks", lo]) / lo)

    print(f"\n## 2. time per generated token and per forward (ms), batch 1, one prompt of {prompt.shape[1]} ids, "
          f"medians [min-max] of {args.rounds} interleaved rounds")
    print(f"   ReFusion in serial blocks of {args.serial_block} tokens (slots of 8): a longer canvas adds serial "
          "blocks (the paper's settings: 512 tokens in 4 to 64)")
    print("   on the native network; AR = models.decoders.ar.ar_generate (greedy, KV cache, one forward per token) on "
          "transformers' Qwen3ForCausalLM")
    print("   built from the same tiny-refusion checkpoint, in the same regime wrapper (benchmarks/common/regimes.py), "
          "so the logits cost alike;")
    print(f"   the 90% regime's seeded rejections repeat every {args.serial_block} positions, so every serial block "
          "has the same mix of forwards")
    if len(fixed) < len(args.canvas):
        print(f"   canvases {', '.join(str(c) for c in args.canvas if c not in fixed)}: not a multiple of "
              f"--serial-block {args.serial_block}, only in the two-block table")
    print(f"  {'regime':8s} {'decoder':9s} {'canvas':>6s} {'blocks':>6s} {'forwards':>8s}"
          f" {'ms/token [min-max]':>26s} {'ms/forward [min-max]':>26s}")
    for regime, table in tables.items():
        for row in ROWS:
            for c in fixed:
                calls, t = table[row, c]
                blocks = f"{c // args.serial_block:6d}" if row == "refusion" else f"{'-':>6s}"
                print(f"  {regime:8s} {row:9s} {c:6d} {blocks} {calls:8d} {cell([s / c * 1e3 for s in t]):>26s}"
                      f" {cell([s / calls * 1e3 for s in t]):>26s}")
        if len(fixed) >= 2:
            a, b = min(fixed), max(fixed)
            growth = {row: statistics.median(table[row, b][1]) / table[row, b][0]
                      / (statistics.median(table[row, a][1]) / table[row, a][0]) for row in ROWS}
            print(f"  {regime:8s} time per forward {b}/{a}: ReFusion x{growth['refusion']:.2f}, "
                  f"AR x{growth['ar']:.2f}; ReFusion's growth / AR's = {ratios[f'fixed {regime}']:.2f}")
            own = decoder_own[regime]
            print(f"  {regime:8s} of it outside network forwards, ms per forward at {a} and {b}: ReFusion "
                  f"{own['refusion', a] * 1e3:.3f} and {own['refusion', b] * 1e3:.3f} "
                  f"(x{own['refusion', b] / own['refusion', a]:.2f}), AR {own['ar', a] * 1e3:.3f} and "
                  f"{own['ar', b] * 1e3:.3f} (x{own['ar', b] / own['ar', a]:.2f})")

    print("\n   the same with two serial blocks at every canvas (a longer canvas means larger blocks), ReFusion, "
          "native network: time per generated token (ms), then per forward")
    print("  regime    " + "".join(f"{c:>22d}" for c in args.canvas))
    for regime, table in tables.items():
        two = {c: table["two blocks", c] for c in args.canvas}
        print(f"  {regime:8s}" + "".join(cell([s / c * 1e3 for s in two[c][1]], 2) for c in args.canvas))
        print(f"  {'  /fwd':8s}" + "".join(cell([s / two[c][0] * 1e3 for s in two[c][1]], 2) for c in args.canvas))
        print(f"  {'  fwds':8s}" + "".join(f"{two[c][0]:9d}{'':12s}" for c in args.canvas))
    return ratios
