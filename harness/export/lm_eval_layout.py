"""A finished run in lm-eval's results layout, so the tools that read lm-eval's output (leaderboard templates, W&B,
zeno, the hub upload) read the harness's runs.

lm-eval 0.4.13 writes, per model, ``<output>/<model>/results_<date id>.json`` (typed by ``lm_eval/result_schema.py``:
per task ``metric,filter`` and ``metric_stderr,filter`` values, ``configs``, ``versions``, ``n-shot``,
``higher_is_better``, ``n-samples``, ``config``) and ``samples_<task>_<date id>.jsonl`` (one line per item and
filter: the response, the filtered response, the filter's metrics and three hashes). The export writes the same
files from ``results.json`` and ``samples/`` alone (no model, no data set), with the harness's speed figures,
diagnostics and manifests as extra fields: ``dllm_harness`` in the results file, a few numbers per sample line.

Where the run folder keeps less than lm-eval does, the export says so rather than invents: ``doc`` holds what the
sample record knows of the item (its id, subject and target), not the data set's row, and ``arguments`` the prompt as
the model received it (a served model's messages as JSON) with the canvas, not the task's stop strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from harness.files import write_atomic
from harness.run.folder import Run
from harness.run.records import ResultEntry, SampleRecord

LM_EVAL_VERSION = "0.4.13"  # the layout written; lm-eval's own version the run used is in the file too
NOT_AVAILABLE = "N/A"  # lm-eval's stderr where it has none (a single item)


def _lm_eval_utils():
    """lm-eval's own naming and hashing, so names and hashes are exactly the ones its readers expect."""
    from lm_eval import utils

    return utils


@dataclass(frozen=True)
class ExportedModel:
    """The files written for one model."""

    model: str
    folder: Path
    results: Path
    samples: dict[str, Path]  # lm-eval task name -> samples file


def date_id(now: datetime) -> str:
    """lm-eval's timestamp in file names: ISO time with ``:`` made ``-``."""
    return now.isoformat().replace(":", "-")


def task_name(task: str) -> str:
    """The task's name in the export (lm-eval's sanitised form: ``lmeval:gsm8k`` -> ``lmeval_gsm8k``)."""
    return _lm_eval_utils().sanitize_task_name(task)


def split_metric(key: str) -> tuple[str, str]:
    """``metric,filter`` -> (metric, filter); a key without a filter has lm-eval's ``none``."""
    metric, _, filt = key.partition(",")
    return metric, filt or "none"


def _stderr(value: Any) -> float | str:
    return value if isinstance(value, (int, float)) and value == value else NOT_AVAILABLE


def task_metrics(entry: ResultEntry) -> dict[str, Any]:
    """The task's entry of ``results``: name, alias, items, and each metric with its stderr."""
    out: dict[str, Any] = {"name": task_name(entry.task), "alias": task_name(entry.task),
                           "sample_len": entry.n_samples}
    for key, summary in sorted(entry.metrics.items()):
        metric, filt = split_metric(key)
        out[f"{metric},{filt}"] = summary.get("value")
        out[f"{metric}_stderr,{filt}"] = _stderr(summary.get("stderr"))
    return out


def metric_names(entry: ResultEntry) -> list[str]:
    return list(dict.fromkeys(split_metric(key)[0] for key in entry.metrics))


def higher_is_better(entry: ResultEntry) -> dict[str, bool | None]:
    """Every metric of the harness's own tasks is a score (higher is better); an ``lmeval:`` task's direction is
    lm-eval's and is not recorded in the run."""
    known = not entry.task.startswith("lmeval:")
    return {metric: (True if known else None) for metric in metric_names(entry)}


def task_config(entry: ResultEntry) -> dict[str, Any]:
    """The task's ``configs`` entry, in the keys lm-eval's task configs use (``output_type``, ``metric_list``,
    ``generation_kwargs``, ``num_fewshot``, ``metadata``), from the result's manifest."""
    manifest = entry.manifest
    task = manifest.get("task") or {}
    filters = list(dict.fromkeys(split_metric(key)[1] for key in entry.metrics))
    return {
        "task": task_name(entry.task),
        "dataset_path": task.get("dataset"),
        "dataset_name": task.get("config"),
        "test_split": task.get("split"),
        "output_type": "generate_until",
        "num_fewshot": int(task.get("num_fewshot") or 0),
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": h}
                        for m, h in higher_is_better(entry).items()],
        "filter_list": [{"name": f} for f in filters],
        "generation_kwargs": {"max_gen_toks": manifest.get("canvas_tokens"), **(manifest.get("decoding") or {})},
        "metadata": {"version": manifest.get("task_version"), "harness_task": entry.task,
                     "lm_eval_task": task.get("lm_eval_task"), "data_source": manifest.get("data_source"),
                     "data_sha256": manifest.get("data_sha256"), "prompt_sha256": manifest.get("prompt_sha256")},
    }


