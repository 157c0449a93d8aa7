"""Labels beside a scatter's points, placed where they overlap no other label, marker or leader line."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from reports.chart import text_extent

LABEL_GAP_PX = 2.0  # the free space a point label keeps around itself
NEAR_PT = 12.0  # a label further from its point than this gets a leader line to it
# Where a point label may go, in points from its point (left, right or centred on it, above or below), nearest first.
LABEL_OFFSETS_PT = tuple(sorted(((dx, dy) for dy in (5, -5, 14, -14, 26, -26, 40, -40, 56, -56, 74, -74, 94, -94)
                                 for dx in (7, -7, 0, 24, -24, 48, -48, 80, -80)), key=lambda o: math.hypot(*o)))


def marker_box(ax: Axes, x: float, y: float, size: float) -> Bbox:
    """The display-space square a scatter marker of ``size`` (points squared) covers, edge included."""
    cx, cy = ax.transData.transform((x, y))
    radius = (math.sqrt(size) / 2 + 1) * ax.figure.dpi / 72
    return Bbox.from_extents(cx - radius, cy - radius, cx + radius, cy + radius)


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


def place_label(ax: Axes, point: tuple[float, float], note: str, placement: Placement) -> Text | None:
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


def place_labels(ax: Axes, notes: Sequence[tuple[tuple[float, float], str]], obstacles: list[Bbox]) -> list[Text]:
    """A label beside every (point, text), none overlapping another label, a marker or a leader line; all or none.

    All or none: a chart with some points labelled and others not reads as if the unlabelled ones were something
    else. When none are placed, the chart's legend must be the key.
    """
    placement = Placement(list(obstacles), [], [])
    placed: list[Text] = []
    for point, note in notes:
        text = place_label(ax, point, note, placement)
        if text is None:
            for done in placed:
                done.remove()
            return []
        placed.append(text)
    return placed
