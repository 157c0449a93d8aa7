"""Whether results of finished runs may be compared, decided in one place.

The report and the regression gate both put results of run folders (``harness.run.folder``) beside each other; both
must agree on what "comparable" means, so both call the functions here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from harness.run.manifest import SCORING_FIELDS
from harness.run.folder import Run
from harness.run.records import ResultEntry

# Scoring fields that belong to the model side: they differ between models by design, so they only matter when the
# same model appears twice (two runs, or baseline against candidate).
MODEL_FIELDS = ("decoding", "model_ref", "adapter")
# Scoring fields that must agree between every result of one task, whatever the model.
TASK_FIELDS = tuple(f for f in SCORING_FIELDS if f not in MODEL_FIELDS)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def field_differences(a: dict[str, Any], b: dict[str, Any], fields: Sequence[str] = SCORING_FIELDS) -> list[str]:
    """Names of the manifest fields (of two per-result manifests) whose values differ."""
    return [f for f in fields if _canonical(a.get(f)) != _canonical(b.get(f))]


def describe_value(value: Any, width: int = 40) -> str:
    """A short printable form of a manifest value, for warnings."""
    text = value if isinstance(value, str) else _canonical(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def describe_difference(field: str, a: Any, b: Any) -> str:
    """``field: a vs b``, shortened; for two mappings only the keys whose values differ, so a long configuration
    cut at a fixed width still shows what changed."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = [k for k in sorted(set(a) | set(b), key=str) if _canonical(a.get(k)) != _canonical(b.get(k))]
        return f"{field}: " + ", ".join(f"{k} {describe_value(a.get(k), 24)} vs {describe_value(b.get(k), 24)}"
                                        for k in keys)
    return f"{field}: {describe_value(a)} vs {describe_value(b)}"


@dataclass(frozen=True)
class Labelled:
    """A result with the name it goes by in a comparison (the model, or "model @ run" when a model is repeated)."""

    label: str
    run: Run
    result: ResultEntry

    @property
    def model(self) -> str:
        return self.result.model

    @property
    def task(self) -> str:
        return self.result.task


def label_results(runs: Sequence[Run]) -> list[Labelled]:
    """Every result of every run, labelled by model; a model that appears in several runs gets the run's name too."""
    runs_of_model: dict[str, set[int]] = defaultdict(set)
    for index, run in enumerate(runs):
        for result in run.results:
            runs_of_model[result.model].add(index)
    names = [run.name for run in runs]
    out = []
    for index, run in enumerate(runs):
        run_name = run.name if names.count(run.name) == 1 else f"{run.name}#{index + 1}"
        for result in run.results:
            model = result.model
            label = model if len(runs_of_model[model]) == 1 else f"{model} @ {run_name}"
            out.append(Labelled(label, run, result))
    return out


def implementation_label(manifest: dict[str, Any]) -> str:
    """How a result's network ran, in words ("native", "transformers, compiled", "engine"); "not recorded" for a
    result stored before the manifest said."""
    found = manifest.get("implementation")
    if not found:
        return "not recorded"
    return found["network"] + (", compiled" if found.get("compiled") else "")


def comparability_warnings(entries: Iterable[Labelled]) -> list[str]:
    """Why the numbers beside each other may not be comparable, one sentence each; empty when they are.

    Results of one task must agree on the task's scoring fields (version, data, prompts, canvas) and item count;
    results of one model in several runs must also agree on the model's (checkpoint, decoding configuration).
    """
    entries = list(entries)
    warnings: list[str] = []
    by_task: dict[str, list[Labelled]] = defaultdict(list)
    by_model_task: dict[tuple[str, str], list[Labelled]] = defaultdict(list)
    for e in entries:
        by_task[e.task].append(e)
        by_model_task[(e.model, e.task)].append(e)
    for task, group in by_task.items():
        for f in TASK_FIELDS:
            warnings.extend(_spread(task, f, group, lambda e, f=f: e.result.manifest.get(f)))
        warnings.extend(_spread(task, "number of items", group, lambda e: e.result.n_samples))
        fixtures = sorted({e.label for e in group if e.result.manifest.get("data_source") == "fixtures"})
        if fixtures:
            warnings.append(f"{task}: {', '.join(fixtures)} ran on the bundled fixture items, not the real test "
                            f"split; their scores say nothing about the model")
    for task, group in by_task.items():
        warnings.extend(_spread(task, "network implementation (speed ratios between these mix the decoder with the "
                                "implementation)", group, lambda e: implementation_label(e.result.manifest)))
    for (model, task), group in by_model_task.items():
        if len(group) > 1:
            for f in MODEL_FIELDS:
                warnings.extend(_spread(f"{model} · {task}", f, group,
                                        lambda e, f=f: e.result.manifest.get(f)))
    return warnings


def _spread(scope: str, what: str, group: Sequence[Labelled], get: Any) -> list[str]:
    values: dict[str, list[str]] = defaultdict(list)
    shown: dict[str, Any] = {}
    for e in group:
        key = _canonical(get(e))
        values[key].append(e.label)
        shown[key] = get(e)
    if len(values) < 2:
        return []
    parts = [f"{describe_value(shown[k])} ({', '.join(labels)})" for k, labels in values.items()]
    return [f"{scope}: {what} differs: {'; '.join(parts)}"]
