"""The program lcb_runner executes for an answer (``evaluation/testing_util.py``), built in the harness from the
syntax tree alone, so nothing the model wrote runs here.

Both kinds start with lcb_runner's import prelude (star imports of the standard modules competitive code leans on,
plain imports of the same, recursion limit 50000): an answer that uses ``deque`` without importing it passes there,
so it passes here. A stdin answer is turned into a function, as lcb_runner's ``make_function`` does: a final
``if __name__ == '__main__':`` block is inlined, the top-level imports stay at module level and every other
statement becomes the body of ``wrapped_function``, which is called once per test. That decides verdicts (a helper
that declares ``global n`` for a top-level ``n`` fails there), hence it is kept. Code that does not parse is left as
it is, and fails to compile in the sandbox, as there.
"""

from __future__ import annotations

import ast

STAR_IMPORTS = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
                "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing")
PLAIN_IMPORTS = STAR_IMPORTS[:16]  # the same modules but builtins and typing, in the same order
PRELUDE = ("".join(f"from {m} import *\n" for m in STAR_IMPORTS) + "".join(f"import {m}\n" for m in PLAIN_IMPORTS)
           + "sys.setrecursionlimit(50000)\n")
ENTRY = "wrapped_function"
MAIN_GUARD = "__name__ == '__main__'"


def inline_main_guard(code: str) -> str:
    """The code with a last top-level ``if __name__ == '__main__':`` replaced by its body."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError):
        return code
    if body and isinstance(body[-1], ast.If) and ast.unparse(body[-1].test).strip() == MAIN_GUARD:
        return ast.unparse(body[:-1]) + "\n" + ast.unparse(body[-1].body)
    return code


def stdin_program(code: str) -> str:
    """The prelude, the answer's top-level imports, and the rest of it as the body of ``wrapped_function``."""
    code = inline_main_guard(code)
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError):
        return code
    imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
    function = ast.parse(f"def {ENTRY}():\n    pass\n").body[0]
    function.body = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    return PRELUDE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)


def functional_program(code: str) -> str:
    """The prelude, then the answer as written."""
    return PRELUDE + "\n\n" + code
