"""The run loop: models × tasks, resumable generation, timing, scoring and the results file.

The harness joins the two sides: a task turns documents into chat turns and scores text; an adapter turns chat turns
into text. Every job is planned (and so validated) before any model loads; then the run goes model by model, with
one model resident at a time, and rewrites the results file after every job. Everything a run finishes is in the
store before the next batch starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm import tqdm

from harness.stats.aggregate import aggregate
from harness.stats.order import order_record
from harness.errors import NothingToScore
from harness.run.generation import LoopSettings, generate_batches, resolve_device
from harness.run.manifest import environment
from harness.run.ranks import DistContext
from harness.run.folder import RunFolder, check_writable, removed_if_left_empty
from harness.run.presets import SMOKE_CANVAS, smoke_canvas
from harness.run.records import ResultEntry, ResultsFile, SampleRecord, as_json
from harness.run.repeats import SAMPLES, draws_nothing
from harness.run.schedule import CONTINUOUS
from harness.run.threads import apply_threads
from harness.run.store import SampleStore, sample_key, versioned_key
from harness.run.versions import StaleSamples, find_stale, stale_message
from harness.timing.clock import peak_memory_bytes
from models.base import GenerationRequest, Message, ModelAdapter
from models.sources import parse_dtype
from models.options import coerce, record
from models.adapters.resident import hand_over
from models.registry import ModelSpec, load_adapter, spec_for
from tasks.base import Doc, Task, TaskPrompt
from tasks.records import LoadedData, go_offline, hub_offline_reason
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
    threads: int | None = None  # torch CPU threads (harness.run.threads); None leaves torch's setting
    schedule: str = CONTINUOUS  # rows in flight (at most batch_size) where the decoder keeps them, else static
    reuse_stale: bool = False  # keep samples another version of their decoder stored (else they are regenerated)
    samples: int | None = None  # generations per item (--samples); None: the preset's for the task, else 1


@dataclass(frozen=True)
class PlannedSample:
    doc: Doc
    prompt: TaskPrompt
    request: GenerationRequest
    key: str  # ``base_key`` at the decoder's version (harness.run.store.versioned_key)
    base_key: str  # what determines the sample apart from the decoder's version (harness.run.store.sample_key)
    sample: int = 0  # which of the item's repeated samples


def to_request(prompt: TaskPrompt, canvas_tokens: int, sample: int = 0) -> GenerationRequest:
    turns = []
    if prompt.system is not None:
        turns.append(Message("system", prompt.system))
    turns.append(Message("user", prompt.user))
    if prompt.prefill is not None:
        turns.append(Message("assistant", prompt.prefill))
    return GenerationRequest(messages=tuple(turns), canvas_tokens=canvas_tokens, stop=prompt.stop, sample=sample)


def plan(task: Task, docs: Sequence[Doc], adapter: ModelAdapter, decoding: dict[str, Any], canvas: int,
         seed: int, batch_size: int = 1, samples: int = 1) -> list[PlannedSample]:
    """Each doc's prompt, and for each of its ``samples`` a request and a sample key; ``decoding`` is the config's
    ``record``. Batched outputs may differ from batch-1 outputs at near-ties, so the batch size is part of a
    sample's key; so is the decoder's version (from version 2 on: a version-1 key is the key of a store written
    before versions existed) and, after an item's first sample, the sample's index (the first keeps the key
    one-sample runs stored it under, so a run with more samples extends a stored one)."""
    identity, version = adapter.identity(), adapter.decoder.version
    planned = []
    for doc in docs:
        prompt = task.prompt(doc)
        for index in range(samples):
            key = sample_key(model=identity, decoding=decoding, task=task.name, task_version=task.version,
                             doc=doc.id, prompt=dataclasses.asdict(prompt), canvas=canvas, seed=seed,
                             batch_size=batch_size, **({"sample": index} if index else {}))
            planned.append(PlannedSample(doc, prompt, to_request(prompt, canvas, index),
                                         versioned_key(key, version), key, index))
    return planned


def prompt_hash(planned: Sequence[PlannedSample]) -> str:
    digest = hashlib.sha256()
    for p in planned:
        digest.update(json.dumps(dataclasses.asdict(p.prompt), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def generate_missing(adapter: ModelAdapter, config: Any, pending: Sequence[PlannedSample], store: SampleStore,
                     settings: RunSettings, label: str, rank: int = 0, done: int = 0) -> None:
    """Generate every pending sample in batches; each finished batch is appended to the store before the next. The
    bar counts the whole share, starting at the ``done`` samples a resumed run already has."""
    loop = LoopSettings(settings.batch_size, settings.warmup, settings.seed, rank, by_length=True,
                        schedule=settings.schedule)
    bar = tqdm(total=done + len(pending), initial=done, desc=label, unit="sample", disable=not settings.progress,
               dynamic_ncols=True)
    rows = settings.batch_size
    for batch in generate_batches(adapter, config, [p.request for p in pending], loop,
                                  note=lambda message: bar.write(f"note: {message}")):
        store.append([dataclasses.replace(record, key=pending[i].key, doc_id=pending[i].doc.id,
                                          sample=pending[i].sample)
                      for i, record in zip(batch.indices, batch.records)])
        bar.update(len(batch.indices))
        rows = min(rows, batch.rows)
    bar.close()
    store.write_peak_memory(peak_memory_bytes(adapter.device))
    if rows < settings.batch_size:  # ran out of memory: the manifest and summary say at which size it settled
        store.write_settled_rows(rows)


def score_samples(task: Task, planned: Sequence[PlannedSample], stored: dict[str, SampleRecord]) -> list[SampleRecord]:
    """Score every stored generation of this plan, in plan order; the scorer runs on all of them at once."""
    present = [p for p in planned if p.key in stored]
    scores = task.score([p.doc for p in present], [stored[p.key].text for p in present])
    return [dataclasses.replace(stored[p.key], sample=p.sample, group=p.doc.group, target=score.target, extracted=score.extracted,
                                scores=score.scores, diagnostics=score.diagnostics,
                                extra={**stored[p.key].extra, **order_record(stored[p.key].to_json())})
            for p, score in zip(present, scores)]


@dataclass
class Job:
    """One model × task of a run, planned: what to generate and under which keys."""

    spec: ModelSpec
    adapter: ModelAdapter
    task: Task
    data: LoadedData
    config: Any  # resolved once, in plan_job: typed, seeded, at the canvas, validated
    decoding: dict[str, Any]  # its record: what the sample keys and the manifest hold
    canvas: int
    samples: int  # generations per item
    planned: list[PlannedSample]
    n_items: int | None = None  # the task's items before --limit (an export's n-samples "original")


def model_groups(jobs: Sequence[Job]) -> list[list[Job]]:
    """Jobs by model, in run order, with models that share a checkpoint (same share key) next to each other, so
    one loaded network serves them all before it is released."""
    by_model: dict[str, list[Job]] = {}
    for job in jobs:
        by_model.setdefault(job.spec.name, []).append(job)
    groups = list(by_model.values())
    keys = [getattr(g[0].adapter, "share_key", lambda: id(g[0].adapter))() for g in groups]
    first = {key: keys.index(key) for key in keys}
    order = sorted(range(len(groups)), key=lambda i: first[keys[i]])  # stable: run order within a checkpoint
    return [groups[i] for i in order]


class Runner:
    def __init__(self, settings: RunSettings, dist_ctx: DistContext = DistContext()):
        self.settings = settings
        self.dist = dist_ctx
        self.folder = RunFolder(settings.output, store_dir=settings.store_dir)
        self.device = resolve_device(settings.device, dist_ctx.local_rank)
        self.dtype = parse_dtype(settings.dtype, self.device)
        self._noted_static: set[str] = set()
        self._noted_identical: set[str] = set()

    def note(self, message: str) -> None:
        if self.dist.is_main:
            print(f"note: {message}")

    def load_data(self, task: Task) -> LoadedData:
        """One task's items (a sweep probes its tasks one by one)."""
        return self.load_all_data([task])[task.name]

    def load_all_data(self, tasks: Sequence[Task]) -> dict[str, LoadedData]:
        """Every task's items; the tasks that fell back to the bundled fixtures are named in one note."""
        s = self.settings
        data = {task.name: task.load(s.data, s.data_dir) for task in tasks}
        fallback = [name for name, loaded in data.items() if loaded.source == "fixtures" and s.data == "auto"]
        if fallback:
            self.note(f"{', '.join(fallback)}: the hub's data is not reachable ({hub_offline_reason() or 'failed'}); "
                      f"using the bundled fixture items (--data fixtures to say so, --data hub to fail instead, "
                      f"--data-dir DIR for local files)")
        unused = [task.name for task in tasks if task.name.startswith("lmeval:")] if s.data_dir else []
        if unused:
            self.note(f"--data-dir does not apply to {', '.join(unused)}: lm-eval loads their items as their task "
                      f"YAML says")
        return data

    def plan_all(self) -> list[Job]:
        """Every job of the run, planned and validated (output folder, data, sandbox, decoding options and canvas)
        before any model loads; a bad run fails here with one line."""
        s = self.settings
        if not s.rescore:
            check_writable(self.folder.root)
        if hub_offline_reason():
            go_offline()  # found once: every hub client (data, checkpoints, lm-eval) then reads its cache, no retries
        tasks = [make_task(name) for name in s.tasks]
        data = self.load_all_data(tasks)
        if smoke_canvas(s.preset) and not s.gen_length:
            self.note(f"--preset smoke: a {SMOKE_CANVAS}-token canvas for every model and task, to check that the "
                      f"run works; scores and speeds are not the tasks' (drop it, or give --gen-length, for those)")
        jobs = []
        for name in s.models:
            spec = spec_for(name)
            adapter = self.adapter(spec)
            jobs.extend(self.plan_job(spec, adapter, task, data[task.name]) for task in tasks)
        if s.rescore and not any(self.store(job).load() for job in jobs):
            raise NothingToScore(f"--rescore: nothing is stored in {self.folder.root} for these models and tasks "
                                 f"(run without --rescore to generate, or point --output at a finished run)")
        if not s.rescore:
            for task in tasks:
                if any(self.pending(job) for job in jobs if job.task is task):
                    task.check_ready()
        return jobs

    def run(self, wait_for_ranks: Callable[[], None] = lambda: None) -> ResultsFile | None:
        """Plan everything, then model by model: generate this rank's share of each job, wait for all ranks (the
        launcher's barrier, given by the command line), and (rank 0) score it and rewrite the results file, so a run
        stopped midway keeps every finished job's results. A model's weights are released (or handed to the next
        model on the same checkpoint) after its jobs."""
        with removed_if_left_empty(self.folder.root):  # a run that fails before storing anything leaves no folder
            return self._run(wait_for_ranks)

    def _run(self, wait_for_ranks: Callable[[], None]) -> ResultsFile | None:
        s = self.settings
        apply_threads(s.threads)
        jobs = self.plan_all()
        manifest = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "environment": environment(self.device),
            "world_size": self.dist.world_size,
            "settings": {k: v for k, v in dataclasses.asdict(s).items() if k != "progress"},
        }
        results = ResultsFile.of(manifest, [])
        groups = model_groups(jobs)
        for number, group in enumerate(groups):
            for adapter, adapter_jobs in itertools.groupby(group, key=lambda job: job.adapter):
                # An engine server lives as long as its model's jobs; its files go to the run folder.
                with adapter.session(self.folder.engine_path(adapter.name)):
                    for job in adapter_jobs:
                        if not s.rescore:
                            self.generate(job)
                        wait_for_ranks()
                        if self.dist.is_main:
                            results = ResultsFile.of(manifest, [*results.results, self.score(job)])
                            self.folder.write_results(results)
            following = groups[number + 1][0].adapter if number + 1 < len(groups) else None
            hand_over(group[0].adapter, following)
        return results if self.dist.is_main else None

    def adapter(self, spec: ModelSpec) -> ModelAdapter:
        # Weights load lazily, on first decode; a LoRA among the model's options is part of which weights.
        return load_adapter(spec, self.device, self.dtype, self.settings.model_args.get(spec.name))

    def store(self, job: Job) -> SampleStore:
        return self.folder.store(job.spec.name, job.task.name, self.dist.rank)

    def plan_job(self, spec: ModelSpec, adapter: ModelAdapter, task: Task, data: LoadedData) -> Job:
        s = self.settings
        every = task.docs(data.records)
        docs = every[: s.limit] if s.limit else every
        if s.limit and s.limit > len(every) and spec.name == s.models[0]:
            self.note(f"{task.name}: --limit {s.limit} is more than its {len(every)} items; running all "
                      f"{len(every)}")
        overrides = {**spec.overrides_for(task.name, s.preset), **s.model_args.get(spec.name, {})}
        # a canvas is the request's and a sample count the run's, not decoder options
        preset_canvas, preset_samples = overrides.pop("gen_length", None), overrides.pop(SAMPLES, None)
        canvas = (s.gen_length or coerce(spec.name, "gen_length", preset_canvas, int | None) or smoke_canvas(s.preset)
                  or task.canvas_tokens)
        samples = s.samples or coerce(spec.name, SAMPLES, preset_samples, int | None) or 1
        config = adapter.make_config(overrides, canvas, s.seed)  # validated here, before any decode
        decoding = record(config)
        if samples > 1 and draws_nothing(decoding) and spec.name not in self._noted_identical:
            self._noted_identical.add(spec.name)
            self.note(f"{spec.name}: its decoding draws nothing at random (temperature 0), so its {samples} samples "
                      f"of an item will be identical (set temperature > 0, or drop --samples)")
        planned = plan(task, docs, adapter, decoding, canvas, s.seed, s.batch_size, samples)
        return Job(spec, adapter, task, data, config, decoding, canvas, samples, planned, len(every))

    def stored(self, job: Job) -> tuple[dict[str, SampleRecord], StaleSamples]:
        """The store's records by key, and the planned samples another version of the decoder stored; with
        ``--reuse-stale`` those stand under their planned keys (so they are neither regenerated nor missing)."""
        stored = self.store(job).load()
        stale = find_stale(job.planned, stored, job.adapter.decoder.version)
        if self.settings.reuse_stale:
            stored = {**stored, **{key: stored[old] for key, (_, old) in stale.found.items()}}
        return stored, stale

    def pending(self, job: Job, stored: dict[str, SampleRecord] | None = None) -> list[PlannedSample]:
        """This rank's share (every world_size-th sample of the plan) minus what any rank already stored."""
        stored = self.stored(job)[0] if stored is None else stored
        return [p for p in job.planned[self.dist.rank::self.dist.world_size] if p.key not in stored]

    def note_stale(self, job: Job, stale: StaleSamples) -> None:
        """One line when the store holds samples of another decoder version: regenerated, kept, or (rescoring)
        left out."""
        if not stale.found:
            return
        s, decoder = self.settings, job.adapter.decoder
        action = ("kept (--reuse-stale; the manifest records them)" if s.reuse_stale else
                  "not scored (rerun without --rescore to regenerate them, or add --reuse-stale to keep them)"
                  if s.rescore else "regenerating (--reuse-stale keeps them)")
        self.note(f"{job.spec.name} · {job.task.name}: {stale_message(stale, decoder.name, decoder.version, action)}")

    def generate(self, job: Job) -> None:
        """Generate what the store lacks; a resumed job says how much it skips."""
        stored, stale = self.stored(job)
        self.note_stale(job, stale)
        pending = self.pending(job, stored)
        share = len(job.planned[self.dist.rank::self.dist.world_size])
        done = share - len(pending)
        label = f"{job.spec.name} · {job.task.name}" + (f" · rank {self.dist.rank}" if self.dist.active else "")
        if done:
            what = "skipped" if not pending else f"resuming with {len(pending)} left"
            self.note(f"{label}: {done} of {share} samples already stored, {what}")
        if pending:
            self.note_static_fallback(job)
            generate_missing(job.adapter, job.config, pending, self.store(job), self.settings, label,
                             self.dist.rank, done)

    def note_static_fallback(self, job: Job) -> None:
        """Once per model: a continuous schedule its decoder cannot keep (no rows in flight) decodes static batches."""
        s, decoder = self.settings, job.adapter.decoder
        if s.schedule == CONTINUOUS and s.batch_size > 1 and decoder.stream is None \
                and job.spec.name not in self._noted_static:
            self._noted_static.add(job.spec.name)
            self.note(f"{job.spec.name}: the {decoder.name} decoder keeps no rows in flight, so its requests decode "
                      f"in static batches of {s.batch_size} (--schedule static says so for every model)")

    def score(self, job: Job) -> ResultEntry:
        s = self.settings
        store = self.store(job)
        stored, stale = self.stored(job)
        settled = store.settled_rows()
        if s.rescore:
            self.note_stale(job, stale)
        missing = sum(p.key not in stored for p in job.planned)
        if missing and s.progress:
            print(f"note: {job.spec.name} · {job.task.name}: {missing} of {len(job.planned)} samples not generated "
                  f"yet; scoring the {len(job.planned) - missing} stored")
        samples = score_samples(job.task, job.planned, stored)
        self.folder.write_samples(job.spec.name, job.task.name, samples)
        summary = aggregate(as_json(samples), job.task.primary_metric, s.batch_size, store.peak_memory(),
                            self.device.type, job.task.answer_key)
        return ResultEntry.from_json({
            "model": job.spec.name,
            "task": job.task.name,
            "manifest": {
                "model_ref": job.spec.ref,
                "model": job.adapter.identity(),
                **{k: v for k, v in job.adapter.identity().items() if k == "adapter"},  # a LoRA's hash, when merged
                "implementation": job.adapter.implementation(job.config.runtime),
                "decoding": job.decoding,
                "preset": s.preset,
                "task": job.task.describe(),
                "task_version": job.task.version,
                "canvas_tokens": job.canvas,
                "dataset": job.data.location,
                "data_source": job.data.source,
                "data_sha256": job.data.sha256,
                "prompt_sha256": prompt_hash(job.planned),
                "seed": s.seed,
                **({"samples": job.samples} if job.samples > 1 else {}),  # generations per item
                "limit": s.limit,
                "batch_size": s.batch_size,
                **({"batch_size_settled": settled} if settled is not None else {}),  # out of memory at batch_size
                "decoder": {"name": job.adapter.decoder.name, "version": job.adapter.decoder.version},
                **({"reused_stale": stale.manifest()} if s.reuse_stale and stale.found else {}),
                "n_planned": len(job.planned),
                "n_items": job.n_items,
                **job.adapter.run_manifest(self.folder.engine_path(job.spec.name)),
            },
            **summary,
        })
