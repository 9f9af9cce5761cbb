"""LlamaIndexChat: any LlamaIndex LLM behind the core's ChatModel protocol.

LlamaIndex's own ``MockLLM`` (it echoes the prompt ``messages_to_prompt`` makes), a
``CustomLLM`` with canned ``ChatResponse``s (every place an LLM may report usage), and an
OpenAI-compatible ``CustomLLM`` that calls the real ``openai`` client against StubOpenAI
the way ``llama-index-llms-openai`` does (``raw`` is the ChatCompletion, token counts in
``additional_kwargs``); that package is not installed here, so this stands in for it.

Token counts by hand (tiktoken cl100k_base): "Be brief." 3, "Say hi" 2, so the prompt
counts (3 + 3) + (2 + 3) + 3 = 14 input tokens; MockLLM's echo
"system: Be brief.\\nuser: Say hi\\nassistant: " is
system|:|·Be|·brief|.\\n|user|:|·Say|·hi|\\n|assistant|:|· = 13 tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import openai
import pytest
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
    MessageRole,
    MockLLM,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback

from llama_index_conceptgraph import LlamaIndexChat, chat_model
from llama_index_conceptgraph.llm import to_chat_messages
from shared_core.llm import (
    ChatModel,
    Completion,
    LLMRunner,
    Message,
    RequestFailed,
    RetryPolicy,
    TokenLedger,
    reply_text,
)
from shared_core.llm.usage import counted_input_tokens
from shared_core.text import count_tokens
from tests.shared_core.llm.scripted import RecordedSleep, ScriptedChat
from tests.shared_core.openai_stub import ChatReply, HTTPError, StubOpenAI, usage

loopback = pytest.mark.allow_hosts(["127.0.0.1"])

PROMPT = [Message("system", "Be brief."), Message("user", "Say hi")]
PROMPT_TOKENS = 14
ECHO = "system: Be brief.\nuser: Say hi\nassistant: "
WIRE_PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "HTTP_PROXY",
                 "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_token_counts_by_hand() -> None:
    assert counted_input_tokens(PROMPT) == PROMPT_TOKENS
    assert count_tokens(ECHO) == 13


# ------------------------------------------------------------------ test LLMs
class Canned(CustomLLM):
    """A CustomLLM whose ``chat`` returns (or raises) the next canned entry, recording calls."""

    replies: list[Any] = Field(default_factory=list)
    name: str = "canned-model"
    calls: list[tuple[list[ChatMessage], dict[str, Any]]] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.name, is_chat_model=True)

    def _next(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        self.calls.append((list(messages), dict(kwargs)))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._next(messages, kwargs)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        await asyncio.sleep(0)
        return self._next(messages, kwargs)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False,
                 **kwargs: Any) -> CompletionResponse:
        raise AssertionError("LlamaIndexChat calls chat")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise AssertionError("LlamaIndexChat calls chat")


def assistant(text: str | None, **kwargs: Any) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text, **kwargs)


class CompletingLLM(CustomLLM):
    """A CustomLLM that implements only ``complete``: LlamaIndex's chat goes through it,
    moving the completion's ``additional_kwargs`` onto the reply's message."""

    completion: CompletionResponse
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False,
                 **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return self.completion

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise AssertionError("not streamed")


class OpenAICompatible(CustomLLM):
    """An OpenAI-compatible LlamaIndex LLM as ``llama-index-llms-openai`` builds its replies:
    the real client's ChatCompletion as ``raw``, token counts in ``additional_kwargs``.
    Per-call kwargs override the request, as there; the client's own retries are off."""

    model: str = "stub-chat"
    base_url: str
    _sync: openai.OpenAI = PrivateAttr()
    _async: openai.AsyncOpenAI = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self._sync = openai.OpenAI(base_url=self.base_url, api_key="sk-test", max_retries=0)
        self._async = openai.AsyncOpenAI(base_url=self.base_url, api_key="sk-test",
                                         max_retries=0)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=True)

    def _request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"model": self.model, **kwargs,
                "messages": [{"role": m.role.value, "content": m.content} for m in messages]}

    @staticmethod
    def _response(raw: Any) -> ChatResponse:
        counts = ({} if raw.usage is None else
                  {"prompt_tokens": raw.usage.prompt_tokens,
                   "completion_tokens": raw.usage.completion_tokens,
                   "total_tokens": raw.usage.total_tokens})
        return ChatResponse(message=assistant(raw.choices[0].message.content), raw=raw,
                            additional_kwargs=counts)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._response(self._sync.chat.completions.create(
            **self._request(messages, kwargs)))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._response(await self._async.chat.completions.create(
            **self._request(messages, kwargs)))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False,
                 **kwargs: Any) -> CompletionResponse:
        raise AssertionError("LlamaIndexChat calls chat")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise AssertionError("LlamaIndexChat calls chat")


