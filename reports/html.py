"""The self-contained HTML report (plus its CSV and Markdown tables), from one or more run folders.

jinja2 with autoescape renders every value as text; figures are PNG data URIs and the page carries a
Content-Security-Policy that forbids loading anything, so the file works offline and makes no request.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import jinja2
import pandas as pd

from harness.stats.aggregate import TOKEN_DEFINITION
from harness.files import write_atomic
from harness.run.folder import Run, RunFolder
from reports import figures
from reports.attribution_table import attribution_frame
from reports.browser import CORRECT_AT, BrowserLimits, browser_payload, script_json
from reports.chart import Chart
from reports.latency_caption import latency_caption
from reports.report_data import ReportData, gather, short_run_names
from reports.published import SOURCE, PublishedCell
from reports.repeated import k_note
from reports.repeated_tables import agreement_frame, pass_at_frame, repeated_tasks
from reports.tables import (AVG_NOTE, MANIFEST_COLUMNS, SERVED_NOTE, diagnostics_frame, manifest_rows, mean_or_none,
                            paper_grid, published_frame, published_reference_frame, served_speed_frame, speed_frame,
                            write_tables)

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class TableView:
    """A frame as display strings, for the template's generic table."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class PublishedView:
    """A published row under its measured one: its cells in the report's task order, and their average."""

    row: str
    source: str
    cells: tuple[PublishedCell | None, ...]
    average: PublishedCell | None
    k_notes: tuple[str | None, ...] = ()  # per cell: where its k is not the measured K, or not stated


@dataclass(frozen=True)
class RepeatedView:
    """One task's repeated samples: its pass@k curve, pass@k at a few k, and how often each model's samples
    agree."""

    task: str
    chart: Chart | None  # None where no model's metric is 0/1 (no pass@k)
    pass_at: TableView
    agreement: TableView


@dataclass(frozen=True)
class RunInfo:
    name: str
    short: str  # what labels call the run when a model appears in several runs
    environment: tuple[tuple[str, str], ...]
    settings: tuple[tuple[str, str], ...]


def display(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def table_view(frame: pd.DataFrame, digits: int = 2) -> TableView:
    rows = tuple(tuple(display(v, digits) for v in row) for row in frame.itertuples(index=False))
    return TableView(tuple(str(c) for c in frame.columns), rows)


def published_rows(data: ReportData) -> dict[str, PublishedView | None]:
    """For each measured row that has a published row, that row's cells for the same task columns."""
    out: dict[str, PublishedView | None] = {}
    for grid_row in paper_grid(data):
        published = grid_row.published_row
        cells = () if published is None else tuple(published.cells.get(data.paper_columns.get(t) or "")
                                                    for t in data.tasks)
        present = [c for c in cells if c is not None]
        average = (PublishedCell(mean_or_none([c.accuracy for c in present]),  # type: ignore[arg-type]
                                 mean_or_none([c.tokens_per_second for c in present]))
                   if present else None)
        notes = tuple(None if cell is None or (measured := data.cell(grid_row.label, task)) is None
                      else k_note(measured.samples, cell.samples) for cell, task in zip(cells, data.tasks))
        out[grid_row.label] = (PublishedView(published.label, published.source, cells, average, notes)
                               if present else None)
    return out


def repeated_views(data: ReportData) -> list[RepeatedView]:
    """Per task where some model drew several samples per item, in the report's task order."""
    curves = figures.pass_at_curves(data)
    return [RepeatedView(task, curves.get(task), table_view(pass_at_frame(data, task), 1),
                         table_view(agreement_frame(data, task), 1)) for task in repeated_tasks(data)]


def run_info(run: Run, short: str) -> RunInfo:
    env = run.manifest.get("environment") or {}
    settings = {k: v for k, v in (run.manifest.get("settings") or {}).items() if k not in ("output", "data_dir")}
    created = run.manifest.get("created")
    environment = [("created", display(created))] + [(k, display(v)) for k, v in env.items()]
    return RunInfo(run.name, short, tuple(environment), tuple((k, display(v)) for k, v in settings.items()))


def best_per_task(data: ReportData) -> list[float | None]:
    values = [[c.value for c in data.cells if c.task == t and c.value is not None] for t in data.tasks]
    return [100.0 * max(v) if v else None for v in values]


def make_environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda value, digits=2: display(value, digits)
    return env


def render_report(data: ReportData, limits: BrowserLimits = BrowserLimits()) -> str:
    """The report page as a string."""
    payload = browser_payload(data, limits)
    context = {
        "title": "Evaluation report: " + ", ".join(run.name for run in data.runs),
        "generated": time.strftime("%Y-%m-%d %H:%M"),
        "token_definition": TOKEN_DEFINITION,
        "runs": [run_info(run, short) for run, short in zip(data.runs, short_run_names([r.name for r in data.runs]))],
        "labels": data.labels,
        "tasks": data.tasks,
        "paper_columns": data.paper_columns,
        "warnings": data.warnings,
        "baseline": data.baseline,
        "grid": paper_grid(data),
        "best": best_per_task(data),
        "published_rows": published_rows(data),
        "repeated": repeated_views(data),
        "avg_note": AVG_NOTE if any(c.samples > 1 for c in data.cells) else "",
        "figures": {
            "tradeoff": figures.tradeoff_scatter(data),
            "accuracy": figures.accuracy_bars(data),
            "latency": figures.latency_boxes(data),
            "forwards": figures.forwards_bars(data),
            "order": figures.order_lines(data),
        },
        "latency_caption": latency_caption(data.samples, data.labels),
        "speed": table_view(speed_frame(data), 3),
        "served_speed": table_view(served_speed_frame(data), 3),
        "served_note": SERVED_NOTE,
        "attribution": table_view(attribution_frame(data), 2),
        "diagnostics": table_view(diagnostics_frame(data), 1),
        "published": table_view(published_frame(data)),
        "published_reference": table_view(published_reference_frame()),
        "published_source": SOURCE,
        "manifest_columns": MANIFEST_COLUMNS,
        "manifests": manifest_rows(data),
        "browser": payload,
        "sample_json": script_json(payload),
        "correct_at": CORRECT_AT,
    }
    return make_environment().get_template("report.html.j2").render(**context)


def write_report(run_dirs: Sequence[Path], output_dir: Path, baseline_model: str | None = None,
                 limits: BrowserLimits = BrowserLimits()) -> Path:
    """Write report.html and its tables (report_*.csv, report_tables.md) into output_dir; returns the HTML's path.

    Raises RunLoadError or ReportError (both ValueError) with a one-line reason on bad input.
    """
    data = gather([Path(p) for p in run_dirs], baseline_model)
    html = render_report(data, limits)
    folder = RunFolder(Path(output_dir))
    write_tables(data, folder)
    write_atomic(folder.report_path, html, errors="replace")  # whatever a model wrote, the page is written
    return folder.report_path
