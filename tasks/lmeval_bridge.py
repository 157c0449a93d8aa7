"""Any generative lm-eval task as a harness task: ``--tasks lmeval:<lm-eval task name>``.

lm-eval builds the task (its YAML, dataset, prompt, filters and metrics); the harness generates, times, stores,
resumes and reports as for its own tasks. What comes from where:

* items: the task's evaluation split as lm-eval loads it (``dataset_path``/``dataset_kwargs``, ``process_docs``);
  ``--data``/``--data-dir`` do not apply. To run on local files, write a task YAML that ``include:``s the built-in
  one and sets ``dataset_path: json`` with ``dataset_kwargs.data_files``, and list its folder in the environment
  variable ``DLLM_LMEVAL_INCLUDE`` (folders separated by ``os.pathsep``, as lm-eval's ``--include_path``).
* prompt: lm-eval's own context for a chat model, single-turn (what ``--apply_chat_template
  --fewshot_as_multiturn false`` renders): the task description as the system turn, the few-shot examples and the
  question as the user turn, the task's ``gen_prefix`` as the assistant prefill. Shots: the task's ``num_fewshot``,
  0 when it sets none (as ``simple_evaluate`` does), drawn with lm-eval's default fewshot seed (1234).
* stop strings: ``generation_kwargs["until"]``; canvas: ``generation_kwargs["max_gen_toks"]``, else 512
  (``--gen-length`` overrides both sides' canvas).
* scores: the task's filter pipelines, then its ``process_results`` per filter, named ``metric,filter`` as in
  lm-eval's results. Only mean-aggregated metrics are kept (the harness averages per-sample scores); the primary
  metric is the first metric under the first filter.

A task that repeats a document (``repeats`` > 1) or is not ``generate_until`` is refused with one line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.records import DataError, DatasetSpec, LoadedData, go_offline, hub_offline_reason, records_sha256

PREFIX = "lmeval:"
INCLUDE_ENV = "DLLM_LMEVAL_INCLUDE"
DEFAULT_CANVAS = 512
FEWSHOT_SEED = 1234  # simple_evaluate's default fewshot_random_seed
INVALID = "[invalid]"  # what lm-eval's regex filter leaves when nothing matches


def include_paths(value: str | None = None) -> list[str]:
    """Folders of local lm-eval task YAMLs, from ``DLLM_LMEVAL_INCLUDE`` unless given."""
    raw = os.environ.get(INCLUDE_ENV, "") if value is None else value
    paths = [p for p in raw.split(os.pathsep) if p.strip()]
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise DataError(f"{INCLUDE_ENV}: {', '.join(missing)} does not exist")
    return paths


def load_lm_eval_task(name: str, include: Sequence[str]) -> Any:
    """Build one lm-eval task by name (or YAML path). The include folders are searched alone first, since indexing
    lm-eval's ~15k built-in tasks takes seconds; the built-ins are indexed only when the name is not found there."""
    from lm_eval.tasks import TaskManager

    if not name:
        raise DataError("give an lm-eval task after lmeval: (e.g. lmeval:gsm8k_cot)")
    manager = TaskManager(include_path=list(include), include_defaults=False) if include else None
    if manager is None or name not in manager.all_tasks:
        manager = TaskManager(include_path=list(include) or None)
    offline = hub_offline_reason()
    if offline:
        go_offline()  # lm-eval's datasets then read their cache at once instead of retrying the hub
    try:
        loaded = manager.load([name])
    except KeyError:
        hint = f" (local task folders go in {INCLUDE_ENV})" if not include else f" (searched also {', '.join(include)})"
        raise DataError(f"unknown lm-eval task {name!r}{hint}") from None
    except Exception as error:  # lm-eval raises many types for bad YAML, missing data and offline hubs
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        if offline:
            first = (f"offline ({offline}) and its data is not in the local cache ({first}); run it once online, "
                     f"or point a local task YAML at local files via {INCLUDE_ENV}")
        raise DataError(f"cannot build lm-eval task {name!r}: {first}") from None
    tasks = loaded["tasks"]
    if len(tasks) != 1:
        raise DataError(f"lm-eval name {name!r} is a group or tag of {len(tasks)} tasks; pass them one by one: "
                        f"{', '.join(PREFIX + t for t in sorted(tasks))}")
    return next(iter(tasks.values()))


