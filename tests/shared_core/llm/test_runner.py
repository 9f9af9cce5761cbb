"""LLMRunner: transport retries, bad-output retries, timeouts, concurrency, sync from a loop.

Transport faults come from the real ``openai`` client talking HTTP to StubOpenAI (a
429 with ``retry-after-ms``, 503s, a 400, a closed port, a slow reply); the pure policy
(what is retried, how often, how long it waits) runs on ScriptedChat. Waits are
recorded by an injected ``sleep``, never slept.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import httpx
import openai
import pytest

from shared_core.llm import (
    BadOutput,
    Completion,
    LLMError,
    LLMRunner,
    Message,
    OpenAIChat,
    Outcome,
    RequestFailed,
    RetryPolicy,
    TokenLedger,
    is_transient,
    reply_text,
    run_sync,
)
from shared_core.llm.runner import retry_after_seconds
from tests.shared_core.llm.scripted import RecordedSleep, ScriptedChat
from tests.shared_core.openai_stub import ChatReply, HTTPError, RawBody, StubOpenAI, usage

loopback = pytest.mark.allow_hosts(["127.0.0.1"])

PROMPT = [Message("user", "Say hi")]  # Say|·hi: 2 tokens + 3 + 3 = 8 counted input tokens
NO_JITTER = RetryPolicy(attempts=3, output_attempts=2, base_delay=0.5, max_delay=30.0,
                        jitter=False)


def stub_runner(stub: StubOpenAI, sleep: RecordedSleep, *, retry: RetryPolicy = NO_JITTER,
                timeout: float | None = 120.0) -> LLMRunner:
    return LLMRunner(OpenAIChat("stub-chat", base_url=stub.url), ledger=TokenLedger(),
                     retry=retry, timeout=timeout, sleep=sleep)


def counts(runner: LLMRunner, stage: str = "s") -> tuple[int, int, int, dict[str, int]]:
    """(calls, retries, failures, bad outputs) booked for ``stage``."""
    u = runner.ledger[stage]
    return u.calls, u.retries, u.failures, u.bad_outputs


# ------------------------------------------------------------------ transport, over HTTP
@loopback
def test_a_429_waits_what_the_server_says_then_succeeds(no_openai_env: None,
                                                        sleep: RecordedSleep) -> None:
    with StubOpenAI(script=[HTTPError(429, "slow down", {"retry-after-ms": "250"}),
                            ChatReply("ok", usage=usage(8, 1))]) as stub:
        runner = stub_runner(stub, sleep)
        assert runner.call("s", PROMPT, reply_text) == "ok"
    assert len(stub.chat_bodies()) == 2
    assert sleep.delays == [0.25]  # the header's 250 ms, not the policy's 0.5 s
    assert counts(runner) == (1, 1, 0, {})
    assert (runner.ledger["s"].input_tokens, runner.ledger["s"].output_tokens) == (8, 1)


@loopback
def test_retry_after_in_seconds_and_the_cap(no_openai_env: None, sleep: RecordedSleep) -> None:
    with StubOpenAI(script=[HTTPError(429, headers={"retry-after": "2"}),
                            HTTPError(429, headers={"retry-after-ms": "90000"}),
                            ChatReply("ok")]) as stub:
        runner = stub_runner(stub, sleep, retry=RetryPolicy(attempts=3, max_delay=5.0,
                                                            jitter=False))
        assert runner.call("s", PROMPT, reply_text) == "ok"
    assert sleep.delays == [2.0, 5.0]  # 2 s as sent; 90 s capped at max_delay
    assert counts(runner) == (1, 2, 0, {})


@loopback
def test_503s_beyond_the_attempts_fail_with_the_status(no_openai_env: None,
                                                       sleep: RecordedSleep) -> None:
    with StubOpenAI(script=[HTTPError(503, "overloaded")] * 4) as stub:
        runner = stub_runner(stub, sleep)  # attempts=3
        with pytest.raises(RequestFailed) as failed:
            runner.call("s", PROMPT, reply_text)
    assert failed.value.kind == "http_503"
    assert "(after 3 attempts)" in failed.value.detail and "overloaded" in failed.value.detail
    assert isinstance(failed.value.__cause__, openai.InternalServerError)
    assert len(stub.chat_bodies()) == 3 and len(stub.script) == 1  # the 4th was never asked
    assert sleep.delays == [0.5, 1.0]  # base 0.5 s, doubled; no header, no jitter
    assert counts(runner) == (0, 2, 1, {})


@loopback
def test_a_client_error_is_raised_at_once(no_openai_env: None, sleep: RecordedSleep) -> None:
    cases = [(400, openai.BadRequestError), (401, openai.AuthenticationError),
             (404, openai.NotFoundError), (422, openai.UnprocessableEntityError)]
    with StubOpenAI(script=[HTTPError(status, f"refused with {status}")
                            for status, _ in cases]) as stub:
        runner = stub_runner(stub, sleep)
        for status, error in cases:
            with pytest.raises(error, match=f"refused with {status}"):
                runner.call("s", PROMPT, reply_text)
    assert len(stub.chat_bodies()) == 4 and sleep.delays == []  # one request each
    assert counts(runner) == (0, 0, 0, {})


@loopback
def test_a_closed_port_is_retried_then_reported_as_connection(no_openai_env: None,
                                                              sleep: RecordedSleep) -> None:
    with StubOpenAI() as stub:
        url = stub.url
    # the stub has stopped: its port refuses connections
    runner = LLMRunner(OpenAIChat("stub-chat", base_url=url), retry=NO_JITTER, sleep=sleep)
    with pytest.raises(RequestFailed) as failed:
        runner.call("s", PROMPT, reply_text)
    assert failed.value.kind == "connection"
    assert isinstance(failed.value.__cause__, openai.APIConnectionError)
    assert sleep.delays == [0.5, 1.0]
    assert counts(runner) == (0, 2, 1, {})


class Stalled:
    """A chat model whose replies never come (until ``release`` is set, for the threads
    that sync calls leave behind)."""

    model_name = "stalled"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sync_calls = 0

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        self.sync_calls += 1
        self.release.wait(3600)
        raise AssertionError("released: the runner gave up on this call long ago")

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


@pytest.mark.parametrize("caller", ["sync", "async"])
def test_the_runner_timeout_bounds_each_call(sleep: RecordedSleep, caller: str) -> None:
    """A sync caller's calls run the model's ``complete`` in threads, an async caller's
    its ``acomplete``: the timeout bounds each either way."""
    model = Stalled()
    runner = LLMRunner(model, timeout=0.01, sleep=sleep,
                       retry=RetryPolicy(attempts=3, base_delay=0.1, jitter=False))
    with pytest.raises(RequestFailed) as failed:
        if caller == "sync":
            runner.call("s", PROMPT, reply_text)
        else:
            asyncio.run(runner.acall("s", PROMPT, reply_text))
    model.release.set()
    assert failed.value.kind == "timeout"
    assert failed.value.detail.endswith("(after 3 attempts)")
    assert sleep.delays == [0.1, 0.2]
    assert counts(runner) == (0, 2, 1, {})
    assert model.sync_calls == (3 if caller == "sync" else 0)


def warm_up(runner: LLMRunner) -> None:
    """One quick call first, so the timed calls below time the server, not the client's
    first-request setup (which can take longer than a tight timeout on a busy machine)."""
    assert runner.call("warm-up", PROMPT, reply_text) == "warm"


@loopback
def test_a_reply_slower_than_the_runner_timeout_is_a_timeout(no_openai_env: None,
                                                             sleep: RecordedSleep) -> None:
    with StubOpenAI(script=[ChatReply("warm"), ChatReply("late", delay=1.0),
                            ChatReply("late", delay=1.0)]) as stub:
        runner = stub_runner(stub, sleep, retry=RetryPolicy(attempts=2, base_delay=0.1,
                                                            jitter=False), timeout=0.2)
        warm_up(runner)
        with pytest.raises(RequestFailed) as failed:
            runner.call("s", PROMPT, reply_text)
    assert failed.value.kind == "timeout"
    assert isinstance(failed.value.__cause__, TimeoutError)
    assert len(stub.chat_bodies()) == 3 and sleep.delays == [0.1]
    assert counts(runner) == (0, 1, 1, {})


@loopback
def test_a_timeout_then_a_prompt_reply(no_openai_env: None, sleep: RecordedSleep) -> None:
    with StubOpenAI(script=[ChatReply("warm"), ChatReply("late", delay=1.0),
                            ChatReply("ok")]) as stub:
        runner = stub_runner(stub, sleep, timeout=0.2)
        warm_up(runner)
        assert runner.call("s", PROMPT, reply_text) == "ok"
    assert counts(runner) == (1, 1, 0, {})


@loopback
def test_the_clients_own_timeout_is_labelled_timeout(no_openai_env: None,
                                                     sleep: RecordedSleep) -> None:
    with StubOpenAI(script=[ChatReply("warm"), ChatReply("late", delay=1.0),
                            ChatReply("late", delay=1.0)]) as stub:
        runner = LLMRunner(OpenAIChat("stub-chat", base_url=stub.url, timeout=0.2),
                           retry=RetryPolicy(attempts=2, jitter=False), timeout=None,
                           sleep=sleep)
        warm_up(runner)
        with pytest.raises(RequestFailed) as failed:
            runner.call("s", PROMPT, reply_text)
    assert isinstance(failed.value.__cause__, openai.APITimeoutError)
    assert failed.value.kind == "timeout"


@loopback
def test_a_malformed_body_is_raised_at_once(no_openai_env: None, sleep: RecordedSleep) -> None:
    """Neither transient nor a BadOutput: a misconfigured server, shown at once, not retried."""
    with StubOpenAI(script=[RawBody(b'{"id": "x", "choices": ['), ChatReply("never")]) as stub:
        runner = stub_runner(stub, sleep)
        with pytest.raises(LLMError, match=r"did not answer with JSON .*is base_url the API root"):
            runner.call("s", PROMPT, reply_text)
    assert len(stub.chat_bodies()) == 1
    assert counts(runner) == (0, 0, 0, {})


# ------------------------------------------------------------------ bad outputs, over HTTP
@loopback
def test_an_empty_reply_is_counted_and_asked_again(no_openai_env: None,
                                                   sleep: RecordedSleep) -> None:
    empties: list[str | None] = ["", "  \n", None]  # None: "content": null
    script = []
    for empty in empties:
        script += [ChatReply(empty, usage=usage(8, 0)), ChatReply("fine", usage=usage(8, 1))]
    with StubOpenAI(script=script) as stub:
        runner = stub_runner(stub, sleep)
        for k in range(1, 4):
            assert runner.call("s", PROMPT, reply_text) == "fine"
            assert counts(runner) == (2 * k, k, 0, {"empty": k})
    # every reply was paid for, so every one is booked: 6 x 8 in, 3 x 1 out
    assert (runner.ledger["s"].input_tokens, runner.ledger["s"].output_tokens) == (48, 3)
    assert sleep.delays == []  # a bad reply is asked again at once


@loopback
def test_refusals_beyond_output_attempts_fail(no_openai_env: None, sleep: RecordedSleep) -> None:
    refusal = ChatReply(content=None, refusal="I can't help with that.")
    with StubOpenAI(script=[refusal, refusal, ChatReply("never")]) as stub:
        runner = stub_runner(stub, sleep)  # output_attempts=2
        with pytest.raises(RequestFailed) as failed:
            runner.call("s", PROMPT, reply_text)
    assert failed.value.kind == "refusal"
    assert failed.value.detail == "I can't help with that. (after 2 replies)"
    assert isinstance(failed.value.__cause__, BadOutput)
    assert len(stub.chat_bodies()) == 2
    assert counts(runner) == (2, 1, 1, {"refusal": 2})


@loopback
def test_a_parse_that_rejects_twice_fails(no_openai_env: None, sleep: RecordedSleep) -> None:
    seen: list[str] = []

    def parse(completion: Completion) -> int:
        seen.append(completion.text)
        try:
            return int(completion.text)
        except ValueError:
            raise BadOutput("unparsable", f"not a number: {completion.text!r}") from None

    with StubOpenAI(script=[ChatReply("seven"), ChatReply("eight"), ChatReply("9")]) as stub:
        runner = stub_runner(stub, sleep)
        with pytest.raises(RequestFailed) as failed:
            runner.call("s", PROMPT, parse)
        assert seen == ["seven", "eight"]
        assert failed.value.kind == "unparsable"
        assert str(failed.value) == "unparsable: not a number: 'eight' (after 2 replies)"
        assert counts(runner) == (2, 1, 1, {"unparsable": 2})
        # the next call gets the next reply: "9" parses
        assert runner.call("s", PROMPT, parse) == 9
    assert counts(runner) == (3, 1, 1, {"unparsable": 2})


# ------------------------------------------------------------------ the policy, on ScriptedChat
def test_transport_and_output_retries_are_counted_apart(sleep: RecordedSleep) -> None:
    model = ScriptedChat([TimeoutError("t1"), "", ConnectionResetError("c1"), "done"])
    runner = LLMRunner(model, retry=RetryPolicy(attempts=3, output_attempts=2,
                                                base_delay=0.5, jitter=False), sleep=sleep)
    assert runner.call("s", PROMPT, reply_text) == "done"
    # transport tries 1 and 2 wait 0.5 and 1.0; the empty reply waits nothing
    assert sleep.delays == [0.5, 1.0]
    assert counts(runner) == (2, 3, 0, {"empty": 1})
    assert len(model.calls) == 4


def test_transport_attempts_are_per_call_not_per_reply(sleep: RecordedSleep) -> None:
    """``attempts`` bounds a call's transport failures in all, across bad replies."""
    model = ScriptedChat([TimeoutError(), "", TimeoutError(), "never"])
    runner = LLMRunner(model, retry=RetryPolicy(attempts=2, output_attempts=3, jitter=False,
                                                base_delay=0.0), sleep=sleep)
    with pytest.raises(RequestFailed) as failed:
        runner.call("s", PROMPT, reply_text)
    assert failed.value.kind == "timeout" and len(model.calls) == 3
    assert counts(runner) == (1, 2, 1, {"empty": 1})


