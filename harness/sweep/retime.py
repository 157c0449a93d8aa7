"""Re-timing a finished sweep in interleaved passes, so its speed-ups and crossovers come with an interval.

Why: a point's own tokens/s is one timed stretch on a shared machine, whose load can halve the speed for seconds at
a time; one pass per point cannot tell a setting that is faster from one that ran at a quieter moment. So once every
point has generated (accuracy and tokens come from that one generation, as for any run), the sweep decodes the first
few stored prompts of every point again, ``repeats`` times, round-robin over the points: every pass visits every
point once, forwards on even passes and backwards on odd ones, so a drift of the load reaches early and late points
alike and each point's passes are spread over the whole re-timing. The frontier (reports.frontier.noise) compares
two points pass by pass (ratios of tokens/s timed in the same pass, seconds apart) and takes the median with a
distribution-free interval.

Each pass times exactly as a run does (harness.run.generation.generate_timed: wall seconds of the decoder call,
device synchronised, tokenisation outside; with rows in flight, the stream's wall seconds), and counts the same
tokens (generated until EOS). The gate's fixed
reference decoder (harness.gate.retiming) is not needed here: points are compared with each other within a pass,
which cancels the load the way the gate's reference chunks do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.run.generation import generate_streamed, generate_timed, same_canvas_batches, seed_everything
from harness.run.ranks import DistContext
from harness.run.schedule import CONTINUOUS
from harness.run.runner import Runner, RunSettings
from harness.sweep.plan import PassTimes, Point, SweepPlan, SweepTiming, load_timing
from models.base import GenerationRequest, ModelAdapter
from models.registry import spec_for
from tasks.registry import make_task


@dataclass(frozen=True)
class TimedJob:
    """One task of one point, ready to decode: the point's config and its prompts in batches of its batch size,
    or, with rows in flight (``rows``), in one stream of at most that many rows."""

    task: str
    config: Any
    batches: tuple[tuple[GenerationRequest, ...], ...]
    rows: int | None = None


@dataclass(frozen=True)
class TimedPoint:
    name: str
    adapter: ModelAdapter
    jobs: tuple[TimedJob, ...]


def interleaved_rounds(names: Sequence[str], repeats: int) -> tuple[tuple[str, ...], ...]:
    """The visiting order of every pass: all points once per pass, forwards on even passes, backwards on odd."""
    return tuple(tuple(names if r % 2 == 0 else reversed(names)) for r in range(repeats))


def timing_prompts(requested: int, batch_sizes: Sequence[int]) -> int:
    """Prompts per task and pass: at least ``requested`` and the largest batch size, rounded up to a multiple of
    it, so the largest batch is full and every batch size decodes the same prompts."""
    largest = max(batch_sizes)
    return largest * math.ceil(max(requested, largest) / largest)


def prepare_point(point: Point, runner: Runner, tasks: Sequence[Any], data: dict[str, Any],
                  prompts: int) -> TimedPoint:
    """The point's config per task (planned exactly as its run was) and its first ``prompts`` requests, batched."""
    spec = spec_for(point.model)
    adapter = runner.adapter(spec)
    jobs = []
    for task in tasks:
        job = runner.plan_job(spec, adapter, task, data[task.name])
        requests = [p.request for p in job.planned[:prompts]]
        if runner.settings.schedule == CONTINUOUS and adapter.decoder.stream is not None:  # timed as the run was
            jobs.append(TimedJob(task.name, job.config, (tuple(requests),), rows=point.batch_size))
            continue
        batches = tuple(tuple(requests[i] for i in b) for b in same_canvas_batches(requests, point.batch_size))
        jobs.append(TimedJob(task.name, job.config, batches))
    return TimedPoint(point.name, adapter, tuple(jobs))


def time_point(point: TimedPoint, seed: int) -> dict[str, tuple[int, float]]:
    """One pass over a point: per task, tokens generated (until EOS) and wall seconds inside the decoder calls."""
    seed_everything(seed)  # sampled decoders draw the same tokens in every pass
    out = {}
    for job in point.jobs:
        tokens, seconds = 0, 0.0
        for batch in job.batches:
            if job.rows is None:
                _, generations, batch_seconds, _ = generate_timed(point.adapter, job.config, batch)
            else:
                generations, batch_seconds = generate_streamed(point.adapter, job.config, batch, job.rows)
            tokens += sum(g.gen_tokens for g in generations)
            seconds += batch_seconds
        out[job.task] = (tokens, seconds)
    return out


def retime(points: Sequence[TimedPoint], repeats: int, seed: int, prompts: int) -> SweepTiming:
    """An untimed warm-up pass (weights, caches), then ``repeats`` interleaved passes over every point."""
    for point in points:
        time_point(point, seed)
    by_name = {p.name: p for p in points}
    order = interleaved_rounds([p.name for p in points], repeats)
    passes: PassTimes = {p.name: {j.task: [] for j in p.jobs} for p in points}
    for number, visit in enumerate(order, start=1):
        print(f"sweep: timing pass {number}/{repeats}")
        for name in visit:
            for task, measured in time_point(by_name[name], seed).items():
                passes[name][task].append(measured)
    return SweepTiming(repeats, prompts, order, passes)


def timing_is_current(root: Path, plan: SweepPlan, repeats: int, prompts: int) -> bool:
    """Whether the sweep folder already holds these passes for exactly these points (a resumed sweep that ran
    nothing new keeps them; any other change re-times every point, since passes are only comparable together)."""
    try:
        timing = load_timing(root)
    except (ValueError, KeyError, TypeError):
        return False
    names = {p.name for p in plan.points}
    return (timing is not None and timing.repeats == repeats and timing.prompts == prompts
            and set(timing.passes) == names
            and all(len(v) == repeats for tasks in timing.passes.values() for v in tasks.values()))


def retime_sweep(plan: SweepPlan, base: RunSettings, runner_for: Callable[[Point], Runner], dist_ctx: DistContext,
                 repeats: int, requested_prompts: int, reuse: bool) -> Path | None:
    """Re-time every point of a finished sweep and write ``sweep_timing.json`` (kept when ``reuse`` and current);
    ``runner_for(point)`` is the point's runner. One process only: ranks would time each other's contention."""
    if repeats < 2:
        return None
    if dist_ctx.active:
        if dist_ctx.is_main:
            print("sweep: timing passes skipped: they need one process (the frontier's speed-ups get no interval)")
        return None
    prompts = timing_prompts(requested_prompts, sorted({p.batch_size for p in plan.points}))
    if reuse and timing_is_current(plan.root, plan, repeats, prompts):
        return plan.folder.timing_path
    tasks = [make_task(name) for name in base.tasks]
    probe = runner_for(plan.points[0])
    data = {task.name: probe.load_data(task) for task in tasks}
    points = [prepare_point(p, runner_for(p), tasks, data, prompts) for p in plan.points]
    print(f"sweep: timing {len(points)} points in {repeats} interleaved passes ({prompts} prompts per task each)")
    return retime(points, repeats, base.seed, prompts).write(plan.root)
