"""Sections 1 and 2 of benchmarks/refusion.py: wall time against the published decoder, and time per token and per
forward by canvas beside the AR decoder."""

from __future__ import annotations

import statistics
import sys
from typing import Callable

import torch

from harness.timing.clock import timed
from harness.timing.forward_timer import ForwardTimer
from models.decoders.ar import ARConfig, ar_generate
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row
from models.networks.hf_causal import TransformersCausalLM
from models.tiny import materialize
from refusion_cases import NO_EOS, REGIMES, make_prompts
from refusion_published import PublishedUnavailable, PublishedWorker
from refusion_setup import networks, summary


def start_published(args, prompts: int) -> tuple[PublishedWorker | None, str]:
    """The published decoder's worker, or (None, why not)."""
    if not args.reference:
        return None, "no --reference given"
    try:
        return PublishedWorker(args.reference_python or sys.executable, args.reference, materialize("tiny-refusion"),
                               prompts=prompts, device=args.device, dtype=args.dtype, threads=args.threads), ""
    except PublishedUnavailable as error:  # e.g. the checkout does not import here (it targets transformers 4.x)
        return None, str(error)


def section_reference(args) -> dict[str, float]:
    """Each regime of ``--reference-regimes`` and canvas: the three decoders on the same prompts, rounds interleaved.
    Returns, by regime, the project's (native network) wall time over the published decoder's, summed over the
    canvases of at least 512 (the issue's bar: mostly accepted and never confident, where the decoder's own work is
    largest), and over all canvases for 90%."""
    cases = {"prompts": 3, "slot_size": 8, "serial_num_blocks": 2}
    prompts = make_prompts(cases["prompts"], args.device)
    worker, why = start_published(args, cases["prompts"])
    ratios: dict[str, float] = {}
    for regime in args.reference_regimes:
        ratio = reference_regime(args, regime, prompts, cases, worker, why)
        ratios.update({f"{regime} {key}": value for key, value in ratio.items()})
    if worker is not None:
        worker.close()
    return ratios


def reference_regime(args, regime: str, prompts, cases: dict, worker: PublishedWorker | None,
                     why: str) -> dict[str, float]:
    native, hf, mask_id = networks(regime, 4096, args)

    device = torch.device(args.device)
    inside: dict[tuple[str, int], list[float]] = {}  # time in the network's forwards (the wrapper's included)

    def project(name: str, network, canvas: int) -> tuple[float, list[list[int]]]:
        cfg = RefusionConfig(gen_length=canvas, slot_size=cases["slot_size"],
                             serial_num_blocks=cases["serial_num_blocks"], mask_id=mask_id, eos_id=NO_EOS)
        with ForwardTimer(network, device) as forwards:
            tokens, seconds = timed(device, lambda: [refusion_decode_row(network, p[None], cfg).token_ids
                                                     for p in prompts])
        inside.setdefault((name, canvas), []).append(forwards.seconds())
        return seconds, tokens

    rows: dict[str, Callable[[int], tuple[float, list[list[int]]]]] = {
        "project, native network": lambda c: project("native", native, c),
        "project, transformers network": lambda c: project("transformers", hf, c),
    }
    if worker is not None:
        def published(canvas: int) -> tuple[float, list[list[int]]]:
            answer = worker.decode(canvas, regime, slot_size=cases["slot_size"],
                                   serial_num_blocks=cases["serial_num_blocks"])
            return answer.seconds, answer.tokens

        rows["published decoder"] = published
    canvases = args.reference_canvas
    tokens = {(name, c): fn(c)[1] for c in canvases for name, fn in rows.items()}  # warm-up; compared below
    times: dict[tuple[str, int], list[float]] = {key: [] for key in tokens}
    for _ in range(args.rounds):
        for c in canvases:
            for name, fn in rows.items():
                seconds, out = fn(c)
                times[name, c].append(seconds)
                if out != tokens[name, c]:
                    raise RuntimeError(f"{name}: tokens changed between rounds at canvas {c}")
    print(f"\n## 1. same cases ({cases['prompts']} prompts, regime {regime}, {cases['serial_num_blocks']} serial "
          "blocks), wall time per round, by canvas")
    for c in canvases:
        base = statistics.median(times["project, transformers network", c])
        for name in rows:
            same = tokens[name, c] == tokens["project, transformers network", c]
            print(f"  {c:5d} {name:30s} {summary(times[name, c])}  x{statistics.median(times[name, c]) / base:.2f}"
                  f" of transformers  tokens identical: {same}")
    if worker is None:
        print(f"        published decoder              skipped ({why})")
        return {}
    median = {key: statistics.median(t) for key, t in times.items()}
    network = {c: statistics.median(inside["native", c][1:]) for c in canvases}  # [0]: the warm-up
    for c in canvases:
        print(f"  canvas {c:5d}: project (native) / published = "
              f"{median['project, native network', c] / median['published decoder', c]:.2f}; its network forwards "
              f"alone / published = {network[c] / median['published decoder', c]:.2f} (no decoder work can go below)")

    def over(selected: list[int], project: Callable[[int], float]) -> float:
        return sum(project(c) for c in selected) / sum(median["published decoder", c] for c in selected)

    def wall(c: int) -> float:
        return median["project, native network", c]

    large = [c for c in canvases if c >= 512]
    return {"all canvases": over(canvases, wall),
            **({"512+": over(large, wall), "512+ network": over(large, network.__getitem__)} if large else {})}


ROWS = ("refusion", "ar")  # section 2's fixed-block table: ReFusion and the AR decoder, alternated within a round


def fixed_block_config(canvas: int, args, mask_id: int) -> RefusionConfig | None:
    """ReFusion at ``canvas`` in serial blocks of ``--serial-block`` tokens, or None where the canvas does not split
    into whole blocks."""
    if canvas % args.serial_block:
        return None
    return RefusionConfig(gen_length=canvas, slot_size=8, serial_num_blocks=canvas // args.serial_block,
                          mask_id=mask_id, eos_id=NO_EOS)


def cell(times: list[float], digits: int = 3) -> str:
    return f"{statistics.median(times):9.3f} [{min(times):.{digits}f}-{max(times):.{digits}f}]"


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
        native, hf, mask_id = networks(regime, 4096, args, period=args.serial_block)
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
            order = ROWS + ("two blocks",) if r % 2 == 0 else ("two blocks",) + ROWS[::-1]
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
    print("   built from the same tiny-refusion checkpoint, in the same regime wrapper (benchmarks/refusion_cases.py), "
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
