"""LangChainChat streaming: the model's own chunks as deltas, the chunks' sum as the reply.

``GenericFakeChatModel`` streams a reply split at whitespace; ``ChatOpenAI`` streams for
real over SSE from StubOpenAI (``stream_usage=True`` asks for usage in the last chunk).
Token counts by hand (tiktoken cl100k_base): the prompt [system "Be brief.", user
"Say hi"] counts (3 + 3) + (2 + 3) + 3 = 14; "Hello there friend" is 3 tokens.
"""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_openai import ChatOpenAI

from langchain_conceptgraph import LangChainChat
from shared_core.llm import Completion, LLMRunner, Message, StreamingChatModel
from tests.shared_core.openai_stub import ChatReply, StubOpenAI, usage

loopback = pytest.mark.allow_hosts(["127.0.0.1"])
PROMPT = [Message("system", "Be brief."), Message("user", "Say hi")]


def test_a_fake_models_chunks_stream_and_add_up_to_the_reply() -> None:
    chat = LangChainChat(GenericFakeChatModel(messages=iter(["Hello there friend"])))
    assert isinstance(chat, StreamingChatModel)
    parts = list(chat.stream(PROMPT))
    assert "".join(p for p in parts if isinstance(p, str)) == "Hello there friend"
    assert len(parts) > 2  # more than one delta: it really streamed
    last = parts[-1]
    assert isinstance(last, Completion)
    assert (last.text, last.input_tokens, last.output_tokens, last.usage_from) == (
        "Hello there friend", 14, 3, "tiktoken")


async def test_the_runner_streams_a_langchain_model_and_books_it() -> None:
    runner = LLMRunner(LangChainChat(GenericFakeChatModel(messages=iter(["Hello there"]))))
    got = [d async for d in runner.astream("answer", PROMPT)]
    assert "".join(got) == "Hello there" and len(got) >= 2
    assert (runner.ledger["answer"].calls, runner.ledger["answer"].output_tokens) == (1, 2)


@loopback
def test_chat_openai_streams_over_sse_with_the_servers_usage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with StubOpenAI(script=[ChatReply("Hello there friend", usage=usage(30, 3))]) as stub:
        model = ChatOpenAI(model="stub-chat", base_url=stub.url,  # type: ignore[arg-type]
                           api_key="sk-test", max_retries=0, stream_usage=True)
        parts = list(LangChainChat(model).stream(PROMPT, max_tokens=8))
        body = stub.chat_bodies()[0]
    assert [p for p in parts if isinstance(p, str)] == ["Hello", " there", " friend"]
    last = parts[-1]
    assert isinstance(last, Completion)
    assert (last.text, last.input_tokens, last.output_tokens, last.usage_from,
            last.finish_reason) == ("Hello there friend", 30, 3, "server", "stop")
    assert body["stream"] is True
