"""The ``openai`` client as a :class:`~.messages.ChatModel`: OpenAI, vLLM, Ollama, llama.cpp.

Configured by ``model``, ``base_url`` and ``api_key``, each falling back to
``$OPENAI_MODEL``, ``$OPENAI_BASE_URL`` and ``$OPENAI_API_KEY``. The client's
own retries are off: :class:`~.runner.LLMRunner` retries, so one policy and one
ledger cover every model.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..openai_endpoint import check_timeout, openai_options
from .messages import Completion, LLMError, Message, StreamPart, check_messages
from .usage import call_settings, completion_with_usage, token_count

# ask for usage in the stream's last chunk (OpenAI, vLLM); servers that ignore it get counted
STREAM_OPTIONS: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}

# OpenAI's reasoning families, optionally behind a provider prefix ("openai/o3-mini"):
# they reject ``max_tokens`` (wanting ``max_completion_tokens``) and any temperature
# but the default
REASONING_MODEL = re.compile(r"^(?:[\w.-]+/)?(?:o\d|gpt-5)(?:$|[-.:])")


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` names an OpenAI reasoning model (o1, o3, o4-mini, gpt-5, ...)."""
    return REASONING_MODEL.match(model) is not None


class OpenAIChat:
    """Chat completions from any OpenAI-compatible server.

    ``OpenAIChat("gpt-4o-mini")`` reads ``$OPENAI_API_KEY``;
    ``OpenAIChat("smollm2", base_url="http://127.0.0.1:8080/v1")`` talks to a local
    llama.cpp server; ``llm.complete([Message("user", "Say hi")]).text`` is the reply.
    A server that answers with something other than JSON (a wrong ``base_url``
    pointing at a web page, say) raises :class:`~.messages.LLMError` saying so.

    Reasoning models (o1, o3, o4-mini, gpt-5, ...) reject ``max_tokens`` and any
    temperature but their default, so for them the limit is sent as
    ``max_completion_tokens`` (which also bounds the hidden reasoning tokens) and no
    temperature is sent. ``reasoning=None`` tells them by name; pass ``True`` or
    ``False`` for a model served under another name.

    ``stream``/``astream`` (:class:`~.messages.StreamingChatModel`) yield the text
    deltas, then the whole :class:`~.messages.Completion`; usage is asked for in the
    last chunk (``stream_options.include_usage``) and counted with tiktoken when the
    server sends none (llama.cpp's server does not).
    """

    def __init__(self, model: str | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 120.0,
                 extra_body: dict[str, Any] | None = None,
                 reasoning: bool | None = None) -> None:
        model = model or os.environ.get("OPENAI_MODEL") or None
        if not model or not isinstance(model, str):
            raise ValueError("OpenAIChat needs a model name: pass model= or set OPENAI_MODEL")
        check_timeout(timeout)
        from openai import AsyncOpenAI, OpenAI

        options = openai_options(api_key, base_url, timeout, 0, who="OpenAIChat")
        self._model = model
        self._sync = OpenAI(**options)
        self._options = options
        # one async client per event loop: its connections belong to the loop that
        # opened them, and a script may run several loops in turn (asyncio.run)
        self._async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = (
            weakref.WeakKeyDictionary())
        self._async_lock = threading.Lock()
        self._extra_body = dict(extra_body or {})
        if reasoning is not None and not isinstance(reasoning, bool):
            raise TypeError(f"reasoning must be True, False or None, got {reasoning!r}")
        self.reasoning = is_reasoning_model(model) if reasoning is None else reasoning
        self.base_url = str(self._sync.base_url)

    @property
    def model_name(self) -> str:
        return self._model

    def _async(self) -> Any:
        """The running loop's ``AsyncOpenAI`` client, made on its first call there."""
        from openai import AsyncOpenAI

        loop = asyncio.get_running_loop()
        with self._async_lock:
            client = self._async_clients.get(loop)
            if client is None:
                client = self._async_clients[loop] = AsyncOpenAI(**self._options)
        return client

    def _request(self, messages: Sequence[Message], max_tokens: int | None,
                 temperature: float) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._model,
            "messages": [{"role": m.role, "content": m.content} for m in check_messages(messages)],
        }
        if self.reasoning:
            if max_tokens is not None:
                request["max_completion_tokens"] = max_tokens
        else:
            request.update(call_settings(max_tokens, temperature))
        if self._extra_body:
            request["extra_body"] = self._extra_body
        return request

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        try:
            response = self._sync.chat.completions.create(
                **self._request(messages, max_tokens, temperature))
        except json.JSONDecodeError as exc:
            raise self._not_json(exc) from exc
        return completion_from_response(response, messages)

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        try:
            response = await self._async().chat.completions.create(
                **self._request(messages, max_tokens, temperature))
        except json.JSONDecodeError as exc:
            raise self._not_json(exc) from exc
        return completion_from_response(response, messages)

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
               temperature: float = 0.0) -> Iterator[StreamPart]:
        request = {**self._request(messages, max_tokens, temperature), **STREAM_OPTIONS}
        try:
            chunks = self._sync.chat.completions.create(**request)
        except json.JSONDecodeError as exc:
            raise self._not_json(exc) from exc
        reader = StreamReader()
        try:
            for chunk in chunks:
                delta = reader.add(chunk)
                if delta:
                    yield delta
        finally:
            chunks.close()  # a consumer that stops early frees the connection
        yield reader.completion(messages, self.base_url)

    async def astream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                      temperature: float = 0.0) -> AsyncIterator[StreamPart]:
        request = {**self._request(messages, max_tokens, temperature), **STREAM_OPTIONS}
        try:
            chunks = await self._async().chat.completions.create(**request)
        except json.JSONDecodeError as exc:
            raise self._not_json(exc) from exc
        reader = StreamReader()
        try:
            async for chunk in chunks:
                delta = reader.add(chunk)
                if delta:
                    yield delta
        finally:
            await chunks.close()
        yield reader.completion(messages, self.base_url)

    def _not_json(self, exc: json.JSONDecodeError) -> LLMError:
        return LLMError(f"the server at {self.base_url} did not answer with JSON ({exc}); "
                        "is base_url the API root, such as http://127.0.0.1:8080/v1?")


