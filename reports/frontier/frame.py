"""The speed/quality frontier of a sweep, as tables: one row per (task, model, point), headlines and crossovers.

Accuracy and its 95% interval are the point's own results (harness.stats.aggregate); each point is tested against its
model's reference point by the gate's paired test (harness.stats.significance: exact McNemar for 0/1 scores, items paired
by doc_id), and
the p-values are Holm-corrected over the model's non-reference points of one task. A point is "matched" when its
accuracy is not significantly below the reference's: not (Holm p < alpha and paired mean below the reference's).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from harness.sweep.crossover import crossings
from harness.run.folder import RunLoadError, load_run
from harness.stats.significance import PairingError, pair_by_doc, paired_test
from harness.stats.estimates import holm_adjust
from harness.sweep.plan import SweepPlan, load_plan

CROSSOVER_RULE = ("tokens/s interpolated linearly in log2(batch size) between measured batch sizes, over the range "
                  "both models cover; a crossover is where the difference changes sign")


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
    tokens_per_second: float | None
    speedup: float | None  # tokens/s over the reference's
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


@dataclass(frozen=True)
class Frontier:
    plan: SweepPlan
    frame: pd.DataFrame
    headlines: tuple[Headline, ...]
    crossovers: pd.DataFrame
    notes: tuple[str, ...]


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


def _measured(plan: SweepPlan) -> tuple[list[dict[str, Any]], list[str]]:
    """One raw row per (point, task) result that exists, with the samples for pairing; notes for what is missing."""
    raw, notes = [], []
    for point in plan.points:
        try:
            run = load_run(plan.folder.point(point).root)
        except RunLoadError:
            notes.append(f"{point.name}: not finished (no results.json); rerun the sweep to complete it")
            continue
        for result in run.results:
            if _tps(result["speed"]) is None:
                notes.append(f"{point.name} · {result['task']}: no timed samples (every batch held a warm-up "
                             f"sample); give more items (--limit) than the batch size, or a smaller --warmup")
            primary = result["metrics"].get(result["primary_metric"], {})
            ci = primary.get("ci95") or [None, None]
            raw.append({"point": point, "task": result["task"], "metric": result["primary_metric"],
                        "accuracy": _number(primary.get("value")), "ci_low": _number(ci[0]),
                        "ci_high": _number(ci[1]), "n": int(result["n_samples"]), "tps": _tps(result["speed"]),
                        "samples": run.samples(point.model, result["task"])})
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
            tests.append(paired_test(pair_by_doc(ref["samples"], r["samples"], r["metric"], r["point"].name)))
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
        ref_tps = ref["tps"] if ref is not None else None
        point = r["point"]
        rows.append(FrontierRow(
            task=r["task"], model=point.model, point=point.name,
            options=", ".join(f"{k}={v}" for k, v in point.options) or "defaults", batch_size=point.batch_size,
            metric=r["metric"], accuracy=r["accuracy"], ci_low=r["ci_low"], ci_high=r["ci_high"], n=r["n"],
            tokens_per_second=r["tps"], speedup=r["tps"] / ref_tps if r["tps"] is not None and ref_tps else None,
            is_reference=r is ref, test=t.test if t else None, right_to_wrong=t.right_to_wrong if t else None,
            wrong_to_right=t.wrong_to_right if t else None, p_value=t.p_value if t else None, p_holm=p_holm,
            significantly_worse=worse, matched=ref is not None and (r is ref or (t is not None and not worse)),
            pareto=pareto[i]))
    return rows


def headline(rows: Sequence[FrontierRow]) -> Headline:
    """The fastest matched point of one (task, model), as a multiple of the reference's tokens/s."""
    first = rows[0]
    matched = [r for r in rows if r.matched and r.speedup is not None]
    if not matched:
        return Headline(first.task, first.model, None, None,
                        f"{first.model} · {first.task}: no point has a tested accuracy and a speed-up")
    best = max(matched, key=lambda r: r.speedup)  # type: ignore[arg-type,return-value]
    text = (f"{first.model} · {first.task}: fastest point whose accuracy is not significantly below the reference: "
            f"{best.options}, batch_size={best.batch_size} — {best.speedup:.2f}x the reference's tokens/s")
    return Headline(first.task, first.model, best.point, best.speedup, text)


def crossover_table(frame: pd.DataFrame, references: dict[str, str]) -> pd.DataFrame:
    """For every task and pair of models: where their tokens/s curves over batch size cross.

    A model's curve is its reference options across the measured batch sizes (the options a user compares at).
    """
    columns = ["task", "model_a", "model_b", "crossover_batch_size", "faster_above", "text"]
    out = []
    for task, rows in frame.groupby("task", sort=False):
        curves = {}
        for model, reference in references.items():
            ref = rows[rows["point"] == reference]
            if ref.empty:
                continue
            same = rows[(rows["model"] == model) & (rows["options"] == ref["options"].iloc[0])]
            curve = {int(b): float(t) for b, t in zip(same["batch_size"], same["tokens_per_second"]) if t == t}
            if len(curve) >= 2:
                curves[model] = curve
        names = list(curves)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                found = crossings(curves[a], curves[b])
                if not found:
                    faster = a if sum(curves[a].values()) >= sum(curves[b].values()) else b
                    out.append([task, a, b, None, None, f"{task}: {a} vs {b}: no crossover in the measured range "
                                f"({faster} faster throughout)"])
                for c in found:
                    winner, loser = (a, b) if c.faster_after == 0 else (b, a)
                    out.append([task, a, b, c.batch_size, winner,
                                f"{task}: {winner} overtakes {loser} at batch size ≈ {c.batch_size:.1f}"])
    return pd.DataFrame(out, columns=columns)


def build_frontier(root: Path) -> Frontier:
    """Everything the frontier page shows, from a sweep folder."""
    plan = load_plan(Path(root))
    raw, notes = _measured(plan)
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
    return Frontier(plan, frame, tuple(heads), crossover_table(frame, plan.references), tuple(notes))


def frontier_frame(root: Path) -> pd.DataFrame:
    """The frontier table of a sweep folder: one row per (task, model, point), as frontier.csv."""
    return build_frontier(root).frame
