"""What a task is: documents, a prompt per document, and a scorer. A task knows nothing about models."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tasks.records import DatasetSpec, LoadedData, load_records


@dataclass(frozen=True)
class Doc:
    """One evaluation item: a stable id, the record in its hub schema, and its subject group if the task has groups."""

    id: str
    data: dict[str, Any]
    group: str | None = None


@dataclass(frozen=True)
class TaskPrompt:
    """Chat turns for one document (system message, user message, assistant prefill) and the stop strings."""

    user: str
    system: str | None = None
    prefill: str | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class SampleScore:
    """Scores of one output. ``scores`` maps "metric,filter" names (lm-eval's) to values; ``diagnostics`` holds the
    flags counted as rates (empty, invalid extraction, execution status)."""

    target: str
    extracted: dict[str, str]
    scores: dict[str, float]
    diagnostics: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    """A benchmark. Subclasses set the class attributes and implement ``prompt`` and ``score``."""

    name: str
    version: str
    dataset: DatasetSpec
    primary_metric: str
    metrics: tuple[str, ...]
    canvas_tokens: int = 512
    equivalent_lm_eval_task: str = ""  # the lm-eval task this one follows, shown in the report's manifests
    paper_column: str = ""  # the ReFusion paper's Table 1 column; the report puts published figures beside it
    # the key of a sample's ``extracted`` that holds its answer, for the majority vote over an item's repeated samples
    # (maj@K); None where the task extracts no answer to vote on (code, instructions)
    answer_key: str | None = None

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        """Turn dataset records into documents in a deterministic order. Override to filter or to add groups."""
        return [Doc(id=self.doc_id(record, i), data=record) for i, record in enumerate(records)]

    def doc_id(self, record: dict[str, Any], index: int) -> str:
        return str(index)

    def load(self, source: str, data_dir: Path | None) -> LoadedData:
        """The task's records. Most tasks read their ``dataset`` (hub, local folder or fixtures); a task that brings its
        own data (an lm-eval task) overrides this."""
        return load_records(self.dataset, source, data_dir)

    @abstractmethod
    def prompt(self, doc: Doc) -> TaskPrompt:
        """The chat turns and stop strings for one document."""

    @abstractmethod
    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        """Score a list of outputs (batched, so code tasks can run them in parallel)."""

    def check_ready(self) -> None:
        """Called once before a run of this task; code tasks run their sandbox canary here."""

    def describe(self) -> dict[str, Any]:
        """What identifies the scoring of this task, for manifests and comparability checks."""
        return {
            "name": self.name,
            "version": self.version,
            "primary_metric": self.primary_metric,
            "metrics": list(self.metrics),
            "canvas_tokens": self.canvas_tokens,
            "dataset": self.dataset.hub_id,
            "config": "+".join(self.dataset.hub_configs) if self.dataset.hub_configs else self.dataset.config,
            "split": self.dataset.split,
            "paper_column": self.paper_column or None,
            "lm_eval_task": self.equivalent_lm_eval_task or None,
        }
