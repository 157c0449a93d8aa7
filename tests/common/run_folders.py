"""Synthetic run folders in exactly the runner's format: results.json plus samples/<model>/<task>.jsonl.

The per-(model, task) figures are computed by harness.stats.aggregate from the sample records, as the runner does, so a
synthetic run differs from a real one only in where the outputs came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.stats.aggregate import aggregate
from harness.run.folder import RunFolder
from harness.run.records import ResultEntry, ResultsFile, SampleRecord
from tasks.registry import make_task, task_names

METRIC = "exact_match,flexible-extract"


def samples(scores: Sequence[float], *, texts: Sequence[str] | None = None, tokens: int = 20, nfe: float = 20.0,
            latency: float = 0.5, warmup: int = 1, doc_ids: Sequence[str] | None = None, metric: str = METRIC,
            target: str = "42") -> list[dict[str, Any]]:
    """Scored sample records; ``scores`` are the primary metric per item (1 right, 0 wrong)."""
    records = []
    for i, score in enumerate(scores):
        text = texts[i] if texts is not None else f"The answer is {42 if score else 7}."
        doc = doc_ids[i] if doc_ids is not None else str(i)
        records.append({
            "key": f"key-{doc}", "doc_id": doc, "prompt": f"Question {doc}: what is six times seven?",
            "text": text, "raw_text": text, "token_ids": list(range(tokens)), "gen_tokens": tokens,
            "gen_tokens_after_stop": tokens, "canvas_tokens": 32, "nfe": nfe, "hit_max_tokens": tokens >= 32,
            "latency_s": latency * (1 + 0.1 * (i % 3)), "batch_latency_s": latency, "batch_size": 1,
            "warmup": i < warmup, "group": None, "target": target,
            "extracted": {"flexible-extract": "42" if score else "7", "strict-match": "[invalid]"},
            "scores": {metric: float(score), "exact_match,strict-match": 0.0},
            "diagnostics": {"empty": not text, "invalid": False},
        })
    return records


def stored(key: str, text: str = "x") -> SampleRecord:
    """A generated, unscored record, as the resume store keeps it."""
    return SampleRecord(key=key, doc_id=key, prompt=f"Question {key}", text=text, raw_text=text, token_ids=[1, 2],
                        gen_tokens=2, gen_tokens_after_stop=2, canvas_tokens=8, nfe=2.0, hit_max_tokens=False,
                        latency_s=0.1, batch_latency_s=0.1, batch_size=1, warmup=False)


@dataclass
class Entry:
    model: str
    task: str
    records: list[dict[str, Any]]
    task_version: str = "task-v1"
    model_ref: str | None = None
    kind: str = "ar"
    decoding: dict[str, Any] = field(default_factory=lambda: {"do_sample": False, "seed": 1234})
    data_source: str = "hub"
    tps_override: float | None = None  # replace the computed tokens/s (speed regressions without fake latencies)


def paper_column(task: str) -> str | None:
    """What the runner records: the registry task's own ``paper_column`` (none for a made-up task)."""
    return (make_task(task).paper_column or None) if task in task_names() else None


def result(entry: Entry) -> dict[str, Any]:
    summary = aggregate(entry.records, METRIC, batch_size=1, peak_memory=123)
    if entry.tps_override is not None:
        summary["speed"]["tokens_per_second"] = entry.tps_override
    return {
        "model": entry.model,
        "task": entry.task,
        "manifest": {
            "model_ref": entry.model_ref or entry.model,
            "model": {"name": entry.model, "ref": entry.model_ref or entry.model, "fingerprint": "fp",
                      "dtype": "float32", "kind": entry.kind},
            "decoding": entry.decoding, "preset": None,
            "task": {"name": entry.task, "version": entry.task_version, "primary_metric": METRIC,
                     "paper_column": paper_column(entry.task)},
            "task_version": entry.task_version, "canvas_tokens": 32, "dataset": f"hub/{entry.task}",
            "data_source": entry.data_source, "data_sha256": "ab" * 32, "prompt_sha256": "cd" * 8, "seed": 1234,
            "limit": None, "n_planned": len(entry.records),
        },
        **summary,
    }


def write_run(folder: Path, entries: Sequence[Entry], with_samples: bool = True,
              device_name: str = "test-cpu") -> Path:
    """Write a run folder and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "created": "2026-01-01T00:00:00+0000",
        "environment": {"harness_version": "0.1.0", "git_commit": "abc", "python": "3.11", "torch": "2.13.0",
                        "device": "cpu", "device_name": device_name, "device_count": 1},
        "settings": {"models": sorted({e.model for e in entries}), "tasks": sorted({e.task for e in entries}),
                     "seed": 1234, "batch_size": 1, "warmup": 1},
    }
    run = RunFolder(folder)
    run.write_results(ResultsFile.of(manifest, [ResultEntry.from_json(result(e)) for e in entries]))
    if with_samples:
        for e in entries:
            run.write_samples(e.model, e.task, [SampleRecord.from_json(r) for r in e.records])
    return folder
