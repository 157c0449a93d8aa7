"""The HumanEval sanitizer: the largest parsable span, then imports and the definitions the entry point reaches."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tasks.sanitize import largest_parsable_span, sanitize

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
    code = "class Box:\n    def get(self):\n        return 1\ndef solve():\n    return Box().get()\n"
    assert same_code(sanitize(code, "solve"), code)


def test_nothing_kept_gives_back_the_span():
    assert sanitize("x = [1,\n", "solve") == "x = [1,"
    assert sanitize("print(1)\nprint(2)", "solve") == "print(1)\nprint(2)"


def test_only_the_first_hundred_lines_are_searched():
    code = "def solve():\n" + "    x = 1\n" * 120 + "    return x\n"
    cut = sanitize(code, "solve")  # the function loses its return, so it is dropped and the span comes back
    assert cut.count("x = 1") == 99 and "return" not in cut


SPANS = [
    "a = 1\nb = 2",
    "prose\ndef f():\n    return 1\nmore prose\n",
    "def f(:\n    pass\nx = 1\ny = 2\nz = 3\n",
    "x = 1\n\n\nnot python at all\n\ny = (\n1)\nz = 2\nw = 3\n",
    "\n\nif x:\n    y = 1\nelse:\n  oops\n",
    "only words here\nand here\n",
    "x = 1\n\n\n",
    "for i in range(3):\n    print(i)\n)\nx = 1\n",
]


@pytest.mark.parametrize("text", SPANS)
def test_the_span_search_agrees_with_evalplus_code_extract(text):
    code_extract = pytest.importorskip("evalplus.sanitize").code_extract
    assert largest_parsable_span(text) == code_extract(text)
