"""The usage snippets in the adapter's class docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["embeddings", "retriever", "selector", "postprocessor", "fused"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(f"llama_index_conceptgraph.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
