"""Decoding sweeps: the Cartesian product of option grids, each point a normal resumable run.

A point is one model with one value for each of its gridded options, at one batch size; it runs into
``<sweep>/<point name>/`` exactly as ``run_eval.py --models MODEL --model-arg ...`` would. Points of one batch size
share one resume store (``<sweep>/store/batch_size=N/``): the store is keyed by content, so two points whose
configurations are equal after resolution generate once. Batch sizes get separate stores because a generation's
timing depends on the batch it ran in, and a batch-size curve needs every batch size measured.

Every point is planned (options checked, configs resolved, sample keys computed) before any point runs, so a bad
option or value fails in one line before anything is generated.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from harness.errors import UsageError
from harness.run.ranks import DistContext
from harness.run.folder import RunFolder, RunLoadError
from harness.run.runner import Runner, RunSettings
from harness.sweep.plan import BATCH, DEFAULT_PROMPTS, DEFAULT_REPEATS, Axis, Point, SweepFolder, SweepPlan
from harness.sweep.retime import retime_sweep
from models.base import ModelAdapter
from models.decoders.contract import ConfigError
from models.options import coerce, leaves, set_options
from models.registry import ModelSpec, adapter_class, spec_for
from tasks.registry import make_task

CANVAS_OPTION = "gen_length"  # a per-model canvas, as presets set it; not a config field


@dataclass(frozen=True)
class SweepSpec:
    """What the user asked for: grids, and per model the reference's options (batch size under model None)."""

    axes: tuple[Axis, ...]
    reference: dict[str | None, dict[str, str]]
    alpha: float = 0.05
    repeats: int = DEFAULT_REPEATS  # interleaved timing passes over every point (1: none, the runs' own figures)
    timing_prompts: int = DEFAULT_PROMPTS

    def __post_init__(self) -> None:
        for flag, value in (("--repeats", self.repeats), ("--timing-prompts", self.timing_prompts)):
            if value < 1:
                raise UsageError(f"{flag} must be at least 1, got {value}")


# --- parsing ------------------------------------------------------------------------------------------------------

def _target(text: str, models: Sequence[str], flag: str) -> tuple[str | None, str]:
    """``MODEL.OPTION`` or a bare ``OPTION`` (every model) or ``batch_size``."""
    model, dot, option = text.rpartition(".")
    if not dot:
        return None, text
    if model not in models:
        raise UsageError(f"{flag} {text!r} names model {model!r}, which is not in --models ({', '.join(models)})")
    if option == BATCH:
        raise UsageError(f"{flag} {text!r}: the batch size belongs to the whole point; write {BATCH}=...")
    return model, option


def check_values(model: str, option: str, values: Sequence[str], flag: str) -> None:
    """Each value typed and checked exactly as ``--model-arg`` would be (models.options), against the model's
    config before any weights or tokenizer load; the canvas is typed as the runner types a preset's."""
    kind = adapter_class(spec_for(model).kind)
    config = kind.base_config()
    valid = sorted(name for name, leaf in leaves(config).items() if leaf.settable)
    if option != CANVAS_OPTION and option not in valid:
        raise UsageError(f"{flag}: {model}: unknown option {option}; valid options: {', '.join(valid)} "
                         f"(or {CANVAS_OPTION}, or {BATCH})")
    try:
        for value in values:
            if option == CANVAS_OPTION:
                coerce(model, option, value, int | None)
            else:
                set_options(config, {option: value}, model)
    except ConfigError as error:
        raise UsageError(f"{flag}: {error}") from None


