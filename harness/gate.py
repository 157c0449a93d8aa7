"""The regression gate: is a candidate run worse than a baseline run, beyond tolerance and beyond noise?

Accuracy, for each (model, task) of the baseline:
  * both runs carry sample records: items are paired by ``doc_id`` (the sample key would do for identical settings,
    but it also hashes the decoding configuration, and the doc id is what identifies an item); 0/1 scores go into an
    exact McNemar test on the discordant pairs, other scores into a paired t-test;
  * otherwise an unpaired test on the summaries: Fisher's exact test on the 2x2 table of right/wrong counts for 0/1
    metrics (recognised by their stderr being sqrt(p(1-p)/(n-1))), a Welch z-test on mean ± stderr for others.
  The p-values are Holm-corrected across every (model, task) compared. A regression is a drop larger than the
  tolerance (in points) that is also significant at the chosen level.
Speed: a regression is a tokens/s drop larger than the tolerated fraction (no test: speed is measured, not sampled).

Exit status: 0 pass, 1 regression, 2 not comparable or bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from harness.compare import describe_value, field_differences
from harness.run_folder import Run, RunLoadError, load_run
from harness.significance import AccuracyTest, PairingError, pair_by_doc, paired_test, unpaired_test
from harness.stats import holm_adjust

PASS, REGRESSION, NOT_COMPARABLE = 0, 1, 2


class GateError(ValueError):
    """The runs cannot be compared, or the input is bad; the message is one line for the user."""


@dataclass(frozen=True)
class GateSettings:
    max_accuracy_drop: float = 1.0  # percentage points
    max_tps_drop: float = 0.10  # fraction of the baseline's tokens/s
    alpha: float = 0.05
    tasks: tuple[str, ...] | None = None


@dataclass(frozen=True)
class GateRow:
    model: str
    task: str
    metric: str
    accuracy: AccuracyTest
    p_holm: float
    baseline_tps: float | None
    candidate_tps: float | None
    accuracy_regression: bool
    speed_regression: bool

    @property
    def tps_change(self) -> float | None:
        """Relative change of tokens/s (-0.2 is 20% slower), None where either side has no speed figure."""
        if not self.baseline_tps or self.candidate_tps is None:
            return None
        return self.candidate_tps / self.baseline_tps - 1.0


@dataclass(frozen=True)
class GateReport:
    settings: GateSettings
    rows: tuple[GateRow, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> bool:
        return any(r.accuracy_regression or r.speed_regression for r in self.rows)


# --- comparing two runs ---------------------------------------------------------------------------------------------

def _entries(baseline: Run, candidate: Run, tasks: tuple[str, ...] | None) -> list[tuple[dict, dict]]:
    chosen = [r for r in baseline.results if tasks is None or r["task"] in tasks]
    if tasks is not None:
        for side, run in (("baseline", baseline), ("candidate", candidate)):
            missing = sorted(set(tasks) - {r["task"] for r in run.results})
            if missing:
                raise GateError(f"{side} {run.results_path} has no results for task {', '.join(missing)}")
    if not chosen:
        raise GateError("nothing to compare: the baseline has no results" + (" for those tasks" if tasks else ""))
    pairs = []
    for base in chosen:
        cand = candidate.result(base["model"], base["task"])
        if cand is None:
            raise GateError(f"candidate has no result for {base['model']} · {base['task']} "
                            f"(restrict with --tasks, or rerun the candidate with it)")
        pairs.append((base, cand))
    return pairs


def check_comparable(base: dict[str, Any], cand: dict[str, Any]) -> None:
    """Raise GateError when the scoring-relevant manifest fields or the primary metric differ."""
    where = f"{base['model']} · {base['task']}"
    if base["primary_metric"] != cand["primary_metric"]:
        raise GateError(f"{where}: primary metric differs ({base['primary_metric']} vs {cand['primary_metric']})")
    differing = field_differences(base["manifest"], cand["manifest"])
    if differing:
        f = differing[0]
        raise GateError(f"not comparable: {where}: {', '.join(differing)} differ(s) "
                        f"({f}: {describe_value(base['manifest'].get(f))} vs "
                        f"{describe_value(cand['manifest'].get(f))})")


def accuracy_test(baseline: Run, candidate: Run, base: dict[str, Any], cand: dict[str, Any]) -> AccuracyTest:
    where = f"{base['model']} · {base['task']}"
    metric = base["primary_metric"]
    base_samples = baseline.samples(base["model"], base["task"])
    cand_samples = candidate.samples(cand["model"], cand["task"])
    if base_samples and cand_samples:
        return paired_test(pair_by_doc(base_samples, cand_samples, metric, where))
    b, c = base["metrics"].get(metric), cand["metrics"].get(metric)
    if not b or not c or b.get("value") is None or c.get("value") is None or not b.get("n") or not c.get("n"):
        raise GateError(f"{where}: no value for {metric} on one side")
    if base["manifest"].get("limit") != cand["manifest"].get("limit"):
        raise GateError(f"not comparable: {where}: different --limit ({base['manifest'].get('limit')} vs "
                        f"{cand['manifest'].get('limit')}) and no sample records to pair the shared items")
    return unpaired_test(b, c)


def speed_notes(baseline: Run, candidate: Run, pairs: Sequence[tuple[dict, dict]]) -> list[str]:
    """Settings that make tokens/s differ for reasons other than the code: hardware, dtype, batch size."""
    notes = []
    env_b, env_c = baseline.manifest.get("environment", {}), candidate.manifest.get("environment", {})
    for key in ("device_name", "device_count", "torch"):
        if env_b.get(key) != env_c.get(key):
            notes.append(f"tokens/s compared across different {key}: {env_b.get(key)} vs {env_c.get(key)}")
    for base, cand in pairs:
        for what, get in (("batch size", lambda r: r["speed"].get("batch_size")),
                          ("dtype", lambda r: r["manifest"].get("model", {}).get("dtype"))):
            if get(base) != get(cand):
                notes.append(f"{base['model']} · {base['task']}: {what} differs ({get(base)} vs {get(cand)})")
    return notes


def evaluate(baseline: Run, candidate: Run, settings: GateSettings) -> GateReport:
    """Compare every baseline (model, task) with the candidate's; raises GateError when they are not comparable."""
    pairs = _entries(baseline, candidate, settings.tasks)
    for base, cand in pairs:
        check_comparable(base, cand)
    tests = [accuracy_test(baseline, candidate, base, cand) for base, cand in pairs]
    adjusted = holm_adjust([t.p_value for t in tests])
    rows = []
    for (base, cand), test, p_holm in zip(pairs, tests, adjusted):
        b_tps, c_tps = base["speed"].get("tokens_per_second"), cand["speed"].get("tokens_per_second")
        speed_drop = bool(b_tps and c_tps is not None and c_tps < b_tps * (1 - settings.max_tps_drop))
        rows.append(GateRow(
            model=base["model"], task=base["task"], metric=base["primary_metric"], accuracy=test, p_holm=p_holm,
            baseline_tps=b_tps, candidate_tps=c_tps,
            accuracy_regression=-test.delta_points > settings.max_accuracy_drop and p_holm < settings.alpha,
            speed_regression=speed_drop,
        ))
    notes = speed_notes(baseline, candidate, pairs)
    gated = {(b["model"], b["task"]) for b, _ in pairs}
    extra = sorted(f"{r['model']} · {r['task']}" for r in candidate.results
                   if (r["model"], r["task"]) not in gated and (settings.tasks is None or r["task"] in settings.tasks))
    if extra:
        notes.append(f"not in the baseline, not gated: {', '.join(extra)}")
    return GateReport(settings, tuple(rows), tuple(notes))


