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
import hashlib
import itertools
import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.cli import UsageError, parse_value
from harness.distributed import DistContext
from harness.runner import Runner, RunSettings, write_json_atomic
from models.base import ModelAdapter, apply_overrides
from models.registry import ModelSpec, adapter_class, load_adapter, spec_for
from tasks.registry import make_task

BATCH = "batch_size"
PLAN_NAME = "sweep.json"
CANVAS_OPTION = "gen_length"  # a per-model canvas, as presets set it; not a decoder field


@dataclass(frozen=True)
class Axis:
    """One grid: a model's option (or the batch size, model None) and the values to try, as the user spelled them."""

    model: str | None
    option: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Point:
    """One run of a sweep: a model, its gridded options (name, value text) in grid order, and a batch size."""

    model: str
    options: tuple[tuple[str, str], ...]
    batch_size: int

    @property
    def name(self) -> str:
        """The folder name, spelling the settings: ``model__opt=value__batch_size=N``."""
        spelled = "__".join(f"{k}={v}" for k, v in self.options) or "defaults"
        name = re.sub(r"[^A-Za-z0-9._+=-]", "_", f"{self.model}__{spelled}__{BATCH}={self.batch_size}")
        if len(name) > 180:  # file systems cap names at 255 bytes; keep it readable and unique
            name = name[:160] + "__" + hashlib.sha256(name.encode()).hexdigest()[:12]
        return name

    @property
    def overrides(self) -> dict[str, Any]:
        return {k: option_value(self.model, k, v) for k, v in self.options}

    @property
    def settings_text(self) -> str:
        return ", ".join([f"{k}={v}" for k, v in self.options] + [f"{BATCH}={self.batch_size}"])


def option_value(model: str, option: str, text: str) -> Any:
    """A grid value as --model-arg parses it, except that a text option keeps its text (``cache=none`` is the
    string "none", not None), checked against the option's declared type so that a wrong one fails before any point
    runs. Issue 15's typed --model-arg parsing should replace this with the shared coercion."""
    hints = typing.get_type_hints(adapter_class(spec_for(model).kind).config_class)
    if option not in hints:
        return parse_value(text)
    allowed = typing.get_args(hints[option]) or (hints[option],)
    if str in allowed and not (type(None) in allowed and text.lower() in ("none", "null")):
        return text
    value = parse_value(text)
    fits = (isinstance(value, bool) and bool in allowed) or (
        not isinstance(value, bool) and any(isinstance(value, t) for t in allowed if t is not bool)) or (
        isinstance(value, int) and not isinstance(value, bool) and float in allowed)
    if not fits:
        names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
        raise UsageError(f"{option}={text} is not {names}")
    return value


@dataclass(frozen=True)
class SweepSpec:
    """What the user asked for: grids, and per model the reference's options (batch size under model None)."""

    axes: tuple[Axis, ...]
    reference: dict[str | None, dict[str, str]]
    alpha: float = 0.05


@dataclass(frozen=True)
class SweepPlan:
    root: Path
    models: tuple[str, ...]
    tasks: tuple[str, ...]
    points: tuple[Point, ...]
    references: dict[str, str]  # model -> name of its reference point
    alpha: float

    def to_json(self) -> dict[str, Any]:
        return {
            "models": list(self.models), "tasks": list(self.tasks), "alpha": self.alpha,
            "references": self.references,
            "points": [{"name": p.name, "model": p.model, "options": [list(o) for o in p.options],
                        "batch_size": p.batch_size} for p in self.points],
        }


def load_plan(root: Path) -> SweepPlan:
    """The plan a sweep wrote into its folder (so the frontier can be rebuilt from the folder alone)."""
    path = Path(root) / PLAN_NAME
    if not path.is_file():
        raise ValueError(f"{root} has no {PLAN_NAME} (not a sweep folder; run `run_eval.py sweep` first)")
    raw = json.loads(path.read_text(encoding="utf-8"))
    points = tuple(Point(p["model"], tuple((k, v) for k, v in p["options"]), int(p["batch_size"]))
                   for p in raw["points"])
    return SweepPlan(Path(root), tuple(raw["models"]), tuple(raw["tasks"]), points, dict(raw["references"]),
                     float(raw.get("alpha", 0.05)))


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


def check_option(model: str, option: str, flag: str) -> None:
    """An option the model's configuration has (or its canvas); the message lists the valid ones."""
    if option == CANVAS_OPTION:
        return
    try:
        apply_overrides(adapter_class(spec_for(model).kind).config_class(), {option: None}, model)
    except ValueError as error:
        raise UsageError(f"{flag}: {error} (or {CANVAS_OPTION}, or {BATCH})") from None


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
                check_option(m, option, "--grid")
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
            check_option(m, option, "--reference")
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
            self.adapters[spec.name] = load_adapter(spec, self.device, self.dtype)
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
    """The run of one point: its model alone, its options over the run's --model-arg, its batch size's store."""
    model_args = {point.model: {**base.model_args.get(point.model, {}), **point.overrides}}
    return dataclasses.replace(base, models=(point.model,), output=root / point.name, batch_size=point.batch_size,
                               model_args=model_args, store_dir=root / "store" / f"{BATCH}={point.batch_size}")


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
            except (TypeError, ValueError) as error:  # a value of the wrong type fails inside the config check
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
    path = settings.output / "results.json"
    if not path.is_file():
        return False
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        recorded = json.dumps(payload["manifest"]["settings"], sort_keys=True)
        full = all(r["n_samples"] == r["manifest"]["n_planned"] for r in payload["results"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return full and recorded == _canonical(settings) and len(payload["results"]) == len(settings.tasks)


def run_sweep(spec: SweepSpec, base: RunSettings, root: Path, dist_ctx: DistContext = DistContext()) -> SweepPlan:
    """Plan every point, write the plan, then run the points not finished yet, in order."""
    adapters: dict[str, ModelAdapter] = {}
    plan = plan_sweep(spec, base, root, dist_ctx, adapters)
    if dist_ctx.is_main:
        write_json_atomic(root / PLAN_NAME, plan.to_json())
    todo = [p for p in plan.points if not is_complete(point_settings(p, base, root))]
    if dist_ctx.is_main:
        print(f"sweep: {len(plan.points)} points, {len(plan.points) - len(todo)} already finished")
    for index, point in enumerate(todo, start=1):
        if dist_ctx.is_main:
            print(f"sweep: point {index}/{len(todo)}: {point.name}")
        SweepRunner(point_settings(point, base, root), dist_ctx, adapters).run()
    return plan
