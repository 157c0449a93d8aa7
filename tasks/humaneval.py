"""HumanEval as the ReFusion fork's ``humaneval_instruct_noprefix`` ran it (docs/tasks.md).

The model continues an assistant turn that opens a python fence. Its code (up to the closing fence) is appended to
the problem's prompt, sanitized down to what the entry point needs, and run with the problem's tests; pass@1 with
one greedy sample is the pass rate.
"""

from __future__ import annotations

from typing import Any, Sequence

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.code import LIMITS, diagnostics, execute, first_python_block
from tasks.records import DatasetSpec
from tasks.sanitize import sanitize

INSTRUCTION = "Write a solution to the following problem and make sure that it passes the tests:\n"
PREFILL = "```python\n"


def check_record(record: dict[str, Any]) -> str | None:
    for field in ("prompt", "test", "entry_point"):
        if not isinstance(record[field], str) or not record[field].strip():
            return f"field {field!r}: expected a non-empty string"
    if not record["entry_point"].isidentifier():
        return f"field 'entry_point': {record['entry_point']!r} is not a Python name"
    return None


def candidate(record: dict[str, Any], output: str) -> str | None:
    """The fork's ``create_test`` filter: the code after the prefill up to the next fence, appended to the prompt,
    sanitized. None when the model wrote no code."""
    code = first_python_block(output).split("```python\n", 1)[-1].split("```")[0]
    if not code.strip():
        return None
    return sanitize(record["prompt"] + "\n" + code, record["entry_point"])


def reference(record: dict[str, Any]) -> str:
    """lm-eval's target, which code_eval appends to the candidate."""
    return f"{record['test']}\ncheck({record['entry_point']})"


class HumanEval(Task):
    name = "humaneval"
    version = "humaneval_instruct_noprefix-refusion-1"
    dataset = DatasetSpec(
        hub_id="openai/openai_humaneval", config=None, split="test", local_file="humaneval/HumanEval.jsonl.gz",
        fixture="humaneval.jsonl", required_fields=("task_id", "prompt", "test", "entry_point"), check=check_record,
    )
    primary_metric = "pass@1,create_test"
    metrics = ("pass@1,create_test",)
    equivalent_lm_eval_task = "humaneval_instruct_noprefix (ReFusion fork)"
    paper_column = "HumanEval"

    def doc_id(self, record: dict[str, Any], index: int) -> str:
        return str(record["task_id"])

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=f"{INSTRUCTION}```{doc.data['prompt']}```", prefill=PREFILL,
                          stop=("\nassert", "\n# Test"))

    def check_ready(self) -> None:
        from tasks.execution import check_canary

        check_canary(LIMITS)

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        candidates = [candidate(doc.data, output) for doc, output in zip(docs, outputs)]
        programs = [None if c is None else c + "\n" + reference(doc.data) for doc, c in zip(docs, candidates)]
        results = execute(programs)
        return [
            SampleScore(target=reference(doc.data), extracted={"create_test": c or ""},
                        scores={"pass@1,create_test": float(result.passed)}, diagnostics=diagnostics(output, result))
            for doc, output, c, result in zip(docs, outputs, candidates, results)
        ]
