"""The report's figures read at a glance, checked from where matplotlib drew each text and mark in the PNG.

The browser test (test_chromium.py) checks the same geometry on the page as displayed; these run without a browser.
"""

from __future__ import annotations

import base64
import io
import itertools

import pytest
from PIL import Image

from reports import figures
from reports.chart import Box, Chart, new_figure, render
from reports.report_data import gather, short_run_names


def overlapping(boxes: tuple[Box, ...]) -> list[tuple[str, str]]:
    return [(a.text, b.text) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]


def outside(chart: Chart) -> list[str]:
    return [b.text for b in chart.texts if b.x0 < 0 or b.y0 < 0 or b.x1 > chart.width or b.y1 > chart.height]


def pixels(chart: Chart) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(chart.uri.split(",", 1)[1]))).convert("RGB")


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


@pytest.mark.parametrize("names, short", [
    (["qwen3+refusion__gsm8k__1a2b3c4d", "qwen3+refusion__gsm8k__9f8e7d6c"], ["1a2b3c4d", "9f8e7d6c"]),
    (["qwen3-8b-paper-gen512", "qwen3-8b-paper-gen256"], ["gen512", "gen256"]),
    (["baseline", "ci"], ["baseline", "ci"]),
    (["run", "run"], ["run#1", "run#2"]),  # the same run twice: only the position tells them apart
    (["run", "run_v2"], ["run", "run_v2"]),  # one name is the shared part: the whole names
    (["a-very-long-experiment-name-alpha", "another-completely-different-one"],
     ["a-very-long-exp…", "another-complet…"]),
    (["x__alpha-beta-gamma-delta-epsilon-1", "x__alpha-beta-gamma-delta-epsilon-2"], ["1", "2"]),
    (["only-one-run__gsm8k__1a2b3c4d"], ["only-one-run__gsm8k__1a2b3c4d"]),
])
def test_short_run_names_keep_what_tells_runs_apart(names, short):
    assert short_run_names(names) == short


def test_models_in_two_runs_get_short_labels(crowded_runs):
    data = gather(crowded_runs)
    assert data.labels == ("tiny-qwen3 @ 1a2b3c4d", "tiny-llada @ 1a2b3c4d", "tiny-refusion @ 1a2b3c4d",
                           "tiny-qwen3 @ 9f8e7d6c", "tiny-llada @ 9f8e7d6c", "tiny-refusion @ 9f8e7d6c")
    assert data.baseline == "tiny-qwen3 @ 1a2b3c4d"


def test_crowded_scatter_labels_every_point_without_overlap(crowded_runs):
    chart = figures.tradeoff_scatter(gather(crowded_runs))
    assert chart is not None
    assert len(chart.point_labels) == 5  # every model but the baseline, labelled beside its marker
    assert "tiny-refusion @ 1a2b3c4d\n0.06× tok/s" in {b.text for b in chart.point_labels}
    assert overlapping(chart.texts) == [] and outside(chart) == []
    assert chart.width <= 1220  # shown at its own size in the page's column, not scaled down


def test_labels_that_cannot_all_fit_leave_the_legend_as_the_key(tmp_path, rf):
    """Nine models on one point: no placement exists, so no point labels at all; the legend names every model."""
    entries = [rf.Entry("base", "gsm8k", rf.samples([1.0, 0.0]), tps_override=100.0)]
    entries += [rf.Entry(f"model-{i}", "gsm8k", rf.samples([1.0, 0.0]), kind="llada", tps_override=50.0)
                for i in range(9)]
    chart = figures.tradeoff_scatter(gather([rf.write_run(tmp_path / "run", entries)]))
    assert chart is not None and chart.point_labels == ()
    texts = {b.text for b in chart.texts}
    assert all(f"model-{i} · 0.50× tok/s (1 task)" in texts for i in range(9))
    assert overlapping(chart.texts) == [] and outside(chart) == []


def test_the_overlap_check_catches_labels_drawn_at_a_fixed_offset(crowded_runs):
    """Negative control: the labels as the report drew them before (every one up and right of its point) overlap."""
    fig = new_figure(7.5, 4.8)
    ax = fig.add_subplot()
    ax.scatter([0.0], [0.0], marker="*")  # the baseline at the origin, as in the report
    for x in (-169.0, -166.0, -160.0, -157.0):
        ax.scatter([x], [0.0])
        ax.annotate(f"tiny-model @ run\n{x}", (x, 0.0), textcoords="offset points", xytext=(8, 6), fontsize=8)
    assert len(overlapping(render(fig).texts)) >= 3


def test_zero_bars_each_show_a_mark_in_their_model_colour(crowded_runs):
    data = gather(crowded_runs)
    chart = figures.accuracy_bars(data)
    assert len(chart.marks) == len(data.labels) * len(data.tasks) and all(m.value == 0.0 for m in chart.marks)
    image = pixels(chart)
    for mark in chart.marks:
        centre = image.getpixel((round(mark.x), round(mark.y)))
        assert all(abs(a - b) <= 40 for a, b in zip(centre, rgb(mark.colour))), (mark, centre)
    for task in data.tasks:
        xs = sorted(m.x for m in chart.marks if m.task == task)
        assert min(b - a for a, b in zip(xs, xs[1:])) >= 8  # side by side, not on top of each other
        assert len({m.colour for m in chart.marks if m.task == task}) == len(data.labels)
    assert overlapping(chart.texts) == [] and outside(chart) == []


def test_every_chart_keeps_its_texts_apart_and_inside(crowded_runs):
    data = gather(crowded_runs)
    for chart in (figures.forwards_bars(data), figures.latency_boxes(data)):
        assert chart is not None and chart.width <= 1220
        assert overlapping(chart.texts) == [] and outside(chart) == []