def n_samples(entry: ResultEntry) -> dict[str, int]:
    """Items in the split (``original``; a run made before the manifest recorded it gives the planned count) and
    items evaluated (``effective``)."""
    manifest = entry.manifest
    original = manifest.get("n_items") or manifest.get("n_planned") or entry.n_samples
    return {"original": int(original), "effective": int(entry.n_samples)}


def model_args(entry: ResultEntry) -> str:
    """lm-eval's ``model_args`` string: ``pretrained=<checkpoint>`` (``model=<served model>,base_url=<url>`` for a
    model served over HTTP), as lm-eval's own models name theirs."""
    served = entry.manifest.get("served")
    if isinstance(served, dict):
        return f"model={served.get('served_model')},base_url={served.get('base_url')}"
    identity = entry.manifest.get("model") or {}
    dtype = f",dtype={identity['dtype']}" if identity.get("dtype") else ""
    return f"pretrained={entry.manifest.get('model_ref')}{dtype}"


def model_config(model: str, entries: Sequence[ResultEntry], run: Run) -> dict[str, Any]:
    """The results' ``config``: the model (by its name in the run) and how the run was made."""
    first = entries[0].manifest
    settings = run.manifest.get("settings") or {}
    return {
        "model": model,
        "model_args": model_args(entries[0]),
        "model_dtype": (first.get("model") or {}).get("dtype"),
        "batch_size": str(first.get("batch_size")),
        "batch_sizes": [],
        "device": (run.manifest.get("environment") or {}).get("device"),
        "use_cache": None,
        "limit": first.get("limit"),
        "bootstrap_iters": 0,  # the harness's stderrs are analytic
        "gen_kwargs": {task_name(e.task): e.manifest.get("decoding") for e in entries},
        "random_seed": first.get("seed", settings.get("seed")),
    }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value == value else None


SAMPLE_NUMBERS = ("gen_tokens", "latency_s", "nfe", "request_latency_s", "request_tokens_per_second",
                  "first_chunk_s", "chunks", "retries")


def items_of(records: Sequence[SampleRecord]) -> list[list[SampleRecord]]:
    """The records by item, in the run's order; an item's repeated samples (``--samples``) in sample order."""
    items: dict[Any, list[SampleRecord]] = {}
    for position, record in enumerate(records):
        items.setdefault(position if record.doc_id is None else record.doc_id, []).append(record)
    return [sorted(item, key=lambda r: r.sample) for item in items.values()]


def sample_lines(entry: ResultEntry, records: Sequence[SampleRecord]) -> list[dict[str, Any]]:
    """One line per item and filter, as lm-eval logs samples: items in the run's order (``doc_id`` is the position
    in the evaluated split), filters in the order the task's metrics name them. An item's repeated samples are its
    responses, as lm-eval's ``repeats`` logs them (``resps`` and ``filtered_resps`` one per sample), and its
    metrics their mean; the numbers per sample line are the first sample's."""
    utils = _lm_eval_utils()
    by_filter: dict[str, list[str]] = {}
    for key in entry.metrics:
        metric, filt = split_metric(key)
        by_filter.setdefault(filt, []).append(metric)
    lines = []
    for filt, metrics in by_filter.items():
        for position, item in enumerate(items_of(records)):
            record = item[0]
            doc = {"id": record.doc_id, **({"group": record.group} if record.group is not None else {}),
                   "target": record.target}
            filtered = []
            for sample in item:
                extracted = sample.extracted if isinstance(sample.extracted, dict) else {}
                filtered.append(str(extracted.get(filt, extracted.get(metrics[0], sample.text))))
            arguments = {"gen_args_0": {"arg_0": record.prompt, "arg_1": {"max_gen_toks": record.canvas_tokens}}}
            line: dict[str, Any] = {
                "doc_id": position, "doc": doc, "target": str(record.target), "arguments": arguments,
                "resps": [[sample.raw_text for sample in item]], "filtered_resps": filtered, "filter": filt,
                "metrics": metrics,
                "doc_hash": utils.hash_string(json.dumps(doc, indent=2, default=str, ensure_ascii=False)),
                "prompt_hash": utils.hash_string(record.prompt), "target_hash": utils.hash_string(str(record.target)),
            }
            for metric in metrics:
                scores = [float((sample.scores or {}).get(f"{metric},{filt}", 0.0)) for sample in item]
                line[metric] = sum(scores) / len(scores)
            data = record.to_json()
            line.update({name: float(v) for name in SAMPLE_NUMBERS if (v := _number(data.get(name))) is not None})
            lines.append(line)
    return lines


