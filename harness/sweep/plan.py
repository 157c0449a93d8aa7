"""The plan of a sweep, as records: its points and each model's reference, written into the sweep folder, and
that folder's layout (SweepFolder).

The sweep (harness.sweep.driver) writes it before any point runs; the frontier (reports.frontier.frame) reads it back, so a
frontier can be rebuilt from the folder alone. No run loop here: the report side imports this.

    <sweep>/sweep.json                     this plan
    <sweep>/<point name>/                  one run folder per point (harness.run.folder.RunFolder)
    <sweep>/store/batch_size=<N>/          the resume store shared by the points of one batch size
    <sweep>/sweep_timing.json              every point re-timed in interleaved passes (harness.sweep.retime)
    <sweep>/frontier.html                  the frontier page (reports.frontier.page)
    <sweep>/frontier.csv, frontier_crossovers.csv   its tables
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.files import write_json_atomic
from harness.run.folder import RunFolder

BATCH = "batch_size"
PLAN_NAME = "sweep.json"
TIMING_NAME = "sweep_timing.json"
TIMING_FORMAT = "sweep-timing-1"
DEFAULT_REPEATS = 6  # the fewest passes whose min-max is a 95% distribution-free interval of the median (96.9%)
DEFAULT_PROMPTS = 4  # stored prompts per task and timing pass (at least the largest batch size: retime.timing_prompts)


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
    def overrides(self) -> dict[str, str]:
        """The options as ``--model-arg`` gives them: text, typed by the model's config (models.options)."""
        return dict(self.options)


@dataclass(frozen=True)
class SweepFolder:
    """The layout of a sweep folder, in one place, as RunFolder is for a run: a sweep is a folder of runs."""

    root: Path

    @property
    def plan_path(self) -> Path:
        return self.root / PLAN_NAME

    def store_dir(self, batch_size: int) -> Path:
        """The resume store shared by a sweep's points of one batch size."""
        return self.root / "store" / f"{BATCH}={batch_size}"

    def point(self, point: Point) -> RunFolder:
        """The run folder of one point, with its batch size's shared store."""
        return RunFolder(self.root / point.name, store_dir=self.store_dir(point.batch_size))

    @property
    def page_path(self) -> Path:
        return self.root / "frontier.html"

    @property
    def table_path(self) -> Path:
        return self.root / "frontier.csv"

    @property
    def crossovers_path(self) -> Path:
        return self.root / "frontier_crossovers.csv"

    @property
    def timing_path(self) -> Path:
        return self.root / TIMING_NAME


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

    @property
    def folder(self) -> SweepFolder:
        return SweepFolder(self.root)

    def write(self) -> Path:
        path = self.folder.plan_path
        write_json_atomic(path, self.to_json())
        return path


def load_plan(root: Path) -> SweepPlan:
    """The plan a sweep wrote into its folder."""
    path = SweepFolder(Path(root)).plan_path
    if not path.is_file():
        raise ValueError(f"{root} has no {PLAN_NAME} (not a sweep folder; run `run_eval.py sweep` first)")
    raw = json.loads(path.read_text(encoding="utf-8"))
    points = tuple(Point(p["model"], tuple((k, v) for k, v in p["options"]), int(p["batch_size"]))
                   for p in raw["points"])
    return SweepPlan(Path(root), tuple(raw["models"]), tuple(raw["tasks"]), points, dict(raw["references"]),
                     float(raw.get("alpha", 0.05)))


# --- timing passes ------------------------------------------------------------------------------------------------

PassTimes = dict[str, dict[str, list[tuple[int, float]]]]  # point name -> task -> one (tokens, seconds) per pass


@dataclass(frozen=True)
class SweepTiming:
    """The re-timing of a sweep's points (harness.sweep.retime): ``repeats`` interleaved passes, each decoding the
    first ``prompts`` stored prompts of every task at the point's batch size; ``order`` is the visiting order of
    every pass (the record that the passes were interleaved)."""

    repeats: int
    prompts: int
    order: tuple[tuple[str, ...], ...]
    passes: PassTimes

    def tokens_per_second(self, point: str, task: str) -> tuple[float, ...] | None:
        """One tokens/s per pass, in pass order; None when this point and task were not re-timed."""
        passes = self.passes.get(point, {}).get(task)
        return tuple(tokens / seconds for tokens, seconds in passes) if passes else None

    def to_json(self) -> dict[str, Any]:
        return {"format": TIMING_FORMAT, "repeats": self.repeats, "prompts": self.prompts,
                "clock": "wall seconds of the decoder call, device synchronised (as a run's tokens/s)",
                "order": [list(o) for o in self.order],
                "passes": {p: {t: [list(x) for x in v] for t, v in tasks.items()} for p, tasks in self.passes.items()}}

    def write(self, root: Path) -> Path:
        path = SweepFolder(Path(root)).timing_path
        write_json_atomic(path, self.to_json())
        return path


def load_timing(root: Path) -> SweepTiming | None:
    """A sweep's timing passes, or None when it has none (a sweep run with --repeats 1, or written before them)."""
    path = SweepFolder(Path(root)).timing_path
    if not path.is_file():
        return None
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or raw.get("format") != TIMING_FORMAT:
        raise ValueError(f"{path} is not a {TIMING_FORMAT} file (delete it and rerun the sweep to re-time)")
    passes = {point: {task: [(int(n), float(s)) for n, s in v] for task, v in tasks.items()}
              for point, tasks in raw["passes"].items()}
    return SweepTiming(int(raw["repeats"]), int(raw["prompts"]), tuple(tuple(o) for o in raw["order"]), passes)
