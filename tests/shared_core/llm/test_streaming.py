"""Streaming through the runner: deltas as they come, usage booked at the end, retries only
before the first token; and OpenAIChat's real SSE path against StubOpenAI.

Token counts by hand (tiktoken cl100k_base): "Say hi" is Say|·hi = 2 tokens, so the
prompt [user "Say hi"] counts 2 + 3 (per message) + 3 (reply priming) = 8 input tokens;
"Paris is lovely" is Paris|·is|·lovely = 3, "Paris" 1.
"""

from __future__ import annotations

import pytest

from shared_core.llm import (
    ChatModel,
    Completion,
    LLMRunner,
    Message,
    OpenAIChat,
    RequestFailed,
    RetryPolicy,
    StreamCut,
    StreamingChatModel,
)
from tests.shared_core.llm.scripted import (
    CompleteOnlyChat,
    RecordedSleep,
    ScriptedChat,
    StreamBreak,
    word_deltas,
)
from tests.shared_core.openai_stub import (
    ChatReply,
    HTTPError,
    RawBody,
    StubOpenAI,
    sse_body,
    stream_chunk,
    usage,
)

loopback = pytest.mark.allow_hosts(["127.0.0.1"])
PROMPT = [Message("user", "Say hi")]
PROMPT_TOKENS = 8


def runner(model: ChatModel, sleep: RecordedSleep, **retry: int) -> LLMRunner:
    return LLMRunner(model, retry=RetryPolicy(jitter=False, **retry), sleep=sleep)


def test_word_deltas_keep_the_whitespace_so_joining_gives_the_reply_back() -> None:
    assert word_deltas("Paris is  lovely") == ["Paris", " is", "  lovely"]
    assert word_deltas("") == []


def test_a_stream_yields_the_deltas_and_books_the_whole_reply(sleep: RecordedSleep) -> None:
    chat = ScriptedChat(["Paris is lovely"])
    assert isinstance(chat, StreamingChatModel)
    run = runner(chat, sleep)
    assert list(run.stream("answer", PROMPT, max_tokens=20)) == ["Paris", " is", " lovely"]
    usage_ = run.ledger["answer"]
    assert (usage_.calls, usage_.input_tokens, usage_.output_tokens) == (1, PROMPT_TOKENS, 3)
    assert usage_.calls_counted_locally == 1
    assert chat.settings == [(20, 0.0)]


async def test_a_transport_failure_before_the_first_token_is_retried(
        sleep: RecordedSleep) -> None:
    chat = ScriptedChat([TimeoutError("slow"), "Paris"])
    run = runner(chat, sleep, base_delay=1)
    assert [d async for d in run.astream("answer", PROMPT)] == ["Paris"]
    assert sleep.delays == [1.0]
    assert (run.ledger["answer"].retries, run.ledger["answer"].calls) == (1, 1)


async def test_a_stream_that_breaks_after_a_token_is_not_retried(sleep: RecordedSleep) -> None:
    chat = ScriptedChat([StreamBreak(("Paris", " is"), ConnectionError("reset")), "unused"])
    run = runner(chat, sleep)
    got: list[str] = []
    with pytest.raises(RequestFailed, match="the stream broke after 2 parts") as failed:
        async for delta in run.astream("answer", PROMPT):
            got.append(delta)
    assert got == ["Paris", " is"] and failed.value.kind == "connection"
    assert len(chat.calls) == 1 and sleep.delays == []
    booked = run.ledger["answer"]
    # what went out is booked (counted: "Paris is" is 2 tokens), and the failure
    assert (booked.calls, booked.output_tokens, booked.failures) == (1, 2, 1)


async def test_an_error_that_is_not_transient_is_raised_at_once(sleep: RecordedSleep) -> None:
    run = runner(ScriptedChat([ValueError("bad request")]), sleep)
    with pytest.raises(ValueError, match="bad request"):
        [d async for d in run.astream("answer", PROMPT)]
    assert run.ledger["answer"].retries == 0


