"""MATH as the ReFusion fork's ``minerva_math`` group ran it at zero shot (docs/tasks.md).

Two metrics, as the fork reports them:

* ``math_verify,none`` (the paper's column): math-verify's ``verify(parse(full gold solution), parse(output))``,
  identical in lm-eval 0.4.13, so it is called as is.
* ``exact_match,none``: the Minerva "Final Answer: The final answer is ... I hope it is correct." sentence,
  normalised and compared with sympy. The fork (lm-eval 0.4.9.1) normalised differently from 0.4.13 (it turns
  ``\\infty`` into ``\\iny`` and ``\\left`` into ``\\le``, both sides alike) and had no identical-string shortcut,
  so those two functions are written here; the rest is lm-eval's ``minerva_math`` utilities.

The sympy comparison is guarded by a SIGALRM timeout (lm-eval's, as in the fork), so ``score`` must run in the main
thread: elsewhere the alarm cannot be set and every comparison would count as unequal.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Any, Sequence

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.records import DatasetSpec, RecordCheck

# The local file's ``type`` names (the original release's) and the hub configs, in lm-eval's group order.
SUBJECTS = {
    "Algebra": "algebra",
    "Counting & Probability": "counting_and_probability",
    "Geometry": "geometry",
    "Intermediate Algebra": "intermediate_algebra",
    "Number Theory": "number_theory",
    "Prealgebra": "prealgebra",
    "Precalculus": "precalculus",
}
SUBJECT_ORDER = tuple(SUBJECTS.values())
NO_BOXED_ANSWER = "[no boxed answer]"
INVALID_ANSWER = "[invalidanswer]"  # lm-eval's get_unnormalized_answer sentinel


def record_check(subject_field: str) -> RecordCheck:
    """The record check of a MATH copy whose subject name is in ``subject_field`` (``type`` in the original release,
    ``subject`` in MATH-500): a known subject, and a solution with a boxed answer, which both metrics score against."""

    def check(record: dict[str, Any]) -> str | None:
        subject = record[subject_field]
        if not isinstance(subject, str) or subject not in SUBJECTS:
            return f"field {subject_field!r}: unknown subject {subject!r} (expected one of {', '.join(SUBJECTS)})"
        solution = record["solution"]
        if not isinstance(solution, str) or ("\\boxed" not in solution and "\\fbox" not in solution):
            return "field 'solution': no \\boxed answer"
        return None

    return check


check_record = record_check("type")


def fork_normalize_final_answer(final_answer: str) -> str:
    """lm-eval 0.4.9.1's ``normalize_final_answer`` (Lewkowycz et al. appendix D, applied naively)."""
    from lm_eval.tasks.minerva_math.utils import REMOVED_EXPRESSIONS, SUBSTITUTIONS

    final_answer = final_answer.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in REMOVED_EXPRESSIONS:
        final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer


def fork_is_equiv(x1: str, x2: str) -> bool:
    """lm-eval 0.4.9.1's ``is_equiv``: sympy difference simplifies to 0; any failure, even on equal strings, is
    unequal."""
    import sympy
    from lm_eval.tasks.minerva_math.utils import timeout
    from sympy.parsing.latex import parse_latex
    from sympy.parsing.latex.errors import LaTeXParsingError

    try:
        with timeout(seconds=5):
            try:
                diff = parse_latex(x1) - parse_latex(x2)
            except (LaTeXParsingError, sympy.SympifyError, TypeError):
                return False
            try:
                return bool(sympy.simplify(diff) == 0)
            except ValueError:
                return False
    except TimeoutError:
        return False
    except ImportError:
        raise
    except Exception:  # noqa: BLE001 - the fork counts every sympy failure as "not equal"
        return False


def gold_answer(solution: str) -> str:
    """The fork's ``process_docs`` answer: the last boxed expression, normalised."""
    from lm_eval.tasks.minerva_math.utils import last_boxed_only_string, remove_boxed

    boxed = last_boxed_only_string(solution)
    if boxed is None:
        return NO_BOXED_ANSWER
    try:
        return fork_normalize_final_answer(remove_boxed(boxed))
    except AssertionError:  # "\fbox{...}" passes last_boxed_only_string but not remove_boxed
        return NO_BOXED_ANSWER


def minerva_exact_match(output: str, gold: str) -> tuple[str, float]:
    """The normalised "Final Answer" and its score. Without that sentence the answer is lm-eval's sentinel, which
    the fork still handed to sympy (~0.15 s an item, and most 0-shot outputs lack the sentence); no gold answer
    parses to the sentinel's symbols, so it scores 0 without the call."""
    from lm_eval.tasks.minerva_math.utils import get_unnormalized_answer

    unnormalized = get_unnormalized_answer(output)
    answer = fork_normalize_final_answer(unnormalized)
    if unnormalized == INVALID_ANSWER:
        return answer, 0.0
    return answer, float(fork_is_equiv(answer, gold))


@lru_cache(maxsize=8192)
def parsed_gold(solution: str) -> tuple[Any, ...]:
    """math-verify's parse of a gold solution, kept: every model scored in one run reuses it."""
    from math_verify import parse

    return tuple(parse(solution))


def math_verify_score(output: str, solution: str) -> tuple[str | None, float]:
    """The extracted answer (None if math-verify finds none) and the verdict against the full gold solution."""
    from math_verify import parse, verify

    target = parse(output)
    shown = (target[-1] if isinstance(target[-1], str) else str(target[0])) if target else None
    return shown, float(verify(gold=list(parsed_gold(solution)), target=target))


class HendrycksMath(Task):
    name = "math"
    version = "minerva_math-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="EleutherAI/hendrycks_math", config=None, split="test", local_file="math/test.jsonl",
        fixture="math.jsonl", required_fields=("problem", "solution", "type"), hub_configs=SUBJECT_ORDER,
        check=check_record,
    )
    primary_metric = "math_verify,none"
    answer_key = "math_verify"
    metrics = ("math_verify,none", "exact_match,none")
    equivalent_lm_eval_task = "minerva_math"
    paper_column = "MATH"

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        """Subjects in lm-eval's group order, each in dataset order, so the local file and the hub agree."""
        by_subject: dict[str, list[dict[str, Any]]] = {s: [] for s in SUBJECT_ORDER}
        for record in records:
            by_subject[SUBJECTS[record["type"]]].append(record)
        return [Doc(id=f"{subject}-{k}", data=record, group=subject)
                for subject, items in by_subject.items() for k, record in enumerate(items)]

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=f"Problem:\n{doc.data['problem']}\n\nSolution:", stop=("Problem:",))

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("MATH scoring needs the main thread (its sympy timeout uses SIGALRM)")
        results = []
        for doc, output in zip(docs, outputs):
            solution = doc.data["solution"]
            gold = gold_answer(solution)
            verified, mv_score = math_verify_score(output, solution)
            minerva, em_score = minerva_exact_match(output, gold)
            results.append(SampleScore(
                target=gold,
                extracted={"math_verify": verified if verified is not None else "[invalid]", "exact_match": minerva},
                scores={"math_verify,none": mv_score, "exact_match,none": em_score},
                diagnostics={"empty": not output.strip(), "invalid": verified is None},
            ))
        return results
