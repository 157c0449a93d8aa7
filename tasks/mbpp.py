"""MBPP as the ReFusion fork's ``mbpp`` ran it at zero shot (docs/tasks.md).

The answer (its first python block, if any) is the whole program: no prompt is prepended. It passes when it runs
with the item's three asserts appended. The test split is task_id 11-510 of the full set.
"""

from __future__ import annotations

from typing import Any, Sequence

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.code import LIMITS, diagnostics, execute, first_python_block
from tasks.records import DatasetSpec

TEST_IDS = range(11, 511)

TEMPLATE = (
    "You are an expert Python programmer. Your task is to write a single Python function to solve the problem "
    "described below, and here is your task: {text}\n\nDirectly after the '[BEGIN]' marker, you must write only the "
    "Python code for the function. Do not provide any explanations, comments, or introductory text. The function "
    "must include the 'def' line, its arguments, the function body, and a 'return' statement. Your code should pass "
    "these tests:\n\n{tests}\n[BEGIN]\n"
)


def check_record(record: dict[str, Any]) -> str | None:
    if not isinstance(record["task_id"], int):
        return f"field 'task_id': expected an integer, got {record['task_id']!r}"
    tests = record["test_list"]
    if not isinstance(tests, list) or len(tests) < 3 or not all(isinstance(t, str) for t in tests):
        return "field 'test_list': expected a list of at least 3 strings"
    return None


def reference(record: dict[str, Any]) -> str:
    """The three asserts, lm-eval's target (``challenge_test_list`` and ``test_setup_code`` are not used)."""
    return "\n".join(record["test_list"][:3])


class MBPP(Task):
    name = "mbpp"
    version = "mbpp-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="google-research-datasets/mbpp", config="full", split="test", local_file="mbpp/mbpp.jsonl",
        fixture="mbpp.jsonl", required_fields=("task_id", "text", "test_list"), check=check_record,
    )
    primary_metric = "pass_at_1,none"
    metrics = ("pass_at_1,none",)
    equivalent_lm_eval_task = "mbpp"
    paper_column = "MBPP"

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        """The test split: the hub's test split already is; the full local file is filtered to it."""
        return [Doc(id=str(r["task_id"]), data=r) for r in records if r["task_id"] in TEST_IDS]

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=TEMPLATE.format(text=doc.data["text"], tests=reference(doc.data)), stop=("[DONE]",))

    def check_ready(self) -> None:
        from tasks.execution import check_canary

        check_canary(LIMITS)

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        completions = [first_python_block(output) for output in outputs]
        programs = [c + "\n" + reference(doc.data) if c.strip() else None for doc, c in zip(docs, completions)]
        results = execute(programs)
        return [
            SampleScore(target=reference(doc.data), extracted={"none": c},
                        scores={"pass_at_1,none": float(result.passed)}, diagnostics=diagnostics(output, result))
            for doc, output, c, result in zip(docs, outputs, completions, results)
        ]
