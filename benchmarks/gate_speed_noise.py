"""Does the gate's speed check survive this machine's noise, and does it still catch a real 2x slowdown?

One tiny run (tiny-qwen3, gsm8k fixtures, canvas 32) is re-timed with ``harness.gate.retiming`` (the measurement
``run_eval.py gate-speed`` writes) over and over, alternating two kinds of measurement:
  * normal: the run's own decoder;
  * slowed: the same adapter with its ``decode`` run twice per prompt (a real 2x slowdown of the timed work, planted
    here only).
Each normal measurement is gated against the previous normal one (an identical rerun: must pass), each slowed one
against the normal one before it (must fail), with the gate's own comparison (``harness.gate.checks.compared_speed``) and its
default tolerance. Beside the normalised change: tokens per CPU-second without the reference, and the passes' wall
time (what a plain timer would see), for contrast.

Targets (printed as PASS/FAIL): identical reruns pass ``--rounds`` times out of ``--rounds``; 2x slowdowns fail as
often.

    python -m benchmarks gate_speed_noise [--rounds 20] [--run RUN_FOLDER] [--passes 5] [--samples 2]
        [--identical-only]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common.table import Table, columns
from benchmarks.common.timing import Spread
from benchmarks.common.verdict import Report
from harness.gate.checks import GateSettings, compared_speed
from harness.gate.retiming import SpeedSettings, load_for_result, measure_run
from harness.run.folder import load_run
from harness.run.records import ResultEntry


def make_run(folder: Path, model: str) -> Path:
    from harness.run.runner import Runner, RunSettings

    Runner(RunSettings(models=(model,), tasks=("gsm8k",), output=folder, gen_length=32, device="cpu",
                       data="fixtures", progress=False)).run()
    return folder


class Adapters:
    """One loaded adapter per result, reused by every measurement; ``slowed`` doubles its decode while set."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] = {}
        self.slowed = False

    def __call__(self, result: ResultEntry, device: Any) -> Any:
        key = result.model
        if key not in self.loaded:
            self.loaded[key] = load_for_result(result, device)
        adapter = self.loaded[key]
        adapter.__dict__.pop("decode", None)
        if self.slowed:
            plain = adapter.decode

            def twice(batch: Any, plain: Any = plain) -> Any:
                plain(batch)
                return plain(batch)

            adapter.decode = twice
        return adapter


def change(base: dict[str, Any], cand: dict[str, Any], key: str) -> float:
    return cand[key] / base[key] - 1.0


def wall_change(base: dict[str, Any], cand: dict[str, Any]) -> float:
    """The change of the whole passes' wall time (prompts and reference chunks): what a plain timer would see."""
    return Spread.of(base["pass_wall_seconds"]).median / Spread.of(cand["pass_wall_seconds"]).median - 1.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--run", type=Path, help="a finished run folder (default: a fresh tiny run in a temp folder)")
    p.add_argument("--model", default="tiny-qwen3")
    p.add_argument("--passes", type=int, default=SpeedSettings.passes)
    p.add_argument("--samples", type=int, default=SpeedSettings.samples)
    p.add_argument("--tolerance", type=float, default=GateSettings.max_tps_drop)
    p.add_argument("--identical-only", action="store_true", help="no slowed measurements (half the time)")


def run(args: argparse.Namespace, report: Report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.run or make_run(Path(tmp) / "run", args.model)
        finished = load_run(folder)
        result = next(r for r in finished.results if r.model == args.model)
        settings = SpeedSettings(passes=args.passes, samples=args.samples, models=(args.model,), tasks=("gsm8k",))
        adapters = Adapters()

        def measured(slowed: bool) -> dict[str, Any]:
            adapters.slowed = slowed
            return measure_run(finished, settings, adapters)["results"][0]

        print(f"{args.model} · gsm8k, {args.samples} prompts, {args.passes} passes per measurement, "
              f"tolerance {100 * args.tolerance:g}% (gate fails below {100 * (1 - args.tolerance):g}% of baseline)")
        table = Table(columns(("round", 5), ("identical: norm", 16), ("cpu tok/s", 10), ("wall", 7), ("verdict", 8),
                              *((("2x slow: norm", 14), ("cpu tok/s", 10), ("wall", 7), ("verdict", 8))
                                if not args.identical_only else ())))
        table.print_header()
        previous = measured(False)
        same, slow = [], []
        for index in range(1, args.rounds + 1):
            slowed = None if args.identical_only else measured(True)
            current = measured(False)
            cells: list[object] = [index]
            for cand, bucket in ((current, same), (slowed, slow)):
                if cand is None:
                    continue
                speed = compared_speed(result, result, previous, cand)
                bucket.append(speed.change)
                cpu = change(previous, cand, "median_tokens_per_second")
                cells += [f"{100 * speed.change:+.1f}%", f"{100 * cpu:+.1f}%", f"{100 * wall_change(previous, cand):+.1f}%",
                          "FAIL" if speed.change < -args.tolerance else "pass"]
            table.print_row(*cells)
            previous = current
    passed = sum(c >= -args.tolerance for c in same)
    caught = sum(c < -args.tolerance for c in slow)
    report.add("identical reruns pass the gate", f"{len(same)}/{len(same)}", passed, passed == len(same),
               f"identical reruns: {Spread.of(same).scaled(100).words(1, '+', '%')}; {passed}/{len(same)} pass "
               f"[{'PASS' if passed == len(same) else 'FAIL'}]")
    if slow:
        report.add("2x slowdowns fail the gate", f"{len(slow)}/{len(slow)}", caught, caught == len(slow),
                   f"2x slowdowns:     {Spread.of(slow).scaled(100).words(1, '+', '%')}; {caught}/{len(slow)} fail "
                   f"the gate [{'PASS' if caught == len(slow) else 'FAIL'}]")
