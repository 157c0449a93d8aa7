"""LiveCodeBench judging: lcb_runner's comparison rules on crafted outputs, the program it builds from an answer, the
calling convention of functional tests, and the gold check on every fixture problem in the sandbox (a correct answer
passes; a wrong, a slow and a crashing one fail with the right status), and those verdicts beside lcb_runner's own.

The comparison with lcb_runner needs a checkout of LiveCodeBench/LiveCodeBench (never part of this repository):
``LCB_REFERENCE_DIR=CHECKOUT``; without it that test skips. Each answer runs through the reference's
``lcb_runner/evaluation/testing_util.py`` (loaded from its file, so none of lcb_runner's model dependencies are
needed) in a subprocess of its own, since its ``reliability_guard`` disables parts of ``os`` for good; the
subprocess's time limit is lcb_runner's global timeout. All answers here are written for these tests (trusted code).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.evalplus.solution_runs import Call, SetRun
from tasks.evalplus.child import encode_output
from tasks.livecodebench.dataset import Problem, Case, problem
from tasks.livecodebench.judge import (functional_arguments, judge, problem_budget, returned_matches, stdout_matches,
                                       verdict)
from tasks.livecodebench.program import PRELUDE, inline_main_guard, stdin_program
from tasks.registry import make_task

# --- the stdin comparison (testing_util.grade_stdio) ---


@pytest.mark.parametrize("output, expected, same", [
    ("6\n3\n", "6\n3\n", True),
    ("6   \n3\t\n\n\n", "6\n3", True),            # trailing whitespace and blank lines at the end
    ("  6\n  3", "6\n3\n", True),                  # leading whitespace of each line
    ("6\n3\n4\n", "6\n3\n", False),                # an extra line
    ("6\n\n3\n", "6\n3\n", False),                 # a blank line inside counts as a line
    ("6 3\n", "6\n3\n", False),                    # same tokens, other lines
    ("2.500000\n", "2.5\n", True),                 # numbers are compared as Decimal values
    ("3.0000000000\n", "3\n", True),
    ("1e2\n", "100\n", True),
    ("0.3333333\n", "0.333333\n", False),          # no tolerance: Decimal equality, not isclose
    ("50000000000000001\n", "50000000000000000\n", False),
    ("1  2   3\n", "1 2 3\n", True),                # tokens split on any whitespace
    ("Yes\n", "yes\n", False),                     # words are compared exactly
    ("1 2 x\n", "1 2 x \n", True),
])
def test_stdout_comparison(output: str, expected: str, same: bool) -> None:
    assert stdout_matches(output, expected) is same


def test_returned_value_comparison() -> None:
    assert returned_matches((3, 5), [3, 5])             # a tuple counts as the list it holds
    assert not returned_matches([(3, 5)], [[3, 5]])     # ... only at the top level, as lcb_runner converts it
    assert returned_matches(2, 2.0) and not returned_matches(2.0000001, 2.0)
    assert not returned_matches({1, 2}, [1, 2])
    assert not returned_matches("2", 2)


def test_functional_calling_convention() -> None:
    """Each input line is one JSON argument, the method is called with them in order."""
    assert functional_arguments('[1, 5, 3]\n2') == [[1, 5, 3], 2]
    assert functional_arguments('"abc"\n[[1,2],[3]]\ntrue') == ["abc", [[1, 2], [3]], True]
    with pytest.raises(json.JSONDecodeError):
        functional_arguments("[1, 2]\n")  # a trailing newline is an empty argument: unreadable, as there


def test_first_failing_test_decides() -> None:
    tests = (Case("", "1", "stdin"), Case("", "2", "stdin"), Case("", "3", "stdin"))
    stdin = Problem("p", None, tests)
    ok = lambda value: Call("ok", value, 0.0)  # noqa: E731
    assert verdict(stdin, SetRun("ran", (ok("1"), ok("2"), ok("3")))).passed
    wrong = verdict(stdin, SetRun("ran", (ok("1"), ok("9"), Call("timeout", "timed out", 6.0))))
    assert (wrong.status, wrong.detail.startswith("test 2 of 3")) == ("failed", True)
    assert verdict(stdin, SetRun("ran", (ok("1"), Call("timeout", "t", 6.0)))).status == "timeout"
    assert verdict(stdin, SetRun("ran", (ok("1"), Call("error", "ValueError", 0.1)))).status == "error"
    assert verdict(stdin, SetRun("ran", (ok("1"),))).status == "error"  # outputs missing
    assert verdict(stdin, SetRun("memory", detail="MemoryError")).status == "memory"
    assert verdict(stdin, SetRun("ran", define_error="timeout")).status == "timeout"
    functional = Problem("f", "f", (Case("1", "[3, 5]", "functional"),))
    assert verdict(functional, SetRun("ran", (ok(encode_output((3, 5))),))).passed
    assert verdict(functional, SetRun("ran", (ok(encode_output([3, 6])),))).status == "failed"


def test_budget_is_lcb_runners_global_timeout() -> None:
    assert problem_budget(10, 6) == (6 + 1) * 10 + 5


# --- the program lcb_runner builds (testing_util.make_function, clean_if_name, import_string) ---


def test_stdin_answer_becomes_a_function_after_the_prelude() -> None:
    program = stdin_program("import sys\nfrom math import gcd\nn = int(input())\nprint(gcd(n, 4))\n")
    assert program.startswith(PRELUDE)
    tail = program[len(PRELUDE):].strip().splitlines()
    assert tail == ["import sys", "from math import gcd", "def wrapped_function():", "    n = int(input())",
                    "    print(gcd(n, 4))"]
    assert PRELUDE.splitlines()[0] == "from string import *" and PRELUDE.splitlines()[-1] == \
        "sys.setrecursionlimit(50000)"


def test_main_guard_is_inlined_only_as_the_last_statement() -> None:
    code = "def main():\n    print(1)\nif __name__ == '__main__':\n    main()\n"
    assert inline_main_guard(code).splitlines() == ["def main():", "    print(1)", "main()"]
    earlier = "if __name__ == '__main__':\n    main()\nx = 1\n"
    assert inline_main_guard(earlier) == earlier
    assert stdin_program("def f(:") == "def f(:"  # unparsable: left as is, fails to compile in the sandbox


# --- the gold check: every fixture problem, in the sandbox ---

STDIN_SUM_MAX = "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a))\nprint(max(a))\n"
STDIN_MEAN = "n = int(input())\na = list(map(int, input().split()))\nprint(f'{sum(a) / n:.10f}')\n"
COUNT_ABOVE = ("class Solution:\n    def countAbove(self, nums: List[int], k: int) -> int:\n"
               "        return sum(1 for x in nums if x > k)\n")
PAIR_SUMS = ("class Solution:\n    def pairSums(self, nums: List[int]) -> List[int]:\n"
             "        return tuple(a + b for a, b in zip(nums, nums[1:]))\n")  # a tuple: counts as the list

# (problem id, correct answer, a wrong one); the slow and crashing ones are made from the correct one.
GOLD = {
    "fix001_a": (STDIN_SUM_MAX, STDIN_SUM_MAX.replace("max(a)", "min(a)")),
    "count-above-threshold": (COUNT_ABOVE, COUNT_ABOVE.replace("x > k", "x >= k")),
    "fix003_b": (STDIN_MEAN, STDIN_MEAN.replace("sum(a) / n:.10f", "sum(a) // n")),
    "adjacent-pair-sums": (PAIR_SUMS, PAIR_SUMS.replace("a + b", "a - b")),
}


def slow(code: str) -> str:
    return code.replace("return ", "while True: pass\n        return ") if "class Solution" in code \
        else "while True:\n    pass\n" + code


def crashing(code: str) -> str:
    return code.replace("return ", "return 1 // 0 + ") if "class Solution" in code else "x = [][0]\n" + code


@pytest.fixture(scope="module")
def fixture_problems() -> dict[str, Problem]:
    task = make_task("livecodebench")
    return {doc.id: problem(doc.data) for doc in task.docs(task.load("fixtures", None).records)}


def test_gold_check_on_every_fixture_problem(fixture_problems: dict[str, Problem]) -> None:
    assert set(fixture_problems) == set(GOLD)
    assert {p.fn_name is None for p in fixture_problems.values()} == {True, False}  # stdin and functional both
    cases = [(pid, kind, code) for pid, (good, bad) in GOLD.items()
             for kind, code in (("passed", good), ("failed", bad), ("timeout", slow(good)),
                                ("error", crashing(good)))]
    verdicts = judge([fixture_problems[pid] for pid, _, _ in cases], [code for _, _, code in cases], timeout=1)
    got = {(pid, kind): v.status for (pid, kind, _), v in zip(cases, verdicts)}
    assert got == {(pid, kind): kind for pid, kind, _ in cases}, [(c[:2], v) for c, v in zip(cases, verdicts)]
    # a wrong answer fails on a private test here (the public ones pass): private tests are decoded and run
    assert all(len(p.tests) > 2 for p in fixture_problems.values())


def test_private_tests_decide(fixture_problems: dict[str, Problem]) -> None:
    """An answer that hard-codes the public test's output passes it and fails on a private one."""
    hard_coded = "class Solution:\n    def countAbove(self, nums, k):\n        return 2\n"
    result, = judge([fixture_problems["count-above-threshold"]], [hard_coded], timeout=2)
    assert result.status == "failed" and result.detail.startswith("test 2 of 4")