class StreamCut(ConnectionError):
    """A reply stream that stopped before the server said it was done."""


@dataclass
class StreamReader:
    """What a chat-completion stream said so far: text, refusal, finish reason, usage."""

    parts: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    finish: str | None = None
    usage: tuple[int, int, int] | None = None
    model: str = ""

    def add(self, chunk: Any) -> str:
        """Take one chunk in; its text delta ("" for none)."""
        self.model = self.model or (getattr(chunk, "model", "") or "")
        reported = getattr(chunk, "usage", None)
        prompt = token_count(getattr(reported, "prompt_tokens", None))
        if prompt is not None:
            details = getattr(reported, "prompt_tokens_details", None)
            self.usage = (prompt, token_count(getattr(reported, "completion_tokens", None)) or 0,
                          token_count(getattr(details, "cached_tokens", None)) or 0)
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return ""
        self.finish = choices[0].finish_reason or self.finish
        delta = getattr(choices[0], "delta", None)
        refusal = getattr(delta, "refusal", None)
        if isinstance(refusal, str) and refusal:
            self.refusal.append(refusal)
        text = getattr(delta, "content", None)
        if isinstance(text, str) and text:
            self.parts.append(text)
            return text
        return ""

    def completion(self, messages: Sequence[Message], server: str | None = None) -> Completion:
        """The whole reply, with the server's usage or tiktoken's count.

        A stream that ended without a finish reason was cut (a dropped
        connection, a server that cut a queued stream short), not finished:
        :class:`StreamCut`, which the runner retries while no token has gone out,
        instead of passing a truncated reply off as whole.
        """
        if self.finish is None:
            raise StreamCut(f"the stream from {server or 'the server'} ended after "
                            f"{len(self.parts)} text parts without a finish reason: "
                            "the connection was cut before the reply was done")
        return completion_with_usage("".join(self.parts), messages, self.usage,
                                     finish=self.finish, refusal="".join(self.refusal) or None,
                                     model=self.model)


def completion_from_response(response: Any, messages: Sequence[Message]) -> Completion:
    """A :class:`Completion` from an ``openai`` ChatCompletion, usage counted when absent."""
    choices = getattr(response, "choices", None) or []
    message = choices[0].message if choices else None
    text = (getattr(message, "content", None) or "") if message is not None else ""
    refusal = getattr(message, "refusal", None) if message is not None else None
    finish = choices[0].finish_reason if choices else None
    usage = getattr(response, "usage", None)
    prompt = token_count(getattr(usage, "prompt_tokens", None))
    reported = None
    if prompt is not None:
        details = getattr(usage, "prompt_tokens_details", None)
        reported = (prompt, token_count(getattr(usage, "completion_tokens", None)) or 0,
                    token_count(getattr(details, "cached_tokens", None)) or 0)
    return completion_with_usage(text, messages, reported, finish=finish, refusal=refusal,
                                 model=getattr(response, "model", "") or "")
