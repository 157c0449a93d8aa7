"""The report's charts, drawn with matplotlib's object API (no pyplot state) and returned as PNG data URIs.

A data URI keeps the HTML self-contained: the page loads nothing from anywhere. Each chart also says where its texts
and value marks landed in the PNG (``Chart``), so a test can check from the geometry that no two texts overlap and
that every value, zero included, has a visible mark.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

from reports.report_data import ReportData
from reports.tables import mean_or_none, pct

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
# Shape and hatch tell models apart where colour cannot (grey print, colour-blind readers, a bar of height zero).
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "h", "<", ">")
HATCHES = ("", "///", "...", "xxx", "\\\\\\", "+++", "---", "ooo", "|||", "***")
DPI = 100
MAX_WIDTH_IN = 12.0  # the page's column is about 1220 px: a wider PNG would be scaled down and its text shrunk
LABEL_GAP_PX = 2.0  # the free space a point label keeps around itself
NEAR_PT = 12.0  # a label further from its point than this gets a leader line to it
# Where a point label may go, in points from its point (left, right or centred on it, above or below), nearest first.
LABEL_OFFSETS_PT = tuple(sorted(((dx, dy) for dy in (5, -5, 14, -14, 26, -26, 40, -40, 56, -56, 74, -74, 94, -94)
                                 for dx in (7, -7, 0, 24, -24, 48, -48, 80, -80)), key=lambda o: math.hypot(*o)))


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def marker(index: int) -> str:
    return MARKERS[index % len(MARKERS)]


def hatch(index: int) -> str:
    return HATCHES[index % len(HATCHES)]


@dataclass(frozen=True)
class Box:
    """A drawn text's extent in the PNG's pixels (origin top left, y down), with the text it shows."""

    text: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


@dataclass(frozen=True)
class Mark:
    """Where one (model, task) value is marked on a bar chart: the marker's centre in PNG pixels and its colour."""

    label: str
    task: str
    value: float
    x: float
    y: float
    colour: str


@dataclass(frozen=True)
class Chart:
    """A rendered chart: the PNG as a data URI, its size in pixels, and where its texts and marks were drawn."""

    uri: str
    width: int
    height: int
    texts: tuple[Box, ...]  # every text drawn: title, axis and tick labels, legend entries, point labels
    point_labels: tuple[Box, ...] = ()  # the scatter's labels beside points; empty when the legend alone names them
    marks: tuple[Mark, ...] = ()


