"""Calling a chat model many times, well: retries, timeouts, concurrency, progress, ledger.

Written once over the :class:`~.messages.ChatModel` protocol, so a LlamaIndex or
LangChain model gets the same policy as the ``openai`` client. Two kinds of
failure are retried separately:

- *transport*: HTTP 408/409/429/5xx, connection errors, timeouts; retried with
  exponential backoff (the server's ``Retry-After`` wins when it sends one);
- *output*: a reply the caller's ``parse`` rejects with :class:`~.messages.BadOutput`
  (empty, refusal, garbage); counted by kind in the ledger and asked again.

Anything else (a 400, a bad key) is a bug to show at once, not to retry.

Streams (:meth:`LLMRunner.astream`) follow the same policy *until the first
token*: a transport failure or an empty reply before any text was yielded is
retried, since the caller has seen nothing; once text has gone out, a failure
raises :class:`RequestFailed` (text already shown cannot be taken back). A
model without streaming is asked once, through :meth:`LLMRunner.acall`, and its
reply yielded as one chunk.

A synchronous caller (``call``, ``stream``, ``map``) gets the model's synchronous
methods, each call in a thread of its own; an async caller gets its async ones, on
the caller's loop. That is what the framework's own ``invoke`` and ``ainvoke``
use. Async HTTP clients pool connections per event loop (LangChain's
``ChatOpenAI`` shares one per base URL across the process), so a sync caller's
calls made through them on a loop of ours would break the same client's later
use on the caller's loop, the next ``asyncio.run`` or an async app's.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Sequence,
)
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, Generic, TypeVar

from .ledger import TokenLedger
from .messages import (
    BadOutput,
    ChatModel,
    Completion,
    LLMError,
    Message,
    StreamingChatModel,
    check_messages,
    reply_text,
)
from .usage import completion_with_usage

T = TypeVar("T")
X = TypeVar("X")
R = TypeVar("R")

TRANSIENT_STATUS = frozenset({408, 409, 429})


class RequestFailed(LLMError):
    """One request failed after every retry; ``kind`` is the last failure's label."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class RetryPolicy:
    """How often to try again, and how long to wait.

    ``attempts`` bounds transport failures per call, ``output_attempts`` bad
    replies per call. The wait before retry ``k`` (1-based) is
    ``min(max_delay, base_delay * 2**(k-1))`` with up to 25 % jitter, unless the
    server said how long to wait.
    """

    attempts: int = 4
    output_attempts: int = 2
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: bool = True

    def __post_init__(self) -> None:
        for name in ("attempts", "output_attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(self.max_delay, max(0.0, retry_after))
        wait = min(self.max_delay, self.base_delay * 2 ** (retry - 1))
        return wait * (1 + 0.25 * random.random()) if self.jitter else wait


def status_code(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    if code is None:
        code = getattr(getattr(exc, "response", None), "status_code", None)
    return code if isinstance(code, int) else None


@cache
def _exception_classes(*names: str) -> tuple[type[BaseException], ...]:
    """The classes named ``"module.Class"`` that import here.

    Each import stands alone, so a missing HTTP library never hides the others.
    """
    found: list[type[BaseException]] = []
    for dotted in names:
        module, _, name = dotted.partition(".")
        try:
            found.append(getattr(__import__(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _transport_errors() -> tuple[type[BaseException], ...]:
    return _exception_classes("openai.APIConnectionError", "httpx.TransportError",
                              "httpx2.TransportError")


def _timeout_errors() -> tuple[type[BaseException], ...]:
    return (TimeoutError, *_exception_classes("openai.APITimeoutError",
                                              "httpx.TimeoutException",
                                              "httpx2.TimeoutException"))


def is_transient(exc: BaseException) -> bool:
    """Whether another try may succeed: rate limits, server errors, lost connections, timeouts."""
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    code = status_code(exc)
    if code is not None:
        return code in TRANSIENT_STATUS or code >= 500
    return isinstance(exc, _transport_errors())


def failure_kind(exc: BaseException) -> str:
    """The ledger's label for a transport failure: timeout, http_<status> or connection."""
    if isinstance(exc, _timeout_errors()):
        return "timeout"
    code = status_code(exc)
    return f"http_{code}" if code is not None else "connection"


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's ``retry-after-ms`` or ``retry-after`` (seconds) header, when it sent one."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return float(value) * scale
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One item's result, or why it failed after every retry (``error``, ``kind``)."""

    index: int
    value: T | None = None
    error: str | None = None
    kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class LLMRunner:
    """Calls one chat model under one policy, and books every call in one ledger.

    ``concurrency`` bounds calls in flight; ``timeout`` (seconds) bounds each
    call whatever the model object's own setting; ``progress`` shows a tqdm bar
    with throughput and ETA in :meth:`map`.
    """

    def __init__(self, model: ChatModel, *, ledger: TokenLedger | None = None,
                 retry: RetryPolicy | None = None, concurrency: int = 4,
                 timeout: float | None = 120.0, progress: bool = False,
                 temperature: float = 0.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if not isinstance(model, ChatModel):
            raise TypeError("model must implement ChatModel (model_name, complete, acomplete); "
                            f"got {type(model).__name__}: wrap framework models with "
                            "the adapters' chat_model()")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError(f"timeout must be seconds > 0 or None, got {timeout!r}")
        self.model = model
        self.ledger = ledger if ledger is not None else TokenLedger()
        self.retry = retry or RetryPolicy()
        self.concurrency = concurrency
        self.timeout = timeout
        self.progress = progress
        self.temperature = temperature
        self._sleep = sleep

    def with_ledger(self, ledger: TokenLedger) -> LLMRunner:
        """This runner's model and policy, booking in ``ledger`` (a per-query account, say)."""
        return LLMRunner(self.model, ledger=ledger, retry=self.retry,
                         concurrency=self.concurrency, timeout=self.timeout,
                         progress=self.progress, temperature=self.temperature,
                         sleep=self._sleep)

    async def acall(self, stage: str, messages: Sequence[Message],
                    parse: Callable[[Completion], T], *, max_tokens: int | None = None) -> T:
        """One call, retried per the policy; ``parse``'s value, or :class:`RequestFailed`."""
        messages = check_messages(messages)
        transport_tries = output_tries = 0
        while True:
            try:
                call = (in_thread(self.model.complete, messages, max_tokens=max_tokens,
                                  temperature=self.temperature)
                        if for_sync_caller() else
                        self.model.acomplete(messages, max_tokens=max_tokens,
                                             temperature=self.temperature))
                completion = await (asyncio.wait_for(call, self.timeout) if self.timeout
                                    else call)
            except Exception as exc:  # classified below; anything not transient re-raises
                if not is_transient(exc):
                    raise
                transport_tries += 1
                kind = failure_kind(exc)
                if transport_tries >= self.retry.attempts:
                    self.ledger.record_failure(stage)
                    raise RequestFailed(kind, f"{type(exc).__name__}: {exc} "
                                        f"(after {transport_tries} attempts)") from exc
                self.ledger.record_retry(stage)
                await self._sleep(self.retry.delay(transport_tries, retry_after_seconds(exc)))
                continue
            self.ledger.record(stage, completion)
            try:
                return parse(completion)
            except BadOutput as bad:
                self.ledger.record_bad_output(stage, bad.kind)
                output_tries += 1
                if output_tries >= self.retry.output_attempts:
                    self.ledger.record_failure(stage)
                    raise RequestFailed(bad.kind, f"{bad.detail} (after {output_tries} "
                                        "replies)") from bad
                self.ledger.record_retry(stage)

    def call(self, stage: str, messages: Sequence[Message], parse: Callable[[Completion], T],
             *, max_tokens: int | None = None) -> T:
        """:meth:`acall` from synchronous code."""
        return run_sync(self.acall(stage, messages, parse, max_tokens=max_tokens))

    async def astream(self, stage: str, messages: Sequence[Message], *,
                      max_tokens: int | None = None) -> AsyncIterator[str]:
        """The reply's text as it arrives, booked in the ledger when the stream ends.

        Retried per the policy only before the first token (see the module
        docstring); ``timeout`` bounds the wait for each next part. A consumer
        that stops early is booked for what it received (tiktoken-counted).
        """
        messages = check_messages(messages)
        if not isinstance(self.model, StreamingChatModel):
            yield await self.acall(stage, messages, reply_text, max_tokens=max_tokens)
            return
        transport_tries = output_tries = 0
        while True:
            parts = (stream_in_thread(partial(self.model.stream, messages,
                                              max_tokens=max_tokens,
                                              temperature=self.temperature))
                     if for_sync_caller() else
                     self.model.astream(messages, max_tokens=max_tokens,
                                        temperature=self.temperature))
            sent: list[str] = []
            completion: Completion | None = None
            booked = finished = False
            timed = self._timed(parts)
            try:
                async for part in timed:
                    if isinstance(part, Completion):
                        completion = part
                    elif part:
                        sent.append(part)
                        yield part
                finished = True
            except Exception as exc:  # classified below; anything not transient re-raises
                booked = bool(sent)
                if sent:
                    self.ledger.record(stage, _partial(sent, messages, self.model.model_name))
                    self.ledger.record_failure(stage)
                if not is_transient(exc):
                    raise
                kind = failure_kind(exc)
                if sent:
                    raise RequestFailed(kind, f"{type(exc).__name__}: {exc} (the stream broke "
                                        f"after {len(sent)} parts; streams are retried only "
                                        "before their first token)") from exc
                transport_tries += 1
                if transport_tries >= self.retry.attempts:
                    self.ledger.record_failure(stage)
                    raise RequestFailed(kind, f"{type(exc).__name__}: {exc} "
                                        f"(after {transport_tries} attempts)") from exc
                self.ledger.record_retry(stage)
                await self._sleep(self.retry.delay(transport_tries, retry_after_seconds(exc)))
                continue
            finally:
                if not (finished or booked) and sent:  # the consumer stopped early
                    self.ledger.record(stage, _partial(sent, messages, self.model.model_name))
                await timed.aclose()
                close = getattr(parts, "aclose", None)
                if close is not None:
                    await close()
            if completion is None:  # a model that ended without its Completion: count it
                completion = completion_with_usage("".join(sent), messages, None, finish=None,
                                                   refusal=None, model=self.model.model_name)
            self.ledger.record(stage, completion)
            if sent:
                return
            try:
                yield reply_text(completion)  # all text in the final part, or a bad reply
                return
            except BadOutput as bad:
                self.ledger.record_bad_output(stage, bad.kind)
                output_tries += 1
                if output_tries >= self.retry.output_attempts:
                    self.ledger.record_failure(stage)
                    raise RequestFailed(bad.kind, f"{bad.detail} (after {output_tries} "
                                        "replies)") from bad
                self.ledger.record_retry(stage)

    async def _timed(self, parts: AsyncIterator[T]) -> AsyncGenerator[T, None]:
        """``parts``, each waited for at most ``timeout`` seconds."""
        iterator = parts.__aiter__()
        while True:
            try:
                step = iterator.__anext__()
                part = await (asyncio.wait_for(step, self.timeout) if self.timeout else step)
            except StopAsyncIteration:
                return
            yield part

    def stream(self, stage: str, messages: Sequence[Message], *,
               max_tokens: int | None = None) -> Iterator[str]:
        """:meth:`astream` from synchronous code (on the background loop, part by part)."""
        return iterate_sync(self.astream(stage, messages, max_tokens=max_tokens))

    async def amap(self, items: Sequence[X], work: Callable[[X], Awaitable[R]], *,
                   desc: str = "LLM calls",
                   on_outcome: Callable[[X, Outcome[R]], None] | None = None,
                   ) -> list[Outcome[R]]:
        """``work`` on every item, at most ``concurrency`` at a time, in input order.

        A :class:`RequestFailed` becomes a failed :class:`Outcome` (the others go
        on); any other exception stops the map. ``on_outcome`` sees each outcome
        as it lands, so a caller can persist progress for resumption.
        """
        from tqdm.auto import tqdm

        gate = asyncio.Semaphore(self.concurrency)
        stopped = False  # set when an error ends the map: no waiting item may start a call
        bar = tqdm(total=len(items), desc=desc, unit="item", disable=not self.progress,
                   dynamic_ncols=True)

        async def one(i: int, item: X) -> Outcome[R]:
            nonlocal stopped
            async with gate:
                if stopped:
                    raise asyncio.CancelledError
                try:
                    outcome: Outcome[R] = Outcome(i, value=await work(item))
                except RequestFailed as failed:
                    outcome = Outcome(i, error=str(failed), kind=failed.kind)
                except BaseException:
                    stopped = True
                    raise
            if on_outcome is not None:
                on_outcome(item, outcome)
            bar.update(1)
            return outcome

        try:
            tasks = [asyncio.ensure_future(one(i, item)) for i, item in enumerate(items)]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        finally:
            bar.close()

    def map(self, items: Sequence[X], work: Callable[[X], Awaitable[R]], *,
            desc: str = "LLM calls",
            on_outcome: Callable[[X, Outcome[R]], None] | None = None) -> list[Outcome[R]]:
        """:meth:`amap` from synchronous code."""
        return run_sync(self.amap(items, work, desc=desc, on_outcome=on_outcome))


def _partial(sent: list[str], messages: Sequence[Message], model: str) -> Completion:
    """What a stream cut short cost, as far as it went: counted, since the server's usage
    comes only with the last chunk."""
    return completion_with_usage("".join(sent), messages, None, finish=None, refusal=None,
                                 model=model)


def in_daemon_thread(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
    """``fn(*args, **kwargs)`` started in a daemon thread of its own: a model call that
    outlives its timeout, or a caller's Ctrl-C, never holds the interpreter's exit (a
    thread pool's workers are joined at exit). The runners' ``concurrency`` bounds them."""
    future: Future[R] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller, as a pool's worker does
            future.set_exception(exc)

    threading.Thread(target=run, name="conceptgraph-llm-call", daemon=True).start()
    return future


class _BackgroundLoop:
    """One event loop on a daemon thread, for every synchronous call of the process:
    its coroutines hold the retries, timeouts and concurrency, and call the model's
    synchronous methods in threads (:func:`for_sync_caller`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="conceptgraph-llm-loop",
                                 daemon=True).start()
                self._loop = loop
            return self._loop

    def is_running_here(self) -> bool:
        """Whether the running coroutine is on this loop (without making one)."""
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False


_BACKGROUND = _BackgroundLoop()


async def in_thread(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """``fn(*args, **kwargs)`` in a daemon thread, in this task's context (as
    ``asyncio.to_thread``, whose pool's threads would hold the interpreter's exit)."""
    context = contextvars.copy_context()
    return await asyncio.wrap_future(in_daemon_thread(context.run, fn, *args, **kwargs))


def for_sync_caller() -> bool:
    """Whether the running coroutine works for a synchronous caller (:func:`run_sync`),
    whose model calls go through the model's synchronous methods."""
    return _BACKGROUND.is_running_here()


async def stream_in_thread(open_stream: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
    """The parts of the synchronous stream ``open_stream()`` makes, each read in a thread
    (the opening too, which may send the request), all in one context.

    One read at a time: a read that outlived its timeout and the stream's close
    take their turns. Closing this closes the stream (its connection); behind a
    read still running, without waiting for it.
    """
    turn = threading.Lock()
    context = contextvars.copy_context()  # one for the whole stream, as one thread has
    end = object()
    opened: list[Iterator[T]] = []

    def read() -> Any:
        with turn:
            if not opened:
                opened.append(iter(context.run(open_stream)))
            return context.run(next, opened[0], end)

    def close() -> None:
        with turn:
            closer = getattr(opened[0], "close", None) if opened else None
            if closer is not None:
                context.run(closer)

    reading: Future[Any] | None = None
    try:
        while True:
            reading = in_daemon_thread(read)
            part = await asyncio.wrap_future(reading)
            if part is end:
                return
            yield part
    finally:
        closing = in_daemon_thread(close)
        if reading is None or reading.done():
            await asyncio.wrap_future(closing)


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running loop (Jupyter).

    It runs on one long-lived loop in a daemon thread (:class:`_BackgroundLoop`),
    where a runner calls the model's synchronous methods (:func:`for_sync_caller`).
    Calling it from that loop's own thread would deadlock, and raises instead.
    A caller interrupted while waiting (Ctrl-C) cancels the coroutine.
    """
    loop = _BACKGROUND.loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError("run_sync called from the LLM loop itself; await the coroutine")
    future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    try:
        return future.result()
    except BaseException:
        # Ctrl-C (or any exit) while waiting: stop the coroutine too, so no retry or
        # further call goes out after the caller has given up (a call already sent ends
        # in its own thread)
        future.cancel()
        raise


def iterate_sync(stream: AsyncIterator[T]) -> Iterator[T]:
    """An async iterator consumed from sync code, one :func:`run_sync` per item.

    Every step runs on the one background loop, so an async client that pools
    connections per loop stays valid; stopping early closes the async iterator.
    """

    async def step() -> T:
        return await stream.__anext__()

    try:
        while True:
            try:
                item = run_sync(step())
            except StopAsyncIteration:
                return
            yield item
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            run_sync(close())