def _batch_value(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text:
        raise UsageError(f"{flag}: {BATCH} must be a whole number of at least 1, got {text!r}")
    return value


def parse_grids(items: Sequence[str], models: Sequence[str]) -> tuple[Axis, ...]:
    """``--grid`` items; a bare option becomes one axis per model, ``batch_size`` one axis for all."""
    axes: list[Axis] = []
    for item in items:
        target, sep, values_text = item.partition("=")
        values = tuple(v.strip() for v in values_text.split(","))
        if not sep or not target or not all(values):
            raise UsageError(f"--grid {item!r} is not MODEL.OPTION=V1,V2,... (e.g. tiny-refusion.slot_size=4,8, "
                             f"or {BATCH}=1,4,16)")
        if len(set(values)) < len(values):
            raise UsageError(f"--grid {item!r} lists a value twice")
        model, option = _target(target.strip(), models, "--grid")
        if option == BATCH and model is None:
            for v in values:
                _batch_value(v, "--grid")
            new = [Axis(None, BATCH, values)]
        else:
            for m in [model] if model else models:
                check_values(m, option, values, "--grid")
            new = [Axis(m, option, values) for m in ([model] if model else models)]
        for axis in new:
            if any(a.model == axis.model and a.option == axis.option for a in axes):
                where = f"{axis.model}.{axis.option}" if axis.model else axis.option
                raise UsageError(f"--grid sets {where} twice; give all its values in one --grid")
            axes.append(axis)
    return tuple(axes)


def parse_reference(items: Sequence[str], models: Sequence[str]) -> dict[str | None, dict[str, str]]:
    """``--reference`` items, comma-separated ``MODEL.OPTION=VALUE`` (bare: every model) and ``batch_size=N``."""
    out: dict[str | None, dict[str, str]] = {}
    for item in (part.strip() for text in items for part in text.split(",")):
        target, sep, value = item.partition("=")
        if not sep or not target or not value:
            raise UsageError(f"--reference {item!r} is not MODEL.OPTION=VALUE (or {BATCH}=N)")
        model, option = _target(target.strip(), models, "--reference")
        if option == BATCH:
            out.setdefault(None, {})[BATCH] = str(_batch_value(value.strip(), "--reference"))
            continue
        for m in [model] if model else models:
            check_values(m, option, [value.strip()], "--reference")
            out.setdefault(m, {})[option] = value.strip()
    return out


# --- planning -----------------------------------------------------------------------------------------------------

class SweepRunner(Runner):
    """A runner whose adapters come from a cache shared by every point, so weights load once per sweep."""

    def __init__(self, settings: RunSettings, dist_ctx: DistContext, adapters: dict[str, ModelAdapter]):
        super().__init__(settings, dist_ctx)
        self.adapters = adapters

    def adapter(self, spec: ModelSpec) -> ModelAdapter:
        if spec.name not in self.adapters:
            self.adapters[spec.name] = super().adapter(spec)  # with the run's LoRA, as a run loads it
        return self.adapters[spec.name]


def batch_sizes(spec: SweepSpec, base: RunSettings) -> tuple[int, ...]:
    axis = next((a for a in spec.axes if a.option == BATCH), None)
    return tuple(int(v) for v in axis.values) if axis else (base.batch_size,)


def reference_batch(spec: SweepSpec, base: RunSettings) -> int:
    """The reference's batch size: as given; else the run's --batch-size when measured; else the grid's first."""
    sizes = batch_sizes(spec, base)
    given = spec.reference.get(None, {}).get(BATCH)
    if given is not None:
        if int(given) not in sizes:
            raise UsageError(f"--reference {BATCH}={given} is not a measured batch size ({', '.join(map(str, sizes))})")
        return int(given)
    return base.batch_size if base.batch_size in sizes else sizes[0]


def point_settings(point: Point, base: RunSettings, root: Path) -> RunSettings:
    """The run of one point: its model alone, its options (text, as --model-arg gives them) over the run's
    --model-arg, its batch size's shared store."""
    model_args = {point.model: {**base.model_args.get(point.model, {}), **point.overrides}}
    folder = SweepFolder(root).point(point)
    return dataclasses.replace(base, models=(point.model,), output=folder.root, batch_size=point.batch_size,
                               model_args=model_args, store_dir=folder.store_dir)


def plan_sweep(spec: SweepSpec, base: RunSettings, root: Path, dist_ctx: DistContext,
               adapters: dict[str, ModelAdapter]) -> SweepPlan:
    """Every point, each planned through the runner (options and values checked, sample keys computed), and each
    model's reference point: the grid point whose samples are the reference's, else an extra set of points."""
    probe = SweepRunner(base, dist_ctx, adapters)
    tasks = [make_task(name) for name in base.tasks]
    data = {task.name: probe.load_data(task) for task in tasks}
    sizes, ref_batch = batch_sizes(spec, base), reference_batch(spec, base)
    points: list[Point] = []
    references: dict[str, str] = {}
    for model in base.models:
        for option in spec.reference.get(model, {}):
            if option in base.model_args.get(model, {}):
                raise UsageError(f"--reference {model}.{option} is also set by --model-arg; drop one")
        axes = [a for a in spec.axes if a.model == model]
        for axis in axes:
            if axis.option in base.model_args.get(model, {}):
                raise UsageError(f"--grid {model}.{axis.option} is also set by --model-arg; drop one")
        option_sets = [tuple(zip([a.option for a in axes], combo)) for combo in
                       itertools.product(*[a.values for a in axes])]

        spec_m = spec_for(model)
        adapter = probe.adapter(spec_m)  # shared through the cache; its weights load on the first decode

        def keys(options: tuple[tuple[str, str], ...]) -> tuple[tuple[str, ...], ...]:
            try:
                runner = SweepRunner(point_settings(Point(model, options, sizes[0]), base, root), dist_ctx, adapters)
                jobs = [runner.plan_job(spec_m, adapter, task, data[task.name]) for task in tasks]
            except ConfigError as error:  # a combination the decoder cannot run, at the task's canvas
                spelled = ", ".join(f"{k}={v}" for k, v in options) or "its defaults"
                first = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise UsageError(f"{model} with {spelled}: {first} (fix that --grid or --reference value)") from None
            return tuple(tuple(p.key for p in job.planned) for job in jobs)

        fingerprints = [keys(options) for options in option_sets]
        ref_options = tuple(spec.reference.get(model, {}).items())
        ref_keys = keys(ref_options)
        if ref_keys in fingerprints:
            ref_options = option_sets[fingerprints.index(ref_keys)]
        else:
            option_sets.append(ref_options)
        points.extend(Point(model, options, size) for options in option_sets for size in sizes)
        references[model] = Point(model, ref_options, ref_batch).name
    names = [p.name for p in points]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash:
        raise UsageError(f"two points would share the folder {clash}; spell the grid values differently")
    return SweepPlan(root, base.models, base.tasks, tuple(points), references, spec.alpha)


# --- running ------------------------------------------------------------------------------------------------------

def _canonical(settings: RunSettings) -> str:
    recorded = {k: v for k, v in dataclasses.asdict(settings).items() if k != "progress"}
    return json.dumps(json.loads(json.dumps(recorded, default=str)), sort_keys=True)


def is_complete(settings: RunSettings) -> bool:
    """A point already finished with these very settings: every planned sample scored."""
    try:
        stored = RunFolder(settings.output).read_results()
        recorded = json.dumps(stored.manifest["settings"], sort_keys=True)
        full = all(r.n_samples == r.manifest["n_planned"] for r in stored.results)
    except (RunLoadError, KeyError, TypeError):
        return False
    return full and recorded == _canonical(settings) and len(stored.results) == len(settings.tasks)


def run_sweep(spec: SweepSpec, base: RunSettings, root: Path, dist_ctx: DistContext = DistContext(),
              wait_for_ranks: Callable[[], None] = lambda: None) -> SweepPlan:
    """Plan every point, write the plan, run the points not finished yet, in order (each waits for every rank
    before scoring, as a run does), then re-time every point in interleaved passes (kept when nothing ran)."""
    adapters: dict[str, ModelAdapter] = {}
    plan = plan_sweep(spec, base, root, dist_ctx, adapters)
    if dist_ctx.is_main:
        plan.write()
    todo = [p for p in plan.points if not is_complete(point_settings(p, base, root))]
    if dist_ctx.is_main:
        print(f"sweep: {len(plan.points)} points, {len(plan.points) - len(todo)} already finished")
    for index, point in enumerate(todo, start=1):
        if dist_ctx.is_main:
            print(f"sweep: point {index}/{len(todo)}: {point.name}")
        SweepRunner(point_settings(point, base, root), dist_ctx, adapters).run(wait_for_ranks)
    retime_sweep(plan, base, lambda p: SweepRunner(point_settings(p, base, root), dist_ctx, adapters), dist_ctx,
                 spec.repeats, spec.timing_prompts, reuse=not todo)
    return plan
