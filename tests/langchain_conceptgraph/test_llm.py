"""LangChainChat: any LangChain chat model behind the core's ChatModel protocol.

``ChatOpenAI`` talks real HTTP to StubOpenAI (``max_retries=0``: our runner retries);
``GenericFakeChatModel`` and a small failing model cover replies without usage and
errors. Token counts by hand (tiktoken cl100k_base): "Be brief." 3, "Say hi" 2,
"Hello there" 2, so the prompt below counts (3 + 3) + (2 + 3) + 3 = 14 input tokens.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI

from langchain_conceptgraph import LangChainChat, chat_model
from langchain_conceptgraph.llm import message_text, to_langchain_messages
from shared_core.llm import (
    BadOutput,
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
from tests.shared_core.llm.scripted import RecordedSleep, ScriptedChat
from tests.shared_core.openai_stub import ChatReply, HTTPError, StubOpenAI, usage

loopback = pytest.mark.allow_hosts(["127.0.0.1"])

PROMPT = [Message("system", "Be brief."), Message("user", "Say hi")]
PROMPT_TOKENS = 14
WIRE_PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "HTTP_PROXY",
                 "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def chat_openai(stub: StubOpenAI, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model="stub-chat", base_url=stub.url, api_key="sk-test",  # type: ignore[arg-type]
                      max_retries=0, **kwargs)


def fake(*replies: str | AIMessage) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(replies))


def test_prompt_tokens_by_hand() -> None:
    assert counted_input_tokens(PROMPT) == PROMPT_TOKENS


# ------------------------------------------------------------------ ChatOpenAI over HTTP
@loopback
def test_chat_openai_usage_from_the_server(no_openai_env: None) -> None:
    with StubOpenAI(script=[ChatReply("Hello there", usage=usage(120, 2, cached_tokens=64)),
                            ChatReply("Again", usage=usage(30, 1))]) as stub:
        chat = LangChainChat(chat_openai(stub))
        ledger = TokenLedger()
        runner = LLMRunner(chat, ledger=ledger)
        first = runner.call("extract", PROMPT, lambda c: c, max_tokens=16)
        second = runner.call("extract", PROMPT, lambda c: c)
    assert chat.model_name == "stub-chat"
    assert first == Completion("Hello there", 120, 2, 64, "server", "stop", None, "stub-chat")
    assert second == Completion("Again", 30, 1, 0, "server", "stop", None, "stub-chat")
    u = ledger["extract"]
    assert (u.calls, u.input_tokens, u.output_tokens, u.cached_tokens,
            u.calls_counted_locally) == (2, 150, 3, 64, 0)
    # the runner's settings reached the wire (ChatOpenAI's name for max_tokens)
    first_body, second_body = stub.chat_bodies()
    assert first_body["messages"] == WIRE_PROMPT and first_body["model"] == "stub-chat"
    assert (first_body["max_completion_tokens"], first_body["temperature"]) == (16, 0.0)
    assert "max_completion_tokens" not in second_body and second_body["temperature"] == 0.0


@loopback
def test_chat_openai_without_usage_is_counted_with_tiktoken(no_openai_env: None) -> None:
    with StubOpenAI(script=[ChatReply("Hello there", usage=None)]) as stub:
        runner = LLMRunner(chat_model(chat_openai(stub)))
        completion = runner.call("extract", PROMPT, lambda c: c)
    assert completion == Completion("Hello there", PROMPT_TOKENS, 2, 0, "tiktoken", "stop",
                                    None, "stub-chat")
    assert runner.ledger["extract"].calls_counted_locally == 1


@loopback
async def test_chat_openai_async_roles_truncation_and_refusal(no_openai_env: None) -> None:
    with StubOpenAI(script=[
        ChatReply("Once upon", finish_reason="length", usage=usage(20, 2),
                  model="stub-chat-2025-01-01"),
        ChatReply(content=None, refusal="I can't help with that.", usage=usage(9, 6)),
    ]) as stub:
        chat = LangChainChat(chat_openai(stub, temperature=0.9))
        conversation = [Message("system", "s"), Message("user", "u"),
                        Message("assistant", "a"), Message("user", "go on")]
        cut = await chat.acomplete(conversation, max_tokens=2, temperature=0.4)
        refused = await chat.acomplete(PROMPT)
    assert stub.chat_bodies()[0]["messages"] == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"}, {"role": "user", "content": "go on"}]
    # the call's temperature overrides the model's own 0.9
    assert stub.chat_bodies()[0]["temperature"] == 0.4
    assert cut == Completion("Once upon", 20, 2, 0, "server", "length", None,
                             "stub-chat-2025-01-01")
    assert cut.truncated
    assert refused.refusal == "I can't help with that." and refused.text == ""
    with pytest.raises(BadOutput, match=r"refusal: I can't help with that\."):
        reply_text(refused)


@loopback
def test_forward_settings_false_leaves_the_models_own(no_openai_env: None) -> None:
    with StubOpenAI() as stub:
        own = chat_openai(stub, temperature=0.9, max_completion_tokens=50)
        LangChainChat(own, forward_settings=False).complete(PROMPT, max_tokens=3,
                                                            temperature=0.0)
        LangChainChat(chat_openai(stub), forward_settings=False).complete(PROMPT, max_tokens=3)
    first, second = stub.chat_bodies()
    assert (first["temperature"], first["max_completion_tokens"]) == (0.9, 50)
    assert "temperature" not in second and "max_completion_tokens" not in second


@loopback
def test_a_429_through_chat_openai_is_retried_by_the_runner(no_openai_env: None) -> None:
    sleep = RecordedSleep()
    with StubOpenAI(script=[HTTPError(429, "slow down", {"retry-after-ms": "250"}),
                            ChatReply("ok", usage=usage(14, 1))]) as stub:
        runner = LLMRunner(chat_model(chat_openai(stub)), sleep=sleep,
                           retry=RetryPolicy(jitter=False))
        assert runner.call("s", PROMPT, reply_text) == "ok"
    assert len(stub.chat_bodies()) == 2  # ChatOpenAI itself did not retry (max_retries=0)
    assert sleep.delays == [0.25]
    u = runner.ledger["s"]
    assert (u.calls, u.retries, u.failures, u.input_tokens) == (1, 1, 0, 14)


@loopback
def test_503s_through_chat_openai_fail_with_the_status(no_openai_env: None) -> None:
    sleep = RecordedSleep()
    with StubOpenAI(script=[HTTPError(503)] * 2) as stub:
        runner = LLMRunner(chat_model(chat_openai(stub)), sleep=sleep,
                           retry=RetryPolicy(attempts=2, base_delay=0.5, jitter=False))
        with pytest.raises(RequestFailed) as failed:
            runner.call("s", PROMPT, reply_text)
    assert failed.value.kind == "http_503" and sleep.delays == [0.5]
    assert isinstance(failed.value.__cause__, openai.InternalServerError)


@loopback
def test_a_400_through_chat_openai_is_the_clients_error_at_once(no_openai_env: None) -> None:
    with StubOpenAI(script=[HTTPError(400, "bad request"), ChatReply("never")]) as stub:
        runner = LLMRunner(chat_model(chat_openai(stub)), sleep=RecordedSleep())
        with pytest.raises(openai.BadRequestError, match="bad request"):
            runner.call("s", PROMPT, reply_text)
    assert len(stub.chat_bodies()) == 1 and runner.ledger["s"].retries == 0


@loopback
def test_two_sync_calls_through_chat_openai_on_a_keep_alive_server(no_openai_env: None) -> None:
    with StubOpenAI(keep_alive=True, script=[ChatReply("one"), ChatReply("two")]) as stub:
        runner = LLMRunner(chat_model(chat_openai(stub)))
        assert runner.call("s", PROMPT, reply_text) == "one"
        assert runner.call("s", PROMPT, reply_text) == "two"


@loopback
def test_sync_then_async_calls_through_chat_openai_in_one_process(no_openai_env: None) -> None:
    """A notebook's case: sync calls, async ones in the notebook's loop, sync again, on a
    keep-alive server. ChatOpenAI shares one async client per base URL across the
    process: had the sync calls run through it on the runner's loop, the first async call
    would fail ("bound to a different event loop"). They run ``invoke`` in threads. (A
    second ``asyncio.run`` fails in LangChain itself: its client keeps the closed loop's
    connections.)"""
    replies = ["one", "two", "three", "four", "five"]
    with StubOpenAI(keep_alive=True, script=[ChatReply(r) for r in replies]) as stub:
        runner = LLMRunner(chat_model(chat_openai(stub)))

        async def called_and_streamed() -> tuple[str, str]:
            called = await runner.acall("s", PROMPT, reply_text)
            return called, "".join([part async for part in runner.astream("s", PROMPT)])

        assert runner.call("s", PROMPT, reply_text) == "one"
        assert "".join(runner.stream("s", PROMPT)) == "two"
        assert asyncio.run(called_and_streamed()) == ("three", "four")
        assert runner.call("s", PROMPT, reply_text) == "five"
    assert runner.ledger["s"].calls == 5 and runner.ledger["s"].retries == 0


# ------------------------------------------------------------------ offline chat models
def test_usage_metadata_with_cache_reads() -> None:
    reply = AIMessage(content="Paris.", usage_metadata={
        "input_tokens": 40, "output_tokens": 3, "total_tokens": 43,
        "input_token_details": {"cache_read": 32}},
        response_metadata={"finish_reason": "stop", "model_name": "served-model"})
    completion = LangChainChat(fake(reply)).complete(PROMPT)
    assert completion == Completion("Paris.", 40, 3, 32, "server", "stop", None, "served-model")


def test_usage_metadata_without_cache_details() -> None:
    reply = AIMessage(content="Paris.", usage_metadata={"input_tokens": 40, "output_tokens": 3,
                                                        "total_tokens": 43})
    completion = LangChainChat(fake(reply)).complete(PROMPT)
    assert (completion.input_tokens, completion.output_tokens, completion.cached_tokens,
            completion.usage_from) == (40, 3, 0, "server")


def test_no_usage_is_counted_with_tiktoken() -> None:
    chat = LangChainChat(fake("Hello there"))
    completion = chat.complete(PROMPT)
    assert completion == Completion("Hello there", PROMPT_TOKENS, 2, 0, "tiktoken", None, None,
                                    "GenericFakeChatModel")


def test_content_blocks_truncation_names_and_refusal() -> None:
    blocks = AIMessage(content=[{"type": "text", "text": "Hello"},
                                {"type": "tool_use", "id": "t", "name": "x", "input": {}},
                                {"type": "text", "text": " there"}],
                       response_metadata={"stop_reason": "max_tokens"})
    refusal = AIMessage(content="", additional_kwargs={"refusal": "No."},
                        response_metadata={"done_reason": "stop"})
    chat = LangChainChat(fake(blocks, refusal))
    cut = chat.complete(PROMPT)
    assert cut.text == "Hello there" and cut.output_tokens == 2
    assert cut.finish_reason == "length" and cut.truncated  # Anthropic's "max_tokens"
    refused = chat.complete(PROMPT)
    assert (refused.refusal, refused.finish_reason) == ("No.", "stop")


async def test_async_complete_offline() -> None:
    completion = await LangChainChat(fake("Hello there")).acomplete(PROMPT)
    assert completion.text == "Hello there" and completion.usage_from == "tiktoken"


def test_map_over_a_langchain_model_keeps_order() -> None:
    runner = LLMRunner(chat_model(fake(*[f"reply {i}" for i in range(6)])), concurrency=1)
    outcomes = runner.map(list(range(6)), lambda i: runner.acall(
        "s", [Message("user", f"q{i}")], reply_text))
    assert [o.value for o in outcomes] == [f"reply {i}" for i in range(6)]


class Failing(BaseChatModel):
    """A chat model whose every call raises the exception it was given."""

    error: Exception

    @property
    def _llm_type(self) -> str:
        return "failing"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise self.error


@pytest.mark.parametrize("use_async", [False, True])
def test_errors_propagate_unchanged(use_async: bool) -> None:
    error = ConnectionResetError("peer reset")
    chat = LangChainChat(Failing(error=error))
    with pytest.raises(ConnectionResetError) as raised:
        if use_async:
            asyncio.run(chat.acomplete(PROMPT))
        else:
            chat.complete(PROMPT)
    assert raised.value is error


def test_the_runner_classifies_errors_from_a_langchain_model() -> None:
    sleep = RecordedSleep()
    runner = LLMRunner(chat_model(Failing(error=TimeoutError("slow"))), sleep=sleep,
                       retry=RetryPolicy(attempts=2, base_delay=0.5, jitter=False))
    with pytest.raises(RequestFailed) as failed:
        runner.call("s", PROMPT, reply_text)
    assert failed.value.kind == "timeout" and sleep.delays == [0.5]
    bug = LLMRunner(chat_model(Failing(error=KeyError("bug"))), sleep=sleep)
    with pytest.raises(KeyError):
        bug.call("s", PROMPT, reply_text)


# ------------------------------------------------------------------ chat_model() and names
def test_chat_model_wraps_passes_through_and_refuses() -> None:
    wrapped = chat_model(fake())
    assert isinstance(wrapped, LangChainChat) and isinstance(wrapped, ChatModel)
    assert chat_model(wrapped) is wrapped
    scripted = ScriptedChat([])
    assert chat_model(scripted) is scripted
    with pytest.raises(TypeError, match=r"takes a LangChain BaseChatModel or a conceptgraph "
                                        r"ChatModel \(model_name, complete, acomplete\), "
                                        "got str"):
        chat_model("gpt-4o-mini")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got FakeListLLM"):  # a text LLM, not a chat model
        chat_model(FakeListLLM(responses=["x"]))  # type: ignore[arg-type]


def test_the_wrapper_checks_what_it_wraps() -> None:
    with pytest.raises(TypeError, match="wraps a LangChain BaseChatModel, got ScriptedChat"):
        LangChainChat(ScriptedChat([]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model_name must be a non-empty str"):
        LangChainChat(fake(), model_name="")


@loopback  # ChatOpenAI probes socket options with a socket when made; nothing is sent
def test_model_names() -> None:
    assert LangChainChat(fake()).model_name == "GenericFakeChatModel"
    assert LangChainChat(fake(), model_name="gpt-4o-mini").model_name == "gpt-4o-mini"
    named = ChatOpenAI(model="gpt-4.1-nano", api_key="sk-test",  # type: ignore[arg-type]
                       base_url="http://127.0.0.1:9/v1")
    assert LangChainChat(named).model_name == "gpt-4.1-nano"
    assert repr(LangChainChat(named)) == "LangChainChat(ChatOpenAI, model_name='gpt-4.1-nano')"


def test_message_conversion() -> None:
    converted = to_langchain_messages([Message("system", "s"), Message("user", "u"),
                                       Message("assistant", "a")])
    assert [type(m) for m in converted] == [SystemMessage, HumanMessage, AIMessage]
    assert [m.content for m in converted] == ["s", "u", "a"]
    with pytest.raises(ValueError, match="must not be empty"):
        to_langchain_messages([])
    assert message_text(AIMessage(content=["a", {"type": "text", "text": "b"},
                                           {"type": "image_url", "image_url": "x"}])) == "ab"
