"""The README's Python snippets: each parses, imports only names that exist, and uses no
name that neither an earlier snippet nor the reader defines (the user's own data and
LLM). A snippet that drifted from the code fails here rather than in a new user's hands.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

# what the reader brings: their chunks, documents, nodes, LLM and chain parts
READERS_OWN = frozenset({
    "texts", "ids", "more_texts", "more_ids", "send_to_kg_extractor", "docs", "nodes", "llm",
    "prompt", "format_docs", "key", "your_langchain_qdrant_store"})
# modules a snippet names with the pip install that brings them (not our dependencies)
INSTALLED_SEPARATELY = frozenset({"llama_index.llms.openai"})


def snippets() -> list[tuple[int, str]]:
    """Each ```python block of the README with the line it starts on."""
    text = README.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def names_bound(tree: ast.AST) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound


def test_the_readme_has_its_snippets() -> None:
    assert len(snippets()) >= 15


def test_every_snippet_uses_only_names_defined_before_it_or_the_readers_own() -> None:
    defined = set(dir(builtins)) | READERS_OWN
    for line, source in snippets():
        tree = ast.parse(source, filename=f"README.md:{line}")
        used = {n.id for n in ast.walk(tree)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        bound = names_bound(tree)
        undefined = sorted(used - bound - defined)
        assert undefined == [], f"README.md:{line} uses {undefined}, defined nowhere before"
        defined |= bound


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore:`langchain-community` is being sunset")
def test_every_name_a_snippet_imports_exists() -> None:
    checked = 0
    for line, source in snippets():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module not in INSTALLED_SEPARATELY:
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), \
                        f"README.md:{line}: {node.module} has no {alias.name}"
                    checked += 1
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
                    checked += 1
    assert checked >= 40
