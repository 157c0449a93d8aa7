"""Speed records of an lm-eval run through a harness adapter, and their figures, written beside lm-eval's output.

The per-sample records carry the fields the harness's runner stores (latency, tokens, forwards, warm-up flag), so
``harness.stats.aggregate.speed_figures`` turns them into the same figures as a harness run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.stats.aggregate import speed_figures
from harness.files import write_json_atomic, write_jsonl_atomic
from harness.run.store import safe_name


@dataclass
class TaskSpeed:
    records: list[dict[str, Any]] = field(default_factory=list)
    peak_memory: int | None = None


@dataclass
class SpeedLog:
    """Records per lm-eval task, in generation order."""

    batch_size: int
    tasks: dict[str, TaskSpeed] = field(default_factory=dict)

    def add(self, task: str, records: list[dict[str, Any]]) -> None:
        self.tasks.setdefault(task, TaskSpeed()).records.extend(records)

    def set_peak_memory(self, task: str, peak: int) -> None:
        self.tasks.setdefault(task, TaskSpeed()).peak_memory = peak

    def figures(self) -> dict[str, dict[str, Any]]:
        return {task: speed_figures(t.records, self.batch_size, t.peak_memory) for task, t in self.tasks.items()}

    def write(self, folder: Path, stamp: str, about: dict[str, Any]) -> list[Path]:
        """``dllm_speed_<stamp>.json`` (figures per task plus ``about``) and one
        ``dllm_speed_samples_<task>_<stamp>.jsonl`` per task, named like lm-eval's results and samples files."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for task, speed in self.tasks.items():
            path = folder / f"dllm_speed_samples_{safe_name(task)}_{stamp}.jsonl"
            write_jsonl_atomic(path, speed.records)
            written.append(path)
        summary = folder / f"dllm_speed_{stamp}.json"
        write_json_atomic(summary, {**about, "speed": self.figures()})
        return [summary, *written]
