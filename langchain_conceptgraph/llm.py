"""Any LangChain chat model as the core's :class:`~shared_core.llm.ChatModel`.

The core's LLM stages (retries, timeouts, concurrency, the token ledger, cost
checks: :class:`~shared_core.llm.LLMRunner`) are written once over ``ChatModel``;
this wrapper lets them drive whatever ``BaseChatModel`` the LangChain app
already uses (``ChatOpenAI``, ``ChatAnthropic``, ``ChatOllama``, ...) through
its own ``invoke`` and ``ainvoke``.

Token counts come from the reply's ``usage_metadata`` when the model reports
usage (``input_tokens``, ``output_tokens``, ``input_token_details.cache_read``);
without it they are counted with tiktoken exactly as
:class:`~shared_core.llm.OpenAIChat` counts them, and the ledger says so. Errors
from the model propagate unchanged, so :func:`~shared_core.llm.is_transient`
sees the client's own exception. Give ``ChatOpenAI`` ``max_retries=0``: the
runner retries, under one policy, booked in one ledger.

>>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
>>> from shared_core.llm import LLMRunner, Message, reply_text
>>> fake = GenericFakeChatModel(messages=iter(["Hello!"]))
>>> runner = LLMRunner(chat_model(fake))
>>> runner.call("demo", [Message("user", "Say hi")], reply_text)
'Hello!'
>>> runner.ledger["demo"].calls, runner.ledger["demo"].calls_counted_locally
(1, 1)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    SystemMessage,
)

from shared_core.llm import ChatModel, Completion, Message, StreamPart
from shared_core.llm.messages import check_messages
from shared_core.llm.usage import call_settings, completion_with_usage, finish_reason, token_count

_MESSAGES: dict[str, type[BaseMessage]] = {"system": SystemMessage, "user": HumanMessage,
                                           "assistant": AIMessage}


class LangChainChat:
    """A LangChain ``BaseChatModel`` behind the :class:`~shared_core.llm.ChatModel` protocol.

    ``max_tokens`` and ``temperature`` go with every call as keyword arguments
    (chat models put them in the request; ``ChatOpenAI`` sends ``max_tokens`` as
    ``max_completion_tokens``); ``forward_settings=False`` leaves both to the
    model's own configuration, for a model that rejects them. ``model_name``
    defaults to the model's ``model_name`` or ``model`` attribute, else its class
    name; it is what prices look up.

    ``stream``/``astream`` run the model's own ``stream``/``astream``: each
    chunk's text, then the chunks added up (LangChain's ``+``) as the whole reply,
    with the ``usage_metadata`` the model put on them (``ChatOpenAI`` needs
    ``stream_usage=True`` for it).

    >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    >>> from shared_core.llm import Message
    >>> chat = LangChainChat(GenericFakeChatModel(messages=iter(["Hi there"])))
    >>> chat.model_name
    'GenericFakeChatModel'
    >>> reply = chat.complete([Message("user", "Hi")])
    >>> reply.text, reply.usage_from, reply.output_tokens
    ('Hi there', 'tiktoken', 2)
    """

    def __init__(self, chat_model: BaseChatModel, *, model_name: str | None = None,
                 forward_settings: bool = True) -> None:
        if not isinstance(chat_model, BaseChatModel):
            raise TypeError("LangChainChat wraps a LangChain BaseChatModel, got "
                            f"{type(chat_model).__name__}")
        if model_name is not None and (not isinstance(model_name, str) or not model_name):
            raise ValueError(f"model_name must be a non-empty str, got {model_name!r}")
        self.chat_model = chat_model
        self.forward_settings = forward_settings
        self._model_name = model_name or _attribute_model_name(chat_model)

    @property
    def model_name(self) -> str:
        return self._model_name

    def __repr__(self) -> str:
        return (f"LangChainChat({type(self.chat_model).__name__}, "
                f"model_name={self._model_name!r})")

    def _kwargs(self, max_tokens: int | None, temperature: float) -> dict[str, Any]:
        return call_settings(max_tokens, temperature) if self.forward_settings else {}

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        reply = self.chat_model.invoke(to_langchain_messages(messages),
                                       **self._kwargs(max_tokens, temperature))
        return self._completion(reply, messages)

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        reply = await self.chat_model.ainvoke(to_langchain_messages(messages),
                                              **self._kwargs(max_tokens, temperature))
        return self._completion(reply, messages)

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
               temperature: float = 0.0) -> Iterator[StreamPart]:
        whole: BaseMessageChunk | None = None
        for chunk in self.chat_model.stream(to_langchain_messages(messages),
                                            **self._kwargs(max_tokens, temperature)):
            whole = chunk if whole is None else whole + chunk
            delta = message_text(chunk)
            if delta:
                yield delta
        yield self._completion(whole if whole is not None else AIMessageChunk(content=""),
                               messages)

    async def astream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                      temperature: float = 0.0) -> AsyncIterator[StreamPart]:
        whole: BaseMessageChunk | None = None
        async for chunk in self.chat_model.astream(to_langchain_messages(messages),
                                                   **self._kwargs(max_tokens, temperature)):
            whole = chunk if whole is None else whole + chunk
            delta = message_text(chunk)
            if delta:
                yield delta
        yield self._completion(whole if whole is not None else AIMessageChunk(content=""),
                               messages)

    def _completion(self, reply: BaseMessage, messages: Sequence[Message]) -> Completion:
        text = message_text(reply)
        meta = reply.response_metadata or {}
        finish = _finish_reason(meta)
        refusal = reply.additional_kwargs.get("refusal")
        refusal = refusal if isinstance(refusal, str) and refusal else None
        model = meta.get("model_name") or meta.get("model")
        model = model if isinstance(model, str) and model else self._model_name
        return completion_with_usage(text, messages, _usage(getattr(reply, "usage_metadata", None)),
                                     finish=finish, refusal=refusal, model=model)


def chat_model(model: BaseChatModel | ChatModel) -> ChatModel:
    """The core's ``ChatModel`` for a LangChain chat model; a ``ChatModel`` passes through.

    >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    >>> chat = chat_model(GenericFakeChatModel(messages=iter([])))
    >>> chat_model(chat) is chat
    True
    """
    if isinstance(model, BaseChatModel):
        return LangChainChat(model)
    if isinstance(model, ChatModel):
        return model
    raise TypeError("chat_model() takes a LangChain BaseChatModel or a conceptgraph ChatModel "
                    f"(model_name, complete, acomplete), got {type(model).__name__}")


def to_langchain_messages(messages: Sequence[Message]) -> list[BaseMessage]:
    """Our messages as LangChain messages: system, human and AI, in order."""
    return [_MESSAGES[m.role](content=m.content) for m in check_messages(messages)]


def message_text(message: BaseMessage) -> str:
    """A reply's text: its string content, or its text blocks joined (Anthropic-style lists)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def _attribute_model_name(model: BaseChatModel) -> str:
    for name in ("model_name", "model"):
        value = getattr(model, name, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _usage(usage: Any) -> tuple[int, int, int] | None:
    """(input, output, cached) tokens from ``usage_metadata``; ``None`` when there is none."""
    if not isinstance(usage, Mapping):
        return None
    prompt = token_count(usage.get("input_tokens"))
    if prompt is None:
        return None
    details = usage.get("input_token_details")
    cached = token_count(details.get("cache_read")) if isinstance(details, Mapping) else None
    return prompt, token_count(usage.get("output_tokens")) or 0, cached or 0


def _finish_reason(meta: Mapping[str, Any]) -> str | None:
    for name in ("finish_reason", "stop_reason", "done_reason"):
        reason = meta.get(name)
        if isinstance(reason, str):
            return finish_reason(reason)
    return None
