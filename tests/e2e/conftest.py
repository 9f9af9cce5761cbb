"""End-to-end fixtures: one llama.cpp server per session, on loopback only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .llama_server import LlamaServer, llama_server_available, start_llama_server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.allow_hosts(["127.0.0.1"]))


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    reason = llama_server_available()
    if reason is not None:
        pytest.skip(reason)
    server = start_llama_server(tmp_path_factory.mktemp("llama"))
    try:
        yield server
    finally:
        server.stop()
