"""The usage examples in the adapter's docstrings run as written (doctest, offline)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from tests.doctest_support import check_doctests, package_modules

DOCUMENTED = ["embeddings", "retriever", "selector", "postprocessor", "fused"]


@pytest.mark.parametrize("name", package_modules("llama_index_conceptgraph"))
def test_docstring_examples_run(name: str) -> None:
    check_doctests(name)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_adapter_module_has_examples(name: str) -> None:
    module = importlib.import_module(f"llama_index_conceptgraph.{name}")
    assert ">>> " in inspect.getsource(module)