def test_a_non_transient_error_from_the_model_is_raised_unchanged(sleep: RecordedSleep) -> None:
    bug = KeyError("the model's own bug")
    runner = LLMRunner(ScriptedChat([bug]), sleep=sleep)
    with pytest.raises(KeyError) as raised:
        runner.call("s", PROMPT, reply_text)
    assert raised.value is bug
    assert counts(runner) == (0, 0, 0, {}) and sleep.delays == []


def test_the_call_settings_reach_the_model() -> None:
    model = ScriptedChat(["a", "b"])
    runner = LLMRunner(model, temperature=0.2)
    runner.call("s", PROMPT, reply_text, max_tokens=64)
    runner.call("s", PROMPT, reply_text)
    assert model.settings == [(64, 0.2), (None, 0.2)]


def test_tiktoken_counts_from_scripted_replies_land_in_the_ledger() -> None:
    runner = LLMRunner(ScriptedChat(["stub reply"]))  # stub|·reply: 2 tokens
    runner.call("s", PROMPT, reply_text)
    u = runner.ledger["s"]
    assert (u.calls, u.input_tokens, u.output_tokens, u.calls_counted_locally) == (1, 8, 2, 1)


@pytest.mark.parametrize("messages, error", [([], ValueError), ("Say hi", TypeError),
                                             ([("user", "hi")], TypeError)])
