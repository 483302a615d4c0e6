"""No import cycles inside the packages, counting imports inside functions.

The graph is built from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` anywhere in a module, relative ones resolved, ``from pkg import name`` counted
as an edge to ``pkg.name`` when that is a module. Imports under ``if TYPE_CHECKING:`` are left
out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("recontext_engine", "recontext_integrations")


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those guarded by ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                bases = [alias.name for alias in node.names]
                names: list[str] = []
            else:
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                bases = [base]
                names = [f"{base}.{alias.name}" for alias in node.names]
            for target in [*bases, *names]:
                # ``import a.b.c`` runs a, a.b and a.b.c: count the deepest one known.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``a -> b -> ... -> a``) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, found breadth first."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in component {sorted(component)}")


def test_the_graph_sees_relative_and_function_level_imports() -> None:
    graph = import_graph(module_files())
    assert "recontext_engine.config" in graph["recontext_engine.engine"]  # from .config import ...
    assert "recontext_engine.backends" in graph["recontext_engine.engine"]  # inside from_pretrained
    assert "recontext_engine" in graph["recontext_integrations.langchain.chat_models"]  # absolute


def test_finds_a_cycle_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package: str) -> None:
    graph = import_graph(module_files())
    cycles = [cycle for cycle in find_cycles(graph) if cycle[0].split(".")[0] == package]
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _engine_all() -> set[str]:
    """``recontext_engine.__all__``, read from the source."""
    tree = ast.parse((ROOT / "recontext_engine" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError("recontext_engine/__init__.py defines no __all__")


def test_integrations_use_only_exported_engine_names() -> None:
    """The adapters import ``from recontext_engine import <name in __all__>`` and nothing deeper,
    type-checking imports included: the engine's modules can move without breaking them."""
    exported, wrong = _engine_all(), []
    for name, path in module_files().items():
        # A benchmark is a program over both packages (it reads the engine's bench data), not an adapter.
        if not name.startswith("recontext_integrations") or name.endswith("_bench"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                wrong += [
                    f"{name}: import {a.name}" for a in node.names if a.name.startswith("recontext_engine")
                ]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module.startswith("recontext_engine."):
                    wrong.append(f"{name}: from {node.module} import ...")
                elif node.module == "recontext_engine":
                    wrong += [
                        f"{name}: {a.name} is not exported" for a in node.names if a.name not in exported
                    ]
    assert not wrong, "\n".join(wrong)