# --- output ---------------------------------------------------------------------------------------------------------

def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def report_frame(report: GateReport) -> pd.DataFrame:
    rows = []
    for r in report.rows:
        t = r.accuracy
        verdict = [name for name, flag in (("ACCURACY", r.accuracy_regression), ("SPEED", r.speed_regression)) if flag]
        rows.append({
            "model": r.model,
            "task": r.task,
            "n": t.n_baseline if t.n_baseline == t.n_candidate else f"{t.n_baseline}/{t.n_candidate}",
            "base %": _fmt(100 * t.baseline, ".2f"),
            "cand %": _fmt(100 * t.candidate, ".2f"),
            "Δ pts": _fmt(t.delta_points, "+.2f"),
            "r→w/w→r": "-" if t.right_to_wrong is None else f"{t.right_to_wrong}/{t.wrong_to_right}",
            "test": t.test,
            "p": _fmt(t.p_value, ".3g"),
            "p Holm": _fmt(r.p_holm, ".3g"),
            "base tok/s": _fmt(r.baseline_tps, ".2f"),
            "cand tok/s": _fmt(r.candidate_tps, ".2f"),
            "Δ tok/s": "-" if r.tps_change is None else f"{100 * r.tps_change:+.1f}%",
            "verdict": " + ".join(verdict) or "ok",
        })
    return pd.DataFrame(rows)


