"""Judge answers as lcb_runner does (``evaluation/testing_util.py``, ``compute_code_generation_metrics.py``), with
the programs run in the harness's sandbox and the outputs compared here.

* One sandboxed program per answer runs every test of its problem, public then private (tasks/livecodebench/child.py).
* Each test may take ``timeout`` seconds (lcb_runner's ``--timeout``, 6) of wall time; the whole problem
  ``(timeout + 1) * tests + 5`` seconds, lcb_runner's global timeout, enforced by the program's own clock and, as
  a backstop, by lowering its CPU limit to that budget (as tasks/evalplus does).
* stdin tests: the output and the expected output are stripped, split on newlines and each line stripped; the line
  counts must agree, and each line must be equal or, read as whitespace-separated numbers, equal as ``Decimal``
  values (``1.50`` equals ``1.5``; there is no tolerance: ``0.333333`` is not ``0.3333333``).
* functional tests: each input line is a JSON argument; the returned value, a top-level tuple made a list, must be
  ``==`` the JSON expected output.
* The first test that does not pass decides the verdict: ``failed`` (wrong answer), ``timeout``, ``error`` (runtime or
  compile error, no such method), or the sandbox's ``memory``; an answer passes when every test passes (pass@1).
"""

from __future__ import annotations

import base64
import json
import pickle
import secrets
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Sequence

from tasks.evalplus.output_compare import Verdict, short_repr
from tasks.evalplus.solution_runs import CHILD_SOURCE as EVALPLUS_CHILD_SOURCE
from tasks.evalplus.solution_runs import SetRun, read_report
from tasks.evalplus.values import PayloadError, decode
from tasks.execution import SandboxLimits, run_programs
from tasks.execution.limits import GiB, MiB
from tasks.livecodebench.dataset import Problem
from tasks.livecodebench.program import functional_program, stdin_program

CHILD_SOURCE = EVALPLUS_CHILD_SOURCE + "\n" + (Path(__file__).with_name("child.py").read_text(encoding="utf-8"))
TIMEOUT_S = 6  # lcb_runner's --timeout default, per test
MEMORY_BYTES = 4 * GiB  # lcb_runner's reliability_guard comment; evalplus's cap
MIN_OUTPUT_CAP = 1 << 20  # characters of a stdin test's output kept: max(this, 2 x expected + this)
MAX_REPORT_BYTES = 256 * MiB  # the sandbox's output cap, which the report must fit in


def problem_budget(tests: int, timeout: float) -> float:
    """lcb_runner's global timeout for one answer: ``(timeout + 1) * tests + 5`` seconds."""
    return (timeout + 1) * tests + 5


def sandbox_limits(budgets: Sequence[float]) -> SandboxLimits:
    """Sandbox limits above every program's own budget, so they only catch what gets past it."""
    most = max(budgets, default=5.0)
    return SandboxLimits(cpu_seconds=most + 2, wall_seconds=most + 20, memory_bytes=MEMORY_BYTES,
                         max_output_bytes=MAX_REPORT_BYTES)


def stripped_lines(text: str) -> list[str]:
    """lcb_runner's ``get_stripped_lines``: strip the text, split on newlines, strip every line."""
    return [line.strip() for line in text.strip().split("\n")]


def as_decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def line_matches(got: str, expected: str) -> bool:
    """Equal lines, or lines whose whitespace-separated tokens are all numbers with equal Decimal values."""
    if got == expected:
        return True
    got_numbers, expected_numbers = as_decimals(got), as_decimals(expected)
    return got_numbers is not None and expected_numbers is not None and got_numbers == expected_numbers


def stdout_matches(output: str, expected: str) -> bool:
    """lcb_runner's stdin comparison of a whole output with the expected one."""
    got, want = stripped_lines(output), stripped_lines(expected)
    return len(got) == len(want) and all(line_matches(g, w) for g, w in zip(got, want))


def returned_matches(value: Any, expected: Any) -> bool:
    """lcb_runner's functional comparison: a tuple counts as a list, then ``==``."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        return bool(value == expected)
    except Exception:  # an array compared with a list, an opaque value that refuses
        return False


def functional_arguments(text: str) -> list[Any]:
    """One JSON value per input line, lcb_runner's calling convention."""
    return [json.loads(line) for line in text.split("\n")]


