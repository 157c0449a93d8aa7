"""The ReFusion fork's code sanitizer for HumanEval (tasks.md §7), written over Python's ``ast``.

It is an ast port of evalplus's tree-sitter sanitizer: find the largest parsable stretch of the text, keep its
imports and the definitions the entry point can reach, and print them back. The prompt's docstring-only stub has no
``return``, so the model's own definition of the same function replaces it.
"""

from __future__ import annotations

import ast

MAX_LINES = 100


def parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, MemoryError, ValueError):  # ValueError: source with NUL bytes
        return False
    return True


def largest_parsable_span(text: str, max_lines: int = MAX_LINES) -> str:
    """The contiguous run of lines (two or more, among the first ``max_lines``) that parses and has the most
    non-blank lines; the first such run wins a tie, as in evalplus's ``code_extract``.

    Searches each start from the longest end down and stops as soon as no shorter run could win, so the usual case
    (everything parses) costs one parse.
    """
    lines = text.split("\n")[:max_lines]
    nonblank_before = [0]
    for line in lines:
        nonblank_before.append(nonblank_before[-1] + bool(line.strip()))

    def count(i: int, j: int) -> int:  # non-blank lines in lines[i..j], inclusive
        return nonblank_before[j + 1] - nonblank_before[i]

    best, span = 0, (0, 0)
    for i in range(len(lines)):
        found = None
        for j in range(len(lines) - 1, i, -1):
            size = count(i, j)
            if size <= best or (found is not None and size < found[1]):
                break
            if parses("\n".join(lines[i:j + 1])):
                found = (j, size)  # keep going down: a shorter run with the same count was found first upstream
        if found is not None:
            best, span = found[1], (i, found[0])
    return "\n".join(lines[span[0]:span[1] + 1])


def _defined_name(node: ast.stmt) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _has_return(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(node))


def _identifiers(node: ast.AST) -> set[str]:
    """Every identifier in a definition (names, attributes, parameters), as tree-sitter's identifier nodes are."""
    names: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.arg, ast.keyword)) and n.arg:
            names.add(n.arg)
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
    """Imports plus the definitions reachable from ``entry_point`` (all definitions if it is None).

    Kept definitions: classes, simple-name assignments, and functions containing a ``return``; a later definition
    of a name replaces an earlier one. If nothing is kept, the largest parsable span is returned as it is.
    """
    text = code.replace("\t", "    ").replace("\r\n", "\n").replace("\r", "\n").strip() + "\n"
    span = largest_parsable_span(text)
    try:
        module = ast.parse(span)
    except (SyntaxError, MemoryError, ValueError):
        return span
    imports: list[ast.stmt] = []
    definitions: dict[str, ast.stmt] = {}
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
            continue
        name = _defined_name(node)
        if name is None or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _has_return(node)):
            continue
        definitions.pop(name, None)  # re-insert so the order is that of the definitions kept
        definitions[name] = node
    if entry_point is not None:
        keep = _reachable(entry_point, {name: _identifiers(node) for name, node in definitions.items()})
        definitions = {name: node for name, node in definitions.items() if name in keep}
    kept = imports + list(definitions.values())
    if not kept:
        return span
    return "\n".join(ast.unparse(node) for node in kept)
