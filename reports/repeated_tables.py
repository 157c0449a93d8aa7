"""The report's tables of repeated samples (``--samples K``): per task, how often each model's K samples of an item
agree, and its pass@k; in percent, like every table of the report, and built from the same ReportData as the rest so
the HTML, CSV and Markdown agree."""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.repeated import Estimate, table_ks
from reports.report_data import Cell, ReportData


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def repeated_tasks(data: ReportData) -> tuple[str, ...]:
    """Tasks, in the report's order, where some model drew several samples per item."""
    return tuple(t for t in data.tasks if any(c.task == t and c.repeated is not None for c in data.cells))


def repeated_cells(data: ReportData, task: str, with_pass_at: bool = False) -> list[tuple[int, Cell]]:
    """The results of ``task`` with several samples per item (and, with ``with_pass_at``, a pass@k curve: a 0/1
    metric), each with its model's index (its colour and marker)."""
    out = []
    for index, label in enumerate(data.labels):
        cell = data.cell(label, task)
        if cell is not None and cell.repeated is not None and (cell.repeated.pass_at or not with_pass_at):
            out.append((index, cell))
    return out


AGREEMENT_COLUMNS = ("model", "K", "items", "all correct %", "all wrong %", "mixed %", "avg@K %", "pass@K %",
                     "maj@K %")


def agreement_frame(data: ReportData, task: str) -> pd.DataFrame:
    """Per model: how often its K samples of an item all agree (all correct, all wrong) or not (mixed), beside
    avg@K, pass@K and maj@K (maj@K blank where the task extracts no answer)."""
    records = []
    for _, c in repeated_cells(data, task):
        r = c.repeated
        assert r is not None
        records.append({
            "model": c.label, "K": r.samples_per_item, "items": r.items,
            "all correct %": _pct(r.agreement.all_correct), "all wrong %": _pct(r.agreement.all_wrong),
            "mixed %": _pct(r.agreement.mixed), "avg@K %": _pct(r.avg.value),
            "pass@K %": None if r.pass_at_top is None else _pct(r.pass_at_top.value),
            "maj@K %": None if r.maj is None else _pct(r.maj.value),
        })
    return pd.DataFrame(records, columns=AGREEMENT_COLUMNS)


def pass_at_frame(data: ReportData, task: str) -> pd.DataFrame:
    """pass@k in % per model at k = 1, 2, 4, ... and the largest K of the task (the figure draws every k); a model
    whose K is smaller has none beyond it."""
    cells = repeated_cells(data, task, with_pass_at=True)
    ks = table_ks(max(len(c.repeated.pass_at) for _, c in cells)) if cells else []  # type: ignore[union-attr]
    records = []
    for _, c in cells:
        r = c.repeated
        assert r is not None
        record: dict[str, Any] = {"model": c.label, "K": r.samples_per_item}
        for k in ks:
            estimate = r.pass_at_k(k)
            record[f"pass@{k} %"] = None if estimate is None else _pct(estimate.value)
        records.append(record)
    return pd.DataFrame(records, columns=["model", "K", *(f"pass@{k} %" for k in ks)])


def _estimate_columns(prefix: str, estimate: Estimate | None) -> dict[str, float | None]:
    if estimate is None:
        return {f"{prefix}_pct": None, f"{prefix}_ci95_low_pct": None, f"{prefix}_ci95_high_pct": None}
    return {f"{prefix}_pct": _pct(estimate.value), f"{prefix}_ci95_low_pct": _pct(estimate.ci_low),
            f"{prefix}_ci95_high_pct": _pct(estimate.ci_high)}


def pass_at_long_frame(data: ReportData) -> pd.DataFrame:
    """Every pass@k of every result with several samples per item, one row per (model, task, k), with its
    item-clustered interval: the figure's points, for the CSV."""
    records = []
    for task in repeated_tasks(data):
        for _, c in repeated_cells(data, task):
            r = c.repeated
            assert r is not None
            for k, estimate in enumerate(r.pass_at, start=1):
                records.append({"model": c.label, "task": task, "K": r.samples_per_item, "k": k,
                                **_estimate_columns("pass_at_k", estimate)})
    return pd.DataFrame(records)


def repeated_summary_frame(data: ReportData) -> pd.DataFrame:
    """One row per result with several samples per item: K, its metric, avg@K, pass@K, maj@K and the agreement
    shares, for the CSV and the Markdown tables."""
    records = []
    for task in repeated_tasks(data):
        for _, c in repeated_cells(data, task):
            r = c.repeated
            assert r is not None
            records.append({
                "model": c.label, "task": task, "K": r.samples_per_item, "items": r.items, "metric": r.metric,
                **_estimate_columns("avg", r.avg), **_estimate_columns("pass_at_K", r.pass_at_top),
                **_estimate_columns("maj", r.maj), "all_correct_pct": _pct(r.agreement.all_correct),
                "all_wrong_pct": _pct(r.agreement.all_wrong), "mixed_pct": _pct(r.agreement.mixed),
            })
    return pd.DataFrame(records)
