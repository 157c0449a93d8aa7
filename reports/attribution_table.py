"""The report's speedup-attribution table: every model against every baseline (HF loop and engine side by side)."""

from __future__ import annotations

import pandas as pd

from harness.stats.attribution import attribution_table
from harness.run.compare import implementation_label
from reports.report_data import ReportData, labelled_entries


def _ms(value: float | None) -> float | None:
    return None if value is None else 1000.0 * value


def attribution_frame(data: ReportData) -> pd.DataFrame:
    """One row per (model, task, baseline); the three factors multiply to the speed ratio where all are known."""
    results = [{**entry.result, "model": entry.label} for entry in labelled_entries(data.runs)]
    network = {(r["model"], r["task"]): implementation_label(r["manifest"]) for r in results}
    rows = []
    for a in attribution_table(results):
        model, base = a["model_cost"], a["baseline_cost"]
        ours, theirs = network.get((a["model"], a["task"])), network.get((a["baseline"], a["task"]))
        rows.append({
            "model": a["model"], "task": a["task"], "baseline": a["baseline"],
            "networks": "same" if ours == theirs else f"DIFFER: {ours} vs {theirs}",
            "speed ×": a["speed_ratio"], "forwards/token ×": a["forwards_factor"],
            "time/forward ×": a["forward_cost_factor"], "outside forwards ×": a["outside_factor"],
            "ms/token": _ms(model["seconds"]), "baseline ms/token": _ms(base["seconds"]),
            "outside ms/token": _ms(None if model["forward_seconds"] is None
                                    else model["seconds"] - model["forward_seconds"]),
            "baseline outside ms/token": _ms(None if base["forward_seconds"] is None
                                             else base["seconds"] - base["forward_seconds"]),
            "note": a["note"] or "",
        })
    frame = pd.DataFrame(rows)
    return frame.sort_values(["task", "model", "baseline"], kind="stable") if rows else frame