STDIN_VARIANTS = [
    ("exit() after printing", "import sys\ndata = sys.stdin.read().split()\na = list(map(int, data[1:]))\n"
                              "print(sum(a))\nprint(max(a))\nexit()\n", "passed"),
    ("main guard", "def main():\n    n = int(input())\n    a = list(map(int, input().split()))\n"
                   "    print(sum(a), max(a), sep='\\n')\nif __name__ == '__main__':\n    main()\n", "passed"),
    ("prelude names", "n = int(input())\nq = deque(map(int, input().split()))\nprint(sum(q))\nprint(max(q))\n",
     "passed"),
    ("stdin lines and buffer", "import sys\ninput = sys.stdin.buffer.readline\nn = int(input())\n"
                               "a = list(map(int, input().split()))\nsys.stdout.write(f'{sum(a)}\\n{max(a)}\\n')\n",
     "passed"),
    ("global of a wrapped name", "n = int(input())\na = list(map(int, input().split()))\ndef show():\n"
                                 "    global a\n    print(sum(a))\n    print(max(a))\nshow()\n", "error"),
    ("sys.exit(1) before printing", "import sys\nsys.exit(1)\n", "failed"),
    ("syntax error", "print(\n", "error"),
    ("stdin readlines", "import sys\nlines = sys.stdin.readlines()\na = list(map(int, lines[1].split()))\n"
                        "print(sum(a))\nprint(max(a))\n", "passed"),
    ("from sys import stdin", "from sys import stdin\nn = int(stdin.readline())\n"
                              "a = list(map(int, stdin.readline().split()))\nprint(sum(a))\nprint(max(a))\n", "passed"),
    ("stdin buffer read", "import sys\nd = sys.stdin.buffer.read().split()\na = list(map(int, d[1:]))\n"
                          "print(sum(a))\nprint(max(a))\n", "passed"),
    ("iterating stdin", "import sys\nlines = [line for line in sys.stdin]\na = list(map(int, lines[1].split()))\n"
                        "print(sum(a))\nprint(max(a))\n", "passed"),
    ("stdout buffer", "import sys\nn = int(input())\na = list(map(int, input().split()))\n"
                      "sys.stdout.buffer.write(f'{sum(a)}\\n{max(a)}\\n'.encode())\n", "passed"),
    ("open(0)", "d = open(0).read().split()\na = list(map(int, d[1:]))\nprint(sum(a))\nprint(max(a))\n", "error"),
    ("quit()", STDIN_SUM_MAX + "quit()\n", "error"),                 # lcb_runner sets builtins.quit to None
    ("an int over 4300 digits", "x = 10 ** 5000\nn = int(input())\na = list(map(int, input().split()))\n"
                                "print(sum(a) + len(str(x)) - 5001)\nprint(max(a))\n", "passed"),
]
# Where lcb_runner's verdict differs, and why: its mock stdin's ``buffer.readline`` returns the first line every
# time, the mock cannot be iterated, and its captured stdout (a StringIO) has no ``buffer``. These are defects of the
# mock, not rules: the harness gives the program real streams, so a correct program passes.
REFERENCE_DIFFERS = {"stdin lines and buffer": "failed", "iterating stdin": "error", "stdout buffer": "error"}


