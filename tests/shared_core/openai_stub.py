"""A tiny OpenAI-compatible HTTP server on 127.0.0.1, for tests of the real ``openai`` client path.

It speaks just enough of the API for our code: ``POST /v1/embeddings`` and
``POST /v1/chat/completions``, and records every request (path, headers, JSON
body), so a test checks what reached the wire instead of patching our code.

Embedding rule (so expected vectors can be worked out by hand): component ``j``
of a text's vector counts the characters ``c`` of the text with
``ord(c) % width == j``; ``width`` is the request's ``dimensions``, else the
server's ``native_dim``. Rows come back in reverse order (each with its
``index``), as base64 float32 when the request asks for ``encoding_format:
"base64"`` (the ``openai`` client's default), else as JSON floats.

Tests that use it need ``@pytest.mark.allow_hosts(["127.0.0.1"])``: pytest-socket
then lets connections reach loopback only.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import numpy as np


def stub_vector(text: str, width: int) -> list[float]:
    """The stub's embedding of ``text``: character counts by ``ord(c) % width``."""
    out = [0.0] * width
    for char in text:
        out[ord(char) % width] += 1.0
    return out


@dataclass
class Recorded:
    """One request: its path, headers (names lowercased) and JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class StubOpenAI:
    """Run as ``with StubOpenAI() as stub: ... stub.url ...``; ``stub.requests`` is the log.

    ``chat`` makes a chat completion's reply text from the request body.
    ``fail_first`` answers that many requests with HTTP 500 first (to count
    retries); ``delay`` sleeps that many seconds before every answer (to trip a
    client timeout).
    """

    native_dim: int = 8
    chat: Callable[[dict[str, Any]], str] = lambda body: "stub reply"
    fail_first: int = 0
    delay: float = 0.0
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL to give the client, ``http://127.0.0.1:PORT/v1``."""
        assert self._server is not None, "the stub is not running"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StubOpenAI:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    stub.requests.append(Recorded(self.path, headers, body))
                    failing = len(stub.requests) <= stub.fail_first
                if stub.delay:
                    time.sleep(stub.delay)
                if failing:
                    self._send(500, {"error": {"message": "stub: failing on purpose",
                                               "type": "server_error"}},
                               {"retry-after-ms": "1"})
                elif self.path == "/v1/embeddings":
                    self._send(200, stub._embeddings(body))
                elif self.path == "/v1/chat/completions":
                    self._send(200, stub._chat(body))
                else:
                    self._send(404, {"error": {"message": f"stub: no route {self.path}"}})

            def _send(self, status: int, payload: dict[str, Any],
                      headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (a timeout test): nothing to tell it

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test output is for the test."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        width = int(body.get("dimensions") or self.native_dim)
        rows = []
        for i, text in enumerate(inputs):
            vector = stub_vector(text, width)
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
            rows.append({"object": "embedding", "index": i, "embedding": encoded})
        n_chars = sum(len(t) for t in inputs)
        return {"object": "list", "data": rows[::-1], "model": body["model"],
                "usage": {"prompt_tokens": n_chars, "total_tokens": n_chars}}

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-stub-{len(self.requests)}", "object": "chat.completion",
            "created": 0, "model": body.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": self.chat(body)}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
