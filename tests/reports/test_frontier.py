"""The frontier's statistics on synthetic sweeps whose answers are known by construction.

Sweep folders are written in the sweep's own format (sweep.json from harness.sweep.plan, each point a run folder
in the runner's format), so the frontier reads them exactly as it reads a real sweep.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from harness.sweep.crossover import crossings
from harness.files import write_json_atomic
from harness.sweep.plan import PLAN_NAME, Point, SweepPlan, SweepTiming
from reports.frontier.frame import build_frontier, frontier_frame, pareto_mask
from reports.frontier.noise import FASTER, UNTESTED, WITHIN_NOISE, pass_ratio
from reports.frontier.page import scatter_chart, write_frontier

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


def write_timing(root: Path, passes: dict[Point, list[float]], task: str = "gsm8k") -> None:
    """A sweep_timing.json whose passes give these tokens/s (100 tokens per pass), in the sweep's own format."""
    names = [p.name for p in passes]
    repeats = len(next(iter(passes.values())))
    order = tuple(tuple(names if r % 2 == 0 else names[::-1]) for r in range(repeats))
    timed = {p.name: {task: [(100, 100 / tps) for tps in values]} for p, values in passes.items()}
    SweepTiming(repeats, 4, order, timed).write(root)


def jittered(tps: float, seed: int, spread: float = 0.03, repeats: int = 6) -> list[float]:
    """``repeats`` passes around ``tps``, each off by at most ``spread`` (deterministic)."""
    rng = np.random.default_rng(seed)
    return list(tps * (1 + rng.uniform(-spread, spread, repeats)))


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
    # the headline skips the fastest point (worse) and names the fastest matched one: 30 / 10 tokens/s, from the
    # runs' own timing alone (no timing passes), so it claims no supported speed-up
    (head,) = build_frontier(root).headlines
    assert head.point == noise.name and head.speedup == pytest.approx(3.0) and not head.supported
    assert "slot_threshold=0.7" in head.text and "3.00x the reference's tokens/s" in head.text
    assert "one timing pass: no 95% interval, not tested against noise" in head.text
    assert frame.loc[noise.name, "speedup_verdict"] == UNTESTED and frame.loc[noise.name, "timing_passes"] == 1


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


def ar_and_diffusion(tmp_path, rf, ar: dict[int, float], diffusion: dict[int, float]) -> tuple[Point, ...]:
    """An AR model (tiny-qwen3) and a diffusion model (tiny-refusion) at their defaults, measured at batch sizes 1
    and 16 with these runs' own tokens/s."""
    scores = ref_scores()
    points = {}
    for batch in (1, 16):
        points[Point("tiny-qwen3", (), batch)] = (scores, ar[batch])
        points[Point("tiny-refusion", (), batch)] = (scores, diffusion[batch])
    refs = {"tiny-qwen3": Point("tiny-qwen3", (), 1), "tiny-refusion": Point("tiny-refusion", (), 1)}
    write_sweep(tmp_path, rf, points, refs)
    return tuple(points)


def test_crossover_the_timing_supports(tmp_path, rf):
    """AR scales with the batch and diffusion does not: AR overtakes at batch 4 (tokens/s 20 vs 40 at batch 1, 60
    vs 40 at batch 16: differences -20 and +20, zero half way in log2, at 4), in every one of six passes, each
    point off by at most 3%: the ratio's interval is below 1 at batch 1 and above 1 at 16, so it is reported."""
    ar, diffusion = {1: 20.0, 16: 60.0}, {1: 40.0, 16: 40.0}
    points = ar_and_diffusion(tmp_path, rf, ar, diffusion)
    tps = {**ar, **{-b: v for b, v in diffusion.items()}}
    write_timing(tmp_path, {p: jittered(tps[p.batch_size if p.model == "tiny-qwen3" else -p.batch_size], seed)
                            for seed, p in enumerate(points)})
    (row,) = build_frontier(tmp_path).crossovers.itertuples()
    assert row.supported and row.faster_above == "tiny-qwen3"
    assert row.crossover_batch_size == pytest.approx(4.0, rel=0.1)  # medians of ±3% passes: near 4
    assert "tiny-qwen3 overtakes tiny-refusion at batch size ≈" in row.text and "95% interval" in row.text
    page = write_frontier(tmp_path).read_text(encoding="utf-8")
    assert "overtakes" in page and "log2(batch size)" in page


