"""Section 1 of the ``refusion`` benchmark (run alone as ``refusion_reference``): the project's ReFusion decoder on
its native and its transformers network against the published decoder on its own network class, same cases, wall
time in interleaved rounds. The published decoder runs in its own environment (``refusion_published``); without a
checkout its row says in one line what it needs (benchmarks/reference/__init__.py)."""

from __future__ import annotations

import statistics
import sys
from typing import Callable

import torch

from benchmarks.common.networks import refusion_checkpoint
from benchmarks.common.regimes import NO_EOS, make_prompts
from benchmarks.common.timing import round_order, seconds_cell
from benchmarks.reference import NEEDS
from benchmarks.reference.refusion_published import PublishedUnavailable, PublishedWorker
from harness.timing.clock import timed
from harness.timing.forward_timer import ForwardTimer
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row
from models.tiny import materialize


def start_published(args, prompts: int) -> tuple[PublishedWorker | None, str]:
    """The published decoder's worker, or (None, why not)."""
    if not args.reference:
        return None, f"no --reference given: {NEEDS}"
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
    native, hf, mask_id = refusion_checkpoint(regime, 4096, args.device, args.dtype)

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
    for r in range(args.rounds):
        for c in canvases:
            for name in round_order(list(rows), r):
                seconds, out = rows[name](c)
                times[name, c].append(seconds)
                if out != tokens[name, c]:
                    raise RuntimeError(f"{name}: tokens changed between rounds at canvas {c}")
    print(f"\n## 1. same cases ({cases['prompts']} prompts, regime {regime}, {cases['serial_num_blocks']} serial "
          "blocks), wall time per round, by canvas")
    for c in canvases:
        base = statistics.median(times["project, transformers network", c])
        for name in rows:
            same = tokens[name, c] == tokens["project, transformers network", c]
            print(f"  {c:5d} {name:30s} {seconds_cell(times[name, c])}  x{statistics.median(times[name, c]) / base:.2f}"
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