# ------------------------------------------------------------------ MockLLM
def test_mock_llm_echo_is_counted_with_tiktoken() -> None:
    ledger = TokenLedger()
    runner = LLMRunner(chat_model(MockLLM()), ledger=ledger)
    completion = runner.call("extract", PROMPT, lambda c: c)
    assert completion == Completion(ECHO, PROMPT_TOKENS, 13, 0, "tiktoken", None, None,
                                    "MockLLM")
    u = ledger["extract"]
    assert (u.calls, u.input_tokens, u.output_tokens, u.calls_counted_locally) == (1, 14, 13, 1)


async def test_mock_llm_async_and_its_own_max_tokens() -> None:
    chat = LlamaIndexChat(MockLLM(max_tokens=3))
    completion = await chat.acomplete(PROMPT, max_tokens=50)  # MockLLM heeds only its own
    assert completion.text == "text text text" and completion.output_tokens == 3


def test_mock_llm_in_a_map_keeps_order() -> None:
    runner = LLMRunner(chat_model(MockLLM()), concurrency=2)
    outcomes = runner.map(["a", "b", "c"], lambda q: runner.acall(
        "s", [Message("user", q)], reply_text))
    assert [o.value for o in outcomes] == [f"user: {q}\nassistant: " for q in "abc"]


# ------------------------------------------------------------------ where usage is found
def openai_raw(usage_: dict[str, Any] | None, finish: str = "stop",
               model: str = "served-model", refusal: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "Paris."}
    if refusal is not None:
        message["refusal"] = refusal
    raw: dict[str, Any] = {"model": model, "choices": [
        {"index": 0, "finish_reason": finish, "message": message}]}
    if usage_ is not None:
        raw["usage"] = usage_
    return raw


@pytest.mark.parametrize("response, expected", [
    # OpenAI's usage in raw (a dict here; an object in the HTTP tests below)
    (ChatResponse(message=assistant("Paris."), raw=openai_raw(usage(40, 3, cached_tokens=32))),
     Completion("Paris.", 40, 3, 32, "server", "stop", None, "served-model")),
    # Anthropic's: input_tokens leaves out cache writes (8) and reads (32): 40 + 8 + 32 = 80
    (ChatResponse(message=assistant("Paris."), raw={
        "model": "claude-x", "stop_reason": "max_tokens",
        "usage": {"input_tokens": 40, "output_tokens": 3, "cache_creation_input_tokens": 8,
                  "cache_read_input_tokens": 32}}),
     Completion("Paris.", 80, 3, 32, "server", "length", None, "claude-x")),
    # no usage in raw: the response's additional_kwargs
    (ChatResponse(message=assistant("Paris."), raw=openai_raw(None, finish="length"),
                  additional_kwargs={"prompt_tokens": 41, "completion_tokens": 2,
                                     "total_tokens": 43}),
     Completion("Paris.", 41, 2, 0, "server", "length", None, "served-model")),
    # nothing anywhere: counted; the model's name from its metadata
    (ChatResponse(message=assistant("Paris.")),
     Completion("Paris.", PROMPT_TOKENS, 2, 0, "tiktoken", None, None, "canned-model")),
    # a usage with no counts in it is no usage; Ollama's done_reason
    (ChatResponse(message=assistant("Paris."), raw={"usage": {}, "done_reason": "stop"}),
     Completion("Paris.", PROMPT_TOKENS, 2, 0, "tiktoken", "stop", None, "canned-model")),
    # a refusal in raw's message; None content is ""
    (ChatResponse(message=assistant(None), raw=openai_raw(usage(9, 6), refusal="I can't.")),
     Completion("", 9, 6, 0, "server", "stop", "I can't.", "served-model")),
    # ... or in the message's additional_kwargs
    (ChatResponse(message=assistant("", additional_kwargs={"refusal": "No."})),
     Completion("", PROMPT_TOKENS, 0, 0, "tiktoken", None, "No.", "canned-model")),
], ids=["openai-raw", "anthropic-raw", "additional-kwargs", "none", "empty-usage",
        "refusal-raw", "refusal-kwargs"])
