"""The records of a run folder, typed in one place: every writer and reader goes through these classes.

``SampleRecord`` is one request's record: a line of the resume store's shards once generated and timed, a line of
``samples/<model>/<task>.jsonl`` once scored (the fields of docs/measurement.md). ``ResultEntry`` is one (model,
task) of ``results.json`` and ``ResultsFile`` the whole file. Their JSON is the files' as they have always been
written, key for key, so folders written before these classes load and resume.

Reading is tolerant in two ways, both deliberate:
- a key that a newer release added and an older file lacks takes its default (``rank``, ``forwards``, ``forward_s``,
  ``schedule``; ``groups``, ``attribution``);
- a key this code does not know is kept (``extra``) and written back after the known ones: adapters add their own
  measurements to a sample (an engine's request latency, DiffusionGemma's passes), and a file written by a later
  release survives being read and rewritten here.
A key every release has written is required (``SAMPLE_KEYS``, ``RESULT_KEYS``): a record without it is damaged.

``harness.stats`` may not import the run loop's parts, so it reads records as the JSON they are stored as
(``to_json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

from harness.run.schedule import STATIC
from harness.stats.attribution import attribution_table

RESULT_KEYS = ("model", "task", "manifest", "n_samples", "primary_metric", "metrics", "speed", "diagnostics")
SAMPLE_KEYS = ("prompt", "text", "raw_text", "token_ids", "gen_tokens", "gen_tokens_after_stop", "canvas_tokens", "nfe",
               "hit_max_tokens", "latency_s", "batch_latency_s", "batch_size", "warmup")
# Written only when set: a request's identity (the lm-eval bridge's records have none) and the continuous schedule's
# times; the scoring fields are written once the sample is scored.
WHEN_SET = ("key", "doc_id", "queue_s", "phase", "phase_elapsed_s")
SCORING = ("group", "target", "extracted", "scores", "diagnostics")


class RecordError(ValueError):
    """A stored record without a key it must have; the message names what is missing."""


def _split(cls: type, data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data``'s keys that are fields of ``cls`` (other than ``extra``), and the others."""
    known = {f.name for f in fields(cls)} - {"extra"}
    return {k: v for k, v in data.items() if k in known}, {k: v for k, v in data.items() if k not in known}


def _record(cls: type, required: Sequence[str], data: Any) -> Any:
    """``cls`` from its JSON: the required keys checked, absent fields at their defaults, unknown keys kept."""
    missing = [k for k in required if k not in data] if isinstance(data, Mapping) else list(required)
    if missing:
        raise RecordError(f"lacks {', '.join(missing)}")
    known, extra = _split(cls, data)
    return cls(**known, extra=extra)


def _json(record: Any) -> dict[str, Any]:
    """A record's fields in declaration order, then the keys it kept from the file."""
    return {**{f.name: getattr(record, f.name) for f in fields(record) if f.name != "extra"}, **record.extra}


@dataclass(frozen=True, kw_only=True)
class SampleRecord:
    """One request: what it was (key, item, rendered prompt), what the decoder produced and what that cost
    (docs/measurement.md), and, once scored, what the task made of it."""

    key: str | None = None  # the sample key (harness.run.store.sample_key); None outside a run (the lm-eval bridge)
    doc_id: str | None = None
    sample: int = 0  # which of the item's repeated samples (--samples); written only after the first
    prompt: str
    text: str
    raw_text: str
    token_ids: list[int]
    gen_tokens: int
    gen_tokens_after_stop: int
    canvas_tokens: int
    nfe: float
    hit_max_tokens: bool
    forwards: int | None = None  # None: not counted (an engine), or stored before rows counted them
    latency_s: float
    forward_s: float | None = None
    batch_latency_s: float | None  # None with the continuous schedule
    batch_size: int
    schedule: str = STATIC
    warmup: bool
    rank: int = 0
    queue_s: float | None = None  # the continuous schedule's times
    phase: str | None = None
    phase_elapsed_s: float | None = None
    group: str | None = None  # scoring: the item's subject, the task's target and extraction, scores, diagnostics
    target: Any = None
    extracted: Any = None
    scores: dict[str, float] | None = None  # None until scored
    diagnostics: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SampleRecord:
        return _record(cls, SAMPLE_KEYS, data)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in _json(self).items()
                if not (k in WHEN_SET and v is None) and not (k in SCORING and self.scores is None)
                and not (k == "sample" and v == 0)}

    @property
    def scored(self) -> bool:
        return self.scores is not None


def as_json(records: Sequence[SampleRecord]) -> list[dict[str, Any]]:
    """Records as stored, for ``harness.stats``."""
    return [r.to_json() for r in records]


@dataclass(frozen=True)
class ResultEntry:
    """One (model, task) of a run: its manifest and the figures of docs/measurement.md (``harness.stats.aggregate``
    computes them; their inner tables stay mappings, as that module writes them)."""

    model: str
    task: str
    manifest: dict[str, Any]
    n_samples: int
    primary_metric: str
    metrics: dict[str, dict[str, Any]]
    groups: dict[str, dict[str, Any]] = field(default_factory=dict, kw_only=True)  # per subject; absent before
    speed: dict[str, Any]
    diagnostics: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ResultEntry:
        return _record(cls, RESULT_KEYS, data)

    def to_json(self) -> dict[str, Any]:
        return _json(self)

    @property
    def primary(self) -> dict[str, Any]:
        """The primary metric's summary (value, stderr, ci95, n); empty when the run scored nothing."""
        return self.metrics.get(self.primary_metric, {})

    @property
    def kind(self) -> str | None:
        """The adapter kind that ran the model ("ar", "llada", "vllm", ...), as the manifest records it."""
        return (self.manifest.get("model") or {}).get("kind")


@dataclass(frozen=True)
class ResultsFile:
    """``results.json``: the run's manifest, one entry per finished (model, task), and the speedup attribution of
    those entries (``harness.stats.attribution``), computed once when the file is written and only read after."""

    manifest: dict[str, Any]
    results: tuple[ResultEntry, ...]
    attribution: tuple[dict[str, Any], ...] = ()  # absent from files written before attribution existed
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, manifest: dict[str, Any], results: Sequence[ResultEntry]) -> ResultsFile:
        """The file for these results, with their attribution."""
        return cls(manifest, tuple(results), tuple(attribution_table([r.to_json() for r in results])))

    @classmethod
    def from_json(cls, data: Any) -> ResultsFile:
        if not isinstance(data, Mapping) or not isinstance(data.get("results"), list):
            raise RecordError("no 'results' list (not a harness results file)")
        entries = []
        for index, entry in enumerate(data["results"]):
            try:
                entries.append(ResultEntry.from_json(entry))
            except RecordError as error:
                raise RecordError(f"result {index} {error}") from None
        known, extra = _split(cls, data)
        manifest = known.get("manifest") if isinstance(known.get("manifest"), dict) else {}
        return cls(manifest, tuple(entries), tuple(known.get("attribution") or ()), extra)

    def to_json(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "results": [r.to_json() for r in self.results],
                "attribution": list(self.attribution), **self.extra}

    def result(self, model: str, task: str) -> ResultEntry | None:
        return next((r for r in self.results if r.model == model and r.task == task), None)
