"""The layering of the four packages and of the harness's parts, read statically from their import statements (lazy
ones included).

Adapters know nothing of tasks, tasks nothing of models or the run loop, the report reads results only, and the
command line is the one place that both runs and reports. Inside the harness, ``PARTS`` says which part may import
which. Every module must also import cleanly on its own.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "models", "tasks", "reports")
RUN_LOOP = {"harness.run.runner", "harness.run.generation", "harness.cli", "harness.distributed.data_parallel",
            "harness.gate.checks", "harness.lmeval.model", "harness.lmeval.dllm_lm_eval"}
LEAVES = {"harness.files", "harness.errors"}  # modules of the harness every part may use: standard library only
# What each part may import besides the leaves and itself (harness.cli, the command line, may import anything).
PARTS: dict[str, set[str]] = {
    "models": set(),
    "tasks": set(),
    "harness.timing": set(),
    "harness.stats": set(),
    "harness.run": {"harness.timing", "harness.stats", "models", "tasks"},
    "harness.distributed": {"harness.run"},
    "harness.gate": {"harness.run", "harness.stats", "harness.timing", "models"},
    "harness.sweep": {"harness.run", "models", "tasks"},
    "harness.lmeval": {"harness.run", "harness.stats", "harness.timing", "models", "tasks"},
    "harness.export": {"harness.run"},  # a finished run's files in another tool's layout
    "reports": {"harness.run", "harness.stats", "harness.sweep"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


@cache
def imports_of(name: str) -> frozenset[str]:
    """The project modules ``name`` imports, anywhere in its body (not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(modules()[name].read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if modules()[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1)
                         if ".".join(parts[:i]) in modules())  # a submodule's import runs its packages too
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
    return frozenset(found - ancestors)  # a module's own packages are already importing when it runs


def reachable(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for target in imports_of(todo.pop()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def find_cycle() -> list[str] | None:
    """One import cycle among the project's modules, or None (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for target in sorted(imports_of(name)):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(modules()):
        if name not in state and (cycle := visit(name)):
            return cycle
    return None


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_graph_reads_real_imports():
    """The checker sees what it must: lazy imports inside functions, and ``from package import module``."""
    assert "reports.command" in imports_of("harness.cli")  # imported inside main()
    assert "harness.run.folder" in imports_of("harness.run.runner")
    assert "harness.files" in imports_of("harness.run.store")
    assert {"models", "models.base"} <= imports_of("harness.run.generation")


def test_the_leaves_import_nothing_of_the_project():
    assert all(not imports_of(leaf) for leaf in LEAVES)


def part_of(name: str) -> str:
    """The part a module belongs to: a harness subpackage, a harness top-level module, or a top-level package."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "harness" else parts[0]


def test_every_module_belongs_to_a_stated_part():
    unstated = {part_of(m) for m in modules()} - set(PARTS) - LEAVES - {"harness", "harness.cli"}
    assert not unstated, f"add {sorted(unstated)} to PARTS"


def test_each_part_imports_only_what_it_may():
    for name in modules():
        part = part_of(name)
        if part in LEAVES or part in {"harness", "harness.cli"}:
            continue
        allowed = PARTS[part] | LEAVES | {part, "harness"}
        wrong = sorted(t for t in imports_of(name) if part_of(t) not in allowed)
        assert not wrong, f"{name} ({part}) imports {wrong}; {part} may import {sorted(PARTS[part]) or 'only the leaves'}"


def test_no_import_cycles():
    assert find_cycle() is None, " -> ".join(find_cycle() or [])


@pytest.mark.parametrize("package", ["models", "tasks"])
def test_models_and_tasks_use_only_the_leaves_of_the_harness(package):
    for name in (m for m in modules() if in_package(m, package)):
        outside = {m for m in reachable(name) if in_package(m, "harness") and m != "harness"} - LEAVES
        assert not outside, f"{name} imports {sorted(outside)}"
        assert not reachable(name) & RUN_LOOP, name
        other = "tasks" if package == "models" else "models"
        assert not any(in_package(m, other) for m in reachable(name)), f"{name} imports {other}"


def test_runner_and_distributed_do_not_import_each_other():
    assert "harness.distributed.data_parallel" not in reachable("harness.run.runner")
    assert "harness.run.runner" not in reachable("harness.distributed.data_parallel")


def test_only_the_command_line_both_runs_and_reports():
    for name in (m for m in modules() if in_package(m, "reports")):
        assert not reachable(name) & RUN_LOOP, f"{name} reaches the run loop: {sorted(reachable(name) & RUN_LOOP)}"
    for name in (m for m in modules() if in_package(m, "harness") and m != "harness.cli"):
        reports = {m for m in imports_of(name) if in_package(m, "reports")}
        assert not reports, f"{name} imports {sorted(reports)}"
    assert "harness.run.generation" in reachable("harness.lmeval.model")
    assert "harness.run.runner" not in reachable("harness.lmeval.model")


def test_module_names_say_what_they_are():
    """One command line and no vague ``data`` module: each name means one thing across the packages."""
    assert [m for m in modules() if m.rpartition(".")[2] == "cli"] == ["harness.cli"]
    assert not [m for m in modules() if m.rpartition(".")[2] == "data"]


@pytest.mark.parametrize("name", sorted(m for m in modules() if not m.rpartition(".")[2].startswith("_")))  # _x: scripts
def test_every_module_imports_on_its_own(name):
    importlib.import_module(name)
