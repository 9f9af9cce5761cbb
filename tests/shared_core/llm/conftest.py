"""Fixtures for the LLM layer's tests: an environment with no OpenAI settings, and a sleep
that records the runner's waits instead of waiting."""

from __future__ import annotations

import pytest

from tests.shared_core.llm.scripted import RecordedSleep

OPENAI_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "HTTP_PROXY", "HTTPS_PROXY",
              "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key, URL, model or proxy from the developer's shell reaches the client."""
    for name in OPENAI_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sleep() -> RecordedSleep:
    return RecordedSleep()
