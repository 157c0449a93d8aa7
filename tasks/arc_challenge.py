"""ARC-Challenge as the ReFusion fork's ``arc_challenge_chat`` ran it (docs/tasks.md).

The answer is generated after an assistant prefill, cut at "\\n\\n" or ".", and matched to the gold letter after a
left strip (the fork's lm-eval 0.4.9.1; 0.4.13 strips both sides).
"""

from __future__ import annotations

import string
from typing import Any

from tasks.base import Doc, TaskPrompt
from tasks.records import DatasetSpec
from tasks.extraction import ExactMatch, ExtractionTask, Pipeline
from tasks.fork_filters import LeftStripFilter

# lm-eval's YAML holds this template in single quotes, so every "\n" reaches the model as a backslash and an "n".
INSTRUCTION = "Given the following question and four candidate answers (A, B, C and D), choose the best answer."
ENDING = ('Your response should end with "The best answer is [the_answer_letter]" where the [the_answer_letter] is '
          "one of A, B, C or D.")
PREFILL = "The best answer is"
LITERAL_NEWLINE = "\\n"
LETTERS = ("A", "B", "C", "D")

PIPELINES = (Pipeline("remove_whitespace", [LeftStripFilter()]),)
PUNCTUATION = str.maketrans("", "", string.punctuation)
MATCH = ExactMatch(ignore_case=True, ignore_punctuation=True)


def check_record(record: dict[str, Any]) -> str | None:
    choices = record["choices"]
    if not isinstance(choices, dict) or not isinstance(choices.get("text"), list) or len(choices["text"]) < 3:
        return "field 'choices': expected {'text': [at least 3 strings], 'label': [...]}"
    count = min(len(choices["text"]), 5)  # a gold fifth option would be valid data, if never shown
    if str(record["answerKey"]) not in {*"ABCDE"[:count], *"12345"[:count]}:
        return f"field 'answerKey': expected a label of one of the {count} choices, got {record['answerKey']!r}"
    return None


def gold_letter(answer_key: Any) -> str:
    """lm-eval's target: numeric labels 1-4 (a few hub items) become A-D."""
    key = str(answer_key)
    return LETTERS[int(key) - 1] if key in ("1", "2", "3", "4") else key


def user_message(record: dict[str, Any]) -> str:
    texts = record["choices"]["text"]
    lines = [INSTRUCTION, f"Question: {record['question'].strip()}",
             f"A. {texts[0]}", f"B. {texts[1]}", f"C. {texts[2]}"]
    if len(texts) > 3:
        lines.append(f"D. {texts[3]}")  # a fifth option, if any, is never shown (as in the fork)
    lines.append(ENDING)
    return LITERAL_NEWLINE.join(lines)


class ARCChallenge(ExtractionTask):
    pipelines = PIPELINES
    match = MATCH
    name = "arc_challenge"
    version = "arc_challenge_chat-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="allenai/ai2_arc", config="ARC-Challenge", split="test", local_file="arc_challenge/test.jsonl",
        fixture="arc_challenge.jsonl", required_fields=("id", "question", "choices", "answerKey"),
        check=check_record,
    )
    primary_metric = "exact_match,remove_whitespace"
    metrics = ("exact_match,remove_whitespace",)
    equivalent_lm_eval_task = "arc_challenge_chat"
    paper_column = "ARC-C"

    def doc_id(self, record: dict[str, Any], index: int) -> str:
        return str(record["id"])

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=user_message(doc.data), prefill=PREFILL, stop=("\n\n", "."))

    def target(self, doc: Doc) -> str:
        return gold_letter(doc.data["answerKey"])

    def is_invalid(self, extracted: dict[str, str]) -> bool:
        """No extraction step can fail here; "invalid" flags answers that are no letter A-D even after the metric's
        case and punctuation folding (e.g. "B) because ...")."""
        return extracted["remove_whitespace"].translate(PUNCTUATION).strip().upper() not in LETTERS
