"""The multi-stage answer pipeline (HuixiangDou2 §6): logic form first, dual level as fallback.

1. ``decompose``: the LLM writes the query as operator steps (:mod:`.logic_form`);
2. ``logic_form``: the steps run, arithmetic and comparisons computed here;
3. ``precheck``: the verifier asks whether that context holds the arguments
   the answer needs (:mod:`.verify`);
4. on any failure there (an unparsable decomposition, an unknown operator, a
   step referencing a missing answer, an empty or unusable verdict, a
   rejection), ``keys`` extracts low- and high-level keys (one LLM call; the
   graphs' own keys when that fails) and ``dual_level`` retrieves for them
   (:mod:`.dual_level`), which always gives a context to answer from;
5. ``answer``: the answer streams from the route's context.

Every stage is recorded in the :class:`~.trace.AnswerTrace` with what it
returned, its LLM tokens and its time; a failure is recorded and answered
through the fallback, never raised. What can still raise is the answer stage
itself when the LLM cannot answer at all (:class:`~shared_core.llm.RequestFailed`
after the runner's retries, or the client's own error for a bad request or key):
that is a broken LLM, not a bad plan, and is not hidden.

``stream``/``astream`` return iterators over the answer's text that hold the
trace (filled as stages run), the evidence and, once done, the whole text.
``prepare``/``aprepare`` run stages 1-4 only, for callers that want the
sources before the first token (the LlamaIndex query engine).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..checks import check_count
from ..index import ConceptGraphIndex
from ..kg.graph import KnowledgeGraph
from ..kg.retrieve import KGRetriever
from ..llm import ChatModel, LLMRunner, Message, iterate_sync, run_sync
from ..text.hygiene import check_query
from .dual_level import DualLevelResult, DualLevelRetriever
from .evidence import Evidence, context_block
from .keys import QueryKeys, extract_keys, graph_keys
from .logic_form import LogicForm, LogicFormResult, Step
from .prompts import ANSWER_CONTEXT_SYSTEM, ANSWER_LOGIC_SYSTEM, question_with_context
from .trace import AnswerTrace, QueryLedger, Route, StageClock
from .verify import Verdict, precheck

GENERATE_STAGE = "answer_generate"
logger = logging.getLogger(__name__)


def error_kind(exc: BaseException) -> str:
    """The failure's kind for the trace: ours carry one (``unparsable``, ``missing_answer``,
    ...); anything else (a client's error) is named by its class."""
    kind = getattr(exc, "kind", None)
    return kind if isinstance(kind, str) else type(exc).__name__


def fall_back(trace: AnswerTrace, clock: StageClock, what: str, exc: BaseException) -> None:
    """Record a logic-form stage's failure; the pipeline goes on to dual level."""
    kind, detail = error_kind(exc), str(exc)
    clock.done("failed", None, error=exc, error_kind=kind)
    # our errors already say their kind first ("unparsable: no steps in ...")
    trace.fallback_reason = f"{what} ({detail if detail.startswith(kind) else f'{kind}: {detail}'})"
    logger.warning("answer pipeline: %s; falling back to dual-level retrieval",
                   trace.fallback_reason)


@dataclass(frozen=True)
class AnswerConfig:
    """The pipeline's knobs; token budgets are cl100k_base tokens.

    ``budget``/``key_budget``: the dual-level context and each key's share of it;
    ``step_budget``: evidence per logic-form step; ``max_keys`` per level;
    ``logic_form=False`` goes straight to dual level; ``precheck=False`` trusts
    any logic form that ran; ``llm_keys=False`` takes keys from the graphs
    without asking the LLM. The ``*_max_tokens`` bound each stage's replies.
    ``answer_instructions`` is added to the answer prompt on either route, for
    the form the answer must take ("Reply with the answer alone, ...").
    """

    budget: int = 1500
    key_budget: int = 400
    step_budget: int = 300
    max_keys: int = 6
    max_steps: int = 6
    top_relations: int = 5
    logic_form: bool = True
    precheck: bool = True
    llm_keys: bool = True
    keys_max_tokens: int | None = 128
    decompose_max_tokens: int | None = 256
    step_max_tokens: int | None = 64
    verify_max_tokens: int | None = 48
    answer_max_tokens: int | None = 512
    answer_instructions: str = ""

    def __post_init__(self) -> None:
        for name in ("budget", "key_budget", "step_budget", "max_keys", "max_steps",
                     "top_relations"):
            check_count(f"AnswerConfig.{name}", getattr(self, name))
        for name in ("keys_max_tokens", "decompose_max_tokens", "step_max_tokens",
                     "verify_max_tokens", "answer_max_tokens"):
            check_count(f"AnswerConfig.{name}", getattr(self, name), optional=True)
        for name in ("logic_form", "precheck", "llm_keys"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"AnswerConfig.{name} must be True or False")
        if not isinstance(self.answer_instructions, str):
            raise TypeError("AnswerConfig.answer_instructions must be a str, got "
                            f"{type(self.answer_instructions).__name__}")

    def answer_system(self, base: str) -> str:
        """An answer stage's system prompt, with the caller's instructions after it."""
        extra = self.answer_instructions.strip()
        return f"{base}\n{extra}" if extra else base


@dataclass
class PreparedAnswer:
    """Stages 1-4 done: the route, its context and the answer prompt; the answer to stream.

    ``stream``/``astream`` run the ``answer`` stage once; afterwards ``text``
    holds the answer, and iterating again gives it whole, as one part.
    """

    query: str
    route: Route
    evidence: tuple[Evidence, ...]
    messages: tuple[Message, ...]
    trace: AnswerTrace
    runner: LLMRunner
    max_tokens: int | None
    logic: LogicFormResult | None = None
    dual: DualLevelResult | None = None
    _parts: list[str] = field(default_factory=list, repr=False)
    _state: str = field(default="ready", repr=False)

    @property
    def text(self) -> str:
        """The answer so far (all of it once the stream has ended)."""
        return "".join(self._parts)

    async def astream(self) -> AsyncIterator[str]:
        if self._state == "done":
            yield self.text
            return
        if self._state != "ready":
            raise RuntimeError("this answer is already being streamed (or stopped midway)")
        self._state = "streaming"
        clock = StageClock(self.trace, "answer")
        ended = False
        try:
            async for delta in self.runner.astream(GENERATE_STAGE, self.messages,
                                                   max_tokens=self.max_tokens):
                self._parts.append(delta)
                yield delta
            ended = True
        except Exception as exc:
            ended = True
            self._state = "failed"
            clock.done("failed", {"route": self.route, "text": self.text}, error=exc)
            raise
        finally:
            if not ended:
                self._state = "stopped"
                clock.done("stopped", {"route": self.route, "text": self.text})
        self._state = "done"
        clock.done("ok", {"route": self.route, "text": self.text})

    def stream(self) -> Iterator[str]:
        """:meth:`astream` from sync code."""
        return iterate_sync(self.astream())


@dataclass(frozen=True)
class Answer:
    """A whole answer: its text, the route, the context it came from, and the trace."""

    text: str
    route: Route
    evidence: tuple[Evidence, ...]
    trace: AnswerTrace
    logic: LogicFormResult | None = None
    dual: DualLevelResult | None = None


class AnswerPipeline:
    """Answers with streaming over a concept index (and optionally our KG).

    ``model`` is an :class:`~shared_core.llm.LLMRunner` (its policy and ledger
    are used; each query also keeps its own ledger for the trace) or a bare
    :class:`~shared_core.llm.ChatModel`.
    """

    def __init__(self, model: LLMRunner | ChatModel, index: ConceptGraphIndex,
                 kg: KnowledgeGraph | KGRetriever | None = None, *,
                 config: AnswerConfig | None = None) -> None:
        if config is not None and not isinstance(config, AnswerConfig):
            raise TypeError(f"config must be an AnswerConfig, got {type(config).__name__}")
        self.runner = model if isinstance(model, LLMRunner) else LLMRunner(model)
        self.config = config or AnswerConfig()
        self.retriever = DualLevelRetriever(index, kg, budget=self.config.budget,
                                            key_budget=self.config.key_budget,
                                            top_relations=self.config.top_relations)

    @property
    def index(self) -> ConceptGraphIndex:
        return self.retriever.index

    def start(self, query: str) -> tuple[LLMRunner, AnswerTrace]:
        """A runner booking in a fresh query ledger (and the shared one), and its trace."""
        check_query(query)
        ledger = QueryLedger(self.runner.ledger)
        return self.runner.with_ledger(ledger), AnswerTrace(query, ledger)

    # ------------------------------------------------------------------ stages 1-4
    async def aprepare(self, query: str, runner: LLMRunner | None = None,
                       trace: AnswerTrace | None = None) -> PreparedAnswer:
        """Logic form and its pre-check, else dual level: the route and the answer prompt."""
        if runner is None or trace is None:
            runner, trace = self.start(query)
        cfg = self.config
        if cfg.logic_form:
            logic = await self._logic_form(query, runner, trace)
            if logic is not None:
                messages = (Message("system", cfg.answer_system(ANSWER_LOGIC_SYSTEM)),
                            Message("user", question_with_context(
                                query, list(logic.evidence), history=logic.history(),
                                heading="Evidence")))
                trace.route = "logic_form"
                return PreparedAnswer(query, "logic_form", logic.evidence, messages, trace,
                                      runner, cfg.answer_max_tokens, logic=logic)
        keys = await self._keys(query, runner, trace)
        clock = StageClock(trace, "dual_level")
        dual = await asyncio.to_thread(self.retriever.retrieve, keys)
        clock.done("ok", dual.to_dict())
        messages = (Message("system", cfg.answer_system(ANSWER_CONTEXT_SYSTEM)),
                    Message("user", question_with_context(query, list(dual.evidence))))
        trace.route = "dual_level"
        return PreparedAnswer(query, "dual_level", dual.evidence, messages, trace, runner,
                              cfg.answer_max_tokens, dual=dual)

    def prepare(self, query: str) -> PreparedAnswer:
        """:meth:`aprepare` from sync code."""
        return run_sync(self.aprepare(query))

    async def _logic_form(self, query: str, runner: LLMRunner,
                          trace: AnswerTrace) -> LogicFormResult | None:
        """Decompose, run, pre-check; the result, or None (the reason in the trace)."""
        cfg = self.config
        logic = LogicForm(runner, self.retriever, step_budget=cfg.step_budget,
                          max_steps=cfg.max_steps, decompose_max_tokens=cfg.decompose_max_tokens,
                          step_max_tokens=cfg.step_max_tokens)
        clock = StageClock(trace, "decompose")
        try:
            steps: tuple[Step, ...] = await logic.decompose(query)
        except Exception as exc:  # recorded in the trace and answered by the fallback
            fall_back(trace, clock, "the decomposition failed", exc)
            return None
        clock.done("ok", {"steps": [str(s) for s in steps]})
        clock = StageClock(trace, "logic_form")
        try:
            result = await logic.execute(steps)
        except Exception as exc:  # recorded in the trace and answered by the fallback
            fall_back(trace, clock, "a logic-form step failed", exc)
            return None
        clock.done("ok", result.to_dict())
        if not cfg.precheck:
            return result
        clock = StageClock(trace, "precheck")
        context = f"Steps:\n{result.history()}\n\n{context_block(list(result.evidence))}"
        try:
            verdict: Verdict = await precheck(runner, query, context,
                                              max_tokens=cfg.verify_max_tokens)
        except Exception as exc:  # recorded in the trace and answered by the fallback
            fall_back(trace, clock, "the pre-check gave no verdict", exc)
            return None
        output = {"supported": verdict.supported, "reason": verdict.reason}
        if not verdict.supported:
            clock.done("rejected", output)
            trace.fallback_reason = f"the pre-check rejected the logic form: {verdict.reason}"
            logger.info("answer pipeline: %s", trace.fallback_reason)
            return None
        clock.done("ok", output)
        return result

    async def _keys(self, query: str, runner: LLMRunner, trace: AnswerTrace) -> QueryKeys:
        """The LLM's keys, or the graphs' when it gave none usable (or is not asked)."""
        cfg = self.config
        clock = StageClock(trace, "keys")
        failure: Exception | None = None
        if cfg.llm_keys:
            try:
                keys = await extract_keys(runner, query, max_keys=cfg.max_keys,
                                          max_tokens=cfg.keys_max_tokens)
            except Exception as exc:  # recorded below; the graphs' keys answer instead
                failure = exc
                logger.warning("answer pipeline: the LLM gave no usable keys (%s: %s); "
                               "using the graphs' keys", type(exc).__name__, exc)
            else:
                clock.done("ok", keys.to_dict())
                return keys
        keys = await asyncio.to_thread(graph_keys, self.index, query, self.retriever.kg,
                                       max_keys=cfg.max_keys)
        if failure is not None:
            clock.done("fallback", keys.to_dict(), error=failure,
                       error_kind=error_kind(failure))
        else:
            clock.done("ok", keys.to_dict())
        return keys

    # ------------------------------------------------------------------ all stages
    def stream(self, query: str) -> AnswerStream:
        """The answer's text as it comes (a sync iterator holding the trace)."""
        return AnswerStream(self, query)

    def astream(self, query: str) -> AsyncAnswerStream:
        """The answer's text as it comes (an async iterator holding the trace)."""
        return AsyncAnswerStream(self, query)

    async def aanswer(self, query: str) -> Answer:
        """The whole answer, streamed inside and joined."""
        prepared = await self.aprepare(query)
        async for _ in prepared.astream():
            pass
        return _answer(prepared)

    def answer(self, query: str) -> Answer:
        """:meth:`aanswer` from sync code."""
        return run_sync(self.aanswer(query))

    def source_metadata(self, piece: Evidence) -> dict[str, Any]:
        """What a framework node or document for ``piece`` carries: the chunk's own
        metadata (its source file, say), then chunk id, score and provenance."""
        try:
            stored = self.index.get(piece.chunk_id).metadata
        except KeyError:  # a KG fact from a chunk the index no longer holds
            stored = {}
        return {**stored, **piece.metadata()}

    def retrieve(self, query: str, keys: QueryKeys | None = None) -> DualLevelResult:
        """Dual-level retrieval alone, no LLM unless asked: ``keys`` given, or the graphs'."""
        check_query(query)
        if keys is None:
            keys = graph_keys(self.index, query, self.retriever.kg,
                              max_keys=self.config.max_keys)
        return self.retriever.retrieve(keys)


def _answer(prepared: PreparedAnswer) -> Answer:
    return Answer(prepared.text, prepared.route, prepared.evidence, prepared.trace,
                  prepared.logic, prepared.dual)


class _AnswerInProgress:
    """What both answer streams hold: the query's trace from the start, the prepared
    answer (route, evidence) once stages 1-4 are done, and the text so far."""

    def __init__(self, pipeline: AnswerPipeline, query: str) -> None:
        self.query = query
        self._pipeline = pipeline
        self._runner, self.trace = pipeline.start(query)
        self.prepared: PreparedAnswer | None = None

    @property
    def text(self) -> str:
        return self.prepared.text if self.prepared is not None else ""

    def _result(self) -> Answer:
        assert self.prepared is not None, "read the stream before asking for its result"
        return _answer(self.prepared)


class AnswerStream(_AnswerInProgress, Iterator[str]):
    """A sync iterator over one answer's text, stages run at the first ``next``.

    ``trace`` fills as stages run; ``prepared`` (route, evidence) is there
    once the first part is out; ``text`` is the answer so far.
    """

    def __init__(self, pipeline: AnswerPipeline, query: str) -> None:
        super().__init__(pipeline, query)
        self._parts = self._run()

    def _run(self) -> Generator[str, None, None]:
        self.prepared = run_sync(self._pipeline.aprepare(self.query, self._runner, self.trace))
        yield from self.prepared.stream()

    def __next__(self) -> str:
        return next(self._parts)

    def close(self) -> None:
        """Stop reading: the answer stage is recorded as stopped."""
        self._parts.close()

    def result(self) -> Answer:
        """The whole answer: reads what is left of the stream first."""
        for _ in self:
            pass
        return self._result()


class AsyncAnswerStream(_AnswerInProgress, AsyncIterator[str]):
    """An async iterator over one answer's text, stages run at the first ``anext``."""

    def __init__(self, pipeline: AnswerPipeline, query: str) -> None:
        super().__init__(pipeline, query)
        self._parts = self._run()

    async def _run(self) -> AsyncGenerator[str, None]:
        self.prepared = await self._pipeline.aprepare(self.query, self._runner, self.trace)
        async for delta in self.prepared.astream():
            yield delta

    async def __anext__(self) -> str:
        return await self._parts.__anext__()

    async def aclose(self) -> None:
        """Stop reading: the answer stage is recorded as stopped."""
        await self._parts.aclose()

    async def result(self) -> Answer:
        """The whole answer: reads what is left of the stream first."""
        async for _ in self:
            pass
        return self._result()
