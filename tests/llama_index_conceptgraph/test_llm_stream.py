"""LlamaIndexChat streaming: ``stream_chat``'s deltas, the last response's usage.

``MockLLM(max_tokens=3)`` streams "text " "text " "text"; a ``CustomLLM`` whose stream
gives no ``delta`` (only the growing text) and usage in its last response checks both
fall-backs. Token counts by hand (tiktoken cl100k_base): the prompt [system "Be brief.",
user "Say hi"] counts 14; "text text text" is 3 tokens.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CustomLLM,
    LLMMetadata,
    MessageRole,
    MockLLM,
)
from llama_index.core.llms.callbacks import llm_completion_callback

from llama_index_conceptgraph import LlamaIndexChat
from shared_core.llm import Completion, LLMRunner, Message, StreamingChatModel

PROMPT = [Message("system", "Be brief."), Message("user", "Say hi")]


def test_mock_llm_streams_its_deltas_then_the_counted_reply() -> None:
    chat = LlamaIndexChat(MockLLM(max_tokens=3))
    assert isinstance(chat, StreamingChatModel)
    parts = list(chat.stream(PROMPT))
    assert parts[:-1] == ["text ", "text ", "text"]
    last = parts[-1]
    assert isinstance(last, Completion)
    assert (last.text, last.input_tokens, last.output_tokens, last.usage_from) == (
        "text text text", 14, 3, "tiktoken")


class GrowingText(CustomLLM):
    """Streams cumulative text without deltas; usage only on the last response."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="growing")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="Hi there")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> Any:
        raise NotImplementedError

    def stream_chat(self, messages: Any, **kwargs: Any) -> Any:
        def gen() -> Any:
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="Hi"))
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT,
                                                   content="Hi there"),
                               additional_kwargs={"prompt_tokens": 21,
                                                  "completion_tokens": 2})
        return gen()

    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        async def gen() -> Any:
            for response in self.stream_chat(messages):
                yield response
        return gen()


async def test_growing_text_becomes_deltas_and_the_last_usage_is_the_servers() -> None:
    chat = LlamaIndexChat(GrowingText())
    parts = [p async for p in chat.astream(PROMPT)]
    assert parts[:-1] == ["Hi", " there"]
    last = parts[-1]
    assert isinstance(last, Completion)
    assert (last.text, last.input_tokens, last.output_tokens, last.usage_from) == (
        "Hi there", 21, 2, "server")


def test_the_runner_streams_a_llama_index_llm_and_books_it() -> None:
    runner = LLMRunner(LlamaIndexChat(MockLLM(max_tokens=2)))
    assert list(runner.stream("answer", PROMPT)) == ["text ", "text"]
    assert (runner.ledger["answer"].calls, runner.ledger["answer"].input_tokens) == (1, 14)
