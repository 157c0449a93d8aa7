"""What a report shows, gathered once from run folders: one cell per (model, task), sample records, warnings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from harness.errors import UserError
from harness.run.compare import Labelled, comparability_warnings, label_results
from harness.run.folder import Run, load_run
from harness.run.records import SampleRecord
from reports.published import COLUMNS, paper_column
from reports.repeated import Repeated, number, parse_repeated, samples_of


class ReportError(UserError, ValueError):
    """Bad report input; the message is one line for the user."""


@dataclass(frozen=True)
class Cell:
    """One (model, task) result, flattened to the numbers a report shows. Accuracy is a fraction (0..1)."""

    label: str
    model: str
    task: str
    run: str
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    tokens_per_second: float | None
    tokens_per_forward: float | None
    forwards_per_sample: float | None
    canvas_tokens: int | None
    gen_tokens_mean: float | None
    latency: dict[str, float | None]
    combined_tokens_per_second: float | None  # data-parallel runs: the sum over ranks (tokens_per_second is per rank)
    diagnostics: dict[str, Any]
    manifest: dict[str, Any]
    timed_samples: int | None = None
    low_sample: bool = False  # the speed figures rest on fewer timed samples than the run's stated minimum
    served_speed: dict[str, Any] = field(default_factory=dict)  # a model served over HTTP: its client-side figures
    samples: int = 1  # samples per item (--samples K); value is then avg@K, and n is items x K
    repeated: Repeated | None = None  # pass@k, maj@K and agreement where K > 1

    @property
    def forwards_per_token(self) -> float | None:
        return 1.0 / self.tokens_per_forward if self.tokens_per_forward else None

    @property
    def served(self) -> bool:
        """Served over HTTP (``openai:``): timed on the client, network and server queue included, so its speed is
        never set beside an in-process model's (a table of its own, a marker on its cells)."""
        return is_served(self.manifest)


def is_served(manifest: dict[str, Any]) -> bool:
    return (manifest.get("implementation") or {}).get("network") == "served"


SERVED_FIGURES = ("request_latency_s", "request_tokens_per_second", "first_chunk_s", "chunks", "tokens_per_chunk",
                  "retries")


@dataclass(frozen=True)
class ReportData:
    runs: tuple[Run, ...]
    cells: tuple[Cell, ...]
    labels: tuple[str, ...]  # table rows, in run order
    tasks: tuple[str, ...]  # table columns, the paper's order first
    paper_columns: dict[str, str | None]  # task -> the paper's column, as the task recorded it in the manifest
    samples: dict[tuple[str, str], list[SampleRecord]]  # (label, task) -> scored sample records
    warnings: tuple[str, ...]
    baseline: str | None

    def cell(self, label: str, task: str) -> Cell | None:
        return next((c for c in self.cells if c.label == label and c.task == task), None)

    def served(self, label: str) -> bool:
        return any(c.served for c in self.cells if c.label == label)

    def kind(self, label: str) -> str | None:
        cell = next((c for c in self.cells if c.label == label), None)
        return None if cell is None else (cell.manifest.get("model") or {}).get("kind")


def repeated_block(entry: Labelled) -> Repeated | None:
    """A result's ``repeated`` block, typed; a block the report cannot read is a ReportError naming the result."""
    r = entry.result
    raw = getattr(r, "repeated", None)
    try:
        return parse_repeated(r.extra.get("repeated") if raw is None else raw)
    except ValueError as error:
        raise ReportError(f"{entry.model} on {entry.task} in {entry.run.name}: {error}") from None


def to_cell(entry: Labelled) -> Cell:
    r = entry.result
    ci = r.primary.get("ci95") or [None, None]
    repeated = repeated_block(entry)
    speed = r.speed
    return Cell(
        label=entry.label, model=entry.model, task=entry.task, run=entry.run.name, metric=r.primary_metric,
        value=number(r.primary.get("value")), ci_low=number(ci[0]), ci_high=number(ci[1]), n=int(r.n_samples),
        tokens_per_second=number(speed.get("tokens_per_second")),
        tokens_per_forward=number(speed.get("tokens_per_forward")),
        forwards_per_sample=number(speed.get("forwards_per_sample")),
        canvas_tokens=speed.get("canvas_tokens"), gen_tokens_mean=number(speed.get("gen_tokens_mean")),
        latency={k: number(v) for k, v in (speed.get("latency_s") or {}).items()},
        combined_tokens_per_second=number(speed.get("combined_tokens_per_second")),
        diagnostics=dict(r.diagnostics), manifest=dict(r.manifest),
        timed_samples=speed.get("timed_samples"), low_sample=bool(speed.get("low_sample")),
        served_speed={k: speed[k] for k in SERVED_FIGURES if k in speed} if is_served(r.manifest) else {},
        samples=samples_of(r.manifest, repeated), repeated=repeated,
    )