def new_figure(width_in: float, height_in: float) -> Figure:
    """A figure with an Agg canvas (text extents need a renderer) and constrained layout, which makes room for a
    legend outside the axes without cropping, so the PNG's pixels are the figure's own coordinates."""
    fig = Figure(figsize=(min(width_in, MAX_WIDTH_IN), height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_data_uri(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)  # no bbox_inches: cropping would shift every recorded position
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def to_box(fig: Figure, bbox: Bbox, text: str = "") -> Box:
    """A display-space Bbox (origin bottom left) as PNG pixels (origin top left)."""
    height = fig.bbox.height
    return Box(text, bbox.x0, height - bbox.y1, bbox.x1, height - bbox.y0)


def drawn_texts(fig: Figure) -> list[Text]:
    """The texts a reader sees: titles, axis labels, tick labels in view, annotations and legend entries."""
    texts: list[Text] = []
    for ax in fig.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        texts += _in_view(ax.get_xticklabels(), ax.get_xlim(), 0) + _in_view(ax.get_yticklabels(), ax.get_ylim(), 1)
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    for legend in fig.legends:
        texts += legend.get_texts()
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def _in_view(labels: Sequence[Text], limits: tuple[float, float], along: int) -> list[Text]:
    """The tick labels matplotlib draws: those of ticks within the axis' limits (it keeps others, undrawn)."""
    low, high = sorted(limits)
    span = 1e-9 * (high - low)
    return [t for t in labels if low - span <= t.get_position()[along] <= high + span]


def render(fig: Figure, point_labels: Sequence[Text] = ()) -> Chart:
    """Draw the figure once into a PNG and record where its texts landed in that same drawing."""
    uri = to_data_uri(fig)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]

    def boxes(texts: Iterable[Text]) -> tuple[Box, ...]:
        return tuple(to_box(fig, text_extent(t, renderer), t.get_text()) for t in texts)

    return Chart(uri, int(round(fig.bbox.width)), int(round(fig.bbox.height)), boxes(drawn_texts(fig)),
                 boxes(point_labels))


def tidy(ax: Axes, title: str, grid_axis: str = "both") -> None:
    ax.set_title(title, fontsize=11)
    ax.grid(axis=grid_axis, alpha=0.3)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def legend_below(fig: Figure, handles: Sequence[object], names: Sequence[str], most_columns: int = 4,
                 marker_scale: float = 1.0) -> None:
    """The legend under the axes, so long names take height rather than squeezing the plot sideways; in as many
    columns as fit the figure's width (a legend wider than the figure would be cut off at the PNG's edges)."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for columns in range(min(len(names), most_columns), 0, -1):
        legend = fig.legend(handles, names, loc="outside lower center", ncols=columns, fontsize=8, frameon=False,
                            markerscale=marker_scale)
        if columns == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width - 8:
            return
        legend.remove()


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
    """Per shared task: Δ tokens/s, Δ accuracy in points and the tokens/s ratio, against the baseline."""
    out = []
    for task in data.tasks:
        mine, theirs = data.cell(label, task), data.cell(base, task)
        if mine is None or theirs is None or None in (mine.value, theirs.value, mine.tokens_per_second,
                                                      theirs.tokens_per_second):
            continue
        ratio = mine.tokens_per_second / theirs.tokens_per_second if theirs.tokens_per_second else None
        out.append((mine.tokens_per_second - theirs.tokens_per_second, 100 * (mine.value - theirs.value), ratio))
    return out


def _marker_box(ax: Axes, x: float, y: float, size: float) -> Bbox:
    """The display-space square a scatter marker of ``size`` (points squared) covers, edge included."""
    cx, cy = ax.transData.transform((x, y))
    radius = (math.sqrt(size) / 2 + 1) * ax.figure.dpi / 72
    return Bbox.from_extents(cx - radius, cy - radius, cx + radius, cy + radius)


def text_extent(text: Text, renderer: object) -> Bbox:
    """The extent of a text's glyphs alone (an annotation's own extent also covers its leader line)."""
    if isinstance(text, Annotation):
        text.update_positions(renderer)  # an annotation's text is positioned relative to its point only when drawn
    return Text.get_window_extent(text, renderer)


def _leader(point: np.ndarray, box: Bbox) -> np.ndarray:
    """Points along the leader line, from the label's nearest edge to its point (the sampling is finer than any text
    is tall, so a leader crossing a label always puts a point inside it)."""
    edge = np.clip(point, [box.x0, box.y0], [box.x1, box.y1])
    return edge + np.linspace(0.0, 1.0, 40)[:, None] * (point - edge)


@dataclass
class Placement:
    """What labels already cover: markers and placed labels (boxes), and the leader lines drawn to far labels."""

    obstacles: list[Bbox]
    labels: list[Bbox]
    leaders: list[np.ndarray]

    def free(self, box: Bbox, leader: np.ndarray | None) -> bool:
        if any(box.overlaps(other) for other in self.obstacles + self.labels):
            return False
        if any(box.count_contains(points) for points in self.leaders):
            return False
        return leader is None or not any(label.count_contains(leader) for label in self.labels)


def _place_label(ax: Axes, point: tuple[float, float], note: str, placement: Placement) -> Text | None:
    """The first candidate position around the point whose text stays inside the axes and clear of the markers,
    the labels and the leader lines placed so far; None when every candidate collides."""
    renderer = ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    inside = ax.get_window_extent(renderer)
    anchor = np.asarray(ax.transData.transform(point), dtype=float)
    for dx, dy in LABEL_OFFSETS_PT:
        far = abs(dx) + abs(dy) > NEAR_PT
        text = ax.annotate(note, point, textcoords="offset points", xytext=(dx, dy), fontsize=8,
                           arrowprops={"arrowstyle": "-", "color": "#777", "lw": 0.6, "shrinkA": 0, "shrinkB": 5}
                           if far else None,
                           ha="left" if dx > 0 else "right" if dx < 0 else "center", va="bottom" if dy > 0 else "top")
        text.set_in_layout(False)  # placing a label must not move the axes it was placed in
        box = text_extent(text, renderer).padded(LABEL_GAP_PX)
        leader = _leader(anchor, box) if far else None
        if (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
                and placement.free(box, leader)):
            placement.labels.append(box)
            if leader is not None:
                placement.leaders.append(leader)
            return text
        text.remove()
    return None


def place_labels(ax: Axes, averages: Sequence[Average], obstacles: list[Bbox]) -> list[Text]:
    """Labels beside every average marker, none overlapping another label, a marker or a leader line; all or none.

    All or none: a chart with some points labelled and others not reads as if the unlabelled ones were something
    else. When none are placed, the legend (which always names every model and its ratio) is the key.
    """
    placement = Placement(list(obstacles), [], [])
    placed: list[Text] = []
    for average in averages:
        text = _place_label(ax, (average.x, average.y), average.note, placement)
        if text is None:
            for done in placed:
                done.remove()
            return []
        placed.append(text)
    return placed


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
    obstacles = [_marker_box(ax, x, y, size) for x, y, size in points]
    labels = place_labels(ax, averages, obstacles)
    return render(fig, labels)


# --- latency --------------------------------------------------------------------------------------------------------


def latency_boxes(data: ReportData) -> Chart | None:
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