def test_crossover_within_noise_is_not_reported(tmp_path, rf):
    """The median curves cross (AR 39 -> 41 tokens/s, diffusion 40 flat), but every point swings ±15% from pass to
    pass: the ratio's interval includes 1 on both sides, so the frontier says "within noise" and gives no batch
    size (the median crossing is kept in its own column)."""
    ar, diffusion = {1: 39.0, 16: 41.0}, {1: 40.0, 16: 40.0}
    points = ar_and_diffusion(tmp_path, rf, ar, diffusion)
    swings = [0.85, 1.15, 0.9, 1.1, 0.95, 1.05]
    passes = {p: [v * (ar if p.model == "tiny-qwen3" else diffusion)[p.batch_size]
                  for v in (swings if i % 2 else swings[::-1])] for i, p in enumerate(points)}
    write_timing(tmp_path, passes)
    frontier = build_frontier(tmp_path)
    (row,) = frontier.crossovers.itertuples()
    assert not row.supported and pd.isna(row.crossover_batch_size) and row.median_crossing > 1
    assert "within noise, no crossover the timing supports" in row.text and "overtakes" not in row.text
    page = write_frontier(tmp_path, frontier).read_text(encoding="utf-8")
    assert "within noise" in page and "overtakes" not in page


def test_one_pass_crossover_is_not_claimed(tmp_path, rf):
    """Without timing passes (a sweep run with --repeats 1) the runs' own tokens/s still cross at batch 4, but one
    pass cannot tell that from noise: no crossover is reported."""
    ar_and_diffusion(tmp_path, rf, {1: 20.0, 16: 60.0}, {1: 40.0, 16: 40.0})
    (row,) = build_frontier(tmp_path).crossovers.itertuples()
    assert not row.supported and pd.isna(row.crossover_batch_size) and row.median_crossing == pytest.approx(4.0)
    assert "not tested against noise" in row.text


def test_separate_curves_say_where_the_noise_is(tmp_path, rf):
    """No crossing: AR clearly faster at batch 16 (2x), within noise at batch 1 (40 vs 39 with ±15% swings)."""
    points = ar_and_diffusion(tmp_path, rf, {1: 40.0, 16: 80.0}, {1: 39.0, 16: 40.0})
    swings = [0.85, 1.15, 0.9, 1.1, 0.95, 1.05]
    tps = {(p.model, p.batch_size): t for p, t in zip(points, (40.0, 39.0, 80.0, 40.0))}
    passes = {p: [tps[(p.model, p.batch_size)] * (v if p.batch_size == 1 else 1.0)
                  for v in (swings if i % 2 else swings[::-1])] for i, p in enumerate(points)}
    write_timing(tmp_path, passes)
    (row,) = build_frontier(tmp_path).crossovers.itertuples()
    assert not row.supported
    assert row.text.endswith("no crossover in the measured range (tiny-qwen3 faster by median; within noise at "
                             "batch size 1)")


# --- speed-ups against the timing noise -------------------------------------------------------------------------

def test_overlapping_timings_are_within_noise():
    ratio = pass_ratio([10, 12, 9, 11, 13, 10], [11, 10, 12, 9, 10, 12])
    assert ratio.verdict == WITHIN_NOISE and ratio.low < 1 < ratio.high and not ratio.supported
    assert "95% interval" in ratio.text()


def test_separated_timings_give_a_ratio_whose_interval_holds_the_true_one():
    """Both points slowed by the same load in each pass (up to 2x, as a shared machine does) plus their own ±5%
    jitter: the pass-by-pass ratio's interval holds the true 3x and excludes 1, though the raw tokens/s of the two
    points overlap nothing like that cleanly."""
    rng = np.random.default_rng(7)
    load = rng.uniform(0.5, 1.0, 6)
    fast = 30 * load * rng.uniform(0.95, 1.05, 6)
    slow = 10 * load * rng.uniform(0.95, 1.05, 6)
    ratio = pass_ratio(list(fast), list(slow))
    assert ratio.verdict == FASTER and ratio.low <= 3.0 <= ratio.high and ratio.high - ratio.low < 0.7
    assert ratio.text(" the reference's tokens/s").startswith(f"{ratio.median:.2f}x the reference's tokens/s (95%")


def test_interval_covers_the_true_ratio_as_often_as_it_says():
    """Six passes: the min-max of the ratios covers their median with probability 1 - 2/2^6 = 96.9%; over 400
    simulated sweeps with log-normal noise around a true ratio of 1.5 it does so at least 94% of the time."""
    rng = np.random.default_rng(11)
    covered = 0
    for _ in range(400):
        a = 15 * np.exp(rng.normal(0, 0.2, 6))
        b = 10 * np.exp(rng.normal(0, 0.2, 6))
        r = pass_ratio(list(a), list(b))
        covered += r.low <= 1.5 <= r.high
    assert covered / 400 >= 0.94