def chat_turns(lm_task: Any, record: dict[str, Any], num_fewshot: int) -> list[dict[str, str]]:
    """lm-eval's single-turn chat messages for one document, captured from its own ``fewshot_context``."""
    captured: list[list[dict[str, str]]] = []

    def capture(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        captured.append(messages)
        return ""

    lm_task.fewshot_context(record, num_fewshot, system_instruction=None, apply_chat_template=True,
                            fewshot_as_multiturn=False, chat_template=capture,
                            gen_prefix=lm_task.doc_to_prefix(record))
    if len(captured) != 1:
        raise DataError(f"lm-eval task {lm_task.config.task}: expected one context per document, got {len(captured)}")
    return captured[0]


def to_task_prompt(messages: list[dict[str, str]], stop: tuple[str, ...]) -> TaskPrompt:
    roles = [m["role"] for m in messages]
    system = messages.pop(0)["content"] if roles[:1] == ["system"] else None
    prefill = messages.pop()["content"] if len(messages) > 1 and messages[-1]["role"] == "assistant" else None
    if [m["role"] for m in messages] != ["user"]:
        raise DataError(f"unexpected lm-eval chat turns {roles} (expected system?, user, assistant?)")
    return TaskPrompt(user=messages[0]["content"], system=system, prefill=prefill, stop=stop)


def until_of(generation_kwargs: dict[str, Any]) -> tuple[str, ...]:
    until = generation_kwargs.get("until") or ()
    return (until,) if isinstance(until, str) else tuple(until)


def mean_metrics(lm_task: Any) -> tuple[str, ...]:
    """The task's metrics that lm-eval aggregates by the mean, in its order."""
    from lm_eval.api.metrics import mean

    aggregation = lm_task.aggregation()
    return tuple(m for m in lm_task._metric_fn_list if aggregation.get(m) is mean)


class LMEvalTask(Task):
    """One lm-eval ``generate_until`` task behind the harness's Task interface."""

    def __init__(self, lm_task: Any):
        import lm_eval

        config = lm_task.config
        if lm_task.OUTPUT_TYPE != "generate_until":
            raise DataError(f"lm-eval task {config.task} is a {lm_task.OUTPUT_TYPE} task; the harness runs "
                            f"generative (generate_until) tasks only")
        if (config.repeats or 1) != 1:
            raise DataError(f"lm-eval task {config.task} repeats each document {config.repeats} times; the harness "
                            f"generates one output per document")
        if config.num_fewshot is None:
            lm_task.set_config(key="num_fewshot", value=0)
        lm_task.set_fewshot_seed(seed=FEWSHOT_SEED)
        self.lm_task = lm_task
        self.filters = tuple(f.name for f in lm_task._filters)
        kept = mean_metrics(lm_task)
        if not kept or not self.filters:
            raise DataError(f"lm-eval task {config.task} has no mean-aggregated metric the harness can average")
        self.name = PREFIX + config.task
        self.version = f"lm-eval-{lm_eval.__version__}:{config.task}:{(config.metadata or {}).get('version', '')}"
        self.metrics = tuple(f"{m},{f}" for f in self.filters for m in kept)
        self.primary_metric = self.metrics[0]
        self.equivalent_lm_eval_task = config.task
        self.generation_kwargs = dict(config.generation_kwargs or {})
        self.canvas_tokens = int(self.generation_kwargs.get("max_gen_toks") or DEFAULT_CANVAS)
        self.stop = until_of(self.generation_kwargs)
        self.num_fewshot = int(config.num_fewshot or 0)
        split = config.test_split or config.validation_split or ""
        self.dataset = DatasetSpec(hub_id=str(config.dataset_path), config=config.dataset_name, split=split,
                                   local_file="", fixture="", required_fields=())
        self._prompts: dict[str, TaskPrompt] = {}

    @classmethod
    def from_name(cls, name: str, include: Sequence[str] | None = None) -> "LMEvalTask":
        return cls(load_lm_eval_task(name, include_paths() if include is None else include))

    # ---- data ------------------------------------------------------------------------------------------------
    def load(self, source: str, data_dir: Path | None) -> LoadedData:
        """lm-eval's evaluation docs; ``data_dir`` does not apply (the task YAML says where its data is)."""
        if source == "fixtures":
            raise DataError(f"{self.name} has no bundled fixtures; its items come from lm-eval "
                            f"({self.dataset.hub_id}); point a local task YAML at local files via {INCLUDE_ENV}")
        records = [dict(doc) for doc in self.lm_task.eval_docs]
        if not records:
            raise DataError(f"{self.name}: lm-eval returned no documents")
        files = (self.lm_task.config.dataset_kwargs or {}).get("data_files")
        where = f"{self.dataset.hub_id}/{self.dataset.config or 'default'}/{self.dataset.split}"
        return LoadedData(records, "lm-eval", f"{where} (data_files {files})" if files else where,
                          records_sha256(records))

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        """Documents in lm-eval's order, ids its doc_ids. All prompts are built here, in that order, from a fresh
        fewshot seed, so a random few-shot sampler draws what lm-eval draws for each document."""
        docs = super().docs(records)
        if not self._prompts:
            self.lm_task.set_fewshot_seed(seed=FEWSHOT_SEED)
            self._prompts = {doc.id: self.build_prompt(doc) for doc in docs}
        return docs

    # ---- prompt and score ------------------------------------------------------------------------------------
    def build_prompt(self, doc: Doc) -> TaskPrompt:
        return to_task_prompt(chat_turns(self.lm_task, doc.data, self.num_fewshot), self.stop)

    def prompt(self, doc: Doc) -> TaskPrompt:
        return self._prompts.get(doc.id) or self.build_prompt(doc)

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        """lm-eval's filters over all outputs at once (as its evaluator applies them), then ``process_results``."""
        from lm_eval.api.instance import Instance

        if not docs:
            return []
        instances = []
        for doc, output in zip(docs, outputs):
            instance = Instance(request_type="generate_until", doc=doc.data, arguments=("", self.generation_kwargs),
                                idx=0, metadata=(self.lm_task.config.task, int(doc.id), 1))
            instance.resps.append(output)
            instances.append(instance)
        for ensemble in self.lm_task._filters:
            ensemble.apply(instances)
        return [self.score_one(doc, output, instance) for doc, output, instance in zip(docs, outputs, instances)]

    def score_one(self, doc: Doc, output: str, instance: Any) -> SampleScore:
        scores: dict[str, float] = {}
        for name in self.filters:
            results = self.lm_task.process_results(doc.data, [instance.filtered_resps[name]])
            for metric, value in results.items():
                key = f"{metric},{name}"
                if key in self.metrics:
                    scores[key] = float(value)
        extracted = {name: str(instance.filtered_resps[name]) for name in self.filters}
        diagnostics = {"empty": not output.strip(), "invalid": extracted[self.filters[0]] == INVALID}
        target = self.lm_task.doc_to_target(doc.data)
        return SampleScore(target=str(target), extracted=extracted, scores=scores, diagnostics=diagnostics)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "num_fewshot": self.num_fewshot,
            "generation_kwargs": self.generation_kwargs,
        }
