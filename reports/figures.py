"""The report's charts, drawn with matplotlib's object API (no pyplot state) on the surface of ``reports.chart``:
grouped bars (accuracy, forwards per token), the accuracy-throughput scatter, the latency boxes, the decode order
lines and the pass@k curves of repeated samples."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import NullLocator

from reports.chart import Chart, Mark, colour, hatch, legend_below, marker, new_figure, render, tidy
from reports.decode_order import POSITION_BINS, order_curve
from reports.point_labels import marker_box, place_labels
from reports.repeated_tables import repeated_cells, repeated_tasks
from reports.report_data import ReportData
from reports.tables import mean_or_none, pct

# --- bars ---------------------------------------------------------------------------------------------------------


def _interval(value: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    """Error-bar lengths below and above a value (zero where there is no interval)."""
    if bounds is None:
        return 0.0, 0.0
    return max(0.0, value - bounds[0]), max(0.0, bounds[1] - value)


def _grouped_bars(data: ReportData, values: dict[tuple[str, str], float | None],
                  errors: dict[tuple[str, str], tuple[float, float]] | None, ylabel: str, title: str) -> Chart:
    """One bar per model within each task's group, with a marker at every bar's value.

    The marker (shape per model, as in the legend) is what keeps a value of zero visible and attributable: a bar of
    height zero draws nothing, and its whisker alone does not say whose it is.
    """
    labels, tasks = data.labels, data.tasks
    fig = new_figure(max(6.0, 1.2 + 0.35 * len(labels) * len(tasks) + 0.6 * len(tasks)), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / len(labels)
    x = np.arange(len(tasks))
    placed: list[tuple[str, str, float, float, str]] = []  # label, task, x, value, colour
    handles, names = [], []
    for i, label in enumerate(labels):
        present = [(j, values[(label, t)]) for j, t in enumerate(tasks) if values.get((label, t)) is not None]
        if not present:
            continue
        xs = [float(x[j] + (i - (len(labels) - 1) / 2) * width) for j, _ in present]
        hs = [float(h) for _, h in present]  # type: ignore[arg-type]
        yerr = None
        if errors is not None:
            spans = [_interval(h, errors.get((label, tasks[j]))) for (j, _), h in zip(present, hs)]
            yerr = [[s[0] for s in spans], [s[1] for s in spans]]
        ax.bar(xs, hs, width * 0.92, color=colour(i), hatch=hatch(i), edgecolor="#333", linewidth=0.6, yerr=yerr,
               capsize=3, error_kw={"elinewidth": 1, "ecolor": "#333"})
        ax.scatter(xs, hs, s=48, marker=marker(i), color=colour(i), edgecolors="black", linewidths=0.7, zorder=4,
                   clip_on=False)
        placed += [(label, tasks[j], xv, h, colour(i)) for (j, _), xv, h in zip(present, xs, hs)]
        handles.append((Patch(facecolor=colour(i), hatch=hatch(i), edgecolor="#333", linewidth=0.6),
                        Line2D([], [], linestyle="none", marker=marker(i), markersize=6, markerfacecolor=colour(i),
                               markeredgecolor="black")))
        names.append(label)
    ax.set_xticks(x, tasks)
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="#333", lw=0.8, zorder=3)
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, -0.05 * high), high)  # room below zero, so a zero marker shows whole, above the spine
    tidy(ax, title, "y")
    if handles:
        legend_below(fig, handles, names)
    chart = render(fig)  # drawn first: the marks' pixels are those of the final layout
    return replace(chart, marks=tuple(Mark(label, task, value, *_pixel(fig, ax, xv, value), col)
                                      for label, task, xv, value, col in placed))


def _pixel(fig: Figure, ax: Axes, x: float, y: float) -> tuple[float, float]:
    """A data point's position in the PNG's pixels (origin top left)."""
    px, py = ax.transData.transform((x, y))
    return float(px), float(fig.bbox.height - py)


def accuracy_bars(data: ReportData) -> Chart:
    """Per-task accuracy with its 95% Wilson interval as error bars."""
    values = {(c.label, c.task): pct(c.value) for c in data.cells}
    errors = {(c.label, c.task): (pct(c.ci_low), pct(c.ci_high)) for c in data.cells
              if c.ci_low is not None and c.ci_high is not None and c.value is not None}
    return _grouped_bars(data, values, errors, "accuracy (%)", "Accuracy per task (95% interval)")


def forwards_bars(data: ReportData) -> Chart | None:
    """Network forwards per generated token: 1 for autoregressive decoding, below 1 when a step commits several."""
    values = {(c.label, c.task): c.forwards_per_token for c in data.cells}
    if all(v is None for v in values.values()):
        return None
    return _grouped_bars(data, values, None, "forwards per generated token", "Forwards per token (lower is better)")


# --- the accuracy-throughput scatter --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Average:
    """One model against the baseline: its per-task (Δ tokens/s, Δ accuracy points), their mean and its mean
    tokens/s ratio."""

    index: int
    label: str
    per_task: tuple[tuple[float, float], ...]
    ratio: float | None

    @property
    def x(self) -> float:
        return float(np.mean([d[0] for d in self.per_task]))

    @property
    def y(self) -> float:
        return float(np.mean([d[1] for d in self.per_task]))

    @property
    def tasks(self) -> int:
        return len(self.per_task)

    @property
    def note(self) -> str:
        return self.label if self.ratio is None else f"{self.label}\n{self.ratio:.2f}× tok/s"

    @property
    def legend(self) -> str:
        speed = "" if self.ratio is None else f" · {self.ratio:.2f}× tok/s"
        return f"{self.label}{speed} ({self.tasks} task{'' if self.tasks == 1 else 's'})"


AVERAGE_SIZE = 120.0  # scatter sizes, in points squared
TASK_SIZE = 18.0
BASELINE_SIZE = 200.0


def _task_deltas(data: ReportData, label: str, base: str) -> list[tuple[float, float, float | None]]:
    """Per shared task: Δ tokens/s, Δ accuracy in points and the tokens/s ratio, against the baseline; none between a
    model served over HTTP and one run in process (their tokens/s are not measured the same way)."""
    out = []
    for task in data.tasks:
        mine, theirs = data.cell(label, task), data.cell(base, task)
        if mine is None or theirs is None or None in (mine.value, theirs.value, mine.tokens_per_second,
                                                      theirs.tokens_per_second) or mine.served != theirs.served:
            continue
        ratio = mine.tokens_per_second / theirs.tokens_per_second if theirs.tokens_per_second else None
        out.append((mine.tokens_per_second - theirs.tokens_per_second, 100 * (mine.value - theirs.value), ratio))
    return out


def _fix_limits(ax: Axes, min_points: float = 2.0) -> None:
    """Freeze the axes' limits before labels are placed, with room around the points and at least ``min_points``
    of Δ accuracy in view (models that all score the same would otherwise get an axis of ±0.05 points)."""
    ax.margins(x=0.12, y=0.2)
    ax.autoscale_view()
    low, high = ax.get_ylim()
    if high - low < min_points:
        middle = (low + high) / 2
        low, high = middle - min_points / 2, middle + min_points / 2
    ax.set_ylim(low, high)
    ax.set_xlim(*ax.get_xlim())


def tradeoff_scatter(data: ReportData) -> Chart | None:
    """Δ accuracy (points) against Δ tokens/s, relative to the baseline model, as the paper's first figure.

    Small dots are single tasks; the large marker is the model's average over the tasks it shares with the baseline,
    labelled beside it where every label fits without overlap, and always named in the legend with its ratio.
    """
    base = data.baseline
    if base is None or not any(label != base for label in data.labels):
        return None
    averages = []
    for i, label in enumerate(data.labels):
        deltas = _task_deltas(data, label, base) if label != base else []
        if deltas:
            per_task = tuple((d[0], d[1]) for d in deltas)
            averages.append(Average(i, label, per_task, mean_or_none([d[2] for d in deltas])))
    if not averages:
        return None
    fig = new_figure(9.0, 5.6)
    ax = fig.add_subplot()
    points: list[tuple[float, float, float]] = [(0.0, 0.0, BASELINE_SIZE)]
    handles: list[Artist] = []
    for average in averages:
        ax.scatter([d[0] for d in average.per_task], [d[1] for d in average.per_task], s=TASK_SIZE,
                   marker=marker(average.index), color=colour(average.index), alpha=0.45)
        handles.append(ax.scatter([average.x], [average.y], s=AVERAGE_SIZE, marker=marker(average.index),
                                  color=colour(average.index), edgecolor="black", zorder=3))
        points += [(x, y, TASK_SIZE) for x, y in average.per_task] + [(average.x, average.y, AVERAGE_SIZE)]
    handles.append(ax.scatter([0], [0], marker="*", s=BASELINE_SIZE, color="black", zorder=4))
    ax.axhline(0, color="#666", lw=0.8)
    ax.axvline(0, color="#666", lw=0.8)
    ax.set_xlabel(f"Δ tokens/s vs {base}")
    ax.set_ylabel(f"Δ accuracy vs {base} (points)")
    tidy(ax, "Accuracy against throughput, relative to the baseline")
    legend_below(fig, handles, [a.legend for a in averages] + [f"baseline: {base}"], marker_scale=0.6)
    _fix_limits(ax)
    fig.canvas.draw()  # lay the figure out, so label extents are measured where they will be drawn
    obstacles = [marker_box(ax, x, y, size) for x, y, size in points]
    labels = place_labels(ax, [((a.x, a.y), a.note) for a in averages], obstacles)
    return render(fig, labels)


# --- latency --------------------------------------------------------------------------------------------------------


def latency_boxes(data: ReportData) -> Chart | None:
    """Per-sample decoder latency of the timed (non-warm-up) samples, one box per model and task (a model served over
    HTTP has its own client-side figures in the served speed table, not a box here)."""
    groups: list[tuple[str, list[float], int]] = []
    for task in data.tasks:
        for i, label in enumerate(data.labels):
            records = data.samples.get((label, task))
            if not records or data.served(label):
                continue
            latencies = [float(r.latency_s) for r in records if not r.warmup]
            if latencies:
                groups.append((f"{label} · {task}", latencies, i))
    if not groups:
        return None
    fig = new_figure(8.5, max(2.2, 0.42 * len(groups) + 1.2))
    ax = fig.add_subplot()
    positions = list(range(len(groups), 0, -1))
    boxes = ax.boxplot([g[1] for g in groups], positions=positions, orientation="horizontal", widths=0.6,
                       patch_artist=True, showfliers=True, flierprops={"markersize": 3})
    for patch, group in zip(boxes["boxes"], groups):
        patch.set_facecolor(colour(group[2]))
        patch.set_hatch(hatch(group[2]))
        patch.set_alpha(0.75)
    ax.set_yticks(positions, [g[0] for g in groups], fontsize=8)
    ax.set_xlabel("latency per sample (s)")
    ax.set_title("Latency distribution (timed samples)", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    _log_if_wide(ax, [v for g in groups for v in g[1]])
    return render(fig)


def _log_if_wide(ax: Axes, values: Sequence[float]) -> None:
    """A log axis when latencies span more than two orders of magnitude (AR vs full-canvas diffusion)."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_xscale("log")


