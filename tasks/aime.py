"""AIME 2024 and 2025 (``aime24``, ``aime25``): 30 problems a year, each with an integer answer from 0 to 999.

Prompted as OpenCompass's AIME configurations prompt them (the evaluations of the 2026 diffusion-LLM papers run on
OpenCompass): the problem, then "Remember to put your final answer within \\boxed{}.". Scored with math-verify
against the integer answer, so ``\\boxed{033}``, ``\\boxed{33}`` and a final ``$33$`` all match ``33``. The canvas
is long (docs/tasks.md): these are multi-page solutions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.records import DatasetSpec, RecordCheck

MATH_VERIFY = "math_verify,none"
INSTRUCTION = "\nRemember to put your final answer within \\boxed{}."


@dataclass(frozen=True)
class AIMEYear:
    """Where one year's problems live and what their fields are called."""

    name: str
    dataset: DatasetSpec
    problem_field: str
    id_field: str | None


def integer_answer(value: Any) -> int | None:
    """The answer as an int when it is one from 0 to 999 (hub copies store it as text or as a number)."""
    text = str(value).strip()
    return int(text) if text.isascii() and text.isdigit() and int(text) <= 999 else None


def checker(problem_field: str) -> RecordCheck:
    """The record check of a year whose problem text is in ``problem_field``."""

    def check(record: dict[str, Any]) -> str | None:
        if not isinstance(record[problem_field], str) or not record[problem_field].strip():
            return f"field {problem_field!r}: expected a non-empty string"
        if integer_answer(record["answer"]) is None:
            return f"field 'answer': expected an integer from 0 to 999, got {record['answer']!r}"
        return None

    return check


AIME24 = AIMEYear("aime24", DatasetSpec(
    hub_id="HuggingFaceH4/aime_2024", config=None, split="train", local_file="aime24/train.jsonl",
    fixture="aime24.jsonl", required_fields=("id", "problem", "answer"), check=checker("problem"),
), problem_field="problem", id_field="id")

AIME25 = AIMEYear("aime25", DatasetSpec(
    hub_id="opencompass/AIME2025", config=None, split="test", local_file="aime25/test.jsonl",
    fixture="aime25.jsonl", required_fields=("question", "answer"), hub_configs=("AIME2025-I", "AIME2025-II"),
    check=checker("question"),
), problem_field="question", id_field=None)


@lru_cache(maxsize=1024)
def parsed_gold(answer: int) -> tuple[Any, ...]:
    from math_verify import parse

    return tuple(parse(f"${answer}$"))


def math_verify_score(output: str, answer: int) -> tuple[str | None, float]:
    """The answer math-verify extracts (None if it finds none) and its verdict against the integer."""
    from math_verify import parse, verify

    target = parse(output)
    shown = (target[-1] if isinstance(target[-1], str) else str(target[0])) if target else None
    return shown, float(verify(gold=list(parsed_gold(answer)), target=target))


class AIME(Task):
    primary_metric = MATH_VERIFY
    answer_key = "math_verify"
    metrics = (MATH_VERIFY,)
    canvas_tokens = 4096
    equivalent_lm_eval_task = "aime24 / aime25 (prompt and checker differ: OpenCompass's prompt, math-verify)"

    def __init__(self, year: AIMEYear) -> None:
        self.year, self.name, self.dataset = year, year.name, year.dataset
        self.version = f"{year.name}-opencompass-boxed-math_verify-1"

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        field = self.year.id_field
        return [Doc(id=str(r[field]) if field else str(i), data=r) for i, r in enumerate(records)]

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=f"{doc.data[self.year.problem_field]}{INSTRUCTION}")

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        results = []
        for doc, output in zip(docs, outputs):
            answer = integer_answer(doc.data["answer"])
            assert answer is not None  # the record check admits integer answers only
            shown, verdict = math_verify_score(output, answer)
            results.append(SampleScore(
                target=str(answer), extracted={"math_verify": shown if shown is not None else "[invalid]"},
                scores={MATH_VERIFY: verdict}, diagnostics={"empty": not output.strip(), "invalid": shown is None},
            ))
        return results