@dataclass(frozen=True)
class Prepared:
    """What one answer's sandbox run needs, or why it cannot run (``unreadable``: test data that does not parse,
    which lcb_runner scores as an error for every answer)."""

    program: str | None
    marker: str
    budget: float
    unreadable: str | None = None


def prepare(problem: Problem, code: str, timeout: float) -> Prepared:
    """The sandboxed program for one answer (``code`` already extracted and non-empty)."""
    marker, budget = secrets.token_hex(12), problem_budget(len(problem.tests), timeout)
    if problem.fn_name is None:
        inputs: list[Any] = [test.input for test in problem.tests]
        source = stdin_program(code)
        cap = max(MIN_OUTPUT_CAP, MIN_OUTPUT_CAP + 2 * max((len(t.output) for t in problem.tests), default=0))
    else:
        try:
            inputs = [functional_arguments(test.input) for test in problem.tests]
        except json.JSONDecodeError as error:
            return Prepared(None, marker, budget, f"functional test input is not JSON lines ({error.msg})")
        source, cap = functional_program(code), 0
    spec = {"code": source, "fn_name": problem.fn_name, "inputs": inputs, "timeout": timeout, "budget": budget,
            "output_cap": cap, "marker": marker}
    request = base64.b64encode(pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
    return Prepared(f"{CHILD_SOURCE}\nlcb_main({request!r})\n", marker, budget)


def _test_verdict(problem: Problem, index: int, value: Any) -> Verdict | None:
    """None when test ``index`` passed with this output, else the failed verdict."""
    test, where = problem.tests[index], f"test {index + 1} of {len(problem.tests)}"
    if problem.fn_name is None:
        if isinstance(value, str) and stdout_matches(value, test.output):
            return None
        return Verdict("failed", f"{where}: expected {short_repr(test.output)}, got {short_repr(value)}")
    try:
        returned, expected = decode(value), json.loads(test.output)
    except (PayloadError, json.JSONDecodeError) as error:
        return Verdict("failed" if isinstance(error, PayloadError) else "error", f"{where}: unreadable ({error})")
    if returned_matches(returned, expected):
        return None
    return Verdict("failed", f"{where}: expected {short_repr(expected)}, got {short_repr(returned)}")


def verdict(problem: Problem, run: SetRun) -> Verdict:
    """The verdict on one answer from what its program sent back: the first test that did not pass decides."""
    if run.status != "ran":
        return Verdict(run.status, run.detail or f"the program ended with {run.status}")
    if run.define_error is not None:
        status = "timeout" if run.define_error == "timeout" else "error"
        return Verdict(status, f"setting up the answer: {run.define_error}")
    for index in range(len(problem.tests)):
        if index >= len(run.calls):
            return Verdict("error", f"test {index + 1} of {len(problem.tests)}: no output came back")
        call = run.calls[index]
        if call.kind != "ok":
            status = "timeout" if call.kind == "timeout" else "error"
            return Verdict(status, f"test {index + 1} of {len(problem.tests)}: {call.value}")
        failure = _test_verdict(problem, index, call.value)
        if failure is not None:
            return failure
    return Verdict("passed")


def judge(problems: Sequence[Problem], codes: Sequence[str], timeout: float = TIMEOUT_S,
          workers: int | None = None) -> list[Verdict]:
    """Verdicts on answers (one extracted program per problem; empty: ``no_code``), run in parallel."""
    prepared = [prepare(p, c, timeout) if c.strip() else None for p, c in zip(problems, codes)]
    runnable = [p for p in prepared if p is not None and p.program is not None]
    limits = sandbox_limits([p.budget for p in runnable])
    results = iter(run_programs([p.program for p in runnable], limits, workers) if runnable else [])
    verdicts = []
    for problem, item in zip(problems, prepared):
        if item is None:
            verdicts.append(Verdict("no_code", "no code in the answer"))
        elif item.unreadable is not None:
            verdicts.append(Verdict("error", item.unreadable))
        else:
            verdicts.append(verdict(problem, read_report(next(results), item.marker)))
    return verdicts
