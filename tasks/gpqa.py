"""GPQA (main) as the ReFusion fork's ``gpqa_main_generative_n_shot`` ran it at zero shot (docs/tasks.md).

The fork shuffled the four answers with Python's global RNG, so the order depended on load order and caching. Here
each item's order comes from a generator seeded by a hash of its question, so every run and every model sees the
same permutation. The answer texts are cleaned as lm-eval 0.4.9.1 did (it also deleted "[...]" notes).
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any, Sequence

from lm_eval.filters.extraction import RegexFilter

from tasks.base import Doc, TaskPrompt
from tasks.records import DatasetSpec
from tasks.extraction import ExactMatch, ExtractionTask, Pipeline
from tasks.fork_filters import FirstChoiceRegexFilter

ANSWER_FIELDS = ("Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3", "Correct Answer")

DESCRIPTION = (
    "Answer the following multiple-choice question. Your response should be the letter of the correct option, "
    "enclosed in parentheses ((A), (B), (C), or (D)).\n"
)

PIPELINES = (
    Pipeline("strict-match", [RegexFilter(r"(?<=The answer is )(.*)(?=.)")]),
    Pipeline("flexible-extract", [FirstChoiceRegexFilter(r"(\([A-Z]\))", group_select=-1, ignore_case=True,
                                                         ignore_punctuation=True)]),
)
MATCH = ExactMatch(ignore_case=True, ignore_punctuation=True)


def check_record(record: dict[str, Any]) -> str | None:
    if not isinstance(record["Question"], str) or not record["Question"].strip():
        return "field 'Question': expected a non-empty string"
    for field in ANSWER_FIELDS:
        if not isinstance(record[field], (str, type(None))):  # lm-eval turns a missing answer into " "
            return f"field {field!r}: expected a string, got {type(record[field]).__name__}"
    return None


def clean_answer(text: str | None) -> str:
    """lm-eval 0.4.9.1's ``preprocess`` for GPQA answers."""
    if text is None:
        return " "
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def choice_order(question: str) -> list[int]:
    """The permutation of (incorrect 1, incorrect 2, incorrect 3, correct) shown as (A)-(D) for this question."""
    seed = int.from_bytes(hashlib.sha256(question.encode("utf-8")).digest()[:8], "big")
    order = [0, 1, 2, 3]
    random.Random(seed).shuffle(order)
    return order


def with_choices(record: dict[str, Any]) -> dict[str, Any]:
    """The record plus lm-eval's derived fields: choice1-4, choices, and the gold "(X)"."""
    answers = [clean_answer(record[field]) for field in ANSWER_FIELDS]
    choices = [answers[i] for i in choice_order(record["Question"])]
    gold = choices.index(answers[3])
    return {**record, **{f"choice{i + 1}": c for i, c in enumerate(choices)}, "choices": choices,
            "answer": f"({chr(ord('A') + gold)})"}


class GPQA(ExtractionTask):
    pipelines = PIPELINES
    match = MATCH
    name = "gpqa"
    version = "gpqa_main_generative-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="Idavidrein/gpqa", config="gpqa_main", split="train", local_file="gpqa/gpqa_main.jsonl",
        fixture="gpqa.jsonl", required_fields=("Question", *ANSWER_FIELDS), gated=True, check=check_record,
    )
    primary_metric = "exact_match,flexible-extract"
    metrics = ("exact_match,flexible-extract", "exact_match,strict-match")
    equivalent_lm_eval_task = "gpqa_main_generative_n_shot"
    paper_column = "GPQA"

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        return [Doc(id=str(r.get("Record ID") or i), data=with_choices(r)) for i, r in enumerate(records)]

    def prompt(self, doc: Doc) -> TaskPrompt:
        d = doc.data
        user = (f"Question: {d['Question']}\nChoices:\n(A) {d['choice1']}\n(B) {d['choice2']}\n(C) {d['choice3']}\n"
                f"(D) {d['choice4']}\nAnswer:")
        return TaskPrompt(system=DESCRIPTION, user=user, stop=("</s>", "Question:", "<|im_end|>"))

    def target(self, doc: Doc) -> str:
        return doc.data["answer"]


class GPQADiamond(GPQA):
    """GPQA's diamond subset (198 questions that experts answer right and non-experts wrong), the GPQA the 2026
    diffusion-LLM papers report: the same zero-shot chat prompt, seeded shuffle and extraction as ``gpqa``, with a
    longer canvas for the reasoning before the letter."""

    name = "gpqa_diamond"
    version = "gpqa_diamond_generative-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="Idavidrein/gpqa", config="gpqa_diamond", split="train", local_file="gpqa/gpqa_diamond.jsonl",
        fixture="gpqa_diamond.jsonl", required_fields=("Question", *ANSWER_FIELDS), gated=True, check=check_record,
    )
    canvas_tokens = 1024
    equivalent_lm_eval_task = "gpqa_diamond_generative_n_shot"
    paper_column = ""
