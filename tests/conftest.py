"""Test-wide guarantees: no network, no writes to the user's cache."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


class _NoNetwork(RuntimeError):
    pass


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guard(sock: socket.socket, address: object) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        raise _NoNetwork(f"tests must run offline; attempted connection to {address!r}")


def _connect(self: socket.socket, address: object) -> None:
    _guard(self, address)
    _real_connect(self, address)  # type: ignore[arg-type]


def _connect_ex(self: socket.socket, address: object) -> int:
    _guard(self, address)
    return _real_connect_ex(self, address)  # type: ignore[arg-type]


@pytest.fixture(autouse=True, scope="session")
def _offline() -> Iterator[None]:
    """Any TCP/UDP connection attempt fails the test (Unix sockets stay usable)."""
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the embedding cache at a temp dir so tests never touch ~/.cache."""
    monkeypatch.setenv("CONCEPTGRAPH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
