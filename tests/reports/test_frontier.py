"""The frontier's statistics on synthetic sweeps whose answers are known by construction.

Sweep folders are written in the sweep's own format (sweep.json from harness.sweep.plan, each point a run folder
in the runner's format), so the frontier reads them exactly as it reads a real sweep.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from harness.sweep.crossover import crossings
from harness.files import write_json_atomic
from harness.sweep.plan import PLAN_NAME, Point, SweepPlan
from reports.frontier.frame import build_frontier, frontier_frame, pareto_mask
from reports.frontier.page import write_frontier

N = 60


def write_sweep(root: Path, rf, points: dict[Point, tuple[list[float], float]], references: dict[str, Point],
                task: str = "gsm8k") -> SweepPlan:
    """One run folder per point with the given per-item scores and tokens/s, and the plan that lists them."""
    for point, (scores, tps) in points.items():
        entry = rf.Entry(point.model, task, rf.samples(scores), decoding=dict(point.overrides), tps_override=tps)
        rf.write_run(root / point.name, [entry])
    models = tuple(dict.fromkeys(p.model for p in points))
    plan = SweepPlan(root, models, (task,), tuple(points), {m: p.name for m, p in references.items()}, 0.05)
    write_json_atomic(root / PLAN_NAME, plan.to_json())
    return plan


def ref_scores() -> list[float]:
    return [1.0 if i % 4 else 0.0 for i in range(N)]  # 45 of 60 right


def flipped(scores: list[float], right_to_wrong: int, wrong_to_right: int = 0) -> list[float]:
    """``right_to_wrong`` right items made wrong and ``wrong_to_right`` wrong items made right, by construction."""
    out = list(scores)
    rights = [i for i, s in enumerate(scores) if s == 1.0][:right_to_wrong]
    wrongs = [i for i, s in enumerate(scores) if s == 0.0][:wrong_to_right]
    for i in rights:
        out[i] = 0.0
    for i in wrongs:
        out[i] = 1.0
    return out


@pytest.fixture
def scripted(tmp_path, rf):
    """tiny-refusion at four thresholds: the reference; a faster one with two discordant items (noise); a slightly
    faster one that gained items; and the fastest, made worse by construction (20 items right at the reference
    are wrong there)."""
    model = "tiny-refusion"
    ref = Point(model, (("slot_threshold", "0.9"),), 1)
    noise = Point(model, (("slot_threshold", "0.7"),), 1)
    gain = Point(model, (("slot_threshold", "0.8"),), 1)
    worse = Point(model, (("slot_threshold", "0.3"),), 1)
    base = ref_scores()
    points = {ref: (base, 10.0), noise: (flipped(base, 1, 1), 30.0), gain: (flipped(base, 0, 3), 15.0),
              worse: (flipped(base, 20), 50.0)}
    write_sweep(tmp_path, rf, points, {model: ref})
    return tmp_path, ref, noise, gain, worse


def test_point_worse_by_construction_is_flagged_and_left_off_matched_accuracy(scripted):
    root, ref, noise, gain, worse = scripted
    frame = frontier_frame(root).set_index("point")
    assert bool(frame.loc[worse.name, "significantly_worse"]) and not bool(frame.loc[worse.name, "matched"])
    assert (frame.loc[worse.name, "right_to_wrong"], frame.loc[worse.name, "wrong_to_right"]) == (20, 0)
    for p in (ref, noise, gain):
        assert bool(frame.loc[p.name, "matched"]) and not bool(frame.loc[p.name, "significantly_worse"])
    assert bool(frame.loc[ref.name, "is_reference"]) and math.isnan(frame.loc[ref.name, "p_value"])
    # the headline skips the fastest point (worse) and names the fastest matched one: 30 / 10 tokens/s
    (head,) = build_frontier(root).headlines
    assert head.point == noise.name and head.speedup == pytest.approx(3.0)
    assert "slot_threshold=0.7" in head.text and "3.00x the reference's tokens/s" in head.text


def test_p_values_are_exact_mcnemar_holm_corrected_over_the_models_points(scripted):
    root, ref, noise, gain, worse = scripted
    frame = frontier_frame(root).set_index("point")
    # independent: a two-sided binomial test on the discordant pairs of each point, then Holm by hand
    raw = {noise.name: scipy_stats.binomtest(1, 2, 0.5).pvalue, gain.name: scipy_stats.binomtest(0, 3, 0.5).pvalue,
           worse.name: scipy_stats.binomtest(20, 20, 0.5).pvalue}
    names = list(raw)
    for name, p in raw.items():
        assert frame.loc[name, "p_value"] == pytest.approx(p)
    ordered = sorted(names, key=raw.get)
    holm, running = {}, 0.0
    for rank, name in enumerate(ordered):
        running = max(running, min(1.0, (len(names) - rank) * raw[name]))
        holm[name] = running
    for name in names:
        assert frame.loc[name, "p_holm"] == pytest.approx(holm[name])
    assert holm[worse.name] < 1e-4 and holm[noise.name] == 1.0


def test_pareto_frontier_and_speedups(scripted):
    root, ref, noise, gain, worse = scripted
    frame = frontier_frame(root).set_index("point")
    # accuracy: ref 45, noise 45, gain 48, worse 25 (of 60); speed 10, 30, 15, 50 tokens/s
    assert {n for n in frame.index if frame.loc[n, "pareto"]} == {noise.name, gain.name, worse.name}
    assert frame.loc[worse.name, "speedup"] == pytest.approx(5.0)
    assert frame.loc[gain.name, "accuracy"] == pytest.approx(48 / 60)
    lo, hi = frame.loc[gain.name, ["ci_low", "ci_high"]]
    assert lo < 48 / 60 < hi  # the interval the run's aggregate wrote (Wilson for 0/1 scores)


def test_pareto_mask_by_hand():
    assert pareto_mask([0.5, 0.6, 0.4, 0.6, None], [10, 5, 20, 5, 100]) == [True, True, True, True, False]
    assert pareto_mask([0.5, 0.4], [10, 9]) == [True, False]


def test_files_and_page(scripted):
    root, ref, noise, gain, worse = scripted
    html = write_frontier(root).read_text(encoding="utf-8")
    table = pd.read_csv(root / "frontier.csv")
    assert len(table) == 4 and set(table["point"]) == {ref.name, noise.name, gain.name, worse.name}
    assert "fastest point whose accuracy is not significantly below the reference" in html
    assert "data:image/png;base64," in html and "default-src 'none'" in html
    sources = re.findall(r'src="([^"]*)"', html)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)  # self-contained: loads nothing
    body = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html.split("<body>")[1])
    assert "<script" not in html and "http" not in body


def test_missing_point_is_noted_not_fatal(scripted):
    root, ref, noise, gain, worse = scripted
    (root / worse.name / "results.json").unlink()
    frontier = build_frontier(root)
    assert worse.name not in set(frontier.frame["point"]) and any(worse.name in n for n in frontier.notes)


# --- batch-size crossovers --------------------------------------------------------------------------------------

def test_crossover_between_measured_sizes_is_the_log_linear_root():
    # differences +5 at batch 1 and -5 at batch 4: linear in log2(batch), zero half way, at batch 2
    (c,) = crossings({1: 10.0, 4: 20.0, 16: 30.0}, {1: 5.0, 4: 25.0, 16: 60.0})
    assert c.batch_size == pytest.approx(2.0) and c.faster_after == 1
    # +6 at 2 and -2 at 32: root at log2 = 1 + 4 * 6/8 = 4, batch 16
    (c,) = crossings({2: 16.0, 32: 20.0}, {2: 10.0, 32: 22.0})
    assert c.batch_size == pytest.approx(16.0) and c.faster_after == 1


def test_crossover_edge_cases():
    assert crossings({1: 10.0, 4: 20.0}, {1: 5.0, 4: 15.0}) == []  # one faster throughout
    (c,) = crossings({1: 10.0, 4: 20.0, 16: 30.0}, {1: 5.0, 4: 20.0, 16: 40.0})  # equal at a measured size
    assert c.batch_size == pytest.approx(4.0) and c.faster_after == 1
    # different measured sizes: the second curve is interpolated at the first's sizes (at 4: 5 + (50-5)/2 = 27.5)
    (c,) = crossings({1: 10.0, 4: 20.0, 16: 30.0}, {1: 5.0, 16: 50.0})
    expected = 2 ** (0 + 2 * 5.0 / (5.0 + 7.5))
    assert c.batch_size == pytest.approx(expected)
    two = crossings({1: 10.0, 4: 20.0, 16: 10.0}, {1: 12.0, 4: 12.0, 16: 12.0})  # crosses up, then back down
    assert [x.faster_after for x in two] == [0, 1]
    assert crossings({4: 1.0, 8: 2.0}, {16: 1.0, 32: 3.0}) == []  # no overlap: nothing to say


def test_crossover_table_from_synthetic_timings(tmp_path, rf):
    """An AR model that scales with the batch and a diffusion model that does not: AR overtakes at batch 4 exactly
    (tokens/s 20 vs 40 at batch 1, 60 vs 40 at batch 16: differences -20 and +20, zero half way in log2, at 4)."""
    scores = ref_scores()
    points = {}
    for batch, ar_tps in ((1, 20.0), (16, 60.0)):
        points[Point("tiny-qwen3", (), batch)] = (scores, ar_tps)
        points[Point("tiny-refusion", (), batch)] = (scores, 40.0)
    refs = {"tiny-qwen3": Point("tiny-qwen3", (), 1), "tiny-refusion": Point("tiny-refusion", (), 1)}
    write_sweep(tmp_path, rf, points, refs)
    table = build_frontier(tmp_path).crossovers
    (row,) = table.itertuples()
    assert row.crossover_batch_size == pytest.approx(4.0) and row.faster_above == "tiny-qwen3"
    assert "tiny-qwen3 overtakes tiny-refusion at batch size ≈ 4.0" in row.text
    page = write_frontier(tmp_path).read_text(encoding="utf-8")
    assert "overtakes" in page and "log2(batch size)" in page
