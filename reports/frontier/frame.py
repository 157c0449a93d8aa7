"""The speed/quality frontier of a sweep, as tables: one row per (task, model, point), headlines and crossovers.

Accuracy and its 95% interval are the point's own results (harness.stats.aggregate); each point is tested against its
model's reference point by the gate's paired test (harness.stats.significance: exact McNemar for 0/1 scores, items paired
by doc_id), and
the p-values are Holm-corrected over the model's non-reference points of one task. A point is "matched" when its
accuracy is not significantly below the reference's: not (Holm p < alpha and paired mean below the reference's).

Speed comes from the sweep's interleaved timing passes when it has them (sweep_timing.json): a point's tokens/s is
its median over passes, and speed-ups and crossovers are tested against the timing noise (reports.frontier.noise); a
ratio or a crossover the passes cannot support is reported as "within noise". A sweep without passes (--repeats 1)
falls back to each run's own tokens/s, and its ratios are marked untested.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from harness.sweep.crossover import Crossing, crossings
from harness.run.folder import RunLoadError, load_run
from harness.run.records import as_json
from harness.stats.significance import PairingError, pair_by_doc, paired_test
from harness.stats.estimates import holm_adjust
from harness.sweep.plan import SweepPlan, SweepTiming, load_plan, load_timing
from reports.frontier.noise import FASTER, SLOWER, UNTESTED, Ratio, speed_ratio

CROSSOVER_RULE = ("median tokens/s over the timing passes, interpolated linearly in log2(batch size) between measured "
                  "batch sizes, over the range both models cover; a crossover is where the difference changes sign, "
                  "reported only when the 95% interval of the two models' pass-by-pass tokens/s ratio excludes 1 at "
                  "the measured batch sizes on both sides of it (else: within noise)")


@dataclass(frozen=True)
class FrontierRow:
    task: str
    model: str
    point: str
    options: str  # the gridded options, without the batch size ("defaults" when none)
    batch_size: int
    metric: str
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    tokens_per_second: float | None  # median over the timing passes (the run's own figure without passes)
    run_tokens_per_second: float | None  # the point's run, one pass over every item
    timing_passes: int
    speedup: float | None  # tokens/s over the reference's: median of the pass-by-pass ratios
    speedup_low: float | None  # its 95% interval (None: too few passes)
    speedup_high: float | None
    speedup_verdict: str | None  # faster, slower, within noise, untested (reports.frontier.noise)
    is_reference: bool
    test: str | None
    right_to_wrong: int | None  # items right at the reference and wrong at this point
    wrong_to_right: int | None
    p_value: float | None
    p_holm: float | None
    significantly_worse: bool
    matched: bool
    pareto: bool


@dataclass(frozen=True)
class Headline:
    task: str
    model: str
    point: str | None
    speedup: float | None
    text: str
    supported: bool = False  # the speed-up's interval excludes 1


@dataclass(frozen=True)
class Frontier:
    plan: SweepPlan
    frame: pd.DataFrame
    headlines: tuple[Headline, ...]
    crossovers: pd.DataFrame
    notes: tuple[str, ...]
    timing: SweepTiming | None = None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _tps(speed: dict[str, Any]) -> float | None:
    """Data-parallel points count every rank (the combined figure); others the one process's."""
    return _number(speed.get("combined_tokens_per_second") or speed.get("tokens_per_second"))


def pareto_mask(accuracy: Sequence[float | None], speed: Sequence[float | None]) -> list[bool]:
    """Points no other point beats on both accuracy and tokens/s (at least as good on both, better on one)."""
    pairs = list(zip(accuracy, speed))

    def dominated(a: float, s: float) -> bool:
        return any(b is not None and t is not None and b >= a and t >= s and (b > a or t > s) for b, t in pairs)

    return [a is not None and s is not None and not dominated(a, s) for a, s in pairs]


def _measured(plan: SweepPlan, timing: SweepTiming | None) -> tuple[list[dict[str, Any]], list[str]]:
    """One raw row per (point, task) result that exists, with the samples for pairing and the point's tokens/s per
    timing pass; notes for what is missing."""
    raw, notes = [], []
    for point in plan.points:
        try:
            run = load_run(plan.folder.point(point).root)
        except RunLoadError:
            notes.append(f"{point.name}: not finished (no results.json); rerun the sweep to complete it")
            continue
        for result in run.results:
            if _tps(result.speed) is None:
                notes.append(f"{point.name} · {result.task}: no timed samples (every batch held a warm-up "
                             f"sample); give more items (--limit) than the batch size, or a smaller --warmup")
            primary = result.primary
            ci = primary.get("ci95") or [None, None]
            passes = timing.tokens_per_second(point.name, result.task) if timing else None
            run_tps = _tps(result.speed)
            raw.append({"point": point, "task": result.task, "metric": result.primary_metric,
                        "accuracy": _number(primary.get("value")), "ci_low": _number(ci[0]),
                        "ci_high": _number(ci[1]), "n": int(result.n_samples), "run_tps": run_tps,
                        "tps": statistics.median(passes) if passes else run_tps, "passes": passes,
                        "samples": run.samples(point.model, result.task)})
    return raw, notes


