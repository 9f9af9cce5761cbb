"""Any LlamaIndex ``LLM`` as the core's :class:`~shared_core.llm.ChatModel`.

The core's LLM stages (retries, timeouts, concurrency, the token ledger, cost
checks: :class:`~shared_core.llm.LLMRunner`) are written once over ``ChatModel``;
this wrapper lets them drive whatever LLM the LlamaIndex app already uses
(OpenAI, Anthropic, Ollama, vLLM, a ``CustomLLM``) through its own ``chat`` and
``achat``.

Token counts come from the reply when the LLM reports usage: an OpenAI-style
``usage`` in ``response.raw`` (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``; Anthropic's ``input_tokens`` plus its
cache writes and reads, ``output_tokens`` too), else ``prompt_tokens`` and
``completion_tokens`` in the response's ``additional_kwargs`` (or its message's,
where a ``CustomLLM``'s completion puts them). Without either they
are counted with tiktoken exactly as :class:`~shared_core.llm.OpenAIChat` counts
them, and the ledger says so. Errors from the LLM propagate unchanged, so
:func:`~shared_core.llm.is_transient` sees the client's own exception.

>>> from llama_index.core.llms import MockLLM
>>> from shared_core.llm import LLMRunner, Message, reply_text
>>> llm = chat_model(MockLLM())          # MockLLM echoes the prompt it was given
>>> runner = LLMRunner(llm)
>>> runner.call("demo", [Message("user", "Say hi")], reply_text)
'user: Say hi\\nassistant: '
>>> runner.ledger["demo"].calls, runner.ledger["demo"].calls_counted_locally
(1, 1)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from llama_index.core.llms import LLM, ChatMessage, ChatResponse, MessageRole

from shared_core.llm import ChatModel, Completion, Message, StreamPart
from shared_core.llm.messages import check_messages
from shared_core.llm.usage import call_settings, completion_with_usage, finish_reason, token_count

_ROLES = {"system": MessageRole.SYSTEM, "user": MessageRole.USER,
          "assistant": MessageRole.ASSISTANT}


class LlamaIndexChat:
    """A LlamaIndex ``LLM`` behind the :class:`~shared_core.llm.ChatModel` protocol.

    ``max_tokens`` and ``temperature`` go with every call as keyword arguments
    (LlamaIndex's OpenAI-style LLMs apply them per call); ``forward_settings=False``
    leaves both to the LLM's own configuration, for an LLM that rejects them.
    ``model_name`` defaults to ``llm.metadata.model_name`` (the class name when
    that is LlamaIndex's placeholder ``"unknown"``); it is what prices look up.

    ``stream``/``astream`` run the LLM's ``stream_chat``/``astream_chat``: each
    response's ``delta`` (or, when an LLM leaves it out, the growth of its
    cumulative text), then the whole reply with the usage of the last response.

    >>> from llama_index.core.llms import MockLLM
    >>> from shared_core.llm import Message
    >>> chat = LlamaIndexChat(MockLLM(max_tokens=2))
    >>> chat.model_name
    'MockLLM'
    >>> reply = chat.complete([Message("user", "Hi")])
    >>> reply.text, reply.usage_from
    ('text text', 'tiktoken')
    """

    def __init__(self, llm: LLM, *, model_name: str | None = None,
                 forward_settings: bool = True) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(f"LlamaIndexChat wraps a llama_index LLM, got {type(llm).__name__}")
        if model_name is not None and (not isinstance(model_name, str) or not model_name):
            raise ValueError(f"model_name must be a non-empty str, got {model_name!r}")
        self.llm = llm
        self.forward_settings = forward_settings
        self._model_name = model_name or _metadata_model_name(llm)

    @property
    def model_name(self) -> str:
        return self._model_name

    def __repr__(self) -> str:
        return f"LlamaIndexChat({type(self.llm).__name__}, model_name={self._model_name!r})"

    def _kwargs(self, max_tokens: int | None, temperature: float) -> dict[str, Any]:
        return call_settings(max_tokens, temperature) if self.forward_settings else {}

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        response = self.llm.chat(to_chat_messages(messages),
                                 **self._kwargs(max_tokens, temperature))
        return self._completion(response, messages)

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        response = await self.llm.achat(to_chat_messages(messages),
                                        **self._kwargs(max_tokens, temperature))
        return self._completion(response, messages)

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
               temperature: float = 0.0) -> Iterator[StreamPart]:
        responses = self.llm.stream_chat(to_chat_messages(messages),
                                         **self._kwargs(max_tokens, temperature))
        text, last = "", None
        for response in responses:
            delta, text, last = _delta(response, text), _grown(response, text), response
            if delta:
                yield delta
        yield self._streamed(last, text, messages)

    async def astream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                      temperature: float = 0.0) -> AsyncIterator[StreamPart]:
        responses = await self.llm.astream_chat(to_chat_messages(messages),
                                                **self._kwargs(max_tokens, temperature))
        text, last = "", None
        async for response in responses:
            delta, text, last = _delta(response, text), _grown(response, text), response
            if delta:
                yield delta
        yield self._streamed(last, text, messages)

    def _streamed(self, last: ChatResponse | None, text: str,
                  messages: Sequence[Message]) -> Completion:
        """The streamed reply whole: its text, the last response's usage and finish."""
        if last is None:  # a stream with no response at all: an empty reply
            return completion_with_usage("", messages, None, finish=None, refusal=None,
                                         model=self._model_name)
        return self._completion(last, messages, text)

    def _completion(self, response: ChatResponse, messages: Sequence[Message],
                    text: str | None = None) -> Completion:
        text = response.message.content or "" if text is None else text
        raw = response.raw
        finish = _finish_reason(raw)
        refusal = _refusal(response)
        model = _field(raw, "model")
        model = model if isinstance(model, str) and model else self._model_name
        usage = _usage(raw, response.additional_kwargs, response.message.additional_kwargs)
        return completion_with_usage(text, messages, usage, finish=finish, refusal=refusal,
                                     model=model)


def chat_model(llm: LLM | ChatModel) -> ChatModel:
    """The core's ``ChatModel`` for a LlamaIndex ``LLM``; a ``ChatModel`` passes through as is.

    >>> from llama_index.core.llms import MockLLM
    >>> chat = chat_model(MockLLM())
    >>> chat_model(chat) is chat
    True
    """
    # a LlamaIndex LLM first: one with a ``model_name`` field (HuggingFaceLLM, say) has
    # every attribute the runtime-checkable protocol looks for, with other signatures
    if isinstance(llm, LLM):
        return LlamaIndexChat(llm)
    if isinstance(llm, ChatModel):
        return llm
    raise TypeError("chat_model() takes a llama_index LLM or a conceptgraph ChatModel "
                    f"(model_name, complete, acomplete), got {type(llm).__name__}")


def to_chat_messages(messages: Sequence[Message]) -> list[ChatMessage]:
    """Our messages as LlamaIndex ``ChatMessage``s, roles mapped one to one."""
    return [ChatMessage(role=_ROLES[m.role], content=m.content)
            for m in check_messages(messages)]


def _delta(response: ChatResponse, before: str) -> str:
    """A streamed response's new text: its ``delta``, else what its whole text added."""
    if response.delta is not None:
        return response.delta
    whole = response.message.content or ""
    return whole[len(before):] if whole.startswith(before) else ""


def _grown(response: ChatResponse, before: str) -> str:
    """The reply so far, after this response."""
    return before + _delta(response, before)


def _metadata_model_name(llm: LLM) -> str:
    try:
        name = llm.metadata.model_name
    except Exception:  # a metadata property that needs a live client: the class will do
        name = None
    return name if isinstance(name, str) and name and name != "unknown" else type(llm).__name__


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, else ``obj.name``; ``None`` when absent."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _usage(raw: Any, *additional: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(input, output, cached) tokens the server reported, or ``None`` when it reported none."""
    usage = _field(raw, "usage")
    if usage is not None:
        prompt = token_count(_field(usage, "prompt_tokens"))
        if prompt is not None:  # OpenAI's shape
            cached = token_count(_field(_field(usage, "prompt_tokens_details"), "cached_tokens"))
            return prompt, token_count(_field(usage, "completion_tokens")) or 0, cached or 0
        prompt = token_count(_field(usage, "input_tokens"))
        if prompt is not None:  # Anthropic's: input_tokens leaves out cache writes and reads
            written = token_count(_field(usage, "cache_creation_input_tokens")) or 0
            cached = token_count(_field(usage, "cache_read_input_tokens")) or 0
            return (prompt + written + cached, token_count(_field(usage, "output_tokens")) or 0,
                    cached)
    for kwargs in additional:  # the response's, then its message's (CustomLLM puts them there)
        prompt = token_count(kwargs.get("prompt_tokens"))
        if prompt is not None:
            return prompt, token_count(kwargs.get("completion_tokens")) or 0, 0
    return None


def _finish_reason(raw: Any) -> str | None:
    choices = _field(raw, "choices")
    reason = None
    if isinstance(choices, Sequence) and not isinstance(choices, str) and choices:
        reason = _field(choices[0], "finish_reason")
    for name in ("finish_reason", "stop_reason", "done_reason"):
        if reason is None:
            reason = _field(raw, name)
    return finish_reason(reason)


def _refusal(response: ChatResponse) -> str | None:
    refusal = response.message.additional_kwargs.get("refusal")
    if refusal is None:
        choices = _field(response.raw, "choices")
        if isinstance(choices, Sequence) and not isinstance(choices, str) and choices:
            refusal = _field(_field(choices[0], "message"), "refusal")
    return refusal if isinstance(refusal, str) and refusal else None