def test_bad_messages_fail_before_the_model_is_called(messages: object,
                                                      error: type[Exception]) -> None:
    model = ScriptedChat(["never"])
    with pytest.raises(error):
        LLMRunner(model).call("s", messages, reply_text)  # type: ignore[arg-type]
    assert model.calls == []


@pytest.mark.parametrize("kwargs, error, message", [
    ({"concurrency": 0}, ValueError, "concurrency must be an int >= 1"),
    ({"concurrency": True}, ValueError, "concurrency must be an int >= 1"),
    ({"concurrency": 2.0}, ValueError, "concurrency must be an int >= 1"),
    ({"timeout": 0}, ValueError, "timeout must be seconds > 0 or None"),
    ({"timeout": -1.0}, ValueError, "timeout must be seconds > 0 or None"),
    ({"timeout": True}, ValueError, "timeout must be seconds > 0 or None"),
])
def test_runner_settings_are_checked(kwargs: dict[str, object], error: type[Exception],
                                     message: str) -> None:
    with pytest.raises(error, match=message):
        LLMRunner(ScriptedChat([]), **kwargs)  # type: ignore[arg-type]


def test_the_runner_refuses_what_is_not_a_chat_model() -> None:
    with pytest.raises(TypeError, match=r"must implement ChatModel.*chat_model\(\)"):
        LLMRunner("gpt-4o-mini")  # type: ignore[arg-type]
    assert LLMRunner(ScriptedChat([]), timeout=None).timeout is None