def task_columns(cells: Sequence[Cell]) -> dict[str, str | None]:
    """Each task's paper column, from the first of its results that records one."""
    columns: dict[str, str | None] = {}
    for c in cells:
        if columns.get(c.task) is None:
            columns[c.task] = paper_column(c.manifest)
    return columns


def task_order(columns: dict[str, str | None]) -> tuple[str, ...]:
    """The paper's column order for tasks it has, then the others in order of appearance."""
    unique = list(columns)
    rank = {c: i for i, c in enumerate(COLUMNS)}
    return tuple(sorted(unique, key=lambda t: (rank.get(columns[t] or "", len(rank)), unique.index(t))))


def choose_baseline(cells: Sequence[Cell], labels: Sequence[str], requested: str | None) -> str | None:
    """The requested model (by label or model name); by default the first autoregressive model, else the first."""
    if not labels:
        return None
    if requested is not None:
        if requested in labels:
            return requested
        matching = list(dict.fromkeys(c.label for c in cells if c.model == requested))
        if len(matching) == 1:
            return matching[0]
        if matching:
            raise ReportError(f"baseline {requested!r} is in several runs; pick one of: {', '.join(matching)}")
        raise ReportError(f"baseline model {requested!r} is not in the runs; models: {', '.join(labels)}")
    ar = [c.label for c in cells if (c.manifest.get("model") or {}).get("kind") == "ar"]
    return ar[0] if ar else labels[0]


WORD_BREAKS = re.compile(r"([_+\-.,@ ]+)")  # run folder names are words joined by these (models+tasks__hash)
SHORT_RUN_CHARS = 16  # a distinguishing part longer than this is cut, where the cut still tells the runs apart


def _shared_words(split: Sequence[list[str]]) -> int:
    """How many leading words (separators included) every name shares."""
    count = 0
    while all(len(words) > count for words in split) and len({words[count] for words in split}) == 1:
        count += 1
    return count


def short_run_names(names: Sequence[str], limit: int = SHORT_RUN_CHARS) -> list[str]:
    """What tells each run's name from the others', for labels a figure can hold: the names less the words they all
    share at the start and at the end, so ``llada+qwen3__gsm8k__1a2b3c4d`` beside ``llada+qwen3__gsm8k__9f8e7d6c``
    gives ``1a2b3c4d`` and ``9f8e7d6c``. A part over ``limit`` characters is cut where the cut keeps the runs apart.
    A name given twice is told apart by its position (``run#1``, ``run#2``)."""
    unique = [name if names.count(name) == 1 else f"{name}#{i + 1}" for i, name in enumerate(names)]
    if len(unique) < 2:
        return unique
    split = [WORD_BREAKS.split(name) for name in unique]
    head = _shared_words(split)
    tail = _shared_words([words[head:][::-1] for words in split])
    parts = ["".join(words[head:len(words) - tail]).strip("_+-., @") for words in split]
    if not all(parts) or len(set(parts)) < len(parts):
        parts = unique  # one name is the others' shared part: only the whole names tell them apart
    cut = [part if len(part) <= limit else part[:limit - 1] + "…" for part in parts]
    return cut if len(set(cut)) == len(cut) else parts


def adapter_tag(manifest: dict[str, Any]) -> str:
    """`` (LoRA 1a2b3c4d)``, the short hash of the LoRA files a result's model merged, or "" without one."""
    sha = (manifest.get("model") or {}).get("adapter")
    return f" (LoRA {sha[:8]})" if sha else ""


def labelled_entries(runs: Sequence[Run]) -> list[Labelled]:
    """Every result labelled by model, and a model found in several runs as ``model @ short run name``; a model
    with a LoRA merged has its short hash beside the name."""
    short = {id(run): name for run, name in zip(runs, short_run_names([run.name for run in runs]))}
    out = []
    for entry in label_results(runs):
        label = entry.label if entry.label == entry.model else f"{entry.model} @ {short[id(entry.run)]}"
        out.append(replace(entry, label=label + adapter_tag(entry.result.manifest)))
    return out


def gather(run_dirs: Sequence[Path], baseline_model: str | None = None) -> ReportData:
    """Load the runs and everything the report needs; raises RunLoadError or ReportError with one line."""
    if not run_dirs:
        raise ReportError("give at least one run folder")
    runs = tuple(load_run(Path(p)) for p in run_dirs)
    entries = labelled_entries(runs)
    if not entries:
        raise ReportError("the runs hold no results")
    cells = tuple(to_cell(e) for e in entries)
    labels = tuple(dict.fromkeys(c.label for c in cells))
    samples = {}
    for e in entries:
        records = e.run.samples(e.model, e.task)
        if records is not None:
            samples[(e.label, e.task)] = records
    columns = task_columns(cells)
    return ReportData(
        runs=runs, cells=cells, labels=labels, tasks=task_order(columns), paper_columns=columns, samples=samples,
        warnings=tuple(comparability_warnings(entries)), baseline=choose_baseline(cells, labels, baseline_model),
    )
