"""The run loop: models × tasks, resumable generation, timing, scoring and the results file.

The harness joins the two sides: a task turns documents into chat turns and scores text; an adapter turns chat turns
into text. Everything a run finishes is in the store before the next batch starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm import tqdm

from harness.aggregate import aggregate
from harness.generation import LoopSettings, generate_batches, resolve_device, with_run_seed
from harness.manifest import environment
from harness.ranks import DistContext
from harness.run_folder import RunFolder
from harness.store import SampleStore, sample_key
from harness.timing import peak_memory_bytes
from models.base import GenerationRequest, Message, ModelAdapter
from models.loading import parse_dtype
from models.options import coerce, record
from models.registry import ModelSpec, load_adapter, spec_for
from tasks.base import Doc, Task, TaskPrompt
from tasks.records import LoadedData
from tasks.registry import make_task


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
    store_dir: Path | None = None  # the resume store's root (default <output>/store); a sweep's points share one


@dataclass(frozen=True)
class PlannedSample:
    doc: Doc
    prompt: TaskPrompt
    request: GenerationRequest
    key: str


def to_request(prompt: TaskPrompt, canvas_tokens: int) -> GenerationRequest:
    turns = []
    if prompt.system is not None:
        turns.append(Message("system", prompt.system))
    turns.append(Message("user", prompt.user))
    if prompt.prefill is not None:
        turns.append(Message("assistant", prompt.prefill))
    return GenerationRequest(messages=tuple(turns), canvas_tokens=canvas_tokens, stop=prompt.stop)


def plan(task: Task, docs: Sequence[Doc], adapter: ModelAdapter, config: Any, canvas: int,
         seed: int) -> list[PlannedSample]:
    identity = adapter.identity()
    decoding = record(config)
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
    loop = LoopSettings(settings.batch_size, settings.warmup, settings.seed, rank)
    bar = tqdm(total=len(pending), desc=label, unit="sample", disable=not settings.progress, dynamic_ncols=True)
    for batch in generate_batches(adapter, config, [p.request for p in pending], loop):
        store.append([{"key": pending[i].key, "doc_id": pending[i].doc.id, **record}
                      for i, record in zip(batch.indices, batch.records)])
        bar.update(len(batch.indices))
    bar.close()
    store.write_peak_memory(peak_memory_bytes(adapter.device))


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
        self.folder = RunFolder(settings.output, store_dir=settings.store_dir)
        self.device = resolve_device(settings.device, dist_ctx.local_rank)
        self.dtype = parse_dtype(settings.dtype, self.device)

    def load_data(self, task: Task) -> LoadedData:
        data = task.load(self.settings.data, self.settings.data_dir)
        if data.source == "fixtures" and self.settings.data == "auto" and self.dist.is_main:
            print(f"note: {task.name}: hub dataset {task.dataset.hub_id} not reachable, using the bundled fixture "
                  f"items (pass --data hub to fail instead, or --data-dir for local files)")
        return data

    def run(self, wait_for_ranks: Callable[[], None] = lambda: None) -> dict[str, Any] | None:
        """Generate this rank's share of every job, wait for all ranks (the launcher's barrier, given by the command
        line), then (rank 0) score and write results."""
        s = self.settings
        tasks = [make_task(name) for name in s.tasks]
        data = {task.name: self.load_data(task) for task in tasks}
        jobs = []
        for name in s.models:
            spec = spec_for(name)
            adapter = self.adapter(spec)
            jobs.extend(self.plan_job(spec, adapter, task, data[task.name]) for task in tasks)
        if not s.rescore:
            for job in jobs:
                self.generate(job)
        wait_for_ranks()
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
        self.folder.write_results(payload)
        return payload

    def adapter(self, spec: ModelSpec) -> ModelAdapter:
        return load_adapter(spec, self.device, self.dtype)  # weights load lazily, on first decode

    def store(self, job: Job) -> SampleStore:
        return self.folder.store(job.spec.name, job.task.name, self.dist.rank)

    def plan_job(self, spec: ModelSpec, adapter: ModelAdapter, task: Task, data: LoadedData) -> Job:
        s = self.settings
        docs = task.docs(data.records)[: s.limit] if s.limit else task.docs(data.records)
        overrides = {**spec.overrides_for(task.name, s.preset), **s.model_args.get(spec.name, {})}
        preset_canvas = overrides.pop("gen_length", None)  # a canvas is the request's, not a decoder option
        canvas = s.gen_length or coerce(spec.name, "gen_length", preset_canvas, int | None) or task.canvas_tokens
        config = with_run_seed(adapter.make_config(overrides, canvas), s.seed)  # validated here, before any decode
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
        label = f"{job.spec.name} · {job.task.name}" + (f" · rank {self.dist.rank}" if self.dist.active else "")
        generate_missing(job.adapter, job.config, pending, store, s, label, self.dist.rank)

    def score(self, job: Job) -> dict[str, Any]:
        s = self.settings
        store = self.store(job)
        stored = store.load()
        missing = sum(p.key not in stored for p in job.planned)
        if missing and s.progress:
            print(f"note: {job.spec.name} · {job.task.name}: {missing} of {len(job.planned)} samples not generated "
                  f"yet; scoring the {len(job.planned) - missing} stored")
        samples = score_samples(job.task, job.planned, stored)
        self.folder.write_samples(job.spec.name, job.task.name, samples)
        summary = aggregate(samples, job.task.primary_metric, s.batch_size, store.peak_memory())
        return {
            "model": job.spec.name,
            "task": job.task.name,
            "manifest": {
                "model_ref": job.spec.ref,
                "model": job.adapter.identity(),
                "decoding": record(job.config),
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
            },
            **summary,
        }
