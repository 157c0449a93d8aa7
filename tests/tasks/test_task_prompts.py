"""Prompts, stop strings, documents and groups of the seven tasks, checked on the bundled fixtures and small records.

The exact strings matter because they decide the scores; lm-eval's rendering is checked separately in
test_lm_eval_parity.py for the five tasks lm-eval can run offline.
"""

from __future__ import annotations

import pytest

from tasks.arc_challenge import ARCChallenge
from tasks.base import Doc
from tasks.records import load_fixtures
from tasks.gpqa import GPQA, choice_order, clean_answer, with_choices
from tasks.hendrycks_math import HendrycksMath
from tasks.humaneval import HumanEval
from tasks.mbpp import MBPP
from tasks.mmlu_pro import SUBJECTS as MMLU_SUBJECTS
from tasks.mmlu_pro import MMLUPro
from tasks.registry import PAPER_TASKS, make_task, task_names

PAPER_PRIMARY = {
    "mmlu_pro": "exact_match,custom-extract",
    "arc_challenge": "exact_match,remove_whitespace",
    "gsm8k": "exact_match,flexible-extract",
    "math": "math_verify,none",
    "gpqa": "exact_match,flexible-extract",
    "humaneval": "pass@1,create_test",
    "mbpp": "pass_at_1,none",
}


def test_registry_has_the_seven_tasks_in_the_papers_order_with_its_columns():
    assert task_names()[:7] == list(PAPER_PRIMARY) == list(PAPER_TASKS)
    for name, primary in PAPER_PRIMARY.items():
        task = make_task(name)
        assert task.name == name
        assert task.primary_metric == primary and task.metrics[0] == primary
        assert task.canvas_tokens == 512
        assert task.describe()["dataset"] == task.dataset.hub_id
    with pytest.raises(KeyError, match="unknown task 'nope'"):
        make_task("nope")


@pytest.mark.parametrize("name", list(PAPER_PRIMARY))
def test_fixtures_load_and_every_doc_has_a_prompt(name):
    task = make_task(name)
    data = load_fixtures(task.dataset)
    docs = task.docs(data.records)
    assert len(docs) >= 3
    assert len({d.id for d in docs}) == len(docs)
    assert task.docs(data.records) == docs  # deterministic
    for doc in docs:
        prompt = task.prompt(doc)
        assert prompt.user and prompt.stop


def test_mmlu_pro_prompt_system_message_options_and_groups():
    task = MMLUPro()
    record = {"question_id": 7, "question": "What is 2+2?", "options": [" 3", "4 ", "5"], "answer": "B",
              "category": "computer science"}
    prompt = task.prompt(task.docs([record])[0])
    assert prompt.system == (
        "The following are multiple choice questions (with answers) about computer science. Think step by step and "
        'then finish your answer with "the answer is (X)" where X is the correct letter choice.\n')
    # The fork (lm-eval 0.4.9.1) printed options as they are; 0.4.13 strips them.
    assert prompt.user == "Question:\nWhat is 2+2?\nOptions:\nA.  3\nB. 4 \nC. 5\nAnswer: Let's think step by step."
    assert prompt.stop == ("Question:",) and prompt.prefill is None
    docs = task.docs([{**record, "category": "math"}, record, {**record, "category": "biology"}])
    assert [d.group for d in docs] == ["biology", "computer_science", "math"]  # lm-eval's subtask order
    assert len(MMLU_SUBJECTS) == 14


def test_arc_prompt_is_the_forks_single_quoted_template_with_literal_backslash_n():
    task = ARCChallenge()
    record = {"id": "x", "question": "  Why?  ", "answerKey": "2",
              "choices": {"text": ["a", "b", "c", "d", "e"], "label": ["1", "2", "3", "4", "5"]}}
    prompt = task.prompt(task.docs([record])[0])
    assert prompt.user == (
        "Given the following question and four candidate answers (A, B, C and D), choose the best answer.\\n"
        "Question: Why?\\nA. a\\nB. b\\nC. c\\nD. d\\nYour response should end with \"The best answer is "
        "[the_answer_letter]\" where the [the_answer_letter] is one of A, B, C or D.")
    assert "\n" not in prompt.user  # only literal backslash-n, never a real newline
    assert prompt.prefill == "The best answer is"
    assert prompt.stop == ("\n\n", ".")
    assert task.score(task.docs([record]), [" B"])[0].target == "B"  # numeric label 2 -> B
    three = {**record, "choices": {"text": ["a", "b", "c"], "label": list("ABC")}}
    assert "\\nC. c\\nYour response" in task.prompt(task.docs([three])[0]).user


