"""The sweep's page and tables: ``frontier.html`` (self-contained, like the report), ``frontier.csv`` and
``frontier_crossovers.csv``, written into the sweep folder (their paths: harness.sweep.plan.SweepFolder)."""

from __future__ import annotations

import time
from pathlib import Path

from dataclasses import dataclass

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.files import write_atomic
from harness.sweep.plan import SweepFolder
from reports.chart import Chart, colour, legend_below, new_figure, render, tidy
from reports.point_labels import Placement, marker_box, place_label
from reports.frontier.frame import CROSSOVER_RULE, Frontier, build_frontier
from reports.html import make_environment, table_view

TABLE_COLUMNS = ["task", "model", "options", "batch_size", "accuracy", "ci_low", "ci_high", "n", "tokens_per_second",
                 "timing_passes", "speedup", "speedup_low", "speedup_high", "speedup_verdict", "right_to_wrong",
                 "wrong_to_right", "p_holm", "matched", "pareto"]


KINDS = (("plain", "o", 30.0), ("worse", "x", 45.0), ("reference", "*", 160.0))  # kind, marker, size (points²)


@dataclass(frozen=True)
class PointMark:
    """One point on the scatter: its key (the point's folder name), its label, its model's index and position."""

    key: str
    note: str
    model: int
    x: float
    y: float
    size: float

    def legend(self, model: str) -> str:
        return f"{model}: {self.note} — {self.x:.3g} tok/s, {self.y:.0f}%"


def _kind(row: pd.Series) -> tuple[str, str, float]:
    return KINDS[2] if row["is_reference"] else KINDS[1] if row["significantly_worse"] else KINDS[0]


def _draw_scatter(rows: pd.DataFrame, models: list[str], in_legend: set[str]) -> tuple[Figure, Axes, list[PointMark]]:
    """The scatter with its legend below (every model's kinds of marker, then the points named in ``in_legend``),
    laid out and with its limits frozen, so labels can be placed where they will be drawn."""
    fig = new_figure(9.0, 5.6)
    ax = fig.add_subplot()
    handles: list[object] = []
    names: list[str] = []
    marks: list[PointMark] = []
    for i, model in enumerate(models):
        mine = rows[rows["model"] == model]
        if mine.empty:
            continue
        acc, tps = 100 * mine["accuracy"], mine["tokens_per_second"]
        low = (acc - 100 * mine["ci_low"].fillna(mine["accuracy"])).clip(lower=0)
        high = (100 * mine["ci_high"].fillna(mine["accuracy"]) - acc).clip(lower=0)
        ax.errorbar(tps, acc, yerr=[low, high], fmt="none", ecolor=colour(i), alpha=0.35, elinewidth=1, capsize=2)
        kinds = mine.apply(lambda r: _kind(r)[0], axis=1)
        for kind, shape, size in KINDS:
            chosen = mine[kinds == kind]
            if not chosen.empty:
                handles.append(ax.scatter(chosen["tokens_per_second"], 100 * chosen["accuracy"], marker=shape, s=size,
                                          color=colour(i), edgecolor="black" if kind == "reference" else None,
                                          zorder=3))
                names.append({"plain": model, "worse": f"{model}: significantly worse",
                              "reference": f"{model}: reference"}[kind])
        front = mine[mine["pareto"]].sort_values("tokens_per_second")
        ax.plot(front["tokens_per_second"], 100 * front["accuracy"], color=colour(i), lw=1.2, drawstyle="steps-pre")
        marks += [PointMark(str(r["point"]), f"{r['options']} · b{r['batch_size']}", i, float(r["tokens_per_second"]),
                            float(100 * r["accuracy"]), _kind(r)[2]) for _, r in mine.iterrows()]
    for m in (m for m in marks if m.key in in_legend):
        handles.append(Line2D([], [], linestyle="none", marker=".", color=colour(m.model)))
        names.append(m.legend(models[m.model]))
    ax.set_xlabel("tokens/s")
    ax.set_ylabel("accuracy (%)")
    speeds = rows["tokens_per_second"]
    if speeds.max() / max(speeds.min(), 1e-12) > 20:
        ax.set_xscale("log")
    tidy(ax, "Accuracy against throughput, every point (line: Pareto frontier)")
    legend_below(fig, handles, names)
    ax.margins(x=0.12, y=0.15)
    ax.autoscale_view()
    ax.set_xlim(*ax.get_xlim())
    ax.set_ylim(*ax.get_ylim())
    fig.canvas.draw()  # lay the figure out, so label extents are measured where they will be drawn
    return fig, ax, marks