def test_stdin_conventions(fixture_problems: dict[str, Problem]) -> None:
    """lcb_runner's rules that decide verdicts: SystemExit ends a test normally, the main guard is inlined, the
    prelude's names exist, every statement but imports runs inside ``wrapped_function`` (so ``global`` misses)."""
    verdicts = judge([fixture_problems["fix001_a"]] * len(STDIN_VARIANTS), [c for _, c, _ in STDIN_VARIANTS],
                     timeout=2)
    assert {label: v.status for (label, _, _), v in zip(STDIN_VARIANTS, verdicts)} == \
        {label: status for label, _, status in STDIN_VARIANTS}


def test_functional_conventions(fixture_problems: dict[str, Problem]) -> None:
    """``Solution()`` is made once and its method called per test; without the method, or without ``class
    Solution`` and a function of that name, the answer errs."""
    count = fixture_problems["count-above-threshold"]
    answers = [
        "def countAbove(nums, k):\n    return sum(x > k for x in nums)\n",     # a plain function is looked up too
        "class Solution:\n    def other(self, nums, k):\n        return 0\n",
        "class Solution:\n    calls = 0\n    def countAbove(self, nums, k):\n        Solution.calls += 1\n"
        "        return sum(x > k for x in nums) + Solution.calls - 1\n",        # state kept between tests
        "",
    ]
    statuses = [v.status for v in judge([count] * len(answers), answers, timeout=2)]
    assert statuses == ["passed", "error", "failed", "no_code"]


