"""The run loop: models × tasks, resumable generation, timing, scoring and the results file.

The harness joins the two sides: a task turns documents into chat turns and scores text; an adapter turns chat turns
into text. Everything a run finishes is in the store before the next batch starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tqdm import tqdm

from harness.aggregate import aggregate
from harness.manifest import environment
from harness.store import SampleStore, safe_name, sample_key
from harness.timing import peak_memory_bytes, reset_peak_memory, timed
from models.base import GenerationRequest, Message, ModelAdapter
from models.loading import parse_dtype
from models.registry import ModelSpec, load_adapter, spec_for
from tasks.base import Doc, Task, TaskPrompt
from tasks.data import LoadedData, load_records
from tasks.registry import make_task


class RunError(RuntimeError):
    """A run that cannot go on; the message is one line for the user."""


@dataclass(frozen=True)
class RunSettings:
    models: tuple[str, ...]
    tasks: tuple[str, ...]
    output: Path
    limit: int | None = None
    seed: int = 1234
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 1
    warmup: int = 1
    data: str = "auto"  # "auto" | "hub" | "fixtures"
    data_dir: Path | None = None
    gen_length: int | None = None  # overrides every task's canvas length
    preset: str | None = None
    model_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    rescore: bool = False
    progress: bool = True
    rank: int = 0
    world_size: int = 1


@dataclass(frozen=True)
class PlannedSample:
    doc: Doc
    prompt: TaskPrompt
    request: GenerationRequest
    key: str


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunError(f"device {name} requested but CUDA is not available (use --device cpu)")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def to_request(prompt: TaskPrompt, canvas_tokens: int) -> GenerationRequest:
    turns = []
    if prompt.system is not None:
        turns.append(Message("system", prompt.system))
    turns.append(Message("user", prompt.user))
    if prompt.prefill is not None:
        turns.append(Message("assistant", prompt.prefill))
    return GenerationRequest(messages=tuple(turns), canvas_tokens=canvas_tokens, stop=prompt.stop)


def with_run_seed(config: Any, seed: int) -> Any:
    """Samplers without an explicit seed take the run's seed, so sampled runs are reproducible too."""
    if any(f.name == "seed" for f in dataclasses.fields(config)) and config.seed is None:
        return dataclasses.replace(config, seed=seed)
    return config


def plan(task: Task, docs: Sequence[Doc], adapter: ModelAdapter, config: Any, canvas: int,
         seed: int) -> list[PlannedSample]:
    identity = adapter.identity()
    decoding = dataclasses.asdict(config)
    planned = []
    for doc in docs:
        prompt = task.prompt(doc)
        key = sample_key(model=identity, decoding=decoding, task=task.name, task_version=task.version,
                         doc=doc.id, prompt=dataclasses.asdict(prompt), canvas=canvas, seed=seed)
        planned.append(PlannedSample(doc, prompt, to_request(prompt, canvas), key))
    return planned


