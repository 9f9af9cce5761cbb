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

Chat replies can be scripted exactly: ``script`` is a queue the chat requests
take from in order, one entry per request (a :class:`ChatReply`, an
:class:`HTTPError` or a :class:`RawBody`, each with its own ``delay``); once it
is empty, replies come from ``chat`` as before.

A chat request with ``"stream": true`` is answered as server-sent events: the
reply's words one chunk each (``"a b"`` → ``"a"``, ``" b"``), then a chunk with
the finish reason, then, when the request asked for
``stream_options.include_usage`` and the reply has ``usage``, a last chunk with
no choices and the usage (as OpenAI does), then ``data: [DONE]``.
:func:`sse_body` builds that body, for a :class:`RawBody` that cuts it short.

Tests that use it need ``@pytest.mark.allow_hosts(["127.0.0.1"])``: pytest-socket
then lets connections reach loopback only.
"""

from __future__ import annotations

import base64
import json
import re
import sys
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


def usage(prompt_tokens: int, completion_tokens: int,
          cached_tokens: int | None = None) -> dict[str, Any]:
    """An OpenAI ``usage`` object; ``cached_tokens`` adds ``prompt_tokens_details``."""
    out: dict[str, Any] = {"prompt_tokens": prompt_tokens,
                           "completion_tokens": completion_tokens,
                           "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


@dataclass(frozen=True)
class ChatReply:
    """A chat completion, every field as given.

    ``content`` ``None`` sends ``"content": null``; ``usage`` ``None`` leaves the
    ``usage`` key out entirely (a server that reports none); ``model`` ``None``
    echoes the request's model.
    """

    content: str | None = "stub reply"
    finish_reason: str | None = "stop"
    refusal: str | None = None
    usage: dict[str, Any] | None = field(default_factory=lambda: usage(1, 1))
    model: str | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class HTTPError:
    """An HTTP error status with an OpenAI-style error body and optional headers
    (``{"retry-after-ms": "250"}``, ``{"retry-after": "2"}``)."""

    status: int
    message: str = "stub: scripted error"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class RawBody:
    """Bytes sent as they are, as JSON (``b'{"choices": ['``: a malformed body)."""

    body: bytes
    status: int = 200
    delay: float = 0.0


Scripted = ChatReply | HTTPError | RawBody
SSE = "text/event-stream"


def sse_body(events: list[dict[str, Any]], done: bool = True) -> bytes:
    """Server-sent events, one ``data:`` line per event, and ``[DONE]`` when ``done``."""
    lines = [f"data: {json.dumps(e)}\n\n" for e in events]
    return ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()


def stream_chunk(content: str | None = None, finish_reason: str | None = None,
                 model: str = "stub", usage: dict[str, Any] | None = None,
                 refusal: str | None = None, choices: bool = True) -> dict[str, Any]:
    """One ``chat.completion.chunk`` event."""
    delta: dict[str, Any] = {} if content is None else {"content": content}
    if refusal is not None:
        delta["refusal"] = refusal
    out: dict[str, Any] = {"id": "chatcmpl-stub", "object": "chat.completion.chunk",
                           "created": 0, "model": model,
                           "choices": [{"index": 0, "delta": delta,
                                        "finish_reason": finish_reason}] if choices else []}
    if usage is not None:
        out["usage"] = usage
    return out


@dataclass
class Recorded:
    """One request: its path, headers (names lowercased) and JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet about a client that hung up (a timeout test, a closed keep-alive connection)."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass
class StubOpenAI:
    """Run as ``with StubOpenAI() as stub: ... stub.url ...``; ``stub.requests`` is the log.

    ``chat`` makes a chat completion's reply text from the request body.
    ``fail_first`` answers that many requests with HTTP 500 first (to count
    retries); ``delay`` sleeps that many seconds before every answer (to trip a
    client timeout). ``script`` scripts chat replies one by one (see the module
    docstring). ``keep_alive`` answers in HTTP/1.1 and keeps connections open for
    the next request, as real servers do (the default closes each one, HTTP/1.0).
    """

    native_dim: int = 8
    chat: Callable[[dict[str, Any]], str] = lambda body: "stub reply"
    fail_first: int = 0
    delay: float = 0.0
    requests: list[Recorded] = field(default_factory=list)
    script: list[Scripted] = field(default_factory=list)
    keep_alive: bool = False

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
            protocol_version = "HTTP/1.1" if stub.keep_alive else "HTTP/1.0"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                scripted: Scripted | None = None
                with stub._lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    stub.requests.append(Recorded(self.path, headers, body))
                    failing = len(stub.requests) <= stub.fail_first
                    if not failing and self.path == "/v1/chat/completions" and stub.script:
                        scripted = stub.script.pop(0)
                if stub.delay:
                    time.sleep(stub.delay)
                if scripted is not None and scripted.delay:
                    time.sleep(scripted.delay)
                if failing:
                    self._send(500, {"error": {"message": "stub: failing on purpose",
                                               "type": "server_error"}},
                               {"retry-after-ms": "1"})
                elif isinstance(scripted, HTTPError):
                    self._send(scripted.status, {"error": {"message": scripted.message,
                                                           "type": "stub_error"}},
                               scripted.headers)
                elif isinstance(scripted, RawBody):
                    self._send(scripted.status, scripted.body)
                elif self.path == "/v1/embeddings":
                    self._send(200, stub._embeddings(body))
                elif self.path == "/v1/chat/completions" and body.get("stream"):
                    self._send(200, stub._chat_stream(body, scripted), content_type=SSE)
                elif self.path == "/v1/chat/completions":
                    self._send(200, stub._chat(body, scripted))
                else:
                    self._send(404, {"error": {"message": f"stub: no route {self.path}"}})

            def _send(self, status: int, payload: dict[str, Any] | bytes,
                      headers: dict[str, str] | None = None,
                      content_type: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                if isinstance(payload, bytes) and payload.startswith(b"data:"):
                    content_type = SSE  # a RawBody holding server-sent events
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (a timeout test): nothing to tell it

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test output is for the test."""

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.005,),
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

    def chat_bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat completion requests, in arrival order."""
        with self._lock:
            return [r.body for r in self.requests if r.path == "/v1/chat/completions"]

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

    def _chat_stream(self, body: dict[str, Any], reply: ChatReply | None = None) -> bytes:
        if reply is None:
            reply = ChatReply(content=self.chat(body))
        model = reply.model or body.get("model", "stub")
        words = re.findall(r"\s*\S+", reply.content or "")
        events = [stream_chunk(w, model=model) for w in words]
        if reply.refusal is not None:
            events.append(stream_chunk(refusal=reply.refusal, model=model))
        events.append(stream_chunk(finish_reason=reply.finish_reason, model=model))
        wants_usage = (body.get("stream_options") or {}).get("include_usage")
        if wants_usage and reply.usage is not None:
            events.append(stream_chunk(model=model, usage=reply.usage, choices=False))
        return sse_body(events)

    def _chat(self, body: dict[str, Any], reply: ChatReply | None = None) -> dict[str, Any]:
        if reply is None:
            reply = ChatReply(content=self.chat(body))
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.refusal is not None:
            message["refusal"] = reply.refusal
        out: dict[str, Any] = {
            "id": f"chatcmpl-stub-{len(self.requests)}", "object": "chat.completion",
            "created": 0, "model": reply.model or body.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": reply.finish_reason, "logprobs": None,
                         "message": message}],
        }
        if reply.usage is not None:
            out["usage"] = reply.usage
        return out