def test_fewer_than_six_passes_give_no_interval():
    ratio = pass_ratio([30.0] * 5, [10.0] * 5)
    assert ratio.verdict == UNTESTED and ratio.low is None and "5 timing passes: no 95% interval" in ratio.text()
    with pytest.raises(ValueError, match="same number of passes"):
        pass_ratio([1.0, 2.0], [1.0])


def test_headline_names_only_a_speed_up_the_timing_supports(scripted):
    """noise: 3x by median but its passes overlap the reference's (within noise); gain: 1.5x in every pass
    (supported); worse: 5x but significantly less accurate. The headline names gain, with its interval."""
    root, ref, noise, gain, worse = scripted
    base = [10.0, 12.0, 9.0, 11.0, 13.0, 10.0]
    write_timing(root, {ref: base, noise: [6.0, 40.0, 27.0, 33.0, 8.0, 36.0], gain: [1.5 * t for t in base],
                        worse: [5 * t for t in base]})
    frontier = build_frontier(root)
    frame = frontier.frame.set_index("point")
    assert frame.loc[noise.name, "speedup_verdict"] == WITHIN_NOISE
    assert frame.loc[gain.name, "speedup_verdict"] == FASTER and frame.loc[gain.name, "timing_passes"] == 6
    assert frame.loc[gain.name, "speedup"] == pytest.approx(1.5)
    assert frame.loc[gain.name, "tokens_per_second"] == pytest.approx(1.5 * 10.5)  # the median pass
    (head,) = frontier.headlines
    assert head.point == gain.name and head.supported
    assert "1.50x the reference's tokens/s (95% interval 1.50-1.50x, 6 interleaved passes)" in head.text


def test_headline_says_within_noise_when_no_speed_up_is_supported(scripted):
    root, ref, noise, gain, worse = scripted
    base = [10.0, 12.0, 9.0, 11.0, 13.0, 10.0]
    write_timing(root, {ref: base, noise: [6.0, 40.0, 27.0, 33.0, 8.0, 36.0], gain: base[::-1],
                        worse: [5 * t for t in base]})
    (head,) = build_frontier(root).headlines
    assert head.point == noise.name and not head.supported
    assert "is faster than it beyond the timing noise" in head.text and "is within noise at" in head.text
    assert "x the reference's tokens/s" not in head.text


# --- the scatter's labels -------------------------------------------------------------------------------------------

def scatter_rows(positions: list[tuple[float, float]]) -> pd.DataFrame:
    """One row per point of one model, at these (tokens/s, accuracy) positions; the first is the reference."""
    return pd.DataFrame([{"model": "tiny-llada", "point": f"p{i}", "options": f"steps={i}", "batch_size": 1 + i % 2,
                          "accuracy": acc, "ci_low": acc - 0.05, "ci_high": acc + 0.05, "tokens_per_second": tps,
                          "is_reference": i == 0, "significantly_worse": False, "pareto": i < 2}
                         for i, (tps, acc) in enumerate(positions)])


def named(chart, note: str) -> bool:
    return any(b.text == note for b in chart.point_labels) or any(note in b.text for b in chart.texts)


def test_point_labels_never_overlap_and_every_point_is_named():
    """Forty-four points, forty of them within a hair of each other (labels at one offset, as the page drew them
    before, would overlap): no two placed labels overlap, and every point is named, beside it or in the legend."""
    crowd = [(20.0 + 0.01 * i, 0.40 + 0.001 * i) for i in range(40)] + [(5.0, 0.1), (40.0, 0.9), (30.0, 0.2),
                                                                        (10.0, 0.7)]
    chart = scatter_chart(scatter_rows(crowd), ["tiny-llada"])
    boxes = chart.point_labels
    assert boxes and all(not a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    assert all(named(chart, f"steps={i} · b{1 + i % 2}") for i in range(len(crowd)))
    assert len(boxes) < len(crowd)  # the crowd cannot all be labelled in place: some went to the legend


def test_spread_points_are_all_labelled_in_place():
    chart = scatter_chart(scatter_rows([(5.0, 0.1), (20.0, 0.5), (40.0, 0.9)]), ["tiny-llada"])
    assert sorted(b.text for b in chart.point_labels) == ["steps=0 · b1", "steps=1 · b2", "steps=2 · b1"]
