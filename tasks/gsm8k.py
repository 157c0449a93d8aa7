"""GSM8K as the ReFusion fork's ``gsm8k_cot`` ran it at zero shot (docs/tasks.md)."""

from __future__ import annotations


from lm_eval.filters.extraction import RegexFilter

from tasks.base import Doc, TaskPrompt
from tasks.records import DatasetSpec
from tasks.extraction import ExactMatch, ExtractionTask, Pipeline

# The fork's YAML is single-quoted, so the first "\n" reaches the model as a literal backslash and an "n".
INSTRUCTION = (
    "Solve the following math problem. You need to think step-by-step, show your detailed reasoning, and end with "
    '"The answer is [result]," where [result] is the answer you get.\\n'
)

PIPELINES = (
    Pipeline("strict-match", [RegexFilter(r"The answer is (\-?[0-9\.\,]+).")]),
    Pipeline("flexible-extract", [RegexFilter(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select=-1)]),
)

MATCH = ExactMatch(ignore_case=True, ignore_punctuation=False, regexes_to_ignore=(",", "\\$", "(?s).*#### ", "\\.$"))


def gold_answer(answer: str) -> str:
    return answer.split("####")[-1].strip()


class GSM8K(ExtractionTask):
    pipelines = PIPELINES
    match = MATCH
    name = "gsm8k"
    version = "gsm8k_cot-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="openai/gsm8k", config="main", split="test", local_file="gsm8k/test.jsonl",
        fixture="gsm8k.jsonl", required_fields=("question", "answer"),
    )
    primary_metric = "exact_match,flexible-extract"
    metrics = ("exact_match,flexible-extract", "exact_match,strict-match")
    equivalent_lm_eval_task = "gsm8k_cot"
    paper_column = "GSM8K"

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=f"{INSTRUCTION}Q: {doc.data['question']}\nA:", stop=("Q:", "</s>", "<|im_end|>"))

    def target(self, doc: Doc) -> str:
        return gold_answer(doc.data["answer"])
