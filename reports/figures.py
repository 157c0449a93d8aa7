"""The report's charts, drawn with matplotlib's object API (no pyplot state) and returned as PNG data URIs.

A data URI keeps the HTML self-contained: the page loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import io
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from reports.report_data import ReportData
from reports.tables import mean_or_none, pct

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def to_data_uri(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _grouped_bars(data: ReportData, values: dict[tuple[str, str], float | None],
                  errors: dict[tuple[str, str], tuple[float, float]] | None, ylabel: str, title: str) -> Figure:
    labels, tasks = data.labels, data.tasks
    fig = Figure(figsize=(max(6.0, 1.2 + 0.35 * len(labels) * len(tasks) + 0.6 * len(tasks)), 3.8))
    ax = fig.add_subplot()
    width = 0.8 / len(labels)
    x = np.arange(len(tasks))
    for i, label in enumerate(labels):
        heights = [values.get((label, t)) for t in tasks]
        present = [j for j, h in enumerate(heights) if h is not None]
        if not present:
            continue
        xs = x[present] + (i - (len(labels) - 1) / 2) * width
        hs = [heights[j] for j in present]
        yerr = None
        if errors is not None:
            lo = [max(0.0, hs[k] - errors.get((label, tasks[j]), (hs[k], hs[k]))[0]) for k, j in enumerate(present)]
            hi = [max(0.0, errors.get((label, tasks[j]), (hs[k], hs[k]))[1] - hs[k]) for k, j in enumerate(present)]
            yerr = [lo, hi]
        ax.bar(xs, hs, width * 0.92, color=colour(i), label=label, yerr=yerr, capsize=3,
               error_kw={"elinewidth": 1, "ecolor": "#333"})
    ax.set_xticks(x, tasks)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def accuracy_bars(data: ReportData) -> str:
    """Per-task accuracy with its 95% Wilson interval as error bars."""
    values = {(c.label, c.task): pct(c.value) for c in data.cells}
    errors = {(c.label, c.task): (pct(c.ci_low), pct(c.ci_high)) for c in data.cells
              if c.ci_low is not None and c.ci_high is not None and c.value is not None}
    fig = _grouped_bars(data, values, errors, "accuracy (%)", "Accuracy per task (95% interval)")
    return to_data_uri(fig)


def forwards_bars(data: ReportData) -> str | None:
    """Network forwards per generated token: 1 for autoregressive decoding, below 1 when a step commits several."""
    values = {(c.label, c.task): c.forwards_per_token for c in data.cells}
    if all(v is None for v in values.values()):
        return None
    fig = _grouped_bars(data, values, None, "forwards per generated token", "Forwards per token (lower is better)")
    return to_data_uri(fig)


def tradeoff_scatter(data: ReportData) -> str | None:
    """Δ accuracy (points) against Δ tokens/s, relative to the baseline model, as the paper's first figure.

    Small dots are single tasks; the large marker is the model's average over the tasks it shares with the baseline.
    """
    base = data.baseline
    others = [label for label in data.labels if label != base]
    if base is None or not others:
        return None
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    plotted = False
    for i, label in enumerate(data.labels):
        if label == base:
            continue
        deltas = []
        for task in data.tasks:
            mine, theirs = data.cell(label, task), data.cell(base, task)
            if mine is None or theirs is None or None in (mine.value, theirs.value, mine.tokens_per_second,
                                                          theirs.tokens_per_second):
                continue
            deltas.append((mine.tokens_per_second - theirs.tokens_per_second, 100 * (mine.value - theirs.value),
                           mine.tokens_per_second, theirs.tokens_per_second))
        if not deltas:
            continue
        plotted = True
        xs, ys = [d[0] for d in deltas], [d[1] for d in deltas]
        ax.scatter(xs, ys, s=18, color=colour(i), alpha=0.45)
        mean_x, mean_y = float(np.mean(xs)), float(np.mean(ys))
        ratio = mean_or_none([d[2] / d[3] for d in deltas if d[3]])
        ax.scatter([mean_x], [mean_y], s=120, color=colour(i), edgecolor="black", zorder=3,
                   label=f"{label} ({len(deltas)} task{'' if len(deltas) == 1 else 's'})")
        note = f"{label}\n{ratio:.2f}× tok/s" if ratio is not None else label
        ax.annotate(note, (mean_x, mean_y), textcoords="offset points", xytext=(8, 6), fontsize=8)
    if not plotted:
        return None
    ax.axhline(0, color="#666", lw=0.8)
    ax.axvline(0, color="#666", lw=0.8)
    ax.scatter([0], [0], marker="*", s=200, color="black", zorder=4, label=f"baseline: {base}")
    ax.set_xlabel(f"Δ tokens/s vs {base}")
    ax.set_ylabel(f"Δ accuracy vs {base} (points)")
    ax.set_title("Accuracy against throughput, relative to the baseline", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_data_uri(fig)


def latency_boxes(data: ReportData) -> str | None:
    """Per-sample decoder latency of the timed (non-warm-up) samples, one box per model and task."""
    groups: list[tuple[str, list[float], int]] = []
    for task in data.tasks:
        for i, label in enumerate(data.labels):
            records = data.samples.get((label, task))
            if not records:
                continue
            latencies = [float(r["latency_s"]) for r in records if not r.get("warmup") and "latency_s" in r]
            if latencies:
                groups.append((f"{label} · {task}", latencies, i))
    if not groups:
        return None
    fig = Figure(figsize=(8.5, max(2.2, 0.42 * len(groups) + 1.2)))
    ax = fig.add_subplot()
    positions = list(range(len(groups), 0, -1))
    boxes = ax.boxplot([g[1] for g in groups], positions=positions, orientation="horizontal", widths=0.6,
                       patch_artist=True, showfliers=True, flierprops={"markersize": 3})
    for patch, group in zip(boxes["boxes"], groups):
        patch.set_facecolor(colour(group[2]))
        patch.set_alpha(0.75)
    ax.set_yticks(positions, [g[0] for g in groups], fontsize=8)
    ax.set_xlabel("latency per sample (s)")
    ax.set_title("Latency distribution (timed samples)", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    _log_if_wide(ax, [v for g in groups for v in g[1]])
    return to_data_uri(fig)


def _log_if_wide(ax: object, values: Sequence[float]) -> None:
    """A log axis when latencies span more than two orders of magnitude (AR vs full-canvas diffusion)."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_xscale("log")  # type: ignore[attr-defined]