async def test_an_empty_reply_is_asked_again_then_fails_clearly(sleep: RecordedSleep) -> None:
    run = runner(ScriptedChat(["", "Paris"]), sleep)
    assert [d async for d in run.astream("answer", PROMPT)] == ["Paris"]
    assert run.ledger["answer"].bad_outputs == {"empty": 1}
    assert run.ledger["answer"].calls == 2
    refused = Completion("", 5, 1, refusal="I cannot help")
    run = runner(ScriptedChat([refused, ""]), sleep, output_attempts=2)
    with pytest.raises(RequestFailed, match="empty") as failed:
        [d async for d in run.astream("answer", PROMPT)]
    assert failed.value.kind == "empty"
    assert run.ledger["answer"].bad_outputs == {"refusal": 1, "empty": 1}
    assert run.ledger["answer"].failures == 1


def test_the_servers_usage_in_the_last_part_is_what_gets_booked(sleep: RecordedSleep) -> None:
    reply = Completion("Paris", 40, 7, 5, "server", "stop", None, "m")
    run = runner(ScriptedChat([reply]), sleep)
    assert list(run.stream("answer", PROMPT)) == ["Paris"]
    booked = run.ledger["answer"]
    assert (booked.input_tokens, booked.output_tokens, booked.cached_tokens) == (40, 7, 5)
    assert booked.calls_counted_locally == 0


def test_a_model_that_cannot_stream_answers_in_one_chunk(sleep: RecordedSleep) -> None:
    chat = CompleteOnlyChat(ScriptedChat(["Paris is lovely"]))
    assert not isinstance(chat, StreamingChatModel)
    run = runner(chat, sleep)
    assert list(run.stream("answer", PROMPT)) == ["Paris is lovely"]
    assert run.ledger["answer"].calls == 1


def test_a_consumer_that_stops_early_is_booked_for_what_it_got(sleep: RecordedSleep) -> None:
    run = runner(ScriptedChat(["Paris is lovely"]), sleep)
    parts = run.stream("answer", PROMPT)
    assert next(parts) == "Paris"
    parts.close()  # type: ignore[attr-defined]
    booked = run.ledger["answer"]
    assert (booked.calls, booked.input_tokens, booked.output_tokens) == (1, PROMPT_TOKENS, 1)


async def test_each_part_is_bounded_by_the_timeout(sleep: RecordedSleep) -> None:
    class Stalls(ScriptedChat):
        async def astream(self, messages, *, max_tokens=None,  # type: ignore[no-untyped-def]
                          temperature=0.0):
            yield "Paris"
            import asyncio

            await asyncio.sleep(5)
            yield " never"

    run = LLMRunner(Stalls(["x"]), timeout=0.05, retry=RetryPolicy(jitter=False), sleep=sleep)
    got: list[str] = []
    with pytest.raises(RequestFailed, match="after 1 parts") as failed:
        async for delta in run.astream("answer", PROMPT):
            got.append(delta)
    assert got == ["Paris"] and failed.value.kind == "timeout"


def test_each_part_of_a_sync_callers_stream_is_bounded_by_the_timeout(
        sleep: RecordedSleep) -> None:
    """A sync caller's stream is the model's ``stream``, read in threads. A read past the
    timeout fails the stream at once; its close waits behind that read, not the caller."""
    import threading
    import time

    release, closed = threading.Event(), threading.Event()

    class Stalls(ScriptedChat):
        def stream(self, messages, *, max_tokens=None,  # type: ignore[no-untyped-def]
                   temperature=0.0):
            try:
                yield "Paris"
                release.wait(5)
                yield " late"
            finally:
                closed.set()

    run = LLMRunner(Stalls(["x"]), timeout=0.05, retry=RetryPolicy(jitter=False), sleep=sleep)
    got: list[str] = []
    start = time.perf_counter()
    with pytest.raises(RequestFailed, match="after 1 parts") as failed:
        for delta in run.stream("answer", PROMPT):
            got.append(delta)
    assert time.perf_counter() - start < 2.5  # not the 5 s the read is stuck for
    assert got == ["Paris"] and failed.value.kind == "timeout"
    assert not closed.is_set()  # the read still holds the stream
    release.set()
    assert closed.wait(5)  # then the close, queued behind it, runs