def prompt_hash(planned: Sequence[PlannedSample]) -> str:
    digest = hashlib.sha256()
    for p in planned:
        digest.update(json.dumps(dataclasses.asdict(p.prompt), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def generate_missing(adapter: ModelAdapter, config: Any, pending: Sequence[PlannedSample], store: SampleStore,
                     settings: RunSettings, label: str) -> None:
    """Generate every pending sample in batches; each finished batch is appended to the store before the next."""
    warm_batches = math.ceil(settings.warmup / settings.batch_size) if settings.warmup > 0 else 0
    bar = tqdm(total=len(pending), desc=label, unit="sample", disable=not settings.progress, dynamic_ncols=True)
    for index, start in enumerate(range(0, len(pending), settings.batch_size)):
        chunk = pending[start:start + settings.batch_size]
        batch = adapter.prepare([p.request for p in chunk], config)
        results, seconds = timed(adapter.device, lambda: adapter.decode(batch))
        generations = adapter.finish(batch, results)
        records = []
        for p, prompt_text, gen in zip(chunk, batch.prompts, generations):
            records.append({
                "key": p.key,
                "doc_id": p.doc.id,
                "prompt": prompt_text,
                **dataclasses.asdict(gen),
                "latency_s": seconds / len(chunk),
                "batch_latency_s": seconds,
                "batch_size": len(chunk),
                "warmup": index < warm_batches,
            })
        store.append(records)
        bar.update(len(chunk))
    bar.close()


def score_samples(task: Task, planned: Sequence[PlannedSample], stored: dict[str, dict[str, Any]]) -> list[dict]:
    """Score every stored generation of this plan, in plan order; the scorer runs on all of them at once."""
    present = [p for p in planned if p.key in stored]
    scores = task.score([p.doc for p in present], [stored[p.key]["text"] for p in present])
    samples = []
    for p, score in zip(present, scores):
        record = dict(stored[p.key])
        record.update({
            "group": p.doc.group,
            "target": score.target,
            "extracted": score.extracted,
            "scores": score.scores,
            "diagnostics": score.diagnostics,
        })
        samples.append(record)
    return samples


def write_jsonl_atomic(path: Path, records: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, default=str)
    os.replace(tmp, path)


def samples_path(output: Path, model: str, task: str) -> Path:
    return output / "samples" / safe_name(model) / f"{safe_name(task)}.jsonl"


def store_for(output: Path, model: str, task: str, rank: int) -> SampleStore:
    return SampleStore(output / "store" / safe_name(model) / safe_name(task), shard=f"rank{rank}")


class Runner:
    def __init__(self, settings: RunSettings):
        self.settings = settings
        self.device = resolve_device(settings.device)
        self.dtype = parse_dtype(settings.dtype, self.device)

    def load_data(self, task: Task) -> LoadedData:
        data = load_records(task.dataset, self.settings.data, self.settings.data_dir)
        if data.source == "fixtures" and self.settings.data == "auto" and self.settings.progress:
            print(f"note: {task.name}: hub dataset {task.dataset.hub_id} not reachable, using the bundled fixture "
                  f"items (pass --data hub to fail instead, or --data-dir for local files)")
        return data

    def run(self) -> dict[str, Any]:
        s = self.settings
        specs = [spec_for(name) for name in s.models]
        tasks = [make_task(name) for name in s.tasks]
        data = {task.name: self.load_data(task) for task in tasks}
        results = []
        for spec in specs:
            adapter = load_adapter(spec, self.device, self.dtype)  # weights load lazily, on first decode
            for task in tasks:
                results.append(self.run_one(spec, adapter, task, data[task.name]))
        payload = {
            "manifest": {
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "environment": environment(self.device),
                "settings": {k: v for k, v in dataclasses.asdict(s).items() if k not in {"progress"}},
            },
            "results": results,
        }
        write_json_atomic(s.output / "results.json", payload)
        return payload

    def run_one(self, spec: ModelSpec, adapter: ModelAdapter, task: Task, data: LoadedData) -> dict:
        s = self.settings
        docs = task.docs(data.records)[: s.limit] if s.limit else task.docs(data.records)
        store = store_for(s.output, spec.name, task.name, s.rank)
        overrides = {**spec.overrides_for(task.name, s.preset), **s.model_args.get(spec.name, {})}
        canvas = s.gen_length or overrides.pop("gen_length", None) or task.canvas_tokens
        config = with_run_seed(adapter.make_config(overrides), s.seed)
        planned = plan(task, docs, adapter, config, canvas, s.seed)
        stored = store.load()
        if s.rescore:
            missing = sum(p.key not in stored for p in planned)
            if missing and s.progress:
                print(f"note: {spec.name} · {task.name}: {missing} of {len(planned)} samples not generated yet; "
                      f"scoring the {len(planned) - missing} stored")
        else:
            task.check_ready()
            seed_everything(s.seed)
            mine = [p for i, p in enumerate(planned) if i % s.world_size == s.rank]
            pending = [p for p in mine if p.key not in stored]
            reset_peak_memory(self.device)
            generate_missing(adapter, config, pending, store, s, f"{spec.name} · {task.name}")
            stored = store.load()
        samples = score_samples(task, planned, stored)
        write_jsonl_atomic(samples_path(s.output, spec.name, task.name), samples)
        summary = aggregate(samples, task.primary_metric, s.batch_size,
                            None if s.rescore else peak_memory_bytes(self.device))
        return {
            "model": spec.name,
            "task": task.name,
            "manifest": {
                "model_ref": spec.ref,
                "model": adapter.identity(),
                "decoding": dataclasses.asdict(config),
                "preset": s.preset,
                "task": task.describe(),
                "task_version": task.version,
                "canvas_tokens": canvas,
                "dataset": data.location,
                "data_source": data.source,
                "data_sha256": data.sha256,
                "prompt_sha256": prompt_hash(planned),
                "seed": s.seed,
                "limit": s.limit,
                "n_planned": len(planned),
            },
            **summary,
        }

