"""What the core asks of a chat model, and what it gets back: one small protocol.

Every LLM the project talks to (the ``openai`` client, a LlamaIndex ``LLM``, a
LangChain chat model) is wrapped behind :class:`ChatModel`, so retries, the token
ledger, concurrency and parsing are written once (:mod:`.runner`), not per
framework.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant"]
UsageSource = Literal["server", "tiktoken"]


@dataclass(frozen=True)
class Message:
    """One chat turn."""

    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant"):
            raise ValueError(f"role must be system, user or assistant, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"message content must be str, got {type(self.content).__name__}")


@dataclass(frozen=True)
class Completion:
    """A model's reply and what it cost.

    ``usage_from`` says whether the token counts are the server's own
    (``"server"``) or counted here with tiktoken because the server gave none.
    ``refusal`` is the model's refusal text when it declined (OpenAI's field).
    ``finish_reason`` ``"length"`` means the reply was cut at ``max_tokens``.
    """

    text: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    usage_from: UsageSource = "server"
    finish_reason: str | None = None
    refusal: str | None = None
    model: str = ""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@runtime_checkable
class ChatModel(Protocol):
    """The one thing the core needs from an LLM: a reply to messages, sync and async.

    Implementations only translate. They raise their client's own errors; the
    runner decides which are worth a retry (:func:`.runner.is_transient`).
    """

    @property
    def model_name(self) -> str: ...

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion: ...

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion: ...


# what a stream yields: the reply's text deltas, then one Completion for the whole reply
StreamPart = str | Completion


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A :class:`ChatModel` that can also stream its reply, for answers shown as they come.

    ``stream`` and ``astream`` yield the reply's text deltas (``str``) as they
    arrive, then exactly one :class:`Completion` for the whole reply: its text
    the deltas joined, its usage the server's (or counted, as ``complete``
    counts it). The last part is what the runner books in the ledger, so a
    streamed answer costs the same in the ledger as a completed one.
    """

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
               temperature: float = 0.0) -> Iterator[StreamPart]: ...

    def astream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                temperature: float = 0.0) -> AsyncIterator[StreamPart]: ...


class LLMError(RuntimeError):
    """An LLM stage could not do its job; the message says what and what to change."""


class BadOutput(ValueError):
    """A reply that cannot be used: empty, a refusal, garbage, truncated.

    ``kind`` is a short stable label the ledger counts replies by
    (``"empty"``, ``"refusal"``, ``"unparsable"``, ``"no_entities"``, ...).
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def check_messages(messages: object) -> tuple[Message, ...]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a sequence of Message")
    out = tuple(messages)
    if not out:
        raise ValueError("messages must not be empty")
    for i, m in enumerate(out):
        if not isinstance(m, Message):
            raise TypeError(f"messages[{i}] must be a Message, got {type(m).__name__}")
    return out


def reply_text(completion: Completion) -> str:
    """The reply's text, or :class:`BadOutput` for an empty reply or a refusal."""
    if completion.refusal:
        raise BadOutput("refusal", completion.refusal[:200])
    if not completion.text.strip():
        raise BadOutput("empty", f"finish_reason={completion.finish_reason!r}")
    return completion.text
