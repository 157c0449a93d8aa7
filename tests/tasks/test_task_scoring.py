"""Scoring details of the multiple-choice and MATH tasks beyond lm-eval parity: the fork's two filter versions,
the diagnostics, and the MATH normalisation quirks."""

from __future__ import annotations

import pytest

from tasks.arc_challenge import ARCChallenge
from tasks.base import Doc
from tasks.fork_filters import FirstChoiceRegexFilter, LeftStripFilter
from tasks.gpqa import GPQA
from tasks.hendrycks_math import HendrycksMath, fork_is_equiv, fork_normalize_final_answer, gold_answer
from tasks.mmlu_pro import MMLUPro


def test_left_strip_filter_keeps_trailing_whitespace():
    assert LeftStripFilter().apply([[" B ", "\tC\n"]], [{}]) == [["B ", "C\n"]]


def test_first_choice_filter_order_of_fallbacks():
    f = FirstChoiceRegexFilter(r"(\([A-Z]\))", group_select=-1, ignore_case=True, ignore_punctuation=True)
    choices = ["sp", "sp2", "Total energy", "four"]
    assert f.extract("(A) no, (C)", choices) == "(C)"  # the regex, last match
    assert f.extract("it is sp2", choices) == "(A)"  # "sp" is listed first and matches inside "sp2"
    assert f.extract("it is sp2", ["sp2", "sp"]) == "(A)"
    assert f.extract("The TOTAL energy!", choices) == "(C)"  # case and punctuation folded
    assert f.extract("my pick: D", choices) == "(D)"  # ":\s*X" fallback
    assert f.extract("nothing", choices) == "[invalid]"


def test_arc_diagnostics():
    task = ARCChallenge()
    doc = task.docs([{"id": "a", "question": "q", "answerKey": "A",
                      "choices": {"text": ["a", "b", "c", "d"], "label": list("ABCD")}}])[0]
    results = task.score([doc] * 4, [" A", " (a)", " A because", ""])
    assert [r.scores["exact_match,remove_whitespace"] for r in results] == [1.0, 1.0, 0.0, 0.0]
    assert [r.diagnostics["invalid"] for r in results] == [False, False, True, True]
    assert [r.diagnostics["empty"] for r in results] == [False, False, False, True]


def test_mmlu_pro_and_gpqa_flag_failed_extraction():
    mmlu = MMLUPro()
    doc = mmlu.docs([{"question_id": 1, "question": "q", "options": ["x", "y"], "answer": "A", "category": "law"}])[0]
    ok, bad = mmlu.score([doc, doc], ["the answer is (A)", "I pick A"])
    assert (ok.scores["exact_match,custom-extract"], ok.diagnostics) == (1.0, {"empty": False, "invalid": False})
    assert (bad.scores["exact_match,custom-extract"], bad.diagnostics) == (0.0, {"empty": False, "invalid": True})
    gpqa = GPQA()
    doc = gpqa.docs([{"Question": "q", "Correct Answer": "yes", "Incorrect Answer 1": "no",
                      "Incorrect Answer 2": "maybe", "Incorrect Answer 3": "never"}])[0]
    (result,) = gpqa.score([doc], ["hmm"])
    assert result.diagnostics == {"empty": False, "invalid": True}
    assert result.extracted == {"strict-match": "[invalid]", "flexible-extract": "[invalid]"}


def test_math_fork_normalisation_quirks():
    assert fork_normalize_final_answer("\\infty") == "\\iny"  # "ft" is a removed unit
    assert fork_normalize_final_answer("\\left(1,2\\right)") == "\\le(1,2\\right)"
    assert fork_normalize_final_answer("x = 1,000") == "1000"
    assert fork_normalize_final_answer("$\\frac12$") == "\\frac{1}{2}"
    assert fork_is_equiv("\\frac{1}{2}", "0.5")
    assert not fork_is_equiv("(1,2)", "(1,2)")  # no identical-string shortcut, and sympy cannot parse a pair
    assert gold_answer("so $\\boxed{\\frac{3}{4}}$.") == "\\frac{3}{4}"
    assert gold_answer("no box") == "[no boxed answer]"


@pytest.mark.parametrize("output, verify, exact", [
    ("We get $\\boxed{\\frac{3}{4}}$.", 1.0, 0.0),
    ("Final Answer: The final answer is $0.75$. I hope it is correct.", 1.0, 1.0),
    ("Final Answer: The final answer is $\\frac{4}{3}$. I hope it is correct.", 0.0, 0.0),
    ("", 0.0, 0.0),
])
def test_math_scores_and_diagnostics(output, verify, exact):
    task = HendrycksMath()
    doc = Doc("algebra-0", {"problem": "p", "solution": "It is $\\boxed{\\frac{3}{4}}$.", "type": "Algebra"},
              "algebra")
    (result,) = task.score([doc], [output])
    assert result.scores == {"math_verify,none": verify, "exact_match,none": exact}
    assert result.target == "\\frac{3}{4}"
    assert result.diagnostics == {"empty": not output, "invalid": not output}


def test_math_refuses_to_score_off_the_main_thread():
    """Off the main thread the SIGALRM guard cannot be set and every sympy comparison would read as unequal."""
    from concurrent.futures import ThreadPoolExecutor

    doc = Doc("algebra-0", {"problem": "p", "solution": "$\\boxed{1}$", "type": "Algebra"}, "algebra")
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(RuntimeError, match="main thread"):
            pool.submit(HendrycksMath().score, [doc], ["1"]).result()
