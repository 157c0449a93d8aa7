"""HumanEval and MBPP: the fork's python-fence rule, the programs built from an answer, and scoring in the sandbox.

One sandbox batch per task keeps this quick; each answer is built to end in one execution status.
"""

from __future__ import annotations

import pytest

from tasks.base import Doc
from tasks.code import first_python_block
from tasks.records import load_fixtures
from tasks.humaneval import HumanEval, candidate, reference
from tasks.mbpp import MBPP

pytest.importorskip("harness.sandbox")


def test_fence_rule_takes_the_first_python_block_only():
    assert first_python_block("intro\n```python\nx = 1\n```\nand\n```python\ny = 2\n```") == "x = 1"
    assert first_python_block("```py\nx = 1\n```") == "```py\nx = 1\n```"  # only a python-tagged block
    assert first_python_block("```python\nx = 1```") == "```python\nx = 1```"  # the body must end in a newline
    assert first_python_block("def f():\n    return 1") == "def f():\n    return 1"


@pytest.fixture(scope="module")
def humaneval_docs() -> list[Doc]:
    task = HumanEval()
    return task.docs(load_fixtures(task.dataset).records)


def test_humaneval_candidate_is_prompt_plus_code_up_to_the_fence_sanitized(humaneval_docs):
    record = humaneval_docs[2].data  # count_vowels, which uses the prompt's is_vowel helper
    output = "def count_vowels(word):\n    return sum(map(is_vowel, word))\n```\nThis counts vowels.\n```"
    program = candidate(record, output)
    assert "def is_vowel" in program and "sum(map(is_vowel, word))" in program
    assert "This counts" not in program and '"""' not in program  # stub dropped, prose after the fence dropped
    # A model that opens its own python block: the wrapper's rule picks the block.
    fenced = "Sure.\n```python\ndef count_vowels(word):\n    return 0\n```"
    assert "return 0" in candidate(record, fenced)
    assert candidate(record, "```") is None and candidate(record, "   \n") is None
    assert reference(record) == record["test"] + "\ncheck(count_vowels)"


def test_humaneval_scores_through_the_sandbox(humaneval_docs):
    doc = humaneval_docs[0]  # add_all
    outputs = {
        "passed": "    return sum(numbers)\n```",
        "failed": "    return 0\n```",
        "error": "    return undefined_name\n```",
        "no_code": "```",
    }
    scores = HumanEval().score([doc] * len(outputs), list(outputs.values()))
    for status, score in zip(outputs, scores):
        assert score.diagnostics["exec_status"] == status
        assert score.scores == {"pass@1,create_test": float(status == "passed")}
        assert score.diagnostics["invalid"] == (status == "no_code")
        assert score.diagnostics["empty"] is False
        assert isinstance(score.diagnostics["exec_output_tail"], str)
    assert "NameError" in scores[2].diagnostics["exec_output_tail"]
    assert scores[0].extracted["create_test"].startswith("from typing import List")


def test_mbpp_program_is_the_completion_plus_three_asserts():
    task = MBPP()
    doc = task.docs(load_fixtures(task.dataset).records)[0]  # largest_of_three
    outputs = {
        "passed": "def largest_of_three(a, b, c):\n    return max(a, b, c)",
        "failed": "```python\ndef largest_of_three(a, b, c):\n    return a\n```\nExplanation follows.",
        "error": "Here is the code: def largest_of_three(a, b, c): return max(a, b, c)",
        "timeout": "def largest_of_three(a, b, c):\n    while True:\n        pass",
        "no_code": "",
    }
    scores = task.score([doc] * len(outputs), list(outputs.values()))
    for status, score in zip(outputs, scores):
        assert score.diagnostics["exec_status"] == status, score.diagnostics
        assert score.scores == {"pass_at_1,none": float(status == "passed")}
    assert scores[1].extracted["none"] == "def largest_of_three(a, b, c):\n    return a"
    assert scores[0].target == "\n".join(doc.data["test_list"])
    assert scores[4].diagnostics["empty"] is True


def test_check_ready_runs_the_sandbox_canary():
    HumanEval().check_ready()
    MBPP().check_ready()