def test_math_prompt_groups_and_subject_order():
    task = HendrycksMath()
    records = load_fixtures(task.dataset).records
    docs = task.docs(list(reversed(records)))
    assert [d.group for d in docs] == ["algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                                       "number_theory", "prealgebra", "precalculus"]
    assert docs[0].id == "algebra-0"
    prompt = task.prompt(docs[0])
    assert prompt.user == f"Problem:\n{docs[0].data['problem']}\n\nSolution:"
    assert prompt.stop == ("Problem:",) and prompt.system is None and prompt.prefill is None
    assert task.describe()["config"] == "+".join(d.group for d in docs)


def test_gpqa_answer_cleaning_and_a_fixed_order_per_question():
    assert clean_answer("  one [note] two  ") == "one two"
    assert clean_answer("A [title]B") == "A. B"
    assert clean_answer(None) == " "
    record = {"Question": "Invented: which is largest?", "Correct Answer": "four", "Incorrect Answer 1": "one",
              "Incorrect Answer 2": "two [a note]", "Incorrect Answer 3": "three"}
    doc = with_choices(record)
    assert sorted(doc["choices"]) == sorted(["four", "one", "two ", "three"])
    assert doc["answer"] == f"({'ABCD'[doc['choices'].index('four')]})"
    assert with_choices(dict(record)) == doc  # same question, same order, in any run
    orders = {tuple(choice_order(f"question {i}")) for i in range(60)}
    assert len(orders) > 12  # the order really depends on the question
    task = GPQA()
    prompt = task.prompt(task.docs([record])[0])
    assert prompt.system == ("Answer the following multiple-choice question. Your response should be the letter of "
                             "the correct option, enclosed in parentheses ((A), (B), (C), or (D)).\n")
    c = doc["choices"]
    assert prompt.user == (f"Question: Invented: which is largest?\nChoices:\n(A) {c[0]}\n(B) {c[1]}\n(C) {c[2]}\n"
                           f"(D) {c[3]}\nAnswer:")
    assert prompt.stop == ("</s>", "Question:", "<|im_end|>")


def test_humaneval_prompt_fences_and_prefill():
    task = HumanEval()
    doc = task.docs(load_fixtures(task.dataset).records)[0]
    prompt = task.prompt(doc)
    assert prompt.user == ("Write a solution to the following problem and make sure that it passes the tests:\n```"
                           + doc.data["prompt"] + "```")
    assert prompt.user.endswith('"""\n```')  # the prompt's own newline sits before the closing fence
    assert prompt.prefill == "```python\n"
    assert prompt.stop == ("\nassert", "\n# Test")
    assert doc.id == "Fixture/0"


def test_mbpp_prompt_and_test_split_filter():
    task = MBPP()
    tests = ["assert f(1) == 1", "assert f(2) == 2 ", "assert f(3) == 3"]
    records = [{"task_id": i, "text": "Write f {x}.", "test_list": tests} for i in (1, 10, 11, 510, 511, 974)]
    docs = task.docs(records)
    assert [d.id for d in docs] == ["11", "510"]
    prompt = task.prompt(docs[0])
    assert prompt.user == (
        "You are an expert Python programmer. Your task is to write a single Python function to solve the problem "
        "described below, and here is your task: Write f {x}.\n\nDirectly after the '[BEGIN]' marker, you must write "
        "only the Python code for the function. Do not provide any explanations, comments, or introductory text. The "
        "function must include the 'def' line, its arguments, the function body, and a 'return' statement. Your code "
        "should pass these tests:\n\nassert f(1) == 1\nassert f(2) == 2 \nassert f(3) == 3\n[BEGIN]\n")
    assert prompt.stop == ("[DONE]",) and prompt.prefill is None and prompt.system is None


def test_doc_ids_come_from_the_records():
    arc = ARCChallenge().docs([{"id": "Mercury_1", "question": "q", "answerKey": "A",
                                "choices": {"text": ["a", "b", "c", "d"], "label": list("ABCD")}}])
    assert arc == [Doc("Mercury_1", arc[0].data)]
    gpqa = GPQA().docs([{"Question": "q1", "Correct Answer": "a", "Incorrect Answer 1": "b",
                         "Incorrect Answer 2": "c", "Incorrect Answer 3": "d"}])
    assert gpqa[0].id == "0"  # no "Record ID": the position
