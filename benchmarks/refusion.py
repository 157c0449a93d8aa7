"""ReFusion speed, side by side in one run (interleaved rounds, medians with min-max spread, one torch thread on CPU).

Networks: the tiny-refusion checkpoint (models/tiny.py), loaded natively and through transformers, wrapped so the
acceptance rate is known (benchmarks/common/regimes.py: every slot accepted, 90% of tokens, or none: the worst case).

Sections:
  1. project decoder on the native network vs the same decoder on transformers' network vs the published decoder on its
     own network class (``--reference PATH`` to a checkout of it, run by ``--reference-python`` in an environment it
     imports in, through benchmarks/reference/refusion_worker.py; the row is skipped, with the reason, when absent or
     not importable; ``python -m benchmarks refusion_reference`` runs this section alone), with the project decoder's
     time inside its native network's forwards over the published decoder's wall time beside the ratio: the floor
     that no cut in the decoder's own work goes below;
  2. time per generated token and per forward at each canvas for the three acceptance regimes, batch 1: ReFusion
     with the serial block size held fixed (``--serial-block``, default 128: a longer canvas adds serial blocks, as
     the paper's settings do, 512 tokens in 4 to 64 of them) beside the AR decoder (models/decoders/ar.py) on
     transformers' Qwen3ForCausalLM from the same checkpoint in the same regime wrapper, in the same interleaved
     rounds, each decoder's time per forward also split into its network's calls and its own work; then ReFusion in
     two serial blocks at every canvas (a longer canvas means larger blocks);
  3. tokens/s at several batch sizes: the same prompts (of different lengths, 90% acceptance) decoded with that
     many rows in flight (continuous batching: a prompt starts in the row of the first to finish);
  4. (not run by default) where section 3's time goes, by torch.profiler: forwards, tokens fed (pads included),
     time in the attention kernel and in matrix products, against the time of every op, at each batch size; then
     one forward of a batch-1 forward's width timed alone (no profiler) at each batch size: the gain batching the
     network itself gives, the ceiling of section 3's, with section 3's batch-8 speed-up as a fraction of it, split
     into four factors that multiply back to it (rows a forward, the batch-1 forward mix, the batch-8 forward, the
     decoder's own work); then one batch-8 forward of the decode beside one of the ceiling's, op by op, to show where
     the difference goes.

The targets close the run: each ratio against its bound, PASS or FAIL, or why it was not measured. Section 1 lives
in benchmarks/reference/refusion_wall.py, 2 in benchmarks/refusion_canvas.py, 3 and 4 in benchmarks/refusion_batch.py.

    python -m benchmarks refusion [--canvas 128 256 512 1024] [--serial-block 128] [--batches 1 4 8 16] [--rounds 3]
                                  [--sections 2 3 4]
    python -m benchmarks refusion_reference --reference PATH [--reference-python PY] [--reference-canvas 512 1024]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common.regimes import REGIMES
from benchmarks.common.verdict import Report
from benchmarks.reference import NEEDS
from benchmarks.reference.refusion_wall import section_reference
from benchmarks.refusion_batch import CEILING_SHARE, section_batch, section_profile
from benchmarks.refusion_canvas import section_canvas

TARGETS = {"wall vs published (all canvases)": 0.7, "per-token 1024/128 at 90%": 1.3, "batch 8 / batch 1 tokens/s": 2.5}
FORWARD_GROWTH = 1.1  # ReFusion's time per forward (fixed serial blocks), largest canvas over smallest, over AR's


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--canvas", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--serial-block", type=int, default=128,
                        help="section 2's fixed serial block size in tokens (a multiple of the slot size, 8)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--batch-canvas", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", default=None, help="path to a checkout of the published ReFusion code")
    parser.add_argument("--reference-canvas", type=int, nargs="+", default=[128, 512, 1024],
                        help="canvases of section 1")
    parser.add_argument("--reference-regimes", nargs="+", default=["90%", "all", "random"], choices=REGIMES,
                        help="acceptance regimes of section 1")
    parser.add_argument("--reference-python", default=None,
                        help="the Python of an environment the checkout imports in (default: this one)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3],
                        help="which sections to run (1: against the published decoder; 4: a profile of section 3)")
    parser.add_argument("--reference-only", action="store_true",
                        help="without --reference, say what the comparison needs and stop (refusion_reference)")


def run(args: argparse.Namespace, report: Report) -> None:
    if args.serial_block < 8 or args.serial_block % 8:
        raise ValueError(f"--serial-block must be a positive multiple of the slot size 8, got {args.serial_block}")
    if args.reference_only and not args.reference:
        report.info("wall vs published", None, f"refusion_reference not run: {NEEDS}")
        return
    torch.set_num_threads(args.threads)
    print(f"# ReFusion benchmark: tiny-refusion, {args.dtype}, {args.device}, {args.threads} thread(s), "
          f"{args.rounds} rounds")
    with torch.no_grad():
        reference = section_reference(args) if 1 in args.sections else {}
        canvas = section_canvas(args) if 2 in args.sections else {}
        batch = section_batch(args) if 3 in args.sections else None
        ceiling = section_profile(args, batch) if 4 in args.sections else None
    print("\n## targets")
    for name, value, op, bound, why in targets(args, reference, canvas, batch, ceiling):
        if value is None:
            report.info(name, None, f"  {name:40s} {why}")
        else:
            ok = report.check(name, value, op, bound)
            print(f"  {name:40s} {value:6.2f} (target {op} {bound})  {'PASS' if ok else 'FAIL'}")
    for regime in args.reference_regimes:
        if f"{regime} 512+ network" in reference:
            print(f"  {f'(wall, {regime}: network forwards alone)':40s} {reference[f'{regime} 512+ network']:6.2f}")
    if batch is not None:
        print(f"  {'(its network forwards alone)':40s} {batch.network_speedup(8):6.2f}")
    if ceiling is not None:
        print(f"  {'(one forward alone, batch 8)':40s} {ceiling:6.2f}")


Target = tuple[str, "float | None", str, float, str]  # (name, value, ">=" or "<=", bound, why not measured)


def targets(args: argparse.Namespace, reference: dict, canvas: dict, batch, ceiling: float | None) -> list[Target]:
    """Every target of the sections asked for, measured or with the reason it was not."""
    lo, hi = min(args.canvas), max(args.canvas)
    fixed = [c for c in args.canvas if c % args.serial_block == 0]
    growth = f"{max(fixed)}/{min(fixed)}" if len(fixed) >= 2 else f"{hi}/{lo}"
    has_1_8 = 1 in args.batches and 8 in args.batches
    wall_why = ("not measured (run --sections 1 with --reference)" if 1 not in args.sections else
                f"not measured: {NEEDS}" if not args.reference else "not measured (the published decoder did not run)")
    found: list[Target] = []
    if 1 in args.sections:
        found += [("wall vs published, 90% (all canvases)", reference.get("90% all canvases"), "<=",
                   TARGETS["wall vs published (all canvases)"], wall_why),
                  *((f"wall vs published, {regime} (512 and up)", reference.get(f"{regime} 512+"), "<=",
                     TARGETS["wall vs published (all canvases)"], wall_why) for regime in args.reference_regimes)]
    if 2 in args.sections:
        found.append((f"per-token {hi}/{lo} at 90% (two blocks)", canvas.get("two blocks 90%"), "<=",
                      TARGETS["per-token 1024/128 at 90%"], "not measured (run --sections 2)"))
        found += [(f"per-forward {growth} over AR's, {regime}", canvas.get(f"fixed {regime}"), "<=", FORWARD_GROWTH,
                   f"not measured (needs two canvases that are multiples of --serial-block {args.serial_block})")
                  for regime in REGIMES]
    batch_why = "not measured (needs --batches with 1 and 8)" if not has_1_8 else "not measured (run --sections 3)"
    speedup = batch.speedup(8) if batch is not None else None
    if 3 in args.sections:
        found.append(("batch 8 / batch 1 tokens/s", speedup, ">=", TARGETS["batch 8 / batch 1 tokens/s"], batch_why))
    if 4 in args.sections:
        share = speedup / ceiling if speedup is not None and ceiling is not None else None
        found.append(("batch 8 / one-forward ceiling", share, ">=", CEILING_SHARE,
                      batch_why if not has_1_8 else "not measured (run --sections 3 4)"))
    return found
