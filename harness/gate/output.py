"""The gate's command line and its printed table: options in, one row per (model, task) and a verdict out."""

from __future__ import annotations

import argparse
import math

import pandas as pd

from harness.errors import OneLineParser
from harness.gate.power import NOT_GATED_POINTS, Power
from harness.gate.verdict import GateError, GateReport, GateSettings


# What each row's Δ speed is the change of: the re-timing's normalised throughput, or the runs' raw tokens/s.
SPEED_BASIS = {"re-timed": "re-timed, normalised", "run": "run, raw"}
SPEED_LEGEND = ("speed: the tok/s columns are raw (the re-timing's median on CPU time, else the run's own); a "
                "re-timed row's Δ speed is of the normalised throughput (tok/s × the reference decoder's CPU seconds), "
                "which the machine's load cancels out of")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run_eval.py gate", error=GateError, description="Fail when a candidate run regresses against a baseline run.")
    d = GateSettings
    p.add_argument("--baseline", required=True, help="baseline run folder or results JSON")
    p.add_argument("--candidate", required=True, help="candidate run folder or results JSON")
    p.add_argument("--max-accuracy-drop", type=float, default=d.max_accuracy_drop, metavar="POINTS",
                   help=f"tolerated accuracy drop in percentage points (default %(default)s; {NOT_GATED_POINTS:g} "
                        f"does not gate accuracy)")
    p.add_argument("--max-tps-drop", type=float, default=d.max_tps_drop, metavar="FRACTION",
                   help="tolerated tokens/s drop as a fraction of the baseline (default %(default)s; 1 disables)")
    p.add_argument("--alpha", type=float, default=d.alpha,
                   help="significance level, Holm-corrected across tasks (default %(default)s)")
    p.add_argument("--max-changed-outputs", type=int, default=d.max_changed_outputs, metavar="K",
                   help="fail when more than K samples' token ids changed (default: report only)")
    p.add_argument("--max-forwards-increase", type=float, default=d.max_forwards_increase, metavar="FRACTION",
                   help="tolerated rise of forwards per token (default %(default)s: exact)")
    p.add_argument("--allow-underpowered", action="store_true",
                   help="judge accuracy even where the sample count cannot detect the tolerated drop")
    p.add_argument("--allow-decoding-change", action="store_true",
                   help="compare runs whose decoding configuration differs (printed as a note)")
    p.add_argument("--tasks", nargs="+", help="only these tasks (space- or comma-separated)")
    return p


def settings_from_args(args: argparse.Namespace) -> GateSettings:
    if not (args.max_accuracy_drop >= 0):
        raise GateError(f"--max-accuracy-drop must be 0 or more points, got {args.max_accuracy_drop}")
    if not (0 <= args.max_tps_drop <= 1):
        raise GateError(f"--max-tps-drop must be a fraction between 0 and 1, got {args.max_tps_drop}")
    if not (0 < args.alpha < 1):
        raise GateError(f"--alpha must be between 0 and 1, got {args.alpha}")
    if args.max_changed_outputs is not None and args.max_changed_outputs < 0:
        raise GateError(f"--max-changed-outputs must be 0 or more, got {args.max_changed_outputs}")
    if not (args.max_forwards_increase >= 0):
        raise GateError(f"--max-forwards-increase must be 0 or more, got {args.max_forwards_increase}")
    tasks = None
    if args.tasks:
        tasks = tuple(t for item in args.tasks for t in item.split(",") if t.strip())
        if not tasks:
            raise GateError("--tasks names no task")
    return GateSettings(args.max_accuracy_drop, args.max_tps_drop, args.alpha, tasks, args.max_changed_outputs,
                        args.max_forwards_increase, args.allow_underpowered, args.allow_decoding_change)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _detectable(power: Power) -> str:
    """The smallest significant drop in points; "none" when even losing every item would not be significant, "-"
    for graded scores (no exact bound)."""
    if power.test == "none":
        return "-"
    return "none" if power.min_drop_points is None else format(power.min_drop_points, ".1f")


def report_frame(report: GateReport) -> pd.DataFrame:
    rows = []
    for r in report.rows:
        t = r.accuracy
        rows.append({
            "model": r.model,
            "task": r.task,
            "n": t.n_baseline if t.n_baseline == t.n_candidate else f"{t.n_baseline}/{t.n_candidate}",
            "base %": _fmt(100 * t.baseline, ".2f"),
            "cand %": _fmt(100 * t.candidate, ".2f"),
            "Δ pts": _fmt(t.delta_points, "+.2f"),
            "min det. pts": _detectable(r.power),
            "r→w/w→r": "-" if t.right_to_wrong is None else f"{t.right_to_wrong}/{t.wrong_to_right}",
            "test": t.test,
            "p": _fmt(t.p_value, ".3g"),
            "p Holm": _fmt(r.p_holm, ".3g"),
            "changed": "-" if r.drift is None else f"{r.drift.changed}/{r.drift.compared}",
            "base fwd/tok": _fmt(r.baseline_fpt, ".4f"),
            "cand fwd/tok": _fmt(r.candidate_fpt, ".4f"),
            "base tok/s": _fmt(r.speed.baseline_tps, ".2f"),
            "cand tok/s": _fmt(r.speed.candidate_tps, ".2f"),
            "Δ speed": "-" if r.speed.change is None else f"{100 * r.speed.change:+.1f}% ({SPEED_BASIS[r.speed.source]})",
            "verdict": " + ".join(r.verdicts) or "ok",
        })
    return pd.DataFrame(rows)


def drift_lines(report: GateReport) -> list[str]:
    lines = []
    for r in report.rows:
        if r.drift is not None and r.drift.changed:
            kind = "" if r.drift.deterministic else " (sampled decoding: seeded, but hardware may change it)"
            lines.append(f"drift: {r.model} · {r.task}: {r.drift.changed} of {r.drift.compared} outputs changed"
                         f"{kind}: {r.drift.describe()}")
    return lines


def rule_text(s: GateSettings) -> str:
    accuracy = ("accuracy not gated" if s.max_accuracy_drop >= NOT_GATED_POINTS
                else f"accuracy drop > {s.max_accuracy_drop:g} pts and Holm p < {s.alpha:g}")
    drift = ("drift reported only" if s.max_changed_outputs is None
             else f"changed outputs > {s.max_changed_outputs}")
    forwards = (f"forwards/token rise > {100 * s.max_forwards_increase:g}%" if s.max_forwards_increase
                else "forwards/token must not rise")
    return f"{accuracy}; {drift}; {forwards}; tokens/s drop > {100 * s.max_tps_drop:g}%"


def format_report(report: GateReport) -> str:
    lines = [report_frame(report).to_string(index=False)]
    lines += drift_lines(report)
    if any(r.speed.source == "re-timed" for r in report.rows):
        lines.append(SPEED_LEGEND)
    lines += [f"note: {n}" for n in report.notes]
    counts = {name: sum(name in r.verdicts for r in report.rows)
              for name in ("ACCURACY", "DRIFT", "FORWARDS", "SPEED")}
    if report.failed:
        found = ", ".join(f"{n} {name.lower()}" for name, n in counts.items() if n)
        lines.append(f"gate: FAIL: regression(s): {found} ({rule_text(report.settings)})")
    else:
        lines.append(f"gate: PASS: {len(report.rows)} comparison(s), no regression ({rule_text(report.settings)})")
    return "\n".join(lines)
