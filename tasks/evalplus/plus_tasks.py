"""HumanEval+ and MBPP+ (evalplus): the paper's two code tasks, scored on evalplus's base and extra tests.

Prompts and code extraction are those of ``humaneval`` and ``mbpp`` (docs/tasks.md), reused from their modules,
so the base and plus scores of one run measure the same answers to the same kind of prompt. Scoring is evalplus's
differential testing: the answer's entry point is called on each input and its output compared with the canonical
solution's (tasks/evalplus/output_compare.py), in the harness's sandbox (tasks/evalplus/solution_runs.py), with evalplus's time
limits. As in evalplus's report, ``pass@1,base`` counts answers that pass the base inputs and ``pass@1,plus``
(the primary metric) answers that pass the base *and* the extra inputs.

MBPP+ prompts use the paper's MBPP template with the MBPP+ statement (its docstring) and its base asserts. MBPP+'s
378 problems come from the hand-checked ("sanitized") MBPP subset, which rewrote some statements and is not limited
to the 500 test ids, so per-problem scores of ``mbpp`` and ``mbpp_plus`` are comparable only on the ids they share.

Diagnostics per sample: ``empty``, ``invalid`` (no code), ``base_status`` and ``plus_status`` (passed, failed,
error, timeout, memory, no_code; counted per status in the results) and ``base_detail`` / ``plus_detail`` (the
first input that decided a failure, e.g. "input 2 of 4: expected 0.002, got 0.0").
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any, Sequence

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.code import first_python_block
from tasks.records import LoadedData
from tasks.evalplus.output_compare import Verdict, check_set
from tasks.evalplus.releases import HUMANEVAL_PLUS, MBPP_PLUS, Problem, Release, load, mbpp_tests, mbpp_text, problem
from tasks.evalplus.solution_runs import CANDIDATE_LIMITS, InputSet, run_sets, time_limits
from tasks.evalplus.groundtruth import Truth, ground_truth
from tasks.humaneval import HumanEval
from tasks.humaneval import candidate as humaneval_candidate
from tasks.mbpp import MBPP

BASE, PLUS = "pass@1,base", "pass@1,plus"
NO_CODE = Verdict("no_code", "no code in the answer")


class EvalPlusTask(Task):
    """What both evalplus tasks share: their data, the sandboxed differential tests, and the two metrics."""

    release: Release
    extraction: str  # the key of the extracted code, named as in the paper task's scores
    primary_metric = PLUS
    metrics = (PLUS, BASE)

    def __init__(self, cache_dir: Path | None = None, workers: int | None = None) -> None:
        """``cache_dir``: where expected outputs are kept (default ``evalplus`` under the cache root,
        ``harness.files.cache_root``); ``workers``: sandboxes at once (default: one per usable core)."""
        self.cache_dir = cache_dir
        self.workers = workers

    def load(self, source: str, data_dir: Path | None) -> LoadedData:
        return load(self.release, source, data_dir)

    def doc_id(self, record: dict[str, Any], index: int) -> str:
        return str(record["task_id"])

    @abstractmethod
    def candidate(self, record: dict[str, Any], output: str) -> str | None:
        """The program to test, extracted from a model's answer as the paper task does; None without code."""

    def check_ready(self) -> None:
        from tasks.execution import check_canary

        check_canary(CANDIDATE_LIMITS)

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        problems = [problem(self.release, doc.data) for doc in docs]
        truths = ground_truth(problems, self.cache_dir, self.workers)
        codes = [self.candidate(doc.data, output) for doc, output in zip(docs, outputs)]
        tested = [(p, c) for p, c in zip(problems, codes) if c is not None]
        sets = [input_set(p, truths[p.key], c, name) for p, c in tested for name in ("base", "plus")]
        runs = iter(run_sets(sets, CANDIDATE_LIMITS, self.workers))
        scores = []
        for p, code, output in zip(problems, codes, outputs):
            verdicts = {name: NO_CODE for name in ("base", "plus")}
            if code is not None:
                truth = truths[p.key]
                verdicts = {name: check_set(p.dataset, p.entry_point, inputs_of(p, name), next(runs),
                                            truth.outputs[name], p.atol) for name in ("base", "plus")}
            scores.append(sample_score(p, code, output, verdicts, self.extraction))
        return scores

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "scorer": "evalplus 0.3.1 differential tests in the harness sandbox"}


def inputs_of(p: Problem, name: str) -> list[Any]:
    return p.base_inputs if name == "base" else p.plus_inputs


def input_set(p: Problem, truth: Truth, code: str, name: str) -> InputSet:
    return InputSet(code, p.entry_point, inputs_of(p, name), time_limits(truth.seconds[name]))


def sample_score(p: Problem, code: str | None, output: str, verdicts: dict[str, Verdict],
                 extraction: str) -> SampleScore:
    base, plus = verdicts["base"], verdicts["plus"]
    return SampleScore(
        target=p.solution,
        extracted={extraction: code or ""},
        scores={BASE: float(base.passed), PLUS: float(base.passed and plus.passed)},
        diagnostics={
            "empty": not output.strip(),
            "invalid": code is None,
            "base_status": base.status,
            "plus_status": plus.status,
            "base_detail": base.detail,
            "plus_detail": plus.detail,
        },
    )


class HumanEvalPlus(EvalPlusTask):
    name = "humaneval_plus"
    version = "humaneval_plus-evalplus-0.3.1-1"
    release = HUMANEVAL_PLUS
    dataset = HUMANEVAL_PLUS.spec
    extraction = "create_test"
    equivalent_lm_eval_task = "none (lm-eval's humaneval_plus reads the hub copy, asserts instead of outputs)"

    def prompt(self, doc: Doc) -> TaskPrompt:
        return HumanEval().prompt(doc)  # the fork's prompt reads only the record's ``prompt``, as HumanEval+ has

    def candidate(self, record: dict[str, Any], output: str) -> str | None:
        return humaneval_candidate(record, output)


class MBPPPlus(EvalPlusTask):
    name = "mbpp_plus"
    version = "mbpp_plus-evalplus-0.3.1-1"
    release = MBPP_PLUS
    dataset = MBPP_PLUS.spec
    extraction = "none"
    equivalent_lm_eval_task = "none (lm-eval's mbpp_plus reads the hub copy, asserts instead of outputs)"

    def prompt(self, doc: Doc) -> TaskPrompt:
        """The paper's MBPP prompt, filled with the MBPP+ statement and base asserts."""
        return MBPP().prompt(Doc(doc.id, {"text": mbpp_text(doc.data), "test_list": mbpp_tests(doc.data)}))

    def candidate(self, record: dict[str, Any], output: str) -> str | None:
        code = first_python_block(output)
        return code if code.strip() else None