# ------------------------------------------------------------------ map
class InFlight:
    """A chat model that counts calls in flight. An async call yields to the loop a few
    times, a sync one (in its thread) sleeps a few hundredths of a second; either way
    later items return sooner, so completion order is not input order."""

    model_name = "in-flight"

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.order: list[str] = []
        self.lock = threading.Lock()
        self.sync_calls = 0

    def _start(self, messages: Sequence[Message]) -> int:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.order.append(messages[-1].content)
            return 20 - len(self.order)

    def _end(self, messages: Sequence[Message]) -> Completion:
        with self.lock:
            self.now -= 1
        text = messages[-1].content.upper()
        return Completion(text, 1, 1, 0, "server", "stop", None, self.model_name)

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float = 0.0) -> Completion:
        self.sync_calls += 1
        time.sleep(self._start(messages) * 0.005)
        return self._end(messages)

    async def acomplete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                        temperature: float = 0.0) -> Completion:
        for _ in range(self._start(messages)):
            await asyncio.sleep(0)
        return self._end(messages)


@pytest.mark.parametrize("caller", ["sync", "async"])
@pytest.mark.parametrize("concurrency", [1, 3, 10])
def test_map_keeps_input_order_and_the_concurrency_bound(concurrency: int, caller: str) -> None:
    model = InFlight()
    runner = LLMRunner(model, concurrency=concurrency)
    items = [f"item {i}" for i in range(10)]
    landed: list[tuple[str, int]] = []
    args = (items, lambda q: runner.acall("map", [Message("user", q)], reply_text))
    on_outcome = lambda item, o: landed.append((item, o.index))  # noqa: E731
    outcomes = (runner.map(*args, on_outcome=on_outcome) if caller == "sync" else
                asyncio.run(runner.amap(*args, on_outcome=on_outcome)))
    assert model.sync_calls == (10 if caller == "sync" else 0)
    assert [o.index for o in outcomes] == list(range(10))
    assert [o.value for o in outcomes] == [f"ITEM {i}" for i in range(10)]
    assert all(o.ok and o.kind is None for o in outcomes)
    assert model.peak == concurrency
    # on_outcome once per item, with the item and its own outcome
    assert sorted(landed) == sorted((f"item {i}", i) for i in range(10))
    assert runner.ledger["map"].calls == 10