def test_where_usage_is_found(response: ChatResponse, expected: Completion) -> None:
    assert LlamaIndexChat(Canned(replies=[response])).complete(PROMPT) == expected


def test_a_custom_llms_completion_kwargs_count_as_usage() -> None:
    llm = CompletingLLM(completion=CompletionResponse(
        text="Paris.", additional_kwargs={"prompt_tokens": 17, "completion_tokens": 2}))
    completion = LlamaIndexChat(llm).complete(PROMPT)
    assert llm.prompts == [ECHO]
    assert completion == Completion("Paris.", 17, 2, 0, "server", None, None, "CompletingLLM")


def test_settings_are_forwarded_as_call_kwargs() -> None:
    llm = Canned(replies=[ChatResponse(message=assistant("a"))] * 3)
    runner = LLMRunner(LlamaIndexChat(llm), temperature=0.3)
    runner.call("s", PROMPT, reply_text, max_tokens=12)
    runner.call("s", PROMPT, reply_text)
    LlamaIndexChat(llm, forward_settings=False).complete(PROMPT, max_tokens=5)
    assert [kwargs for _, kwargs in llm.calls] == [{"temperature": 0.3, "max_tokens": 12},
                                                  {"temperature": 0.3}, {}]
    sent = llm.calls[0][0]
    assert [(m.role, m.content) for m in sent] == [(MessageRole.SYSTEM, "Be brief."),
                                                   (MessageRole.USER, "Say hi")]


@pytest.mark.parametrize("use_async", [False, True])
def test_errors_propagate_unchanged(use_async: bool) -> None:
    error = ConnectionResetError("peer reset")
    chat = LlamaIndexChat(Canned(replies=[error]))
    with pytest.raises(ConnectionResetError) as raised:
        if use_async:
            asyncio.run(chat.acomplete(PROMPT))
        else:
            chat.complete(PROMPT)
    assert raised.value is error


def test_the_runner_retries_a_transient_error_from_a_llama_index_llm() -> None:
    sleep = RecordedSleep()
    llm = Canned(replies=[TimeoutError("slow"), ChatResponse(message=assistant("ok"))])
    runner = LLMRunner(chat_model(llm), sleep=sleep,
                       retry=RetryPolicy(base_delay=0.5, jitter=False))
    assert runner.call("s", PROMPT, reply_text) == "ok"
    assert sleep.delays == [0.5] and runner.ledger["s"].retries == 1


# ------------------------------------------------------------------ OpenAI-compatible, HTTP
@loopback
def test_openai_compatible_llm_over_http(no_openai_env: None) -> None:
    with StubOpenAI(script=[ChatReply("Hello there", usage=usage(120, 2, cached_tokens=64)),
                            ChatReply("Cut", finish_reason="length", usage=None)]) as stub:
        chat = LlamaIndexChat(OpenAICompatible(base_url=stub.url))
        runner = LLMRunner(chat)
        first = runner.call("extract", PROMPT, lambda c: c, max_tokens=16)
        second = runner.call("extract", PROMPT, lambda c: c)
    assert chat.model_name == "stub-chat"
    assert first == Completion("Hello there", 120, 2, 64, "server", "stop", None, "stub-chat")
    assert second == Completion("Cut", PROMPT_TOKENS, 1, 0, "tiktoken", "length", None,
                                "stub-chat")
    assert second.truncated
    assert stub.chat_bodies() == [
        {"model": "stub-chat", "temperature": 0.0, "max_tokens": 16, "messages": WIRE_PROMPT},
        {"model": "stub-chat", "temperature": 0.0, "messages": WIRE_PROMPT}]


@loopback
def test_a_429_through_a_llama_index_llm_is_retried(no_openai_env: None) -> None:
    sleep = RecordedSleep()
    with StubOpenAI(script=[HTTPError(429, "slow down", {"retry-after-ms": "250"}),
                            ChatReply("ok", usage=usage(14, 1))]) as stub:
        runner = LLMRunner(chat_model(OpenAICompatible(base_url=stub.url)), sleep=sleep)
        assert runner.call("s", PROMPT, reply_text) == "ok"
    assert sleep.delays == [0.25] and len(stub.chat_bodies()) == 2
    u = runner.ledger["s"]
    assert (u.calls, u.retries, u.input_tokens, u.output_tokens) == (1, 1, 14, 1)


