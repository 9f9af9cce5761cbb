"""A scripted chat model for unit tests: replies come from a list or a function, in order.

It is a stand-in for the *LLM* (not for any of our code): it implements the
:class:`~shared_core.llm.ChatModel` protocol, records every call, and books
tokens the way a server without usage would be counted (tiktoken), so ledger
figures in tests can be worked out by hand from the prompts and replies.

A script entry is a reply text, a :class:`~shared_core.llm.Completion` (to set
usage, ``finish_reason`` or a refusal exactly), or an exception instance to raise.

It streams too (:class:`~shared_core.llm.StreamingChatModel`): a reply's words
as deltas (``"a b c"`` → ``"a"``, ``" b"``, ``" c"``), then its Completion. A
:class:`StreamBreak` entry yields its ``deltas`` and then raises its ``error``
mid-stream. ``CompleteOnlyChat(ScriptedChat(...))`` is a model that cannot stream.
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from shared_core.llm import Completion, Message, StreamPart
from shared_core.llm.usage import counted_input_tokens
from shared_core.text import count_tokens


@dataclass(frozen=True)
class StreamBreak:
    """A stream that yields ``deltas`` and then fails with ``error``."""

    deltas: tuple[str, ...]
    error: BaseException


Reply = str | Completion | BaseException | StreamBreak


def word_deltas(text: str) -> list[str]:
    """How ScriptedChat streams a reply: each word with the whitespace before it."""
    return re.findall(r"\s*\S+", text) or ([text] if text else [])


@dataclass
class ScriptedChat:
    """``ScriptedChat(["reply 1", TimeoutError(), "reply 2"])`` or ``ScriptedChat(fn)``.

    With a list, call ``k`` gets entry ``k`` (running past the end is a test bug
    and raises). With a function, every call gets ``fn(messages)``. ``settings``
    records each call's ``(max_tokens, temperature)``.
    """

    script: Sequence[Reply] | Callable[[Sequence[Message]], Reply]
    name: str = "scripted"
    calls: list[tuple[Message, ...]] = field(default_factory=list)
    settings: list[tuple[int | None, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return self.name

    def _next(self, messages: Sequence[Message]) -> Reply:
        with self._lock:
            self.calls.append(tuple(messages))
            if callable(self.script):
                return self.script(messages)
            k = len(self.calls) - 1
            if k >= len(self.script):
                raise AssertionError(f"ScriptedChat: call {k + 1} but only "
                                     f"{len(self.script)} replies scripted")
            return self.script[k]

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        self.settings.append((max_tokens, temperature))
        reply = self._next(messages)
        if isinstance(reply, StreamBreak):
            raise reply.error
        return self._completion(reply, messages)

    def _completion(self, reply: str | Completion | BaseException,
                    messages: Sequence[Message]) -> Completion:
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Completion):
            return reply
        return Completion(reply, counted_input_tokens(messages), count_tokens(reply), 0,
                          "tiktoken", "stop", None, self.name)

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, temperature=temperature)

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
               temperature: float = 0.0) -> Iterator[StreamPart]:
        self.settings.append((max_tokens, temperature))
        reply = self._next(messages)
        if isinstance(reply, StreamBreak):
            yield from reply.deltas
            raise reply.error
        completion = self._completion(reply, messages)
        yield from word_deltas(completion.text)
        yield completion

    async def astream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                      temperature: float = 0.0) -> AsyncIterator[StreamPart]:
        for part in self.stream(messages, max_tokens=max_tokens, temperature=temperature):
            yield part


@dataclass
class CompleteOnlyChat:
    """A ScriptedChat that cannot stream: only ``complete``/``acomplete`` (the protocol)."""

    inner: ScriptedChat

    @property
    def model_name(self) -> str:
        return self.inner.name

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        return self.inner.complete(messages, max_tokens=max_tokens, temperature=temperature)

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        return self.inner.complete(messages, max_tokens=max_tokens, temperature=temperature)


class RecordedSleep:
    """``LLMRunner(sleep=RecordedSleep())``: keeps every wait the runner asks for, sleeps none."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
