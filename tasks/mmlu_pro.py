"""MMLU-Pro as the ReFusion fork's ``mmlu_pro`` group ran it at zero shot (docs/tasks.md).

One task over the whole test split; each item's ``category`` is its group, so the harness reports the 14 subjects
and their size-weighted mean, which is lm-eval's group score.
"""

from __future__ import annotations

from typing import Any, Sequence

from lm_eval.filters.extraction import RegexFilter

from tasks.base import Doc, TaskPrompt
from tasks.records import DatasetSpec
from tasks.extraction import ExactMatch, ExtractionTask, Pipeline

LETTERS = "ABCDEFGHIJ"

# lm-eval's subtasks, in the order its group lists them; the subject string goes into the system message.
SUBJECTS = ("biology", "business", "chemistry", "computer science", "economics", "engineering", "health", "history",
            "law", "math", "other", "philosophy", "physics", "psychology")

DESCRIPTION = (
    "The following are multiple choice questions (with answers) about {subject}. Think step by step and then finish "
    'your answer with "the answer is (X)" where X is the correct letter choice.\n'
)

PIPELINES = (Pipeline("custom-extract", [RegexFilter(r"answer is \(?([ABCDEFGHIJ])\)?")]),)
MATCH = ExactMatch(ignore_case=True, ignore_punctuation=True)


def check_record(record: dict[str, Any]) -> str | None:
    options = record["options"]
    if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
        return "field 'options': expected a non-empty list of strings"
    if record["category"] not in SUBJECTS:
        return f"field 'category': unknown subject {record['category']!r}"
    if record["answer"] not in tuple(LETTERS[: len(options)]):
        return f"field 'answer': expected a letter A-{LETTERS[len(options) - 1]}, got {record['answer']!r}"
    return None


def user_message(record: dict[str, Any]) -> str:
    """The fork's ``format_cot_example`` without an answer. Options are not stripped (0.4.13 strips them)."""
    options = "".join(f"{letter}. {option}\n" for letter, option in zip(LETTERS, record["options"]))
    return f"Question:\n{record['question']}\nOptions:\n{options}Answer: Let's think step by step."


def group_name(category: str) -> str:
    return category.replace(" ", "_")


class MMLUPro(ExtractionTask):
    pipelines = PIPELINES
    match = MATCH
    name = "mmlu_pro"
    version = "mmlu_pro-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="TIGER-Lab/MMLU-Pro", config=None, split="test", local_file="mmlu_pro/test.jsonl",
        fixture="mmlu_pro.jsonl", required_fields=("question_id", "question", "options", "answer", "category"),
        check=check_record,
    )
    primary_metric = "exact_match,custom-extract"
    metrics = ("exact_match,custom-extract",)
    equivalent_lm_eval_task = "mmlu_pro"
    paper_column = "MMLU-Pro"

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        """Subjects in lm-eval's group order, each in dataset order (a stable sort), so --limit stays in order."""
        ordered = sorted(records, key=lambda r: SUBJECTS.index(r["category"]))
        return [Doc(id=str(r["question_id"]), data=r, group=group_name(r["category"])) for r in ordered]

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(system=DESCRIPTION.format(subject=doc.data["category"]), user=user_message(doc.data),
                          stop=("Question:",))

    def target(self, doc: Doc) -> str:
        return doc.data["answer"]