def scatter_chart(rows: pd.DataFrame, models: list[str]) -> Chart | None:
    """Accuracy (with its 95% interval) against tokens/s of every point of one task; each model's Pareto frontier as
    a line, its reference as a star, points significantly below the reference as crosses.

    Every point is named once, and no two names overlap: beside its marker where a free place is found
    (reports.point_labels, clear of markers, labels and leader lines), else in the legend. A point moved to
    the legend changes the layout, so the chart is drawn again until every remaining label fits (the legend's set
    only grows, so this ends)."""
    rows = rows.dropna(subset=["accuracy", "tokens_per_second"])
    if rows.empty:
        return None
    in_legend: set[str] = set()
    while True:
        fig, ax, marks = _draw_scatter(rows, models, in_legend)
        placement = Placement([marker_box(ax, m.x, m.y, m.size) for m in marks], [], [])
        placed, missed = [], set()
        for m in (m for m in marks if m.key not in in_legend):
            text = place_label(ax, (m.x, m.y), m.note, placement)
            if text is None:
                missed.add(m.key)
            else:
                placed.append(text)
        if not missed:
            return render(fig, placed)
        in_legend |= missed


def frontier_scatter(rows: pd.DataFrame, models: list[str]) -> str | None:
    """The scatter as a data URI for the page (scatter_chart)."""
    chart = scatter_chart(rows, models)
    return chart.uri if chart else None


def batch_curves(rows: pd.DataFrame, models: list[str], crossovers: pd.DataFrame) -> str | None:
    """Tokens/s against batch size per model and option setting, crossovers marked; None without a batch grid."""
    if rows["batch_size"].nunique() < 2:
        return None
    fig = new_figure(9.0, 5.0)
    ax = fig.add_subplot()
    handles: list[object] = []
    names: list[str] = []
    for i, model in enumerate(models):
        mine = rows[rows["model"] == model]
        reference = mine[mine["is_reference"]]["options"]
        for options, curve in mine.groupby("options", sort=False):
            curve = curve.dropna(subset=["tokens_per_second"]).sort_values("batch_size")
            main = not reference.empty and options == reference.iloc[0]
            handles += ax.plot(curve["batch_size"], curve["tokens_per_second"], marker="o" if main else ".",
                               color=colour(i), lw=2 if main else 0.8, ls="-" if main else "--",
                               alpha=1 if main else 0.6)
            names.append(f"{model} ({options})")
    for _, c in crossovers.dropna(subset=["crossover_batch_size"]).iterrows():
        ax.axvline(c["crossover_batch_size"], color="#666", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("tokens/s")
    tidy(ax, "Median tokens/s against batch size (thick: reference options; dotted: supported crossovers)")
    legend_below(fig, handles, names)
    return render(fig).uri


def render_frontier(frontier: Frontier) -> str:
    frame, plan = frontier.frame, frontier.plan
    sections = []
    for task in plan.tasks:
        rows = frame[frame["task"] == task]
        crossings = frontier.crossovers[frontier.crossovers["task"] == task]
        sections.append({
            "task": task,
            "headlines": [h.text for h in frontier.headlines if h.task == task],
            "scatter": frontier_scatter(rows, list(plan.models)),
            "batch": batch_curves(rows, list(plan.models), crossings),
            "crossovers": list(crossings["text"]),
            "table": table_view(rows[TABLE_COLUMNS], 3),
        })
    context = {
        "title": f"Speed/quality frontier: {plan.root.name}",
        "generated": time.strftime("%Y-%m-%d %H:%M"),
        "plan": plan, "alpha": plan.alpha, "sections": sections, "notes": frontier.notes,
        "crossover_rule": CROSSOVER_RULE,
    }
    return make_environment().get_template("frontier.html.j2").render(**context)


def write_frontier(root: Path, frontier: Frontier | None = None) -> Path:
    """Write frontier.html, frontier.csv and frontier_crossovers.csv into the sweep folder, each atomically (the
    tables rendered to text first); returns the page's path."""
    folder = SweepFolder(Path(root))
    frontier = frontier if frontier is not None else build_frontier(folder.root)
    write_atomic(folder.table_path, frontier.frame.to_csv(index=False))
    write_atomic(folder.crossovers_path, frontier.crossovers.to_csv(index=False))
    write_atomic(folder.page_path, render_frontier(frontier))
    return folder.page_path