def _group_rows(group: list[dict[str, Any]], reference: str, alpha: float, notes: list[str]) -> list[FrontierRow]:
    """The rows of one (task, model): tests against its reference, Holm over the others, Pareto mask."""
    ref = next((r for r in group if r["point"].name == reference), None)
    tests: list[Any] = []
    for r in group:
        if ref is None or r is ref or r["samples"] is None or ref["samples"] is None:
            tests.append(None)
            continue
        try:
            tests.append(paired_test(pair_by_doc(as_json(ref["samples"]), as_json(r["samples"]), r["metric"],
                                                 r["point"].name)))
        except PairingError as error:
            notes.append(str(error))
            tests.append(None)
    if ref is None:
        notes.append(f"{group[0]['point'].model} · {group[0]['task']}: reference {reference} not finished; "
                     f"no tests or speed-ups")
    tested = [i for i, t in enumerate(tests) if t is not None]
    adjusted = dict(zip(tested, holm_adjust([tests[i].p_value for i in tested])))
    pareto = pareto_mask([r["accuracy"] for r in group], [r["tps"] for r in group])
    rows = []
    for i, r in enumerate(group):
        t, p_holm = tests[i], adjusted.get(i)
        worse = bool(t is not None and p_holm is not None and p_holm < alpha and t.candidate < t.baseline)
        ratio = (speed_ratio(r["tps"], ref["tps"], r["passes"], ref["passes"])
                 if ref is not None and r["tps"] is not None and ref["tps"] else None)
        point = r["point"]
        rows.append(FrontierRow(
            task=r["task"], model=point.model, point=point.name,
            options=", ".join(f"{k}={v}" for k, v in point.options) or "defaults", batch_size=point.batch_size,
            metric=r["metric"], accuracy=r["accuracy"], ci_low=r["ci_low"], ci_high=r["ci_high"], n=r["n"],
            tokens_per_second=r["tps"], run_tokens_per_second=r["run_tps"],
            timing_passes=len(r["passes"]) if r["passes"] else 1, speedup=ratio.median if ratio else None,
            speedup_low=ratio.low if ratio else None, speedup_high=ratio.high if ratio else None,
            speedup_verdict=None if ratio is None or r is ref else ratio.verdict, is_reference=r is ref,
            test=t.test if t else None, right_to_wrong=t.right_to_wrong if t else None,
            wrong_to_right=t.wrong_to_right if t else None, p_value=t.p_value if t else None, p_holm=p_holm,
            significantly_worse=worse, matched=ref is not None and (r is ref or (t is not None and not worse)),
            pareto=pareto[i]))
    return rows


OF_REFERENCE = " the reference's tokens/s"


def _ratio(row: FrontierRow) -> Ratio:
    return Ratio(row.speedup or 0.0, row.speedup_low, row.speedup_high, row.timing_passes)


def headline(rows: Sequence[FrontierRow]) -> Headline:
    """The fastest matched point of one (task, model), as a multiple of the reference's tokens/s, among the points
    whose speed-up the timing supports; else the fastest by median, said to be within noise (or untested)."""
    first = rows[0]
    where = f"{first.model} · {first.task}"
    matched = [r for r in rows if r.matched and r.speedup is not None and not r.is_reference]
    if not matched:
        return Headline(first.task, first.model, None, None,
                        f"{where}: no point besides the reference has a matched accuracy and a speed-up")
    faster = [r for r in matched if r.speedup_verdict == FASTER]
    best = max(faster or matched, key=lambda r: r.speedup)  # type: ignore[arg-type,return-value]
    setting = f"{best.options}, batch_size={best.batch_size}"
    ratio = _ratio(best)
    if faster or best.speedup_verdict == UNTESTED:
        text = (f"{where}: fastest point whose accuracy is not significantly below the reference: {setting} — "
                f"{ratio.text(OF_REFERENCE)}")
    else:
        text = (f"{where}: no point whose accuracy is not significantly below the reference is faster than it beyond "
                f"the timing noise; the fastest by median, {setting}, is {best.speedup_verdict} at {ratio.text()}")
    return Headline(first.task, first.model, best.point, best.speedup, text, bool(faster))


CROSSOVER_COLUMNS = ["task", "model_a", "model_b", "crossover_batch_size", "faster_above", "median_crossing",
                     "supported", "text"]


def reference_curves(rows: pd.DataFrame, references: dict[str, str]) -> dict[str, dict[int, tuple[float, str]]]:
    """Per model of one task: {batch size: (median tokens/s, point name)} at its reference's options (the options a
    user compares at), for models measured at two batch sizes or more."""
    curves = {}
    for model, reference in references.items():
        ref = rows[rows["point"] == reference]
        if ref.empty:
            continue
        same = rows[(rows["model"] == model) & (rows["options"] == ref["options"].iloc[0])]
        curve = {int(b): (float(t), str(p)) for b, t, p in zip(same["batch_size"], same["tokens_per_second"],
                                                                same["point"]) if t == t}
        if len(curve) >= 2:
            curves[model] = curve
    return curves