def task_hash(lines: Sequence[dict[str, Any]]) -> str:
    """lm-eval's per-task hash: of every line's doc, prompt and target hashes in order."""
    return _lm_eval_utils().hash_string("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in lines))


def run_date(run: Run) -> float | None:
    """The run's start as a UNIX time (lm-eval's ``date``), from its manifest."""
    try:
        return datetime.strptime(run.manifest.get("created", ""), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def results_document(model: str, entries: Sequence[ResultEntry], run: Run,
                     lines: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One model's results file; ``lines`` are its tasks' sample lines (absent for a run without sample files)."""
    environment = run.manifest.get("environment") or {}
    names = [task_name(e.task) for e in entries]
    document: dict[str, Any] = {
        "results": {name: task_metrics(e) for name, e in zip(names, entries)},
        "group_subtasks": {name: [] for name in names},
        "configs": {name: task_config(e) for name, e in zip(names, entries)},
        "versions": {name: e.manifest.get("task_version") for name, e in zip(names, entries)},
        "n-shot": {name: task_config(e)["num_fewshot"] for name, e in zip(names, entries)},
        "higher_is_better": {name: higher_is_better(e) for name, e in zip(names, entries)},
        "n-samples": {name: n_samples(e) for name, e in zip(names, entries)},
        "config": model_config(model, entries, run),
        "model_source": "dllm-harness",
        "model_name": model,
        "model_name_sanitized": _lm_eval_utils().sanitize_model_name(model),
        "system_instruction": None, "system_instruction_sha": None, "fewshot_as_multiturn": None,
        "chat_template": None, "chat_template_sha": None,
        "task_hashes": {name: task_hash(found) for name, found in lines.items()},
    }
    if isinstance(environment.get("git_commit"), str):
        document["git_hash"] = environment["git_commit"]
    if (date := run_date(run)) is not None:
        document["date"] = date
    for key, name in (("transformers_version", "transformers"), ("lm_eval_version", "lm_eval")):
        if isinstance(environment.get(name), str):
            document[key] = environment[name]
    document["dllm_harness"] = {
        "layout": f"lm-eval {LM_EVAL_VERSION}",
        "run": str(run.root),
        "primary_metric": {name: e.primary_metric for name, e in zip(names, entries)},
        "speed": {name: e.speed for name, e in zip(names, entries)},
        "diagnostics": {name: e.diagnostics for name, e in zip(names, entries)},
        "manifest": {name: e.manifest for name, e in zip(names, entries)},
    }
    return document


def export_run(run: Run, output: Path, now: datetime) -> list[ExportedModel]:
    """Every model of ``run`` in lm-eval's layout under ``output``: a folder per model with its results file and a
    samples file per task that has sample records."""
    stamp = date_id(now)
    by_model: dict[str, list[ResultEntry]] = {}
    for entry in run.results:
        by_model.setdefault(entry.model, []).append(entry)
    exported = []
    for model, entries in by_model.items():
        folder = Path(output) / _lm_eval_utils().sanitize_model_name(model)
        lines, paths = {}, {}
        for entry in entries:
            records = run.samples(entry.model, entry.task)
            if records is not None:
                name = task_name(entry.task)
                lines[name] = sample_lines(entry, records)
                paths[name] = folder / f"samples_{name}_{stamp}.jsonl"
        document = results_document(model, entries, run, lines)
        results_path = folder / f"results_{stamp}.json"
        for name, path in paths.items():
            write_atomic(path, "".join(json.dumps(line, default=str, ensure_ascii=False) + "\n"
                                       for line in lines[name]))
        write_atomic(results_path, json.dumps(document, indent=2, default=str, ensure_ascii=False))
        exported.append(ExportedModel(model, folder, results_path, paths))
    return exported
