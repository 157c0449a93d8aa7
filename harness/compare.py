"""One place to load finished runs and to decide whether two results may be compared.

The report and the regression gate both read run folders (``<run>/results.json`` plus ``<run>/samples/``) or a bare
results JSON; both must agree on what "comparable" means, so both call the functions here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness.manifest import SCORING_FIELDS
from harness.store import safe_name

# Scoring fields that belong to the model side: they differ between models by design, so they only matter when the
# same model appears twice (two runs, or baseline against candidate).
MODEL_FIELDS = ("decoding", "model_ref")
# Scoring fields that must agree between every result of one task, whatever the model.
TASK_FIELDS = tuple(f for f in SCORING_FIELDS if f not in MODEL_FIELDS)
RESULT_KEYS = ("model", "task", "manifest", "n_samples", "primary_metric", "metrics", "speed", "diagnostics")


class RunLoadError(ValueError):
    """A run folder or results file that cannot be read; the message is one line for the user."""


@dataclass(frozen=True)
class Run:
    """A finished run: its manifest, its per-(model, task) results, and the folder its sample records live in."""

    name: str
    results_path: Path
    manifest: dict[str, Any]
    results: tuple[dict[str, Any], ...]

    @property
    def root(self) -> Path:
        return self.results_path.parent

    def result(self, model: str, task: str) -> dict[str, Any] | None:
        return next((r for r in self.results if r["model"] == model and r["task"] == task), None)

    def samples_path(self, model: str, task: str) -> Path:
        return self.root / "samples" / safe_name(model) / f"{safe_name(task)}.jsonl"


def load_run(path: Path) -> Run:
    """Read a run folder or a results JSON file; raises RunLoadError with a one-line reason."""
    path = Path(path)
    if path.is_dir():
        results_path = path / "results.json"
        if not results_path.is_file():
            raise RunLoadError(f"{path} is a folder without results.json (not a finished run)")
    elif path.is_file():
        results_path = path
    else:
        raise RunLoadError(f"{path} does not exist")
    try:
        payload = json.loads(results_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise RunLoadError(f"cannot read {results_path}: {error}") from None
    except json.JSONDecodeError as error:
        raise RunLoadError(f"{results_path} is not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("results"), list):
        raise RunLoadError(f"{results_path} has no 'results' list (not a harness results file)")
    for index, result in enumerate(payload["results"]):
        missing = [k for k in RESULT_KEYS if not isinstance(result, dict) or k not in result]
        if missing:
            raise RunLoadError(f"{results_path}: result {index} lacks {', '.join(missing)}")
    name = results_path.parent.name if results_path.name == "results.json" else results_path.stem
    manifest = payload.get("manifest") if isinstance(payload.get("manifest"), dict) else {}
    return Run(name=name, results_path=results_path, manifest=manifest, results=tuple(payload["results"]))


def load_samples(run: Run, model: str, task: str) -> list[dict[str, Any]] | None:
    """The scored sample records of one (model, task), or None when the run carries none (a bare results file)."""
    path = run.samples_path(model, task)
    if not path.is_file():
        return None
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise RunLoadError(f"{path}: line {number} is not valid JSON") from None
            if not isinstance(record, dict) or "doc_id" not in record or "scores" not in record:
                raise RunLoadError(f"{path}: line {number} is not a scored sample record")
            records.append(record)
    return records


def primary_value(result: dict[str, Any]) -> float | None:
    """The primary metric's mean, or None where the run did not score it."""
    value = result["metrics"].get(result["primary_metric"], {}).get("value")
    return None if value is None else float(value)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def field_differences(a: dict[str, Any], b: dict[str, Any], fields: Sequence[str] = SCORING_FIELDS) -> list[str]:
    """Names of the manifest fields (of two per-result manifests) whose values differ."""
    return [f for f in fields if _canonical(a.get(f)) != _canonical(b.get(f))]


def describe_value(value: Any, width: int = 40) -> str:
    """A short printable form of a manifest value, for warnings."""
    text = value if isinstance(value, str) else _canonical(value)
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True)
class Labelled:
    """A result with the name it goes by in a comparison (the model, or "model @ run" when a model is repeated)."""

    label: str
    run: Run
    result: dict[str, Any]

    @property
    def model(self) -> str:
        return self.result["model"]

    @property
    def task(self) -> str:
        return self.result["task"]


def label_results(runs: Sequence[Run]) -> list[Labelled]:
    """Every result of every run, labelled by model; a model that appears in several runs gets the run's name too."""
    runs_of_model: dict[str, set[int]] = defaultdict(set)
    for index, run in enumerate(runs):
        for result in run.results:
            runs_of_model[result["model"]].add(index)
    names = [run.name for run in runs]
    out = []
    for index, run in enumerate(runs):
        run_name = run.name if names.count(run.name) == 1 else f"{run.name}#{index + 1}"
        for result in run.results:
            model = result["model"]
            label = model if len(runs_of_model[model]) == 1 else f"{model} @ {run_name}"
            out.append(Labelled(label, run, result))
    return out


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
            warnings.extend(_spread(task, f, group, lambda e, f=f: e.result["manifest"].get(f)))
        warnings.extend(_spread(task, "number of items", group, lambda e: e.result["n_samples"]))
        fixtures = sorted({e.label for e in group if e.result["manifest"].get("data_source") == "fixtures"})
        if fixtures:
            warnings.append(f"{task}: {', '.join(fixtures)} ran on the bundled fixture items, not the real test "
                            f"split; their scores say nothing about the model")
    for (model, task), group in by_model_task.items():
        if len(group) > 1:
            for f in MODEL_FIELDS:
                warnings.extend(_spread(f"{model} · {task}", f, group,
                                        lambda e, f=f: e.result["manifest"].get(f)))
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
