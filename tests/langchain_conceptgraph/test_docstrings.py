"""Every public class's docstring snippets run as written, in order (top-level await allowed)."""

from __future__ import annotations

import ast
import inspect
import re
import warnings
from typing import Any

import pytest

from langchain_conceptgraph import (
    ConceptGraphAnswerer,
    ConceptGraphRetriever,
    CoreChunkSelector,
    CoreEmbeddings,
    FusedRetriever,
    LangChainVectorStore,
)
from tests.doctest_support import check_doctests, package_modules

SNIPPET = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.parametrize("cls", [ConceptGraphRetriever, FusedRetriever, CoreChunkSelector,
                                 CoreEmbeddings, ConceptGraphAnswerer, LangChainVectorStore])
async def test_docstring_snippets_run(cls: type) -> None:
    doc = inspect.getdoc(cls) or ""
    snippets = SNIPPET.findall(doc)
    assert len(snippets) >= 3, f"{cls.__name__} documents too few runnable snippets"
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-experimental's sunset
        for snippet in snippets:
            code = compile(inspect.cleandoc(snippet), f"<{cls.__name__} docstring>", "exec",
                           flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)
            if inspect.iscoroutine(result):
                await result


@pytest.mark.parametrize("name", package_modules("langchain_conceptgraph"))
def test_doctest_examples_run(name: str) -> None:
    """Any ``>>>`` example runs too (the classes document theirs as snippets above)."""
    check_doctests(name)
