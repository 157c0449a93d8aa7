"""The report's numbers as tables: pandas frames for CSV and Markdown, and row objects for the HTML template.

Accuracy is shown in percent (the paper's unit); every table is built from the same ReportData, so the HTML, CSV
and Markdown never disagree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from harness.run.compare import MODEL_FIELDS, TASK_FIELDS, implementation_label
from harness.run.folder import RunFolder
from reports.report_data import Cell, ReportData
from reports.published import COLUMNS, SOURCE, PublishedCell, PublishedRow, published_row, published_table
from reports.repeated import avg_label, k_note, samples_words
from reports.repeated_tables import pass_at_long_frame, repeated_summary_frame


def pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def mean_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


# --- the paper-style table --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GridCell:
    accuracy: float | None  # percent
    ci_low: float | None
    ci_high: float | None
    tokens_per_second: float | None
    n: int | None = None
    low_sample: bool = False  # speed from too few timed samples
    served: bool = False  # tokens/s timed on the client of an HTTP server, not in process: marked wherever shown
    samples: int = 1  # samples per item: accuracy is then avg@K, its interval clustered by item
    items: int | None = None  # items under K > 1 samples (n is items x K)
    maj: float | None = None  # maj@K, percent, where K > 1 and the task extracts an answer

    @property
    def k_label(self) -> str:
        return avg_label(self.samples)


@dataclass(frozen=True)
class GridRow:
    label: str
    cells: tuple[GridCell | None, ...]  # one per task, None where the model did not run it
    average: GridCell
    tasks_in_average: int
    published_row: PublishedRow | None


def grid_cell(cell: Cell) -> GridCell:
    r = cell.repeated
    return GridCell(pct(cell.value), pct(cell.ci_low), pct(cell.ci_high), cell.tokens_per_second, cell.n,
                    cell.low_sample, cell.served, cell.samples, None if r is None else r.items,
                    None if r is None or r.maj is None else pct(r.maj.value))


def paper_grid(data: ReportData) -> list[GridRow]:
    """Models as rows, tasks as columns, and the average over the tasks each model ran (as the paper's Avg.)."""
    rows = []
    for label in data.labels:
        cells = tuple(None if (c := data.cell(label, t)) is None else grid_cell(c) for t in data.tasks)
        present = [c for c in cells if c is not None]
        average = GridCell(mean_or_none([c.accuracy for c in present]),
                           None, None, mean_or_none([c.tokens_per_second for c in present]),
                           served=any(c.served for c in present))
        first = next(c for c in data.cells if c.label == label)
        rows.append(GridRow(label, cells, average, len(present), published_row(first.manifest)))
    return rows


SERVED_MARK = " (served over HTTP)"
AVG_NOTE = ("A figure marked avg@K is the mean over K samples per item, its 95% interval clustered by item (an item's "
            "K samples are one draw, not K), and n is items × K; maj@K is the majority vote over an item's K answers.")
SERVED_NOTE = ("Served over HTTP (openai:): each request timed on this side of the wire, from sending to its last "
               "byte, the network and the server's queue included; the server's own token count. Not measured the "
               "way the in-process models above are: compare these with each other, not with those.")


def cell_text(cell: GridCell | None, with_ci: bool = True) -> str:
    if cell is None:
        return "-"
    ci = f" [{fmt(cell.ci_low, 1)}, {fmt(cell.ci_high, 1)}]" if with_ci and cell.ci_low is not None else ""
    few = " (few timed samples)" if cell.low_sample else ""
    k = f" {cell.k_label}" if cell.k_label else ""
    maj = f", maj@{cell.samples} {fmt(cell.maj)}" if cell.maj is not None else ""
    return (f"{fmt(cell.accuracy)}{k}{ci}{maj} / {fmt(cell.tokens_per_second)} tok/s"
            f"{SERVED_MARK if cell.served else ''}{few}")


def paper_frame(data: ReportData) -> pd.DataFrame:
    """The paper-style table as text cells: "accuracy [95% CI] / tokens/s"."""
    records = []
    for row in paper_grid(data):
        record: dict[str, Any] = {"model": row.label}
        record.update({t: cell_text(c) for t, c in zip(data.tasks, row.cells)})
        suffix = "" if row.tasks_in_average == len(data.tasks) else f" ({row.tasks_in_average} tasks)"
        record["Avg."] = cell_text(row.average, with_ci=False) + suffix
        records.append(record)
    return pd.DataFrame(records)


# --- tidy numbers -----------------------------------------------------------------------------------------------------

def summary_frame(data: ReportData) -> pd.DataFrame:
    """One row per (model, task) with every number the report shows."""
    records = []
    for c in data.cells:
        record: dict[str, Any] = {
            "model": c.label, "run": c.run, "task": c.task, "metric": c.metric, "n": c.n,
            "samples_per_item": c.samples,
            "accuracy_pct": pct(c.value), "ci95_low_pct": pct(c.ci_low), "ci95_high_pct": pct(c.ci_high),
            "tokens_per_second": c.tokens_per_second,
            "combined_tokens_per_second": c.combined_tokens_per_second, "tokens_per_forward": c.tokens_per_forward,
            "forwards_per_token": c.forwards_per_token, "forwards_per_sample": c.forwards_per_sample,
            "canvas_tokens": c.canvas_tokens, "gen_tokens_mean": c.gen_tokens_mean,
        }
        record.update({f"latency_{k}_s": v for k, v in c.latency.items()})
        record.update(diagnostic_values(c))
        record["data_source"] = c.manifest.get("data_source")
        records.append(record)
    return pd.DataFrame(records)


def diagnostic_values(cell: Cell) -> dict[str, Any]:
    """Rates in percent under "<name>_pct"; status counts as "status: count" text."""
    out: dict[str, Any] = {}
    for key, value in sorted(cell.diagnostics.items()):
        if key.endswith("_rate"):
            out[f"{key[:-5]}_pct"] = pct(value)
        elif isinstance(value, dict):
            out[key] = ", ".join(f"{k}: {v}" for k, v in sorted(value.items()))
        else:
            out[key] = value
    return out


def speed_frame(data: ReportData) -> pd.DataFrame:
    """The in-process models' speed (served models have ``served_speed_frame``)."""
    records = []
    for c in (c for c in data.cells if not c.served):
        records.append({
            "model": c.label, "task": c.task, "network": implementation_label(c.manifest),
            "tokens/s": c.tokens_per_second, "tokens/forward": c.tokens_per_forward,
            "forwards/token": c.forwards_per_token, "forwards/sample": c.forwards_per_sample,
            "canvas": c.canvas_tokens, "gen tokens (mean)": c.gen_tokens_mean,
            "latency mean s": c.latency.get("mean"), "p50 s": c.latency.get("p50"),
            "p90 s": c.latency.get("p90"), "p99 s": c.latency.get("p99"),
            "timed samples": c.timed_samples if not c.low_sample else f"{c.timed_samples} (few)",
        })
        if any(o.combined_tokens_per_second is not None for o in data.cells):
            records[-1]["tokens/s all ranks"] = c.combined_tokens_per_second
    return pd.DataFrame(records)


def _spread(speed: dict[str, Any], name: str, stat: str) -> float | None:
    return (speed.get(name) or {}).get(stat)


def served_speed_frame(data: ReportData) -> pd.DataFrame:
    """The speed of models served over HTTP, client side: per request latency, tokens/s, time to the first chunk of
    text and the chunks it came in (a block-diffusion server sends a block per chunk), and the run's tokens/s."""
    records = []
    for c in (c for c in data.cells if c.served):
        served, speed = c.manifest.get("served") or {}, c.served_speed
        records.append({
            "model": c.label, "task": c.task, "server": served.get("base_url"),
            "served model": served.get("served_model"), "streamed": served.get("streamed"),
            "tokens/s (run)": c.tokens_per_second,
            "request tokens/s p50": _spread(speed, "request_tokens_per_second", "p50"),
            "request latency p50 s": _spread(speed, "request_latency_s", "p50"),
            "p90 s": _spread(speed, "request_latency_s", "p90"),
            "first chunk p50 s": _spread(speed, "first_chunk_s", "p50"),
            "chunks (mean)": _spread(speed, "chunks", "mean"),
            "tokens/chunk (mean)": _spread(speed, "tokens_per_chunk", "mean"),
            "gen tokens (mean)": c.gen_tokens_mean, "retries": speed.get("retries"),
            "timed samples": c.timed_samples if not c.low_sample else f"{c.timed_samples} (few)",
        })
    return pd.DataFrame(records)


def diagnostics_frame(data: ReportData) -> pd.DataFrame:
    records = []
    for c in data.cells:
        values = diagnostic_values(c)
        record: dict[str, Any] = {"model": c.label, "task": c.task, "n": c.n}
        record.update({k.replace("_pct", " %"): v for k, v in values.items()})
        records.append(record)
    return pd.DataFrame(records)


# --- published beside measured ----------------------------------------------------------------------------------------

PUBLISHED_COLUMNS = ("model", "task", "published row", "n", "measured accuracy %", "published accuracy %",
                     "samples per item", "measured tokens/s", "published tokens/s", "published benchmark", "source")


def samples_text(measured: int, published: PublishedCell) -> str:
    """Whether a measured figure and a published cell are over the same samples per item: "same (avg@8)", or the
    note that says how they differ (``reports.repeated.k_note``)."""
    note = k_note(measured, published.samples)
    return f"same ({samples_words(measured)})" if note is None else note


def published_frame(data: ReportData) -> pd.DataFrame:
    """Measured cells of models and tasks a published row has, beside its figures for them; "published benchmark"
    says where the source's benchmark is not the task measured here."""
    records = []
    for c in data.cells:
        row, column = published_row(c.manifest), data.paper_columns.get(c.task)
        published = None if row is None or column is None else row.cells.get(column)
        if published is None:
            continue
        records.append({
            "model": c.label, "task": c.task, "published row": row.label, "n": c.n,
            "measured accuracy %": pct(c.value), "published accuracy %": published.accuracy,
            "samples per item": samples_text(c.samples, published),
            "measured tokens/s": c.tokens_per_second, "published tokens/s": published.tokens_per_second,
            "published benchmark": published.note or "same", "source": row.source,
        })
    return pd.DataFrame(records, columns=PUBLISHED_COLUMNS)


def published_reference_frame() -> pd.DataFrame:
    """The paper's whole table, "accuracy / tokens/s" per cell, for reference."""
    table = published_table()
    records = []
    for row, cells in table.items():
        record = {"published (paper)": row}
        record.update({col: f"{cell.accuracy:.2f} / {cell.tokens_per_second:.2f}" for col, cell in cells.items()})
        acc = sum(c.accuracy for c in cells.values()) / len(cells)
        tps = sum(c.tokens_per_second for c in cells.values()) / len(cells)
        record["Avg."] = f"{acc:.2f} / {tps:.2f}"
        records.append(record)
    return pd.DataFrame(records, columns=["published (paper)", *COLUMNS, "Avg."])


# --- manifests --------------------------------------------------------------------------------------------------------

# ``decoder`` is its name and version; ``reused_stale`` marks samples an older decoder version stored that the run kept
# (--reuse-stale), ``batch_size_settled`` the rows a decode that ran out of memory fell back to
MANIFEST_COLUMNS = ("model_ref", "fingerprint", "dtype", "decoder", "decoding", "reused_stale", "preset",
                    "task_version", "lm_eval_task", "dataset", "data_source", "data_sha256", "prompt_sha256",
                    "canvas_tokens", "seed", "limit", "n_planned", "batch_size_settled")


@dataclass(frozen=True)
class ManifestRow:
    label: str
    task: str
    values: dict[str, str]
    differs: frozenset[str]  # scoring fields that differ from another result they are compared with


def _manifest_text(manifest: dict[str, Any], key: str) -> str:
    if key in ("fingerprint", "dtype"):
        value = (manifest.get("model") or {}).get(key)
    elif key == "lm_eval_task":  # the lm-eval task the harness task follows (Task.equivalent_lm_eval_task)
        value = (manifest.get("task") or {}).get(key)
    else:
        value = manifest.get(key)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if key == "data_sha256" and isinstance(value, str):
        return value[:16]
    return "-" if value is None else str(value)


def manifest_rows(data: ReportData) -> list[ManifestRow]:
    """Per-result manifests, marking a task field that differs within its task and a model field that differs
    between two runs of the same model."""
    def canonical(cell: Cell, key: str) -> str:
        return json.dumps(cell.manifest.get(key), sort_keys=True, default=str)

    rows = []
    for c in data.cells:
        same_task = [o for o in data.cells if o.task == c.task]
        same_model = [o for o in same_task if o.model == c.model]
        differs = {f for f in TASK_FIELDS if len({canonical(o, f) for o in same_task}) > 1}
        differs |= {f for f in MODEL_FIELDS if len({canonical(o, f) for o in same_model}) > 1}
        differs |= {"reused_stale"} if c.manifest.get("reused_stale") else set()  # marked like a difference
        rows.append(ManifestRow(c.label, c.task, {k: _manifest_text(c.manifest, k) for k in MANIFEST_COLUMNS},
                                frozenset(differs)))
    return rows


def manifest_frame(data: ReportData) -> pd.DataFrame:
    return pd.DataFrame([{"model": r.label, "task": r.task, **r.values} for r in manifest_rows(data)])


# --- files ------------------------------------------------------------------------------------------------------------

def _md_cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = f"{value:.2f}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' to_markdown needs tabulate, which is not a dependency)."""
    if frame.empty:
        return "_(none)_"
    header = "| " + " | ".join(_md_cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def markdown_report(data: ReportData) -> str:
    parts = ["# Evaluation tables", "",
             "Accuracy in % with its 95% Wilson interval / tokens per second (generated tokens until EOS)."
             + (f" {AVG_NOTE}" if any(c.samples > 1 for c in data.cells) else ""), ""]
    if data.warnings:
        parts += ["**Comparability warnings**", ""] + [f"- {w}" for w in data.warnings] + [""]
    parts += ["## Accuracy and throughput", "", markdown_table(paper_frame(data)), ""]
    parts += ["## Speed", "", markdown_table(speed_frame(data)), ""]
    served = served_speed_frame(data)
    if not served.empty:
        parts += ["## Speed of models served over HTTP", "", SERVED_NOTE, "", markdown_table(served), ""]
    repeated = repeated_summary_frame(data)
    if not repeated.empty:
        parts += ["## Repeated samples per item (avg@K, pass@K, maj@K and agreement, in %)", "",
                  markdown_table(repeated), ""]
    parts += ["## Diagnostics (rates in %)", "", markdown_table(diagnostics_frame(data)), ""]
    published = published_frame(data)
    parts += ["## Published figures beside measured (each row's source; not measured here)", "",
              markdown_table(published) if not published.empty else "_No measured model maps to a published row._",
              ""]
    parts += [f"## Published table ({SOURCE}; not measured here)", "", markdown_table(published_reference_frame()), ""]
    return "\n".join(parts)


def write_tables(data: ReportData, folder: RunFolder) -> list[Path]:
    """CSV and Markdown versions of the report's tables, each written atomically through the run folder (a reader
    never sees half a table); returns the files written."""
    frames = {
        "results": summary_frame(data),
        "table": paper_frame(data),
        "published": published_frame(data),
        "manifests": manifest_frame(data),
        **({"served": served} if not (served := served_speed_frame(data)).empty else {}),
        **({"repeated": repeated} if not (repeated := repeated_summary_frame(data)).empty else {}),
        **({"pass_at_k": passes} if not (passes := pass_at_long_frame(data)).empty else {}),
    }
    written = [folder.write_table(table, frame.to_csv(index=False)) for table, frame in frames.items()]
    written.append(folder.write_tables_markdown(markdown_report(data)))
    return written
