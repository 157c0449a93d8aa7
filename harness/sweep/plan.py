"""The plan of a sweep, as records: its points and each model's reference, written into the sweep folder, and
that folder's layout (SweepFolder).

The sweep (harness.sweep.driver) writes it before any point runs; the frontier (reports.frontier.frame) reads it back, so a
frontier can be rebuilt from the folder alone. No run loop here: the report side imports this.

    <sweep>/sweep.json                     this plan
    <sweep>/<point name>/                  one run folder per point (harness.run.folder.RunFolder)
    <sweep>/store/batch_size=<N>/          the resume store shared by the points of one batch size
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

    @property
    def settings_text(self) -> str:
        return ", ".join([f"{k}={v}" for k, v in self.options] + [f"{BATCH}={self.batch_size}"])


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
