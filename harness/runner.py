"""The run loop: models × tasks, resumable generation, timing, scoring and the results file.

The harness joins the two sides: a task turns documents into chat turns and scores text; an adapter turns chat turns
into text. Everything a run finishes is in the store before the next batch starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
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

from harness import distributed
from harness.aggregate import aggregate
from harness.attribution import attribution_table
from harness.distributed import DistContext
from harness.generation import generate_timed, timing_record, warmup_batches
from harness.manifest import environment
from harness.store import SampleStore, safe_name, sample_key
from harness.timing import peak_memory_bytes, reset_peak_memory
from models.base import GenerationRequest, Message, ModelAdapter
from models.loading import parse_dtype
from models.registry import ModelSpec, load_adapter, spec_for
from tasks.base import Doc, Task, TaskPrompt
from tasks.data import LoadedData
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


@dataclass(frozen=True)
class PlannedSample:
    doc: Doc
    prompt: TaskPrompt
    request: GenerationRequest
    key: str


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` is this rank's GPU when there is one (torchrun's LOCAL_RANK), else the CPU."""
    if name == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
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
                     settings: RunSettings, label: str, rank: int = 0) -> None:
    """Generate every pending sample in batches; each finished batch is appended to the store before the next."""
    warm_batches = warmup_batches(settings.warmup, settings.batch_size)
    bar = tqdm(total=len(pending), desc=label, unit="sample", disable=not settings.progress, dynamic_ncols=True)
    for index, start in enumerate(range(0, len(pending), settings.batch_size)):
        chunk = pending[start:start + settings.batch_size]
        prompts, generations, seconds, forward_s = generate_timed(adapter, config, [p.request for p in chunk])
        records = [{"key": p.key, "doc_id": p.doc.id,
                    **timing_record(prompt, gen, seconds, len(chunk), index < warm_batches, rank, forward_s)}
                   for p, prompt, gen in zip(chunk, prompts, generations)]
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


def write_atomic(path: Path, text: str) -> None:
    """Write a whole file or nothing: a crash never leaves a half-written results or samples file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_jsonl_atomic(path: Path, records: Sequence[dict[str, Any]]) -> None:
    write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(payload, indent=2, default=str))


def samples_path(output: Path, model: str, task: str) -> Path:
    return output / "samples" / safe_name(model) / f"{safe_name(task)}.jsonl"


def store_for(output: Path, model: str, task: str, rank: int) -> SampleStore:
    return SampleStore(output / "store" / safe_name(model) / safe_name(task), shard=f"rank{rank}")


@dataclass
class Job:
    """One model × task of a run, planned: what to generate and under which keys."""

    spec: ModelSpec
    adapter: ModelAdapter
    task: Task
    data: LoadedData
    config: Any
    canvas: int
    planned: list[PlannedSample]


class Runner:
    def __init__(self, settings: RunSettings, dist_ctx: DistContext = DistContext()):
        self.settings = settings
        self.dist = dist_ctx
        self.device = resolve_device(settings.device, dist_ctx.local_rank)
        self.dtype = parse_dtype(settings.dtype, self.device)

    def load_data(self, task: Task) -> LoadedData:
        data = task.load(self.settings.data, self.settings.data_dir)
        if data.source == "fixtures" and self.settings.data == "auto" and self.dist.is_main:
            print(f"note: {task.name}: hub dataset {task.dataset.hub_id} not reachable, using the bundled fixture "
                  f"items (pass --data hub to fail instead, or --data-dir for local files)")
        return data

    def run(self) -> dict[str, Any] | None:
        """Generate this rank's share of every job, wait for all ranks, then (rank 0) score and write results."""
        s = self.settings
        tasks = [make_task(name) for name in s.tasks]
        data = {task.name: self.load_data(task) for task in tasks}
        jobs = []
        for name in s.models:
            spec = spec_for(name)
            adapter = load_adapter(spec, self.device, self.dtype)  # weights load lazily, on first decode
            jobs.extend(self.plan_job(spec, adapter, task, data[task.name]) for task in tasks)
        if not s.rescore:
            for adapter, model_jobs in itertools.groupby(jobs, key=lambda job: job.adapter):
                with adapter.session(s.output):  # an engine server lives as long as its model's jobs
                    for job in model_jobs:
                        self.generate(job)
        distributed.wait_for_all(self.dist)
        if not self.dist.is_main:
            return None
        payload = {
            "manifest": {
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "environment": environment(self.device),
                "world_size": self.dist.world_size,
                "settings": {k: v for k, v in dataclasses.asdict(s).items() if k != "progress"},
            },
            "results": [self.score(job) for job in jobs],
        }
        payload["attribution"] = attribution_table(payload["results"])
        write_json_atomic(s.output / "results.json", payload)
        return payload

    def store(self, job: Job) -> SampleStore:
        return store_for(self.settings.output, job.spec.name, job.task.name, self.dist.rank)

    def plan_job(self, spec: ModelSpec, adapter: ModelAdapter, task: Task, data: LoadedData) -> Job:
        s = self.settings
        docs = task.docs(data.records)[: s.limit] if s.limit else task.docs(data.records)
        overrides = {**spec.overrides_for(task.name, s.preset), **s.model_args.get(spec.name, {})}
        preset_canvas = overrides.pop("gen_length", None)  # a canvas is the request's, not a decoder option
        canvas = s.gen_length or preset_canvas or task.canvas_tokens
        config = with_run_seed(adapter.make_config(overrides), s.seed)
        return Job(spec, adapter, task, data, config, canvas, plan(task, docs, adapter, config, canvas, s.seed))

    def generate(self, job: Job) -> None:
        """This rank's share (every world_size-th sample of the plan) minus what any rank already stored."""
        s = self.settings
        store = self.store(job)
        stored = store.load()
        mine = job.planned[self.dist.rank::self.dist.world_size]
        pending = [p for p in mine if p.key not in stored]
        if not pending:
            return
        job.task.check_ready()
        seed_everything(s.seed)
        reset_peak_memory(self.device)
        label = f"{job.spec.name} · {job.task.name}" + (f" · rank {self.dist.rank}" if self.dist.active else "")
        generate_missing(job.adapter, job.config, pending, store, s, label, self.dist.rank)
        store.write_peak_memory(peak_memory_bytes(self.device))

    def score(self, job: Job) -> dict[str, Any]:
        s = self.settings
        store = self.store(job)
        stored = store.load()
        missing = sum(p.key not in stored for p in job.planned)
        if missing and s.progress:
            print(f"note: {job.spec.name} · {job.task.name}: {missing} of {len(job.planned)} samples not generated "
                  f"yet; scoring the {len(job.planned) - missing} stored")
        samples = score_samples(job.task, job.planned, stored)
        write_jsonl_atomic(samples_path(s.output, job.spec.name, job.task.name), samples)
        summary = aggregate(samples, job.task.primary_metric, s.batch_size, store.peak_memory())
        return {
            "model": job.spec.name,
            "task": job.task.name,
            "manifest": {
                "model_ref": job.spec.ref,
                "model": job.adapter.identity(),
                "decoding": dataclasses.asdict(job.config),
                "preset": s.preset,
                "task": job.task.describe(),
                "task_version": job.task.version,
                "canvas_tokens": job.canvas,
                "dataset": job.data.location,
                "data_source": job.data.source,
                "data_sha256": job.data.sha256,
                "prompt_sha256": prompt_hash(job.planned),
                "seed": s.seed,
                "limit": s.limit,
                "n_planned": len(job.planned),
                **job.adapter.run_manifest(s.output),
            },
            **summary,
        }