# ------------------------------------------------------------- OpenAIChat over SSE
@loopback
def test_openai_chat_streams_deltas_and_reads_usage_from_the_last_chunk(
        no_openai_env: None) -> None:
    with StubOpenAI(script=[ChatReply("Paris is lovely", usage=usage(11, 3, 2))]) as stub:
        chat = OpenAIChat("m", base_url=stub.url, api_key="k")
        parts = list(chat.stream(PROMPT, max_tokens=9))
        body = stub.chat_bodies()[0]
    assert parts[:-1] == ["Paris", " is", " lovely"]
    last = parts[-1]
    assert isinstance(last, Completion)
    assert (last.text, last.input_tokens, last.output_tokens, last.cached_tokens,
            last.usage_from, last.finish_reason, last.model) == (
        "Paris is lovely", 11, 3, 2, "server", "stop", "m")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 9


@loopback
async def test_openai_chat_counts_usage_when_the_stream_has_none(no_openai_env: None) -> None:
    with StubOpenAI(script=[ChatReply("Paris is lovely", usage=None)]) as stub:
        chat = OpenAIChat("m", base_url=stub.url, api_key="k")
        parts = [p async for p in chat.astream(PROMPT)]
    last = parts[-1]
    assert isinstance(last, Completion)
    assert (last.input_tokens, last.output_tokens, last.usage_from) == (PROMPT_TOKENS, 3,
                                                                         "tiktoken")


@loopback
def test_the_runner_retries_a_server_error_before_the_stream_starts(
        no_openai_env: None, sleep: RecordedSleep) -> None:
    with StubOpenAI(script=[HTTPError(503), ChatReply("Paris", usage=usage(8, 1))]) as stub:
        run = runner(OpenAIChat("m", base_url=stub.url, api_key="k"), sleep)
        assert list(run.stream("answer", PROMPT)) == ["Paris"]
    assert run.ledger["answer"].retries == 1
    assert run.ledger["answer"].calls_counted_locally == 0


@loopback
def test_a_refusal_in_the_stream_is_a_bad_output(no_openai_env: None,
                                                 sleep: RecordedSleep) -> None:
    body = sse_body([stream_chunk(refusal="no"), stream_chunk(finish_reason="stop")])
    with StubOpenAI(script=[RawBody(body), ChatReply("Fine")]) as stub:
        run = runner(OpenAIChat("m", base_url=stub.url, api_key="k"), sleep)
        assert list(run.stream("answer", PROMPT)) == ["Fine"]
    assert run.ledger["answer"].bad_outputs == {"refusal": 1}


@loopback
def test_a_stream_cut_before_its_first_token_is_retried(no_openai_env: None,
                                                        sleep: RecordedSleep) -> None:
    # the role chunk, then the connection closes: what llama-cpp-python's server sends a
    # stream that waits behind another one
    cut = sse_body([stream_chunk()], done=False)
    with StubOpenAI(script=[RawBody(cut), ChatReply("Paris", usage=usage(8, 1))]) as stub:
        run = runner(OpenAIChat("m", base_url=stub.url, api_key="k"), sleep, base_delay=1)
        assert list(run.stream("answer", PROMPT)) == ["Paris"]
    assert (run.ledger["answer"].retries, run.ledger["answer"].calls) == (1, 1)
    assert sleep.delays == [1.0] and run.ledger["answer"].bad_outputs == {}


@loopback
async def test_a_stream_cut_after_tokens_fails_rather_than_pass_for_whole(
        no_openai_env: None, sleep: RecordedSleep) -> None:
    cut = sse_body([stream_chunk("Paris"), stream_chunk(" is")], done=False)
    with StubOpenAI(script=[RawBody(cut), ChatReply("unused")]) as stub:
        run = runner(OpenAIChat("m", base_url=stub.url, api_key="k"), sleep)
        got: list[str] = []
        with pytest.raises(RequestFailed, match="the stream broke after 2 parts") as failed:
            async for delta in run.astream("answer", PROMPT):
                got.append(delta)
        asked = len(stub.chat_bodies())
    assert got == ["Paris", " is"] and asked == 1  # never asked again
    assert failed.value.kind == "connection"
    assert "without a finish reason" in str(failed.value)
    assert run.ledger["answer"].failures == 1


@loopback
def test_the_sync_stream_says_it_was_cut_too(no_openai_env: None) -> None:
    with StubOpenAI(script=[RawBody(sse_body([stream_chunk("Par")], done=False))]) as stub:
        chat = OpenAIChat("m", base_url=stub.url, api_key="k")
        parts = chat.stream(PROMPT)
        assert next(parts) == "Par"
        with pytest.raises(StreamCut, match="after 1 text parts without a finish reason"):
            next(parts)