def size_ratio(task: str, a: tuple[float, str], b: tuple[float, str], timing: SweepTiming | None) -> Ratio:
    """Tokens/s of point ``a`` over point ``b`` (median tokens/s, point name) at one batch size."""
    passes = [timing.tokens_per_second(name, task) if timing else None for _, name in (a, b)]
    return speed_ratio(a[0], b[0], passes[0], passes[1])


def _at(ratios: dict[int, Ratio], size: int) -> str:
    return f"{ratios[size].text()} at batch size {size}" if size in ratios else f"not measured at batch size {size}"


def crossing_row(task: str, a: str, b: str, crossing: Crossing, ratios: dict[int, Ratio]) -> list[Any]:
    """One crossing of the median curves: a crossover when the a/b ratio's interval excludes 1, on the loser's side
    at the measured batch size below it and on the winner's side at the one above; else within noise."""
    winner, loser = (a, b) if crossing.faster_after == 0 else (b, a)
    below = max((size for size in ratios if size < crossing.batch_size), default=0)
    above = min((size for size in ratios if size > crossing.batch_size), default=0)
    before, after = (SLOWER, FASTER) if winner == a else (FASTER, SLOWER)
    supported = (below in ratios and above in ratios and ratios[below].verdict == before
                 and ratios[above].verdict == after)
    evidence = f"{a}/{b} tokens/s {_at(ratios, below)}, {_at(ratios, above)}"
    x = crossing.batch_size
    if supported:
        return [task, a, b, x, winner, x, True, f"{task}: {winner} overtakes {loser} at batch size ≈ {x:.1f} "
                                                f"({evidence})"]
    tested = all(size in ratios and ratios[size].verdict != UNTESTED for size in (below, above))
    verdict = "within noise" if tested else "not tested against noise"
    return [task, a, b, None, None, x, False, f"{task}: {a} vs {b}: {verdict}, no crossover the timing supports: "
                                              f"their median tokens/s cross at batch size ≈ {x:.1f}, but {evidence}"]


def no_crossing_row(task: str, a: str, b: str, ratios: dict[int, Ratio]) -> list[Any]:
    """Median curves that do not cross: which model is faster, and at which batch sizes only by noise."""
    faster = a if sum(r.median >= 1 for r in ratios.values()) * 2 >= len(ratios) else b
    expected = FASTER if faster == a else SLOWER
    unsupported = [str(size) for size, r in sorted(ratios.items()) if r.verdict != expected]
    if not unsupported:
        detail = f"{faster} faster at every measured batch size, beyond noise"
    elif any(r.verdict != UNTESTED for r in ratios.values()):
        detail = f"{faster} faster by median; within noise at batch size {', '.join(unsupported)}"
    else:
        passes = next(iter(ratios.values())).passes
        detail = f"{faster} faster throughout; {passes} timing pass(es): not tested against noise (sweep --repeats 6)"
    return [task, a, b, None, None, None, False, f"{task}: {a} vs {b}: no crossover in the measured range ({detail})"]


def crossover_table(frame: pd.DataFrame, references: dict[str, str], timing: SweepTiming | None = None
                    ) -> pd.DataFrame:
    """For every task and pair of models: where their tokens/s curves over batch size cross, when the timing passes
    support it (see CROSSOVER_RULE)."""
    out = []
    for task, rows in frame.groupby("task", sort=False):
        curves = reference_curves(rows, references)
        names = list(curves)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ratios = {size: size_ratio(str(task), curves[a][size], curves[b][size], timing)
                          for size in sorted(set(curves[a]) & set(curves[b]))}
                found = crossings({k: v[0] for k, v in curves[a].items()}, {k: v[0] for k, v in curves[b].items()})
                out.extend([crossing_row(str(task), a, b, c, ratios) for c in found]
                           or [no_crossing_row(str(task), a, b, ratios)])
    return pd.DataFrame(out, columns=CROSSOVER_COLUMNS)


def build_frontier(root: Path) -> Frontier:
    """Everything the frontier page shows, from a sweep folder."""
    plan = load_plan(Path(root))
    timing = load_timing(plan.root)
    raw, notes = _measured(plan, timing)
    rows: list[FrontierRow] = []
    for task in plan.tasks:
        for model in plan.models:
            group = [r for r in raw if r["task"] == task and r["point"].model == model]
            if group:
                rows.extend(_group_rows(group, plan.references[model], plan.alpha, notes))
    frame = pd.DataFrame([asdict(r) for r in rows], columns=list(FrontierRow.__dataclass_fields__))
    heads = []
    for (task, model), _ in frame.groupby(["task", "model"], sort=False):
        heads.append(headline([r for r in rows if r.task == task and r.model == model]))
    return Frontier(plan, frame, tuple(heads), crossover_table(frame, plan.references, timing), tuple(notes), timing)


def frontier_frame(root: Path) -> pd.DataFrame:
    """The frontier table of a sweep folder: one row per (task, model, point), as frontier.csv."""
    return build_frontier(root).frame