@loopback
def test_http_errors_through_a_llama_index_llm(no_openai_env: None) -> None:
    sleep = RecordedSleep()
    with StubOpenAI(script=[HTTPError(503), HTTPError(503), HTTPError(400, "bad request")]
                    ) as stub:
        runner = LLMRunner(chat_model(OpenAICompatible(base_url=stub.url)), sleep=sleep,
                           retry=RetryPolicy(attempts=2, base_delay=0.5, jitter=False))
        with pytest.raises(RequestFailed) as failed:
            runner.call("s", PROMPT, reply_text)
        assert failed.value.kind == "http_503"
        assert isinstance(failed.value.__cause__, openai.InternalServerError)
        with pytest.raises(openai.BadRequestError, match="bad request"):
            runner.call("s", PROMPT, reply_text)
    assert sleep.delays == [0.5] and len(stub.chat_bodies()) == 3


@loopback
def test_sync_then_async_calls_through_one_llama_index_llm(no_openai_env: None) -> None:
    """Sync calls, then async ones in the caller's loop, then sync again, on one LLM
    object and a keep-alive server: the sync calls go through its ``chat`` (not its
    async client on the runner's loop, which the caller's loop could not use after)."""
    replies = ["one", "two", "three"]
    with StubOpenAI(keep_alive=True, script=[ChatReply(r) for r in replies]) as stub:
        runner = LLMRunner(chat_model(OpenAICompatible(base_url=stub.url)))
        assert runner.call("s", PROMPT, reply_text) == "one"
        assert asyncio.run(runner.acall("s", PROMPT, reply_text)) == "two"
        assert runner.call("s", PROMPT, reply_text) == "three"
    assert runner.ledger["s"].calls == 3 and runner.ledger["s"].retries == 0


# ------------------------------------------------------------------ chat_model() and names
class NamedLLM(Canned):
    """An LLM with a ``model_name`` field, as HuggingFaceLLM has: it carries every attribute
    the runtime-checkable ChatModel protocol looks for, so the protocol alone would let it
    through with the wrong ``complete``."""

    model_name: str = "hf-model"


def test_chat_model_wraps_passes_through_and_refuses() -> None:
    wrapped = chat_model(MockLLM())
    assert isinstance(wrapped, LlamaIndexChat) and isinstance(wrapped, ChatModel)
    assert chat_model(wrapped) is wrapped
    scripted = ScriptedChat([])
    assert chat_model(scripted) is scripted
    named = NamedLLM()
    assert isinstance(named, ChatModel)  # the trap
    assert isinstance(chat_model(named), LlamaIndexChat)
    with pytest.raises(TypeError, match="takes a llama_index LLM or a conceptgraph ChatModel "
                                        r"\(model_name, complete, acomplete\), got str"):
        chat_model("gpt-4o-mini")  # type: ignore[arg-type]


def test_the_wrapper_checks_what_it_wraps() -> None:
    with pytest.raises(TypeError, match="wraps a llama_index LLM, got ScriptedChat"):
        LlamaIndexChat(ScriptedChat([]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model_name must be a non-empty str"):
        LlamaIndexChat(MockLLM(), model_name="")


def test_model_names() -> None:
    assert LlamaIndexChat(MockLLM()).model_name == "MockLLM"  # metadata says "unknown"
    assert LlamaIndexChat(Canned(name="gpt-4o-mini")).model_name == "gpt-4o-mini"
    assert LlamaIndexChat(MockLLM(), model_name="smollm2").model_name == "smollm2"
    assert repr(LlamaIndexChat(MockLLM())) == "LlamaIndexChat(MockLLM, model_name='MockLLM')"


def test_message_conversion() -> None:
    converted = to_chat_messages([Message("system", "s"), Message("user", "u"),
                                  Message("assistant", "a")])
    assert [(m.role, m.content) for m in converted] == [
        (MessageRole.SYSTEM, "s"), (MessageRole.USER, "u"), (MessageRole.ASSISTANT, "a")]
    with pytest.raises(ValueError, match="must not be empty"):
        to_chat_messages([])
    with pytest.raises(TypeError, match=r"messages\[0\] must be a Message"):
        to_chat_messages([ChatMessage(role="user", content="x")])  # type: ignore[list-item]
