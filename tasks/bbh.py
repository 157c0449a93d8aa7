"""BIG-Bench Hard (``bbh``): 27 reasoning subsets, zero-shot chain of thought through the chat template.

Prompt, stop strings, extraction and matching are lm-eval's ``bbh_cot_zeroshot`` (0.4.13), read from its own task
files so they cannot drift: system the subset's description, user ``Q: <input>\\nA: Let's think step by step.``.
The primary metric is ``exact_match,strict-match``, the answer after "the answer is" (the extraction of the papers'
OpenCompass BBH); ``flexible-extract`` is lm-eval's per-subset fallback (the last option letter, True/False, number,
...). Results are reported per subset and pooled over all items, as lm-eval's group weights them by size.

The hub copy is ``SaylorTwift/bbh`` (lm-eval's): the same records as ``lukaemon/bbh``, whose main branch is a loading
script that ``datasets`` no longer runs. The subsets are hub configs with no field naming them, so each is loaded on
its own and its records are tagged with ``subset``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from tasks.base import Doc, TaskPrompt
from tasks.extraction import ExactMatch, ExtractionTask, Pipeline
from tasks.records import FIXTURES, DataError, DatasetSpec, LoadedData, load_records

HUB_ID = "SaylorTwift/bbh"
SUBSET = "subset"  # the field added to each record: which subset (hub config) it came from


@lru_cache(maxsize=1)
def task_folder() -> Path:
    import lm_eval.tasks.bbh

    return Path(next(iter(lm_eval.tasks.bbh.__path__))) / "cot_zeroshot"


@lru_cache(maxsize=1)
def subsets() -> tuple[str, ...]:
    """The 27 subsets, in lm-eval's order (its group file lists them alphabetically)."""
    return tuple(sorted(p.stem for p in task_folder().glob("*.yaml") if not p.stem.startswith("_")))


@lru_cache(maxsize=32)
def subset_config(subset: str) -> dict[str, Any]:
    """lm-eval's task config of one subset, includes merged and ``!function`` filters resolved to classes."""
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(task_folder() / f"{subset}.yaml", resolve_func=True)


def build_filter(step: dict[str, Any]) -> Any:
    from lm_eval.filters import get_filter

    options = {k: v for k, v in step.items() if k != "function"}
    function = step["function"]
    return (get_filter(function) if isinstance(function, str) else function)(**options)


@lru_cache(maxsize=32)
def pipelines(subset: str) -> tuple[Pipeline, ...]:
    """The subset's filter lists as harness pipelines (``take_first``, which every list ends with, is the
    pipeline's own last step)."""
    return tuple(Pipeline(entry["name"], [build_filter(step) for step in entry["filter"]
                                          if step["function"] != "take_first"])
                 for entry in subset_config(subset)["filter_list"])


@lru_cache(maxsize=1)
def exact_match() -> ExactMatch:
    """lm-eval's ``exact_match`` options, the same in every subset's config."""
    (metric,) = subset_config(subsets()[0])["metric_list"]
    return ExactMatch(ignore_case=metric.get("ignore_case", False),
                      ignore_punctuation=metric.get("ignore_punctuation", False),
                      regexes_to_ignore=tuple(metric.get("regexes_to_ignore", ())))


def subset_spec(subset: str) -> DatasetSpec:
    return DatasetSpec(hub_id=HUB_ID, config=subset, split="test", local_file=f"bbh/{subset}.jsonl",
                       fixture=f"bbh_{subset}.jsonl", required_fields=("input", "target"), check=check_record)


def check_record(record: dict[str, Any]) -> str | None:
    for field in ("input", "target"):
        if not isinstance(record[field], str) or not record[field].strip():
            return f"field {field!r}: expected a non-empty string"
    return None


def available(source: str, data_dir: Path | None) -> tuple[str, ...]:
    """The subsets a source holds: all of them on the hub and in a local folder, a few in the fixtures."""
    if data_dir is None and source == "fixtures":
        return tuple(s for s in subsets() if (FIXTURES / subset_spec(s).fixture).exists())
    return subsets()


def load(source: str, data_dir: Path | None) -> LoadedData:
    """Every subset from the hub or ``DIR/bbh/<subset>.jsonl``, or the subsets the fixtures hold
    (``tasks/fixtures/bbh_<subset>.jsonl``), each record tagged with its subset."""
    if data_dir is None and source == "auto":
        try:
            return load("hub", None)
        except DataError:
            return load("fixtures", None)
    parts = [(subset, load_records(subset_spec(subset), source, data_dir)) for subset in available(source, data_dir)]
    digest = hashlib.sha256()
    for subset, part in parts:
        digest.update(f"{subset}:{part.sha256}\n".encode())
    origin = parts[0][1].source
    location = {"hub": f"{HUB_ID}/{len(parts)} configs/test", "local": str(Path(parts[0][1].location).parent),
                "fixtures": f"fixtures/bbh_<subset>.jsonl ({len(parts)} subsets)"}[origin]
    records = [{**record, SUBSET: subset} for subset, part in parts for record in part.records]
    return LoadedData(records, origin, location, digest.hexdigest())


class BBH(ExtractionTask):
    pipelines = ()  # per subset: pipelines_for
    name = "bbh"
    version = "bbh_cot_zeroshot-lm_eval-0.4.13-chat-1"
    dataset = DatasetSpec(hub_id=HUB_ID, config="27 subsets", split="test", local_file="bbh/<subset>.jsonl",
                          fixture="bbh_<subset>.jsonl", required_fields=("input", "target"), check=check_record)
    primary_metric = "exact_match,strict-match"
    metrics = ("exact_match,strict-match", "exact_match,flexible-extract")
    canvas_tokens = 1024
    equivalent_lm_eval_task = "bbh_cot_zeroshot"

    @property
    def match(self) -> ExactMatch:  # type: ignore[override]
        return exact_match()

    def load(self, source: str, data_dir: Path | None) -> LoadedData:
        return load(source, data_dir)

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        counts: dict[str, int] = {}
        docs = []
        for record in records:
            subset = record[SUBSET]
            counts[subset] = counts.get(subset, 0) + 1
            docs.append(Doc(id=f"{subset}-{counts[subset] - 1}", data=record, group=subset))
        return docs

    def prompt(self, doc: Doc) -> TaskPrompt:
        config = subset_config(doc.data[SUBSET])
        return TaskPrompt(system=config["description"], user=f"Q: {doc.data['input']}\nA: Let's think step by step.",
                          stop=tuple(config["generation_kwargs"]["until"]))

    def pipelines_for(self, doc: Doc) -> Sequence[Pipeline]:
        return pipelines(doc.data[SUBSET])

    def target(self, doc: Doc) -> str:
        return doc.data["target"]
