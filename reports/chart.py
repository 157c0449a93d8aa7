"""The drawing surface the report's charts share: a figure with an Agg canvas, its PNG as a data URI, and where its
texts and value marks landed in that PNG.

A data URI keeps the HTML self-contained: the page loads nothing from anywhere. Each chart also says where its texts
and value marks landed in the PNG (``Chart``), so a test can check from the geometry that no two texts overlap and
that every value, zero included, has a visible mark.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Iterable, Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
# Shape and hatch tell models apart where colour cannot (grey print, colour-blind readers, a bar of height zero).
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "h", "<", ">")
HATCHES = ("", "///", "...", "xxx", "\\\\\\", "+++", "---", "ooo", "|||", "***")
DPI = 100
MAX_WIDTH_IN = 12.0  # the page's column is about 1220 px: a wider PNG would be scaled down and its text shrunk


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


def text_extent(text: Text, renderer: object) -> Bbox:
    """The extent of a text's glyphs alone (an annotation's own extent also covers its leader line)."""
    if isinstance(text, Annotation):
        text.update_positions(renderer)  # an annotation's text is positioned relative to its point only when drawn
    return Text.get_window_extent(text, renderer)