def test_map_turns_a_failed_request_into_a_failed_outcome(sleep: RecordedSleep) -> None:
    def reply(messages: Sequence[Message]) -> str | BaseException:
        q = messages[-1].content
        return ConnectionResetError("reset") if q == "bad" else q.upper()

    runner = LLMRunner(ScriptedChat(reply), retry=RetryPolicy(attempts=2, jitter=False),
                       sleep=sleep, concurrency=2)
    seen: list[Outcome[str]] = []
    outcomes = runner.map(["a", "bad", "c"],
                          lambda q: runner.acall("s", [Message("user", q)], reply_text),
                          on_outcome=lambda item, o: seen.append(o))
    assert [o.ok for o in outcomes] == [True, False, True]
    assert [o.value for o in outcomes] == ["A", None, "C"]
    bad = outcomes[1]
    assert bad.index == 1 and bad.kind == "connection"
    assert bad.error == "connection: ConnectionResetError: reset (after 2 attempts)"
    assert sorted(o.index for o in seen) == [0, 1, 2]
    assert counts(runner) == (2, 1, 1, {})


def stop_map_case() -> tuple[ScriptedChat, list[str], Exception]:
    """Four items one at a time; the caller's own work raises on "b" before any call."""
    model = ScriptedChat(lambda messages: messages[-1].content)
    runner = LLMRunner(model, concurrency=1)
    landed: list[str] = []

    async def work(q: str) -> str:
        if q == "b":
            raise RuntimeError("a bug in the caller's work")
        return await runner.acall("s", [Message("user", q)], reply_text)

    with pytest.raises(RuntimeError, match="a bug in the caller's work") as raised:
        runner.map(["a", "b", "c", "d"], work, on_outcome=lambda item, o: landed.append(item))
    return model, landed, raised.value


