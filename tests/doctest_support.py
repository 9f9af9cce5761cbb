"""Runs a package's ``>>>`` examples: shared by each package's test_docstrings.py."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re

# a doctest that builds a real model would load weights (slow, and from the network
# when missing): examples must use HashingEmbedder, and these names may not appear
_MODEL_LOADERS = re.compile(r"minilm_embedder|SentenceTransformerEmbedder|OpenAIEmbedder\(")


def package_modules(package: str) -> list[str]:
    """Every module of ``package``, itself included, by dotted name."""
    root = importlib.import_module(package)
    names = [package]
    names += [m.name for m in pkgutil.walk_packages(root.__path__, prefix=f"{package}.")]
    return sorted(names)


def check_doctests(name: str) -> None:
    """Every ``>>>`` example in module ``name`` runs and passes; none loads a real model."""
    module = importlib.import_module(name)
    source = inspect.getsource(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    # only the module's own objects: re-exported names are checked in their own module
    tests = [t for t in finder.find(module) if t.examples]
    examples = [e.source for t in tests for e in t.examples]
    assert not [e for e in examples if _MODEL_LOADERS.search(e)], \
        f"{name}: a docstring example loads a real model; use HashingEmbedder"
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0, f"{name}: {result.failed} docstring example(s) failed"
    # an example doctest cannot see (outside a docstring, or a broken prompt) fails here
    assert result.attempted == source.count(">>> "), \
        f"{name}: ran {result.attempted} examples of {source.count('>>> ')} in the source"
