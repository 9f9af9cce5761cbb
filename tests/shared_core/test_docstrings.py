"""The engine's ``>>>`` examples run under doctest, offline, with HashingEmbedder only."""

from __future__ import annotations

import pytest

from tests.doctest_support import check_doctests, package_modules


@pytest.mark.parametrize("name", package_modules("shared_core"))
def test_docstring_examples_run(name: str) -> None:
    check_doctests(name)
