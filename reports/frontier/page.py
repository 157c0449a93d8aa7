"""The sweep's page and tables: ``frontier.html`` (self-contained, like the report), ``frontier.csv`` and
``frontier_crossovers.csv``, written into the sweep folder (their paths: harness.sweep.plan.SweepFolder)."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.files import write_atomic
from harness.sweep.plan import SweepFolder
from reports.figures import colour, to_data_uri
from reports.frontier.frame import CROSSOVER_RULE, Frontier, build_frontier
from reports.html import make_environment, table_view

TABLE_COLUMNS = ["task", "model", "options", "batch_size", "accuracy", "ci_low", "ci_high", "n", "tokens_per_second",
                 "speedup", "right_to_wrong", "wrong_to_right", "p_holm", "matched", "pareto"]


def _axes_style(ax: object, log_x: bool) -> None:
    if log_x:
        ax.set_xscale("log")  # type: ignore[attr-defined]
    ax.grid(alpha=0.3)  # type: ignore[attr-defined]
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)  # type: ignore[attr-defined]
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # type: ignore[attr-defined]


def frontier_scatter(rows: pd.DataFrame, models: list[str]) -> str | None:
    """Accuracy (with its 95% interval) against tokens/s of every point of one task; each model's Pareto frontier as
    a line, its reference as a star, points significantly below the reference as crosses."""
    rows = rows.dropna(subset=["accuracy", "tokens_per_second"])
    if rows.empty:
        return None
    fig = Figure(figsize=(8.0, 4.8))
    ax = fig.add_subplot()
    for i, model in enumerate(models):
        mine = rows[rows["model"] == model]
        if mine.empty:
            continue
        acc, tps = 100 * mine["accuracy"], mine["tokens_per_second"]
        low = (acc - 100 * mine["ci_low"].fillna(mine["accuracy"])).clip(lower=0)
        high = (100 * mine["ci_high"].fillna(mine["accuracy"]) - acc).clip(lower=0)
        ax.errorbar(tps, acc, yerr=[low, high], fmt="none", ecolor=colour(i), alpha=0.35, elinewidth=1, capsize=2)
        for kind, marker, size in (("plain", "o", 30), ("worse", "x", 45), ("reference", "*", 160)):
            chosen = mine[mine["is_reference"]] if kind == "reference" else (
                mine[mine["significantly_worse"]] if kind == "worse"
                else mine[~mine["is_reference"] & ~mine["significantly_worse"]])
            if not chosen.empty:
                label = {"plain": model, "worse": f"{model}: significantly worse",
                         "reference": f"{model}: reference"}[kind]
                ax.scatter(chosen["tokens_per_second"], 100 * chosen["accuracy"], marker=marker, s=size,
                           color=colour(i), edgecolor="black" if kind == "reference" else None, zorder=3, label=label)
        front = mine[mine["pareto"]].sort_values("tokens_per_second")
        ax.plot(front["tokens_per_second"], 100 * front["accuracy"], color=colour(i), lw=1.2, drawstyle="steps-pre")
        for _, r in mine.iterrows():
            ax.annotate(f"{r['options']} · b{r['batch_size']}", (r["tokens_per_second"], 100 * r["accuracy"]),
                        textcoords="offset points", xytext=(4, 4), fontsize=6.5, color="#444")
    ax.set_xlabel("tokens/s")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy against throughput, every point (line: Pareto frontier)", fontsize=11)
    speeds = rows["tokens_per_second"]
    _axes_style(ax, speeds.max() / max(speeds.min(), 1e-12) > 20)
    return to_data_uri(fig)


def batch_curves(rows: pd.DataFrame, models: list[str], crossovers: pd.DataFrame) -> str | None:
    """Tokens/s against batch size per model and option setting, crossovers marked; None without a batch grid."""
    if rows["batch_size"].nunique() < 2:
        return None
    fig = Figure(figsize=(8.0, 4.4))
    ax = fig.add_subplot()
    for i, model in enumerate(models):
        mine = rows[rows["model"] == model]
        reference = mine[mine["is_reference"]]["options"]
        for options, curve in mine.groupby("options", sort=False):
            curve = curve.dropna(subset=["tokens_per_second"]).sort_values("batch_size")
            main = not reference.empty and options == reference.iloc[0]
            ax.plot(curve["batch_size"], curve["tokens_per_second"], marker="o" if main else ".", color=colour(i),
                    lw=2 if main else 0.8, ls="-" if main else "--", alpha=1 if main else 0.6,
                    label=f"{model} ({options})")
    for _, c in crossovers.dropna(subset=["crossover_batch_size"]).iterrows():
        ax.axvline(c["crossover_batch_size"], color="#666", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("tokens/s")
    ax.set_title("Throughput against batch size (thick: the reference's options; dotted: crossovers)", fontsize=11)
    _axes_style(ax, False)
    return to_data_uri(fig)


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
