"""The ReFusion fork's code sanitizer for HumanEval (docs/tasks.md), reimplemented to give the fork's program.

The fork's ``sanitize_utils.sanitize`` is a simplified ast port of evalplus's tree-sitter sanitizer, and the paper's
HumanEval numbers are scored through it, so its quirks are reproduced rather than fixed (issue 19):

* the search for code is over ``str.splitlines()`` lines (which also break at form feeds, ``\\x1c``-``\\x1e``,
  ``\\x85``, ``\\u2028``...), single lines included, among the first 100;
* kept at module level: imports, classes, plain ``def`` functions that contain a ``return`` (not ``async def``),
  and assignments whose first target is a name; annotated assignments (``OFFSET: int = 0``) are dropped;
* a redefinition replaces the earlier definition's body but keeps its place (a dict assignment);
* a definition depends on the names and attribute names in it, but the object an attribute is read from is not
  looked into, so a class used only as ``Solution().add(a, b)`` is not reachable and is dropped;
* when nothing is kept the result is the empty string.

Where the fork raises (a ``RecursionError`` on absurdly nested code, a NUL byte on some Pythons) there is no fork
program to match; here such text counts as not parsing.
"""

from __future__ import annotations

import ast

MAX_LINES = 100


def parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, MemoryError, ValueError, RecursionError):
        return False
    return True


def largest_parsable_span(text: str, max_lines: int = MAX_LINES) -> str:
    """The run of lines that parses and has the most non-blank lines; among those, the one starting first, then
    ending first; "" when no run with a non-blank line parses (the fork's exhaustive search, same answer).

    Searches each start from the longest end down and stops as soon as no run from there could win, so the usual
    case (everything parses) costs a few parses instead of the fork's ~5,000.
    """
    lines = text.splitlines()[:max_lines]
    nonblank_before = [0]
    for line in lines:
        nonblank_before.append(nonblank_before[-1] + bool(line.strip()))

    def count(i: int, j: int) -> int:  # non-blank lines in lines[i..j], inclusive
        return nonblank_before[j + 1] - nonblank_before[i]

    best, span = 0, None
    for i in range(len(lines)):
        found = None
        for j in range(len(lines) - 1, i - 1, -1):
            size = count(i, j)
            if size <= best or (found is not None and size < found[1]):
                break
            if parses("\n".join(lines[i:j + 1])):
                found = (j, size)  # keep going down: the fork takes the shortest run with this count
        if found is not None:
            best, span = found[1], (i, found[0])
    return "" if span is None else "\n".join(lines[span[0]:span[1] + 1])


def _kept_name(node: ast.stmt) -> str | None:
    """The name a module-level statement defines, if the fork keeps that kind of statement."""
    if isinstance(node, ast.ClassDef):
        return node.name
    if isinstance(node, ast.FunctionDef):
        return node.name if any(isinstance(n, ast.Return) for n in ast.walk(node)) else None
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def dependencies(node: ast.AST) -> set[str]:
    """Names and attribute names below ``node``; neither is looked into (so ``a.b`` gives "b" only)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        for child in ast.iter_child_nodes(stack.pop()):
            if isinstance(child, ast.Name):
                names.add(child.id)
            elif isinstance(child, ast.Attribute):
                names.add(child.attr)
            else:
                stack.append(child)
    return names


def _reachable(entry_point: str, deps: dict[str, set[str]]) -> set[str]:
    seen, queue = {entry_point}, [entry_point]
    while queue:
        for name in deps.get(queue.pop(), ()):
            if name not in seen:
                seen.add(name)
                queue.append(name)
    return seen


def sanitize(code: str, entry_point: str | None) -> str:
    """Imports plus the definitions reachable from ``entry_point`` (every definition if it is None or empty)."""
    text = code.replace("\t", "    ").replace("\r\n", "\n").replace("\r", "\n").strip() + "\n"
    module = ast.parse(largest_parsable_span(text))
    imports: list[ast.stmt] = []
    definitions: dict[str, ast.stmt] = {}
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
        elif (name := _kept_name(node)) is not None:
            definitions[name] = node  # a redefinition keeps the first one's place, as in the fork
    if entry_point:
        keep = _reachable(entry_point, {name: dependencies(node) for name, node in definitions.items()})
        definitions = {name: node for name, node in definitions.items() if name in keep}
    return "\n".join(ast.unparse(node) for node in imports + list(definitions.values()))
