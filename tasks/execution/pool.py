"""Run many programs in parallel.

Workers are threads that each hand one program to a supervisor forked from a shared template
process and wait on its pipes: the harness process itself is never forked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from tasks.execution.limits import SandboxLimits
from tasks.execution.result import ExecutionResult
from tasks.execution.execute import execute
from tasks.execution.zygote import Zygote


def default_workers() -> int:
    """One program per core the harness may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def run_programs(
    programs: Sequence[str],
    limits: SandboxLimits = SandboxLimits(),
    workers: int | None = None,
    progress: bool = False,
) -> list[ExecutionResult]:
    """Run every program in its own sandbox; results are in the order of `programs`."""
    if workers is None:
        workers = default_workers()
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer or None, got {workers!r}")
    if not programs:
        return []
    results: list[ExecutionResult | None] = [None] * len(programs)
    with Zygote() as zygote, ThreadPoolExecutor(max_workers=min(workers, len(programs))) as pool:
        futures = {pool.submit(execute, program, limits, zygote): i for i, program in enumerate(programs)}
        done = as_completed(futures)
        if progress:
            from tqdm import tqdm

            done = tqdm(done, total=len(futures), desc="sandbox", unit="prog")
        try:
            for future in done:
                results[futures[future]] = future.result()[0]
        except BaseException:
            pool.shutdown(cancel_futures=True)  # a broken sandbox stops the batch promptly
            raise
    return results  # type: ignore[return-value]
