"""Gold replay over the real splits in ../shared/data (skipped where absent): each reference answer, written the way
a model would write it, must score as right.

Items that cannot pass even with the reference answer, because of how the fork scores them:

* HumanEval/50: the sanitizer keeps only definitions reachable from the entry point ``decode_shift``; the tests
  also call the prompt's ``encode_shift``, which the sanitized program no longer defines (NameError).
* MBPP 367: its asserts use a tree ``root`` built by ``test_setup_code``, which the fork does not run (NameError).
* MBPP 123 may pass or time out: the reference sums amicable numbers below 10,000 in quadratic time, 2-5 s of
  CPU on the shared 2-core development VM (3.9 s at load 2.7, 4.3-5.4 s at load about 4.5). On a shared machine
  the CPU time a program is charged grows with load, so the 3 s CPU budget can stop it (once: ``timeout`` after
  6.4 s of wall time, under the 8 s wall clock), and so can the wall clock; a ``timeout`` is tolerated, nothing else.

MATH: math-verify over all 5,000 gold solutions took 65 s on 2 cores, so this test replays a fixed subset, every
fifth item (1,000, all seven subjects); the full set scored 5,000/5,000 when measured.

MATH-500 has no real split in ../shared/data, so its replay runs on the bundled fixture (one invented item per
subject, in the hub's schema), and on ``math500/test.jsonl`` there when someone puts the hub file in that folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tasks.arc_challenge import ARCChallenge, gold_letter
from tasks.base import Task
from tasks.records import load_fixtures, load_local
from tasks.gsm8k import GSM8K, gold_answer
from tasks.hendrycks_math import HendrycksMath
from tasks.humaneval import HumanEval
from tasks.math500 import Math500
from tasks.mbpp import MBPP
from tasks.mmlu_pro import MMLUPro

HUMANEVAL_CANNOT_PASS = {"HumanEval/50": "error"}
MBPP_CANNOT_PASS = {"367": "error"}
MBPP_WALL_CLOCK_UNDER_LOAD = {"123": "timeout"}


def replay(task: Task, data_dir: Path, write_answer, every: int = 1):
    docs = task.docs(load_local(task.dataset, data_dir).records)[::every]
    return docs, task.score(docs, [write_answer(doc.data) for doc in docs])


def mean(scores, metric: str) -> float:
    return sum(s.scores[metric] for s in scores) / len(scores)


def test_gsm8k_reference_answers_score_all(shared_data):
    def answer(record):
        reasoning = re.sub(r"<<[^>]*>>", "", record["answer"].split("####")[0]).strip()
        return f"{reasoning}\nThe answer is {gold_answer(record['answer'])}."

    docs, scores = replay(GSM8K(), shared_data, answer)
    assert len(docs) == 1319
    assert mean(scores, "exact_match,strict-match") == 1.0
    assert mean(scores, "exact_match,flexible-extract") == 1.0


def test_arc_reference_letters_score_all(shared_data):
    docs, scores = replay(ARCChallenge(), shared_data, lambda r: f" {gold_letter(r['answerKey'])}")
    assert len(docs) == 1172
    assert mean(scores, "exact_match,remove_whitespace") == 1.0


def test_mmlu_pro_reference_letters_score_all(shared_data):
    docs, scores = replay(MMLUPro(), shared_data, lambda r: f"Let's check each option. So the answer is ({r['answer']}).")
    assert len(docs) == 12032
    assert mean(scores, "exact_match,custom-extract") == 1.0
    assert len({d.group for d in docs}) == 14


def test_math_gold_solutions_verify(shared_data):
    docs, scores = replay(HendrycksMath(), shared_data, lambda r: r["solution"], every=5)
    assert len(docs) == 1000 and len({d.group for d in docs}) == 7
    assert mean(scores, "math_verify,none") >= 0.99


def test_math500_fixture_gold_solutions_and_answers_score_all():
    """Both the whole solution and the ``answer`` field, boxed as a model writes it, verify; the fork's Minerva exact
    match takes the "Final Answer" sentence and fails exactly where its normalisation mangles the gold answer
    (``\\infty`` into ``\\iny``, ``\\left`` into ``\\le``: docs/tasks.md)."""
    task = Math500()
    docs = task.docs(load_fixtures(task.dataset).records)
    assert len(docs) >= 5 and len({d.group for d in docs}) == 7
    solutions = task.score(docs, [d.data["solution"] for d in docs])
    assert mean(solutions, "math_verify,none") == 1.0
    answers = task.score(docs, [f"Working it out, the answer is $\\boxed{{{d.data['answer']}}}$.\nFinal Answer: The "
                                f"final answer is ${d.data['answer']}$. I hope it is correct." for d in docs])
    assert mean(answers, "math_verify,none") == 1.0
    mangled = [any(t in d.data["answer"] for t in ("\\infty", "\\left")) for d in docs]
    assert [s.scores["exact_match,none"] for s in answers] == [0.0 if m else 1.0 for m in mangled]
    wrong = task.score(docs, ["So the answer is $\\boxed{-7}$." for _ in docs])
    assert mean(wrong, "math_verify,none") == 0.0


def test_math500_gold_solutions_verify(shared_data):
    task = Math500()
    if not (shared_data / task.dataset.local_file).exists():
        pytest.skip(f"{task.dataset.local_file} is not in ../shared/data")
    docs, scores = replay(task, shared_data, lambda r: r["solution"])
    assert len(docs) == 500 and len({d.group for d in docs}) == 7
    assert mean(scores, "math_verify,none") >= 0.99


@pytest.mark.slow
def test_humaneval_canonical_solutions_pass_in_the_sandbox(shared_data):
    # After the "```python\n" prefill a model writes the whole function, then closes the fence.
    docs, scores = replay(HumanEval(), shared_data, lambda r: r["prompt"] + r["canonical_solution"] + "\n```")
    assert len(docs) == 164
    failures = {d.id: s.diagnostics["exec_status"] for d, s in zip(docs, scores) if s.scores["pass@1,create_test"] < 1}
    assert failures == HUMANEVAL_CANNOT_PASS


@pytest.mark.slow
def test_mbpp_reference_solutions_pass_in_the_sandbox(shared_data):
    docs, scores = replay(MBPP(), shared_data, lambda r: f"```python\n{r['code']}\n```")
    assert len(docs) == 500
    failures = {d.id: s.diagnostics["exec_status"] for d, s in zip(docs, scores) if s.scores["pass_at_1,none"] < 1}
    slow = {k: v for k, v in failures.items() if k in MBPP_WALL_CLOCK_UNDER_LOAD}
    assert slow.items() <= MBPP_WALL_CLOCK_UNDER_LOAD.items()
    assert {k: v for k, v in failures.items() if k not in slow} == MBPP_CANNOT_PASS