# --- decode order ---------------------------------------------------------------------------------------------------


def order_lines(data: ReportData) -> dict[str, Chart]:
    """Per task, the mean commit step at each position of the answer, one line per model whose samples recorded
    their steps (``reports.decode_order.order_curve``): left-to-right decoding is the diagonal, a decode that
    fills the end first bends below it there. Tasks where no model recorded steps get no figure."""
    out: dict[str, Chart] = {}
    centres = [(b + 0.5) / POSITION_BINS for b in range(POSITION_BINS)]
    for task in data.tasks:
        curves = [(i, label, order_curve(data.samples.get((label, task), [])))
                  for i, label in enumerate(data.labels)]
        curves = [(i, label, curve) for i, label, curve in curves if curve is not None]
        if not curves:
            continue
        fig = new_figure(7.0, 4.6)
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1], color="#999", lw=0.8, ls="--", zorder=1)
        handles = []
        for i, label, curve in curves:
            points = [(x, y) for x, y in zip(centres, curve) if y is not None]
            handles.append(ax.plot([p[0] for p in points], [p[1] for p in points], color=colour(i),
                                   marker=marker(i), markersize=4, lw=1.6)[0])
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("position in the answer (fraction of its tokens)")
        ax.set_ylabel("mean commit step (fraction of the sample's forwards)")
        tidy(ax, f"Decode order: {task}")
        legend_below(fig, handles + [Line2D([], [], color="#999", lw=0.8, ls="--")],
                     [c[1] for c in curves] + ["strictly left to right"])
        out[task] = render(fig)
    return out


