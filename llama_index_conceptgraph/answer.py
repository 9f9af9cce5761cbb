"""HuixiangDou2's answer pipeline as a LlamaIndex query engine, streaming or not.

The pipeline itself (logic form, pre-check, dual-level fallback, the trace) is
the core's :class:`~shared_core.answer.AnswerPipeline`; this module only
translates: a LlamaIndex ``LLM`` in, ``Response`` objects with source nodes out.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Iterator
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.llms import LLM
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.settings import Settings

from shared_core import ConceptGraphIndex
from shared_core.answer import AnswerConfig, AnswerPipeline, AnswerTrace, Evidence, PreparedAnswer
from shared_core.fusion import ContextItem
from shared_core.kg import KGRetriever, KnowledgeGraph
from shared_core.llm import ChatModel, LLMRunner

from ._nodes import item_to_node
from .fused import FusedConceptKGRetriever
from .llm import chat_model
from .retriever import ConceptGraphRetriever


class ConceptGraphQueryEngine(BaseQueryEngine):
    """Answers from the concept graph (and a KG) the HuixiangDou2 way, streamed if asked.

    The LLM first writes the question as operator steps (retrieve, filter,
    compare, count, compute); the steps run, with arithmetic done in Python,
    and a pre-check asks whether the evidence holds what the answer needs.
    When any of that fails or is rejected, dual-level retrieval (low-level
    keys: entities and concepts; high-level keys: themes and relations) gives
    the context instead, so there is always an answer to stream.

    ``query`` returns a ``Response`` whose ``source_nodes`` are the context
    (each node's metadata: the chunk's own, plus ``chunk_id``, ``score`` and
    ``provenance``: which level and key, or which logic-form step, found it)
    and whose ``metadata`` holds ``route``, ``fallback_reason`` and ``trace``
    (the :class:`~shared_core.answer.AnswerTrace`: every stage, its output,
    tokens and seconds). With ``streaming=True`` it returns a
    ``StreamingResponse`` whose sources are there before the first token;
    ``aquery`` then returns an ``AsyncStreamingResponse``. ``retrieve`` runs
    dual-level retrieval alone, with the graphs' keys and no LLM.

    >>> from llama_index.core.llms import MockLLM
    >>> from llama_index.core.schema import TextNode
    >>> from shared_core import HashingEmbedder
    >>> from shared_core.answer import AnswerConfig
    >>> from llama_index_conceptgraph import CoreEmbedding
    >>> nodes = [TextNode(id_="ada", text="Ada Lovelace wrote the first computer program."),
    ...          TextNode(id_="babbage", text="Charles Babbage designed the Analytical Engine.")]
    >>> retriever = ConceptGraphRetriever.from_defaults(
    ...     nodes, embed_model=CoreEmbedding(HashingEmbedder()))
    >>> engine = ConceptGraphQueryEngine.from_defaults(
    ...     retriever, llm=MockLLM(max_tokens=3),
    ...     config=AnswerConfig(logic_form=False, llm_keys=False))
    >>> response = engine.query("Who wrote the first program?")
    >>> response.metadata["route"], response.source_nodes[0].node.node_id
    ('dual_level', 'ada')
    >>> response.metadata["trace"].names
    ['keys', 'dual_level', 'answer']
    """

    def __init__(self, pipeline: AnswerPipeline, *, streaming: bool = False,
                 callback_manager: CallbackManager | None = None) -> None:
        if not isinstance(pipeline, AnswerPipeline):
            raise TypeError(f"pipeline must be an AnswerPipeline, got {type(pipeline).__name__}")
        if not isinstance(streaming, bool):
            raise TypeError(f"streaming must be True or False, got {streaming!r}")
        self.pipeline = pipeline
        self.streaming = streaming
        super().__init__(callback_manager=callback_manager)

    @classmethod
    def from_defaults(
        cls,
        index: ConceptGraphIndex | ConceptGraphRetriever,
        llm: LLM | ChatModel | LLMRunner | None = None,
        kg: KnowledgeGraph | KGRetriever | None = None,
        *,
        config: AnswerConfig | None = None,
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
    ) -> ConceptGraphQueryEngine:
        """An engine over ``index`` (or a retriever's index), answering with ``llm``.

        ``llm`` is a LlamaIndex ``LLM`` (``Settings.llm`` when omitted), a core
        ``ChatModel``, or an ``LLMRunner`` with its own retry policy and ledger.
        """
        if isinstance(index, FusedConceptKGRetriever):
            raise TypeError("from_defaults takes the concept graph, not a "
                            "FusedConceptKGRetriever: its KG retriever is not one the answer "
                            "pipeline reads. Pass the ConceptGraphRetriever it fuses, and our "
                            "KG (extract_kg's graph) as kg=")
        if isinstance(index, ConceptGraphRetriever):
            index = index.index
        if llm is None:
            llm = Settings.llm
        runner = llm if isinstance(llm, LLMRunner) else LLMRunner(chat_model(llm))
        return cls(AnswerPipeline(runner, index, kg, config=config), streaming=streaming,
                   callback_manager=callback_manager)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # ------------------------------------------------------------------ translation
    def source_nodes(self, evidence: tuple[Evidence, ...]) -> list[NodeWithScore]:
        """The context as nodes: id per piece, the chunk's metadata plus provenance."""
        return [item_to_node(ContextItem(piece.piece_id, piece.text, piece.tokens, piece.score,
                                         self.pipeline.source_metadata(piece)))
                for piece in evidence]

    @staticmethod
    def _metadata(trace: AnswerTrace) -> dict[str, Any]:
        # the live trace: a streaming response's answer stage lands in it once read
        return {"route": trace.route, "fallback_reason": trace.fallback_reason, "trace": trace}

    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Dual-level retrieval alone: the graphs' keys, no LLM."""
        return self.source_nodes(self.pipeline.retrieve(query_bundle.query_str).evidence)

    # ------------------------------------------------------------------ query
    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with self.callback_manager.event(
                CBEventType.QUERY, payload={EventPayload.QUERY_STR: query_bundle.query_str}
        ) as event:
            response: RESPONSE_TYPE
            if self.streaming:
                prepared = self.pipeline.prepare(query_bundle.query_str)
                response = StreamingResponse(_generator(prepared.stream()),
                                             self.source_nodes(prepared.evidence),
                                             self._metadata(prepared.trace))
            else:
                answer = self.pipeline.answer(query_bundle.query_str)
                response = Response(answer.text, self.source_nodes(answer.evidence),
                                    self._metadata(answer.trace))
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with self.callback_manager.event(
                CBEventType.QUERY, payload={EventPayload.QUERY_STR: query_bundle.query_str}
        ) as event:
            response: RESPONSE_TYPE
            prepared = await self.pipeline.aprepare(query_bundle.query_str)
            if self.streaming:
                response = AsyncStreamingResponse(_agenerator(prepared),
                                                  self.source_nodes(prepared.evidence),
                                                  self._metadata(prepared.trace))
            else:
                async for _ in prepared.astream():
                    pass
                response = Response(prepared.text, self.source_nodes(prepared.evidence),
                                    self._metadata(prepared.trace))
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response


def _generator(parts: Iterator[str]) -> Generator[str, None, None]:
    """``StreamingResponse`` wants a generator."""
    yield from parts


async def _agenerator(prepared: PreparedAnswer) -> AsyncGenerator[str, None]:
    async for part in prepared.astream():
        yield part