def test_a_non_transient_error_stops_the_map() -> None:
    model, landed, _ = stop_map_case()
    called = [c[-1].content for c in model.calls]
    assert landed[0] == "a" and called[0] == "a"
    assert "b" not in landed  # the error is raised, not turned into an outcome
    assert "d" not in called and "d" not in landed  # the rest never started


def test_no_call_starts_after_the_map_has_failed() -> None:
    model, landed, _ = stop_map_case()
    assert [c[-1].content for c in model.calls] == ["a"]
    assert landed == ["a"]


def test_map_of_nothing() -> None:
    runner = LLMRunner(ScriptedChat([]))
    assert runner.map([], lambda q: runner.acall("s", PROMPT, reply_text)) == []


async def test_call_and_map_work_inside_a_running_event_loop() -> None:
    """Jupyter's case: sync entry points from a thread that already runs a loop."""
    asyncio.get_running_loop()  # this test runs in one
    threads: list[str] = []

    def reply(messages: Sequence[Message]) -> str:
        threads.append(threading.current_thread().name)
        return "hi"

    runner = LLMRunner(ScriptedChat(reply))
    assert runner.call("s", PROMPT, reply_text) == "hi"
    assert [o.value for o in runner.map([1, 2], lambda _: runner.acall("s", PROMPT,
                                                                          reply_text))] == [
        "hi", "hi"]
    # the model's sync method, each call in a thread of its own beside the runner's loop
    assert threads == ["conceptgraph-llm-call"] * 3
    # and an error crosses back to the caller's thread
    failing = LLMRunner(ScriptedChat([ValueError("boom")]))
    with pytest.raises(ValueError, match="boom"):
        failing.call("s", PROMPT, reply_text)


async def test_acall_in_the_callers_loop() -> None:
    runner = LLMRunner(ScriptedChat(["hi"]))
    assert await runner.acall("s", PROMPT, reply_text) == "hi"
    outcomes = await runner.amap(["x"], lambda _: asyncio.sleep(0, result="done"))
    assert outcomes == [Outcome(0, value="done")]


def test_run_sync_without_a_loop() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert run_sync(answer()) == 42


@loopback
@pytest.mark.parametrize("keep_alive", [
    False,
    True,
])
def test_sync_calls_one_after_another(no_openai_env: None, keep_alive: bool) -> None:
    """Real servers (OpenAI, vLLM, llama.cpp) keep connections alive between requests."""
    with StubOpenAI(keep_alive=keep_alive, script=[ChatReply("one"), ChatReply("two"),
                                                   ChatReply("three")]) as stub:
        runner = LLMRunner(OpenAIChat("stub-chat", base_url=stub.url))
        assert runner.call("s", PROMPT, reply_text) == "one"
        assert runner.call("s", PROMPT, reply_text) == "two"
        outcomes = runner.map(["x"], lambda _: runner.acall("s", PROMPT, reply_text))
        assert outcomes[0].value == "three"