def format_report(report: GateReport) -> str:
    s = report.settings
    lines = [report_frame(report).to_string(index=False)]
    lines += [f"note: {n}" for n in report.notes]
    acc = sum(r.accuracy_regression for r in report.rows)
    speed = sum(r.speed_regression for r in report.rows)
    rule = (f"accuracy drop > {s.max_accuracy_drop:g} pts and Holm p < {s.alpha:g}; "
            f"tokens/s drop > {100 * s.max_tps_drop:g}%")
    if report.failed:
        lines.append(f"gate: FAIL: {acc} accuracy and {speed} speed regression(s) ({rule})")
    else:
        lines.append(f"gate: PASS: {len(report.rows)} comparison(s), no regression ({rule})")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so every bad input ends in one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise GateError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="run_eval.py gate", description="Fail when a candidate run regresses against a baseline run.")
    p.add_argument("--baseline", required=True, help="baseline run folder or results JSON")
    p.add_argument("--candidate", required=True, help="candidate run folder or results JSON")
    p.add_argument("--max-accuracy-drop", type=float, default=GateSettings.max_accuracy_drop, metavar="POINTS",
                   help="tolerated accuracy drop in percentage points (default %(default)s)")
    p.add_argument("--max-tps-drop", type=float, default=GateSettings.max_tps_drop, metavar="FRACTION",
                   help="tolerated tokens/s drop as a fraction of the baseline (default %(default)s; 1 disables)")
    p.add_argument("--alpha", type=float, default=GateSettings.alpha,
                   help="significance level, Holm-corrected across tasks (default %(default)s)")
    p.add_argument("--tasks", nargs="+", help="only these tasks (space- or comma-separated)")
    return p


def settings_from_args(args: argparse.Namespace) -> GateSettings:
    if not (args.max_accuracy_drop >= 0):
        raise GateError(f"--max-accuracy-drop must be 0 or more points, got {args.max_accuracy_drop}")
    if not (0 <= args.max_tps_drop <= 1):
        raise GateError(f"--max-tps-drop must be a fraction between 0 and 1, got {args.max_tps_drop}")
    if not (0 < args.alpha < 1):
        raise GateError(f"--alpha must be between 0 and 1, got {args.alpha}")
    tasks = None
    if args.tasks:
        tasks = tuple(t for item in args.tasks for t in item.split(",") if t.strip())
        if not tasks:
            raise GateError("--tasks names no task")
    return GateSettings(args.max_accuracy_drop, args.max_tps_drop, args.alpha, tasks)


def main_gate(argv: list[str]) -> int:
    """``run_eval.py gate --baseline B --candidate C ...``: print the table, exit 0 pass / 1 regression / 2 bad."""
    try:
        args = build_parser().parse_args(argv)
        settings = settings_from_args(args)
        baseline, candidate = load_run(args.baseline), load_run(args.candidate)
        report = evaluate(baseline, candidate, settings)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    except (GateError, PairingError, RunLoadError) as error:
        print(f"gate: error: {error}", file=sys.stderr)
        return NOT_COMPARABLE
    print(format_report(report))
    return REGRESSION if report.failed else PASS


if __name__ == "__main__":
    sys.exit(main_gate(sys.argv[1:]))