# --- pass@k of repeated samples -------------------------------------------------------------------------------------

LOG_K_FROM = 16  # a curve to k = 16 or more is drawn on a log2 axis (pass@k moves most at small k)


def pass_at_curves(data: ReportData) -> dict[str, Chart]:
    """Per task where some model drew K > 1 samples per item of a 0/1 metric, pass@k in % for k = 1..K, one line
    per such model with its item-clustered 95% interval shaded; a mark at every point (``Chart.marks``, in k order
    per model)."""
    out: dict[str, Chart] = {}
    for task in repeated_tasks(data):
        cells = repeated_cells(data, task, with_pass_at=True)
        if not cells:
            continue  # a graded metric: no pass@k
        fig = new_figure(7.0, 4.6)
        ax = fig.add_subplot()
        handles, names, placed = [], [], []
        for i, cell in cells:
            r = cell.repeated
            assert r is not None
            points = [(k, e) for k, e in enumerate(r.pass_at, start=1) if e.value is not None]
            ks = [k for k, _ in points]
            ys = [100.0 * e.value for _, e in points]  # type: ignore[operator]
            bounded = [(k, e) for k, e in points if e.ci_low is not None and e.ci_high is not None]
            if bounded:
                ax.fill_between([k for k, _ in bounded], [100.0 * e.ci_low for _, e in bounded],  # type: ignore
                                [100.0 * e.ci_high for _, e in bounded], color=colour(i), alpha=0.15, lw=0)
            handles.append(ax.plot(ks, ys, color=colour(i), marker=marker(i), markersize=5 if len(ks) <= 16 else 3,
                                   lw=1.6, markeredgecolor="black", markeredgewidth=0.6, clip_on=False, zorder=3)[0])
            items = "" if r.items is None else f", {r.items} items"
            names.append(f"{cell.label} (K = {r.samples_per_item}{items})")
            placed += [(cell.label, float(k), y, colour(i)) for k, y in zip(ks, ys)]
        largest = max(c.repeated.samples_per_item for _, c in cells)  # type: ignore[union-attr]
        _k_axis(ax, largest)
        ax.set_ylim(0, 100)
        ax.set_xlabel("k (samples drawn per item)")
        ax.set_ylabel("pass@k (%)")
        tidy(ax, f"pass@k: {task} (95% interval, clustered by item)")
        legend_below(fig, handles, names, most_columns=2)
        chart = render(fig)
        out[task] = replace(chart, marks=tuple(Mark(label, task, y, *_pixel(fig, ax, k, y), col)
                                               for label, k, y, col in placed))
    return out


def _k_axis(ax: Axes, largest: int) -> None:
    """Whole k only: every k up to 15, else a log2 axis ticked at the powers of two and the largest K."""
    if largest >= LOG_K_FROM:
        ax.set_xscale("log", base=2)
        ticks = sorted({2 ** e for e in range(int(np.log2(largest)) + 1)} | {largest})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())  # a log axis' minor ticks would be labelled 3, 5, 6, 7, ...
        ax.set_xlim(0.9, largest * 1.1)
    else:
        ax.set_xticks(range(1, largest + 1))
        ax.set_xlim(0.7, largest + 0.3)
