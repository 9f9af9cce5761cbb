"""Token usage, one way for every chat model: the server's counts, else tiktoken's.

``OpenAIChat`` and the framework wrappers all end a call the same way: read
what usage the server reported, fall back to counting, and say which it was.
That rule, and the chat overhead the fallback counts, live here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..text.tokens import count_tokens
from .messages import Completion, Message

# OpenAI's documented chat overhead: tokens per message around its content, and the
# reply's priming; used only when a server reports no usage.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_REPLY = 3
# what providers call "cut at max_tokens"; Completion.truncated knows OpenAI's "length"
TRUNCATED_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS"})


def message_tokens(content: str) -> int:
    """One message's share of a call's input, as the fallback counts it."""
    return count_tokens(content) + TOKENS_PER_MESSAGE


def counted_input_tokens(messages: Sequence[Message]) -> int:
    """Prompt tokens by tiktoken (cl100k_base), for servers that report no usage."""
    return sum(message_tokens(m.content) for m in messages) + TOKENS_PER_REPLY


def token_count(value: Any) -> int | None:
    """A reported token count, or ``None`` for anything that is not an int >= 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def finish_reason(reason: Any) -> str | None:
    """The provider's finish reason, with every "cut at max_tokens" spelled ``"length"``."""
    if not isinstance(reason, str):
        return None
    return "length" if reason in TRUNCATED_REASONS else reason


def call_settings(max_tokens: int | None, temperature: float) -> dict[str, Any]:
    """The per-call keyword arguments a chat model gets: temperature, and max_tokens if set."""
    settings: dict[str, Any] = {"temperature": temperature}
    if max_tokens is not None:
        settings["max_tokens"] = max_tokens
    return settings


def completion_with_usage(text: str, messages: Sequence[Message],
                          usage: tuple[int, int, int] | None, *, finish: str | None,
                          refusal: str | None, model: str) -> Completion:
    """A :class:`Completion` with the server's ``(input, output, cached)`` usage, or, when
    it gave none, tiktoken's counts of the prompt and the reply."""
    if usage is None:
        return Completion(text, counted_input_tokens(messages), count_tokens(text), 0,
                          "tiktoken", finish, refusal, model)
    return Completion(text, usage[0], usage[1], usage[2], "server", finish, refusal, model)
