"""HuixiangDou2's answer pipeline as a LangChain runnable: a question in, the answer streamed out.

The pipeline itself (logic form, pre-check, dual-level fallback, the trace) is
the core's :class:`~shared_core.answer.AnswerPipeline`; this module only
translates: a LangChain chat model in, LangChain documents and callback events out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, TypedDict

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
    adispatch_custom_event,
    dispatch_custom_event,
)
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableSerializable,
)
from pydantic import ConfigDict, field_validator
from typing_extensions import Self

from shared_core import ConceptGraphIndex
from shared_core.answer import Answer, AnswerConfig, AnswerPipeline, AnswerTrace, Evidence
from shared_core.kg import KGRetriever, KnowledgeGraph
from shared_core.llm import ChatModel, LLMRunner
from shared_core.text.hygiene import check_query

from .llm import chat_model
from .retrievers import ConceptGraphRetriever, FusedRetriever, check_invoke_kwargs

AnswerInput = str | Mapping[str, Any]
TRACE_EVENT = "conceptgraph_answer"


class AnswerWithSources(TypedDict):
    """What :meth:`ConceptGraphAnswerer.answer_with_sources` returns."""

    answer: str
    sources: list[Document]
    route: str
    fallback_reason: str | None
    trace: dict[str, Any]


class ConceptGraphAnswerer(RunnableSerializable[AnswerInput, str]):
    """Answers a question from the concept graph (and a KG) the HuixiangDou2 way, streamed.

    The LLM first writes the question as operator steps (retrieve, filter,
    compare, count, compute); the steps run, with arithmetic done in Python,
    and a pre-check asks whether the evidence holds what the answer needs.
    When any of that fails or is rejected, dual-level retrieval (low-level
    keys: entities and concepts; high-level keys: themes and relations) gives
    the context instead. The answer then streams from whichever context won.

    The input is the question, or a dict holding it under ``question_key``
    (so it drops into a chain after ``RunnablePassthrough.assign``); the output
    is the answer's text. Each run dispatches a custom callback event
    ``"conceptgraph_answer"`` with the route, the fallback reason, the sources'
    metadata and the whole stage trace (tokens and seconds per stage), so
    ``astream_events`` and tracing tools see how the answer was reached; the
    chat model's calls (plan, steps, verdict, keys, answer) run as child runs
    of the answerer's run.

    Setup:
        ```bash
        pip install conceptgraph langchain-openai
        ```

    Instantiate:
        ```python
        from langchain_core.documents import Document
        from langchain_core.language_models import FakeListChatModel
        from shared_core import HashingEmbedder
        from shared_core.answer import AnswerConfig
        from langchain_conceptgraph import (
            ConceptGraphAnswerer, ConceptGraphRetriever, CoreEmbeddings,
        )

        docs = [
            Document(page_content="Ada Lovelace wrote the first computer program.", id="ada"),
            Document(page_content="Charles Babbage designed the Analytical Engine.", id="babbage"),
        ]
        retriever = ConceptGraphRetriever.from_documents(docs, CoreEmbeddings(HashingEmbedder()))
        llm = FakeListChatModel(responses=["Ada Lovelace"])  # e.g. ChatOpenAI(max_retries=0)
        answerer = ConceptGraphAnswerer.from_llm(
            llm, retriever, config=AnswerConfig(logic_form=False, llm_keys=False)
        )
        ```

    Invoke:
        ```python
        assert answerer.invoke("Who wrote the first program?") == "Ada Lovelace"
        ```

    Stream:
        ```python
        parts = []
        for part in answerer.stream({"question": "Who wrote the first program?"}):
            print(part, end="", flush=True)
            parts.append(part)
        assert "".join(parts) == "Ada Lovelace"
        ```

    Async:
        ```python
        assert await answerer.ainvoke("Who wrote the first program?") == "Ada Lovelace"
        parts = [p async for p in answerer.astream("Who wrote the first program?")]
        assert "".join(parts) == "Ada Lovelace"
        ```

    Sources and trace:
        ```python
        out = answerer.answer_with_sources("Who wrote the first program?")
        assert (out["answer"], out["route"]) == ("Ada Lovelace", "dual_level")
        assert out["sources"][0].id == "ada"
        print(out["sources"][0].metadata["provenance"])  # level, key, source, concept, hop
        assert [s["name"] for s in out["trace"]["stages"]] == ["keys", "dual_level", "answer"]
        ```

    Use within a chain:
        ```python
        from langchain_core.runnables import RunnablePassthrough

        chain = RunnablePassthrough.assign(answer=answerer)
        out = chain.invoke({"question": "Who wrote the first program?"})
        assert out["answer"] == "Ada Lovelace"
        ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: AnswerPipeline
    """The core pipeline: its LLM runner (retries, ledger), index, KG and config."""
    question_key: str = "question"
    """Where the question is when the input is a dict."""

    @field_validator("question_key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not value:
            raise ValueError("question_key is empty: name the input key holding the question")
        return value

    @classmethod
    def from_llm(
        cls,
        llm: BaseChatModel | ChatModel | LLMRunner,
        index: ConceptGraphIndex | ConceptGraphRetriever,
        kg: KnowledgeGraph | KGRetriever | None = None,
        *,
        config: AnswerConfig | None = None,
        question_key: str = "question",
    ) -> Self:
        """An answerer over ``index`` (or a retriever's index), answering with ``llm``.

        ``llm`` is any LangChain chat model (give ``ChatOpenAI`` ``max_retries=0``:
        the runner retries, under one policy, booked in one ledger), a core
        ``ChatModel``, or an ``LLMRunner`` with its own policy and ledger.
        """
        if isinstance(index, FusedRetriever):
            raise TypeError("from_llm takes the concept graph, not a FusedRetriever: its KG "
                            "retriever is not one the answer pipeline reads. Pass "
                            "fused.concept_retriever, and our KG (extract_kg's graph) as kg=")
        if isinstance(index, ConceptGraphRetriever):
            index = index.index
        runner = llm if isinstance(llm, LLMRunner) else LLMRunner(chat_model(llm))
        return cls(pipeline=AnswerPipeline(runner, index, kg, config=config),
                   question_key=question_key)

    # ------------------------------------------------------------------ input and output
    def question(self, value: object) -> str:
        """The question in an input: the input itself, or its ``question_key`` entry."""
        if isinstance(value, Mapping):
            if self.question_key not in value:
                keys = ", ".join(repr(k) for k in value) or "none"
                raise KeyError(f"the input has no {self.question_key!r} key (it has {keys}); "
                               "pass the question as a str or under question_key")
            value = value[self.question_key]
        elif not isinstance(value, str):
            raise TypeError("ConceptGraphAnswerer takes the question as a str or a dict "
                            f"holding it under {self.question_key!r}, got {type(value).__name__}")
        return check_query(value)

    def sources(self, evidence: tuple[Evidence, ...]) -> list[Document]:
        """The answer's context as documents: the chunk's metadata plus provenance."""
        return [Document(page_content=piece.text, id=piece.piece_id,
                         metadata=self.pipeline.source_metadata(piece)) for piece in evidence]

    def _event(self, trace: AnswerTrace, evidence: tuple[Evidence, ...]) -> dict[str, Any]:
        return {"route": trace.route, "fallback_reason": trace.fallback_reason,
                "sources": [self.pipeline.source_metadata(p) for p in evidence],
                "trace": trace.to_dict()}

    def _with_sources(self, answer: Answer) -> AnswerWithSources:
        return AnswerWithSources(answer=answer.text, sources=self.sources(answer.evidence),
                                 route=answer.route, fallback_reason=answer.trace.fallback_reason,
                                 trace=answer.trace.to_dict())

    # ------------------------------------------------------------------ invoke
    def _answer(self, value: AnswerInput, config: RunnableConfig) -> Answer:
        answer = self.pipeline.answer(self.question(value))
        dispatch_custom_event(TRACE_EVENT, self._event(answer.trace, answer.evidence),
                              config=config)
        return answer

    async def _aanswer(self, value: AnswerInput, config: RunnableConfig) -> Answer:
        answer = await self.pipeline.aanswer(self.question(value))
        await adispatch_custom_event(TRACE_EVENT, self._event(answer.trace, answer.evidence),
                                     config=config)
        return answer

    def _answer_text(self, value: AnswerInput, run_manager: CallbackManagerForChainRun,
                     config: RunnableConfig) -> str:
        return self._answer(value, config).text

    async def _aanswer_text(self, value: AnswerInput,
                            run_manager: AsyncCallbackManagerForChainRun,
                            config: RunnableConfig) -> str:
        return (await self._aanswer(value, config)).text

    def invoke(self, input: AnswerInput, config: RunnableConfig | None = None,
               **kwargs: Any) -> str:
        check_invoke_kwargs(self, kwargs, "no options")
        return self._call_with_config(self._answer_text, input, config, run_type="chain")

    async def ainvoke(self, input: AnswerInput, config: RunnableConfig | None = None,
                      **kwargs: Any) -> str:
        check_invoke_kwargs(self, kwargs, "no options")
        return await self._acall_with_config(self._aanswer_text, input, config,
                                             run_type="chain")

    def _sourced(self, value: AnswerInput, config: RunnableConfig) -> AnswerWithSources:
        return self._with_sources(self._answer(value, config))

    async def _asourced(self, value: AnswerInput, config: RunnableConfig) -> AnswerWithSources:
        return self._with_sources(await self._aanswer(value, config))

    def with_sources(self) -> Runnable[AnswerInput, AnswerWithSources]:
        """A runnable giving the answer with its sources (documents), route and trace."""
        return RunnableLambda(self._sourced, afunc=self._asourced,
                              name=f"{type(self).__name__}.with_sources")

    def answer_with_sources(self, input: AnswerInput,
                            config: RunnableConfig | None = None) -> AnswerWithSources:
        """``with_sources().invoke``: the answer, its sources, route and stage trace."""
        return self.with_sources().invoke(input, config)

    async def aanswer_with_sources(self, input: AnswerInput,
                                   config: RunnableConfig | None = None) -> AnswerWithSources:
        """:meth:`answer_with_sources`, async."""
        return await self.with_sources().ainvoke(input, config)

    # ------------------------------------------------------------------ stream
    def _stream_answer(self, inputs: Iterator[AnswerInput],
                       run_manager: CallbackManagerForChainRun,
                       config: RunnableConfig) -> Iterator[str]:
        question = self.question(_only(list(inputs)))
        answer = self.pipeline.stream(question)
        try:
            yield from answer
        finally:
            answer.close()  # a reader that stops early: the trace says "stopped"
        done = answer.result()
        dispatch_custom_event(TRACE_EVENT, self._event(done.trace, done.evidence),
                              config=config)

    async def _astream_answer(self, inputs: AsyncIterator[AnswerInput],
                              run_manager: AsyncCallbackManagerForChainRun,
                              config: RunnableConfig) -> AsyncIterator[str]:
        question = self.question(_only([value async for value in inputs]))
        answer = self.pipeline.astream(question)
        try:
            async for part in answer:
                yield part
        finally:
            await answer.aclose()
        done = await answer.result()
        await adispatch_custom_event(TRACE_EVENT, self._event(done.trace, done.evidence),
                                     config=config)

    def stream(self, input: AnswerInput, config: RunnableConfig | None = None,
               **kwargs: Any) -> Iterator[str]:
        """The answer's text as the LLM writes it (the stages before it run first)."""
        check_invoke_kwargs(self, kwargs, "no options")
        yield from self._transform_stream_with_config(iter([input]), self._stream_answer,
                                                      config, run_type="chain")

    async def astream(self, input: AnswerInput, config: RunnableConfig | None = None,
                      **kwargs: Any) -> AsyncIterator[str]:
        """:meth:`stream`, async."""
        check_invoke_kwargs(self, kwargs, "no options")

        async def one() -> AsyncIterator[AnswerInput]:
            yield input

        async for part in self._atransform_stream_with_config(one(), self._astream_answer,
                                                              config, run_type="chain"):
            yield part


def _only(inputs: list[AnswerInput]) -> AnswerInput:
    """``stream`` gets its one input as an iterator; ``transform`` could pass several."""
    if len(inputs) != 1:
        raise ValueError(f"ConceptGraphAnswerer answers one question per run, got {len(inputs)} "
                         "input chunks; stream or invoke with the whole question")
    return inputs[0]
