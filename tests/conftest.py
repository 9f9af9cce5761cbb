"""Test-wide guarantees: no network (pytest-socket, see pyproject), no writes to ~/.cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the embedding cache at a temp dir and keep Hugging Face libraries offline."""
    monkeypatch.setenv("CONCEPTGRAPH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
