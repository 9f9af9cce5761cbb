"""OpenAIChat: the real ``openai`` client over HTTP to StubOpenAI on 127.0.0.1.

Settings from arguments and the environment, the request on the wire, usage from the
server (cached tokens included) and tiktoken's counts when the server sends none.

Token counts by hand (tiktoken cl100k_base): "Be brief." is Be|·brief|. = 3 tokens,
"Say hi" is Say|·hi = 2, "stub reply" is stub|·reply = 2. With OpenAI's chat overhead
(3 a message, 3 for the reply's priming) the prompt below counts
(3 + 3) + (2 + 3) + 3 = 14 input tokens.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from shared_core.llm import ChatModel, Completion, LLMRunner, Message, OpenAIChat, TokenLedger
from shared_core.llm.openai_chat import is_reasoning_model
from shared_core.llm.usage import counted_input_tokens
from shared_core.text import count_tokens
from tests.shared_core.openai_stub import ChatReply, RawBody, StubOpenAI, usage

loopback = pytest.mark.allow_hosts(["127.0.0.1"])

PROMPT = [Message("system", "Be brief."), Message("user", "Say hi")]
PROMPT_TOKENS = 14
WIRE_PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


def test_the_hand_count_of_the_prompt() -> None:
    assert [count_tokens(m.content) for m in PROMPT] == [3, 2]
    assert counted_input_tokens(PROMPT) == PROMPT_TOKENS
    assert counted_input_tokens([Message("user", "")]) == 3 + 3


# ------------------------------------------------------------------ settings
def test_model_from_the_argument_or_the_environment(no_openai_env: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    base = "http://127.0.0.1:9/v1"
    assert OpenAIChat("from-arg", base_url=base).model_name == "from-arg"
    monkeypatch.setenv("OPENAI_MODEL", "from-env")
    assert OpenAIChat(base_url=base).model_name == "from-env"
    assert OpenAIChat("from-arg", base_url=base).model_name == "from-arg"  # the argument wins


@pytest.mark.parametrize("env_model", [None, ""])
def test_no_model_is_a_clear_error(no_openai_env: None, monkeypatch: pytest.MonkeyPatch,
                                   env_model: str | None) -> None:
    if env_model is not None:
        monkeypatch.setenv("OPENAI_MODEL", env_model)
    with pytest.raises(ValueError, match="needs a model name: pass model= or set OPENAI_MODEL"):
        OpenAIChat(base_url="http://127.0.0.1:9/v1")


@pytest.mark.parametrize("kwargs, message", [
    ({}, "OpenAIChat needs an API key for api.openai.com"),
    ({"base_url": "https://api.openai.com/v1"}, "OpenAIChat needs an API key for api.openai.com"),
    ({"base_url": "https://res.openai.azure.com/openai/v1/"},
     "OpenAIChat needs an API key for res.openai.azure.com"),
    ({"base_url": "localhost:8000/v1"}, "base_url must be an http(s) URL"),
    ({"base_url": "ftp://127.0.0.1/v1"}, "base_url must be an http(s) URL"),
    ({"base_url": "http://127.0.0.1:8000/v1", "timeout": 0}, "timeout must be"),
    ({"base_url": "http://127.0.0.1:8000/v1", "timeout": float("inf")}, "timeout must be"),
])
def test_settings_are_checked_when_made(no_openai_env: None, kwargs: dict[str, Any],
                                        message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        OpenAIChat("gpt-4o-mini", **kwargs)


def test_a_bad_url_in_the_environment_names_its_source(no_openai_env: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "127.0.0.1:8080")
    with pytest.raises(ValueError, match=r"got '127.0.0.1:8080' \(from OPENAI_BASE_URL\)"):
        OpenAIChat("local")


def test_a_key_in_the_environment_is_enough_for_openai(no_openai_env: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    chat = OpenAIChat("gpt-4o-mini")
    assert chat.base_url == "https://api.openai.com/v1/"
    assert isinstance(chat, ChatModel)


@loopback
def test_base_url_and_key_from_the_arguments(no_openai_env: None) -> None:
    with StubOpenAI() as stub:
        chat = OpenAIChat("stub-chat", base_url=stub.url, api_key="sk-arg")
        assert chat.base_url == stub.url + "/"
        assert chat.complete(PROMPT).text == "stub reply"
        # no key for a server of our own: the placeholder, not a refusal
        OpenAIChat("stub-chat", base_url=stub.url).complete(PROMPT)
    assert stub.paths() == ["/v1/chat/completions"] * 2
    assert [r.headers["authorization"] for r in stub.requests] == ["Bearer sk-arg",
                                                                   "Bearer EMPTY"]


@loopback
def test_base_url_key_and_model_from_the_environment(no_openai_env: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with StubOpenAI() as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        monkeypatch.setenv("OPENAI_MODEL", "env-model")
        completion = OpenAIChat().complete(PROMPT)
    assert completion.text == "stub reply" and completion.model == "env-model"
    assert stub.requests[0].headers["authorization"] == "Bearer sk-env"
    assert stub.requests[0].body["model"] == "env-model"


# ------------------------------------------------------------------ the wire
@loopback
def test_the_request_body_on_the_wire(no_openai_env: None) -> None:
    with StubOpenAI() as stub:
        chat = OpenAIChat("stub-chat", base_url=stub.url)
        chat.complete(PROMPT, max_tokens=16, temperature=0.7)
        chat.complete([Message("user", "a"), Message("assistant", "b"), Message("user", "c")])
        OpenAIChat("stub-chat", base_url=stub.url,
                   extra_body={"top_k": 5}).complete(PROMPT)
    first, second, third = stub.chat_bodies()
    assert first == {"model": "stub-chat", "messages": WIRE_PROMPT, "temperature": 0.7,
                     "max_tokens": 16}
    # no max_tokens unless asked; temperature 0 by default; roles kept in order
    assert second == {"model": "stub-chat", "temperature": 0.0,
                      "messages": [{"role": "user", "content": "a"},
                                   {"role": "assistant", "content": "b"},
                                   {"role": "user", "content": "c"}]}
    # extra_body lands at the top level of the JSON body (vLLM's top_k, say)
    assert third == {"model": "stub-chat", "messages": WIRE_PROMPT, "temperature": 0.0,
                     "top_k": 5}


@loopback
def test_the_runner_sends_its_temperature_and_the_calls_max_tokens(no_openai_env: None) -> None:
    with StubOpenAI() as stub:
        runner = LLMRunner(OpenAIChat("stub-chat", base_url=stub.url), temperature=0.3)
        runner.call("s", PROMPT, lambda c: c.text, max_tokens=8)
    assert stub.chat_bodies() == [{"model": "stub-chat", "messages": WIRE_PROMPT,
                                   "temperature": 0.3, "max_tokens": 8}]


@pytest.mark.parametrize(("model", "expected"), [
    ("o1", True), ("o3-mini", True), ("o4-mini-2025-04-16", True), ("gpt-5", True),
    ("gpt-5-mini", True), ("openai/o3", True), ("gpt-4o", False), ("gpt-4.1-mini", False),
    ("smollm2-135m-instruct", False), ("ollama/llama3", False), ("o", False), ("omni", False),
])
def test_reasoning_models_are_told_by_name(model: str, expected: bool) -> None:
    assert is_reasoning_model(model) is expected


@loopback
def test_a_reasoning_model_gets_max_completion_tokens_and_no_temperature(
        no_openai_env: None) -> None:
    with StubOpenAI() as stub:
        LLMRunner(OpenAIChat("o3-mini", base_url=stub.url), temperature=0.3).call(
            "s", PROMPT, lambda c: c.text, max_tokens=8)
        OpenAIChat("o3-mini", base_url=stub.url).complete(PROMPT)
        # a reasoning model served under a name we cannot tell, and the reverse
        OpenAIChat("my-r1", base_url=stub.url, reasoning=True).complete(PROMPT, max_tokens=4)
        OpenAIChat("o3-mini", base_url=stub.url, reasoning=False).complete(PROMPT, max_tokens=4)
    first, second, third, fourth = stub.chat_bodies()
    assert first == {"model": "o3-mini", "messages": WIRE_PROMPT, "max_completion_tokens": 8}
    assert second == {"model": "o3-mini", "messages": WIRE_PROMPT}
    assert third == {"model": "my-r1", "messages": WIRE_PROMPT, "max_completion_tokens": 4}
    assert fourth == {"model": "o3-mini", "messages": WIRE_PROMPT, "temperature": 0.0,
                      "max_tokens": 4}


def test_reasoning_must_be_a_bool_or_none(no_openai_env: None) -> None:
    with pytest.raises(TypeError, match="reasoning must be True, False or None"):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", reasoning="yes")  # type: ignore[arg-type]


def test_bad_messages_fail_before_any_request(no_openai_env: None) -> None:
    chat = OpenAIChat("m", base_url="http://127.0.0.1:9/v1")  # nothing listens: never reached
    with pytest.raises(ValueError, match="must not be empty"):
        chat.complete([])
    with pytest.raises(TypeError, match="sequence of Message"):
        chat.complete("hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\] must be a Message, got dict"):
        chat.complete([Message("user", "hi"), {"role": "user", "content": "x"}])  # type: ignore[list-item]


# ------------------------------------------------------------------ usage
@loopback
def test_usage_from_the_server_cached_tokens_included(no_openai_env: None) -> None:
    with StubOpenAI(script=[ChatReply("Hello.", usage=usage(120, 7, cached_tokens=64)),
                            ChatReply("Again.", usage=usage(30, 5))]) as stub:
        ledger = TokenLedger()
        runner = LLMRunner(OpenAIChat("stub-chat", base_url=stub.url), ledger=ledger)
        first = runner.call("extract", PROMPT, lambda c: c)
        second = runner.call("extract", PROMPT, lambda c: c)
    assert first == Completion("Hello.", 120, 7, 64, "server", "stop", None, "stub-chat")
    assert second == Completion("Again.", 30, 5, 0, "server", "stop", None, "stub-chat")
    usage_ = ledger["extract"]
    assert (usage_.calls, usage_.input_tokens, usage_.output_tokens, usage_.cached_tokens,
            usage_.calls_counted_locally) == (2, 150, 12, 64, 0)


@loopback
def test_no_usage_from_the_server_is_counted_with_tiktoken(no_openai_env: None) -> None:
    with StubOpenAI(script=[ChatReply("stub reply", usage=None)]) as stub:
        ledger = TokenLedger()
        runner = LLMRunner(OpenAIChat("stub-chat", base_url=stub.url), ledger=ledger)
        completion = runner.call("extract", PROMPT, lambda c: c)
    assert "usage" not in json.dumps(stub.chat_bodies())  # nothing asked the server for it
    assert completion == Completion("stub reply", PROMPT_TOKENS, 2, 0, "tiktoken", "stop", None,
                                    "stub-chat")
    assert completion.input_tokens == counted_input_tokens(PROMPT)
    assert completion.output_tokens == count_tokens("stub reply")
    usage_ = ledger["extract"]
    assert (usage_.calls, usage_.input_tokens, usage_.output_tokens,
            usage_.calls_counted_locally) == (1, 14, 2, 1)


@loopback
async def test_async_complete_and_what_the_reply_says(no_openai_env: None) -> None:
    with StubOpenAI(script=[
        ChatReply("Once upon", finish_reason="length", usage=usage(9, 2),
                  model="gpt-4o-mini-2024-07-18"),
        ChatReply(content=None, refusal="I can't help with that.", usage=usage(9, 6)),
        ChatReply(content=None, usage=usage(9, 0)),
    ]) as stub:
        chat = OpenAIChat("gpt-4o-mini", base_url=stub.url)
        cut = await chat.acomplete(PROMPT, max_tokens=2)
        refused = await chat.acomplete(PROMPT)
        empty = await chat.acomplete(PROMPT)
    assert cut == Completion("Once upon", 9, 2, 0, "server", "length", None,
                             "gpt-4o-mini-2024-07-18")
    assert cut.truncated and not refused.truncated
    assert refused == Completion("", 9, 6, 0, "server", "stop", "I can't help with that.",
                                 "gpt-4o-mini")
    assert empty == Completion("", 9, 0, 0, "server", "stop", None, "gpt-4o-mini")


@loopback
def test_a_reply_with_no_choices_is_empty_not_a_crash(no_openai_env: None) -> None:
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
    with StubOpenAI(script=[RawBody(json.dumps(body).encode())]) as stub:
        completion = OpenAIChat("m", base_url=stub.url).complete(PROMPT)
    # no usage either: the prompt is counted, the (absent) reply is 0 tokens
    assert completion == Completion("", PROMPT_TOKENS, 0, 0, "tiktoken", None, None, "m")


@loopback
def test_the_stub_script_feeds_chat_requests_only_then_falls_back(no_openai_env: None) -> None:
    """The stub itself: a script entry per chat request, in order, then ``chat`` answers."""
    with StubOpenAI(chat=lambda body: body["messages"][-1]["content"].upper(),
                    script=[ChatReply("scripted")]) as stub:
        chat = OpenAIChat("m", base_url=stub.url)
        assert chat.complete(PROMPT).text == "scripted"
        assert chat.complete(PROMPT).text == "SAY HI"
        assert stub.script == []
