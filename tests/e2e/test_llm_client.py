"""The LLM layer against a real llama.cpp server: usage, truncation, concurrency, timeouts.

Structure only: a 135M model is no judge of answer quality, so no test reads
meaning into the reply text.
"""

from __future__ import annotations

import pytest

from shared_core.llm import (
    Completion,
    LLMRunner,
    Message,
    OpenAIChat,
    RequestFailed,
    RetryPolicy,
    TokenLedger,
    reply_text,
)

from .llama_server import MODEL_NAME, LlamaServer


def chat(server: LlamaServer) -> OpenAIChat:
    return OpenAIChat(MODEL_NAME, base_url=server.url, timeout=120)


def test_a_reply_carries_the_servers_usage(llama_server: LlamaServer) -> None:
    completion = chat(llama_server).complete([Message("user", "Name one colour.")],
                                             max_tokens=8)
    assert completion.usage_from == "server"
    assert completion.input_tokens > 5  # the chat template wraps the 4 words
    assert 1 <= completion.output_tokens <= 8
    assert completion.finish_reason in ("stop", "length")


def test_max_tokens_cuts_the_reply_and_says_so(llama_server: LlamaServer) -> None:
    completion = chat(llama_server).complete(
        [Message("user", "Write a long story about a dragon.")], max_tokens=2)
    assert completion.truncated
    assert completion.output_tokens == 2


async def test_async_map_books_every_call_in_the_ledger(llama_server: LlamaServer) -> None:
    ledger = TokenLedger()
    runner = LLMRunner(chat(llama_server), ledger=ledger, concurrency=2)
    questions = [f"Count to {n}." for n in range(1, 7)]
    seen: list[int] = []

    async def ask(q: str) -> int:
        completion_tokens: list[int] = []

        def parse(c: Completion) -> str:
            completion_tokens.append(c.output_tokens)
            return reply_text(c)

        await runner.acall("e2e", [Message("user", q)], parse, max_tokens=6)
        seen.extend(completion_tokens)
        return completion_tokens[-1]

    outcomes = await runner.amap(questions, ask)
    assert [o.index for o in outcomes] == list(range(6))
    assert all(o.ok for o in outcomes)
    usage = ledger["e2e"]
    assert usage.calls == len(seen) >= 6
    assert usage.output_tokens == sum(seen)
    assert usage.calls_counted_locally == 0


def test_a_timeout_is_retried_then_reported(llama_server: LlamaServer) -> None:
    ledger = TokenLedger()
    runner = LLMRunner(chat(llama_server), ledger=ledger, timeout=0.001,
                       retry=RetryPolicy(attempts=3, base_delay=0.0, jitter=False))
    with pytest.raises(RequestFailed) as failed:
        runner.call("e2e", [Message("user", "Hello")], reply_text, max_tokens=4)
    assert failed.value.kind == "timeout"
    assert ledger["e2e"].retries == 2
    assert ledger["e2e"].failures == 1
    assert ledger["e2e"].calls == 0
