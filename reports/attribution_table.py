"""The report's speedup-attribution table: each run's own (its results.json), every model against every baseline
of a task (HF loop and engine side by side)."""

from __future__ import annotations

import pandas as pd

from harness.run.compare import implementation_label
from reports.report_data import ReportData, labelled_entries


def _ms(value: float | None) -> float | None:
    return None if value is None else 1000.0 * value


def _outside(cost: dict[str, float | None]) -> float | None:
    """Seconds per token outside the network's forwards (None where the time inside was not measured)."""
    return None if cost["forward_seconds"] is None else cost["seconds"] - cost["forward_seconds"]


def attribution_frame(data: ReportData) -> pd.DataFrame:
    """One row per (model, task, baseline) of each run's own attribution, as its results.json holds it, the models
    named by their labels in the report; the three factors multiply to the speed ratio where all are known."""
    entries = labelled_entries(data.runs)
    labels = {(id(e.run), e.model, e.task): e.label for e in entries}
    network = {(e.label, e.task): implementation_label(e.result.manifest) for e in entries}
    rows = []
    for run in data.runs:
        for a in run.attribution:
            label, baseline = labels[(id(run), a["model"], a["task"])], labels[(id(run), a["baseline"], a["task"])]
            ours, theirs = network[(label, a["task"])], network[(baseline, a["task"])]
            cost, base = a["model_cost"], a["baseline_cost"]
            rows.append({
                "model": label, "task": a["task"], "baseline": baseline,
                "networks": "same" if ours == theirs else f"DIFFER: {ours} vs {theirs}",
                "speed ×": a["speed_ratio"], "forwards/token ×": a["forwards_factor"],
                "time/forward ×": a["forward_cost_factor"], "outside forwards ×": a["outside_factor"],
                "ms/token": _ms(cost["seconds"]), "baseline ms/token": _ms(base["seconds"]),
                "outside ms/token": _ms(_outside(cost)), "baseline outside ms/token": _ms(_outside(base)),
                "note": a["note"] or "",
            })
    frame = pd.DataFrame(rows)
    return frame.sort_values(["task", "model", "baseline"], kind="stable") if rows else frame