def test_default_timeout_is_six_seconds(fixture_problems: dict[str, Problem]) -> None:
    """With lcb_runner's default per-test timeout, 5 s of work passes and an endless loop times out."""
    pace = "import time\nt = time.time()\nwhile time.time() - t < 4.5:\n    pass\n" + STDIN_SUM_MAX
    one = Problem("one", None, fixture_problems["fix001_a"].tests[:1])
    fast, endless = judge([one, one], [pace, "while True:\n    pass\n"])
    assert (fast.status, endless.status) == ("passed", "timeout")


# --- agreement with lcb_runner's run_test ---

REFERENCE = os.environ.get("LCB_REFERENCE_DIR")
REFERENCE_TIMEOUT_S = 1
# lcb_runner's result codes: True passed, False (functional) or -2 wrong answer, -3 time limit, -4 runtime or
# compile error; -1 is the global timeout of compute_code_generation_metrics.check_correctness.
CODES = {-1: "timeout", -2: "failed", -3: "timeout", -4: "error"}

RUNNER = textwrap.dedent("""\
    import importlib.util, json, sys
    sys.set_int_max_str_digits(50000)  # as lcb_runner's compute_code_generation_metrics does on import
    spec = importlib.util.spec_from_file_location("testing_util", sys.argv[1])
    util = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(util)
    request = json.load(open(sys.argv[2]))
    result, _ = util.run_test(request["sample"], test=request["code"], timeout=request["timeout"])
    with open(sys.argv[3], "w") as out:
        json.dump([r if isinstance(r, bool) else int(r) for r in result], out)
""")


def reference_status(problem: Problem, code: str, folder: Path, index: int) -> str:
    """lcb_runner's verdict on one answer, as the harness names it."""
    sample = {"input_output": json.dumps({"inputs": [t.input for t in problem.tests],
                                          "outputs": [t.output for t in problem.tests],
                                          "fn_name": problem.fn_name})}
    request, result = folder / f"request{index}.json", folder / f"result{index}.json"
    request.write_text(json.dumps({"sample": sample, "code": code, "timeout": REFERENCE_TIMEOUT_S}))
    util = Path(REFERENCE) / "lcb_runner" / "evaluation" / "testing_util.py"
    try:
        subprocess.run([sys.executable, "-c", RUNNER, str(util), str(request), str(result)], cwd=folder,
                       capture_output=True, timeout=problem_budget(len(problem.tests), REFERENCE_TIMEOUT_S))
    except subprocess.TimeoutExpired:
        return "timeout"
    if not result.exists():
        return "timeout"  # check_correctness scores a run that left no result as -1 on every test
    codes = json.loads(result.read_text())
    if codes and all(c is True for c in codes):
        return "passed"
    return "failed" if codes[-1] is False else CODES[codes[-1]]


@pytest.mark.slow
@pytest.mark.skipif(not REFERENCE, reason="LCB_REFERENCE_DIR (a LiveCodeBench checkout) is not set")
def test_verdicts_agree_with_lcb_runner(fixture_problems: dict[str, Problem], tmp_path: Path) -> None:
    """The gold check's answers and the stdin conventions' variants, judged by both."""
    problems = fixture_problems
    cases = [(pid, code) for pid, (good, bad) in GOLD.items() for code in (good, bad, slow(good), crashing(good))]
    labels = [f"{pid} {kind}" for pid in GOLD for kind in ("correct", "wrong", "slow", "crashing")]
    cases += [("fix001_a", code) for _, code, _ in STDIN_VARIANTS]
    labels += [label for label, _, _ in STDIN_VARIANTS]
    ours = judge([problems[pid] for pid, _ in cases], [code for _, code in cases], timeout=REFERENCE_TIMEOUT_S)
    theirs = [reference_status(problems[pid], code, tmp_path, i) for i, (pid, code) in enumerate(cases)]
    differ = {label: t for label, o, t in zip(labels, ours, theirs) if o.status != t}
    # 26 of 29 agree; the three that differ are the reference's mock-stream defects, and only those
    assert differ == REFERENCE_DIFFERS, f"{len(cases) - len(differ)}/{len(cases)} agree; differ: {differ}"