@loopback
def test_sync_calls_then_async_ones_from_loops_of_the_callers_own(no_openai_env: None) -> None:
    """A notebook or script's case: sync calls (on the runner's loop), then
    ``asyncio.run`` twice, each a new loop, on a keep-alive server. A client whose
    connections another loop opened fails with "bound to a different event loop", then
    "Event loop is closed": each loop gets its own async client."""
    replies = ["one", "two", "three", "four five", "six", "seven eight"]
    with StubOpenAI(keep_alive=True, script=[ChatReply(r) for r in replies]) as stub:
        runner = LLMRunner(OpenAIChat("stub-chat", base_url=stub.url))

        async def called_and_streamed() -> tuple[str, list[str]]:
            called = await runner.acall("s", PROMPT, reply_text)
            return called, [part async for part in runner.astream("s", PROMPT)]

        assert runner.call("s", PROMPT, reply_text) == "one"
        assert list(runner.stream("s", PROMPT)) == ["two"]
        assert asyncio.run(called_and_streamed()) == ("three", ["four", " five"])
        assert asyncio.run(called_and_streamed()) == ("six", ["seven", " eight"])
    assert runner.ledger["s"].calls == 6 and runner.ledger["s"].retries == 0


# ------------------------------------------------------------------ RetryPolicy
@pytest.mark.parametrize("kwargs, message", [
    ({"attempts": 0}, "attempts must be an int >= 1"),
    ({"attempts": True}, "attempts must be an int >= 1"),
    ({"attempts": 2.0}, "attempts must be an int >= 1"),
    ({"output_attempts": 0}, "output_attempts must be an int >= 1"),
    ({"output_attempts": "2"}, "output_attempts must be an int >= 1"),
    ({"base_delay": -0.1}, "base_delay must be a number >= 0"),
    ({"base_delay": True}, "base_delay must be a number >= 0"),
    ({"max_delay": -1}, "max_delay must be a number >= 0"),
    ({"max_delay": "30"}, "max_delay must be a number >= 0"),
])
def test_retry_policy_is_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_retry_delays_by_hand() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=False)
    # min(3, 0.5 * 2**(k-1)) for retries 1..5
    assert [policy.delay(k) for k in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    # the server's word wins, within [0, max_delay]
    assert policy.delay(1, retry_after=0.25) == 0.25
    assert policy.delay(4, retry_after=0.0) == 0.0
    assert policy.delay(1, retry_after=-5.0) == 0.0
    assert policy.delay(1, retry_after=60.0) == 3.0
    assert RetryPolicy(base_delay=0.0, jitter=False).delay(7) == 0.0
    defaults = RetryPolicy()
    assert (defaults.attempts, defaults.output_attempts, defaults.base_delay,
            defaults.max_delay, defaults.jitter) == (4, 2, 0.5, 30.0, True)


def test_jitter_adds_up_to_a_quarter(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = RetryPolicy(base_delay=2.0, max_delay=30.0)
    monkeypatch.setattr(random, "random", lambda: 0.0)
    assert policy.delay(2) == 4.0
    monkeypatch.setattr(random, "random", lambda: 0.5)
    assert policy.delay(2) == 4.5  # 4 * (1 + 0.25 * 0.5)
    monkeypatch.setattr(random, "random", lambda: 1.0)
    assert policy.delay(2) == 5.0
    assert policy.delay(2, retry_after=1.0) == 1.0  # no jitter on the server's word


# ------------------------------------------------------------------ is_transient
def _transport() -> ModuleType:
    """The HTTP package the ``openai`` client is built on: ``httpx2`` from openai 3, else
    ``httpx``; its errors are made with that package's requests and responses."""
    try:
        import httpx2
    except ImportError:  # pragma: no cover - openai < 3
        return httpx
    return httpx2


OPENAI_HTTP = _transport()


def _request() -> httpx.Request:
    return httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")


def _openai_request() -> object:
    return OPENAI_HTTP.Request("POST", "http://127.0.0.1/v1/chat/completions")


def _status_error(status: int) -> openai.APIStatusError:
    response = OPENAI_HTTP.Response(status, request=_openai_request())
    cls = {400: openai.BadRequestError, 401: openai.AuthenticationError,
           403: openai.PermissionDeniedError, 404: openai.NotFoundError,
           409: openai.ConflictError, 422: openai.UnprocessableEntityError,
           429: openai.RateLimitError}.get(status, openai.InternalServerError)
    return cls(f"status {status}", response=response, body=None)


class WithStatus(Exception):
    def __init__(self, status_code: object) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code


@pytest.mark.parametrize("exc, transient", [
    (TimeoutError(), True),
    (asyncio.TimeoutError(), True),
    (ConnectionError(), True),
    (ConnectionRefusedError(), True),
    (ConnectionResetError(), True),
    (openai.APIConnectionError(request=_openai_request()), True),  # type: ignore[arg-type]
    (openai.APITimeoutError(request=_openai_request()), True),  # type: ignore[arg-type]
    (httpx.ConnectError("refused"), True),
    (httpx.ReadTimeout("slow"), True),
    (httpx.RemoteProtocolError("cut"), True),
    (_status_error(408), True),
    (_status_error(409), True),
    (_status_error(429), True),
    (_status_error(500), True),
    (_status_error(502), True),
    (_status_error(503), True),
    (_status_error(529), True),
    (_status_error(400), False),
    (_status_error(401), False),
    (_status_error(403), False),
    (_status_error(404), False),
    (_status_error(422), False),
    (httpx.HTTPStatusError("gateway", request=_request(),
                           response=httpx.Response(504, request=_request())), True),
    (httpx.HTTPStatusError("gone", request=_request(),
                           response=httpx.Response(410, request=_request())), False),
    (WithStatus(429), True),  # any client's error that carries status_code
    (WithStatus(418), False),
    (WithStatus("503"), False),  # not an int: not a status
    (ValueError("bad"), False),
    (json.JSONDecodeError("x", "doc", 0), False),
    (BadOutput("empty", "nothing"), False),
    (RequestFailed("timeout", "after 4"), False),
    (RuntimeError("Event loop is closed"), False),
    (KeyError("k"), False),
], ids=lambda v: type(v).__name__ + (f"_{v.status_code}" if hasattr(v, "status_code") else "")
   if isinstance(v, BaseException) else str(v))
def test_is_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


@pytest.mark.parametrize("name", ["ConnectError", "ReadTimeout", "RemoteProtocolError"])
def test_is_transient_knows_the_openai_clients_transport_errors(name: str) -> None:
    if OPENAI_HTTP is httpx:
        pytest.skip("openai < 3 is built on httpx, covered above")
    assert is_transient(getattr(OPENAI_HTTP, name)("lost"))


@pytest.mark.parametrize("headers, seconds", [
    ({"retry-after-ms": "250"}, 0.25),
    ({"Retry-After-Ms": "1500"}, 1.5),  # header names are case-insensitive
    ({"retry-after": "3"}, 3.0),
    ({"retry-after": "0.5", "retry-after-ms": "100"}, 0.1),  # the finer one wins
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),  # a date: not read
    ({}, None),
])
def test_retry_after_from_the_response_headers(headers: dict[str, str],
                                               seconds: float | None) -> None:
    response = OPENAI_HTTP.Response(429, request=_openai_request(), headers=headers)
    exc = openai.RateLimitError("slow down", response=response, body=None)
    assert retry_after_seconds(exc) == seconds


def test_no_response_no_retry_after() -> None:
    assert retry_after_seconds(TimeoutError()) is None
    assert retry_after_seconds(openai.APIConnectionError(
        request=_openai_request())) is None  # type: ignore[arg-type]


def test_ctrl_c_while_waiting_in_run_sync_cancels_the_call(tmp_path: Path) -> None:
    # a real SIGINT in a child process: the waiting caller gets KeyboardInterrupt and the
    # coroutine on the background loop is cancelled, not left running (and spending). The
    # child raises KeyboardInterrupt on SIGINT as an interactive Python does, even when
    # the tests run where SIGINT is ignored (a background job of a shell: Python then
    # keeps ignoring it, and the call would simply finish)
    script = tmp_path / "interrupt.py"
    script.write_text(textwrap.dedent("""
        import asyncio, os, signal, threading, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from shared_core.llm import run_sync

        cancelled = threading.Event()

        async def long_call():
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            run_sync(long_call())
        except KeyboardInterrupt:
            print("interrupted", cancelled.wait(5), round(time.monotonic() - start) < 5)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert done.stdout.split() == ["interrupted", "True", "True"], done.stderr
