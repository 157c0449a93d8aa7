"""Answer extraction and matching as lm-eval pipelines do it, built from lm-eval's own filters and metric.

A pipeline is a named list of lm-eval filters applied to one response (one repeat), then ``exact_match`` with the
task's options. Keeping lm-eval's classes means the harness extracts exactly what lm-eval would.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

from lm_eval.api.metrics import exact_match_hf_evaluate
from lm_eval.api.filter import Filter
from lm_eval.filters.selection import TakeFirstFilter

from tasks.base import Doc, SampleScore, Task


@dataclass(frozen=True)
class ExactMatch:
    """lm-eval's ``exact_match`` options (a port of HF evaluate's metric)."""

    ignore_case: bool = False
    ignore_punctuation: bool = False
    regexes_to_ignore: tuple[str, ...] = ()

    def __call__(self, prediction: str, reference: str) -> float:
        result = exact_match_hf_evaluate(
            [prediction], [reference],
            regexes_to_ignore=list(self.regexes_to_ignore) or None,
            ignore_case=self.ignore_case,
            ignore_punctuation=self.ignore_punctuation,
        )
        return float(result["exact_match"])


@dataclass(frozen=True)
class Pipeline:
    """A named filter chain (lm-eval's ``filter_list`` entry); ``take_first`` is appended as lm-eval does."""

    name: str
    filters: Sequence[Filter]
    extra: dict[str, Any] = field(default_factory=dict)

    def extract(self, response: str, doc: dict[str, Any]) -> str:
        responses: Any = [[response]]
        for step in [*self.filters, TakeFirstFilter()]:
            responses = list(step.apply(responses, [doc]))
        return responses[0]


def score_pipelines(
    response: str, doc: dict[str, Any], target: str, pipelines: Sequence[Pipeline], match: ExactMatch
) -> tuple[dict[str, str], dict[str, float]]:
    """Extracted answer per pipeline and ``exact_match,<pipeline>`` scores."""
    extracted = {p.name: p.extract(response, doc) for p in pipelines}
    scores = {f"exact_match,{name}": match(answer, target) for name, answer in extracted.items()}
    return extracted, scores


INVALID = "[invalid]"


class ExtractionTask(Task):
    """A task scored by extracting an answer with lm-eval filter pipelines and matching it exactly to the target.
    Subclasses set ``pipelines`` and ``match`` and say what the target of a document is."""

    pipelines: tuple[Pipeline, ...]
    match: ExactMatch

    @abstractmethod
    def target(self, doc: Doc) -> str:
        """The gold answer as the metric compares it."""

    @property
    def answer_key(self) -> str:  # type: ignore[override]
        """The primary metric's filter: its extraction is the answer a majority vote counts."""
        return self.primary_metric.split(",")[1]

    def pipelines_for(self, doc: Doc) -> Sequence[Pipeline]:
        """The pipelines that score this document: the task's own, unless its subsets extract differently (BBH)."""
        return self.pipelines

    def is_invalid(self, extracted: dict[str, str]) -> bool:
        """Whether extraction failed, judged on the primary metric's filter."""
        return extracted[self.primary_metric.split(",")[1]] == INVALID

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        results = []
        for doc, output in zip(docs, outputs):
            target = self.target(doc)
            extracted, scores = score_pipelines(output, doc.data, target, self.pipelines_for(doc), self.match)
            diagnostics = {"empty": not output.strip(), "invalid": self.is_invalid(extracted)}
            results.append(SampleScore(target=target, extracted=extracted, scores=scores, diagnostics=diagnostics))
        return results
