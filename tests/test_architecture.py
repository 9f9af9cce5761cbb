"""The layout's promises, checked on the source: no import cycles in the core, the core
imports no framework and no benchmark, adapters use only public names of the core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "shared_core"
ADAPTERS = [ROOT / "llama_index_conceptgraph", ROOT / "langchain_conceptgraph"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth in the file, relative imports resolved."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            out.add(stem)
            out.update(f"{stem}.{alias.name}" for alias in node.names)
    return out


def core_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in CORE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = {m for m in imports_of(path) if m in modules and m != name}
        # a module's own package __init__ re-exports it: that edge is not a dependency
        graph[name] = {d for d in deps if not name.startswith(d + ".") and d != "shared_core"}
    return graph


def test_no_import_cycles_in_the_core() -> None:
    graph = core_graph()
    assert len(graph) > 30  # the walk found the package
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


@pytest.mark.parametrize("forbidden", ["llama_index", "langchain", "benchmarks", "tests"])
def test_the_core_imports_no_framework_and_no_benchmark(forbidden: str) -> None:
    offenders = sorted(module_name(p) for p in CORE.rglob("*.py")
                       if any(m == forbidden or m.startswith(forbidden + ".")
                              or m.startswith(forbidden + "_") for m in imports_of(p)))
    assert offenders == []


def test_adapters_use_only_public_names_of_the_core() -> None:
    private = []
    for folder in ADAPTERS:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "shared_core"):
                    private += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                                if a.name.startswith("_")]
                # reaching into a core object: index._x, state._x, corpus._x, graph._x
                if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                        and not node.attr.startswith("__")
                        and isinstance(node.value, ast.Attribute | ast.Name)
                        and (node.value.attr if isinstance(node.value, ast.Attribute)
                             else node.value.id) in {"index", "state", "corpus", "graph"}):
                    private.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert private == []
