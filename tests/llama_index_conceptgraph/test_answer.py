"""ConceptGraphQueryEngine: the core pipeline as a query engine, translated and nothing more.

The pipeline's branches are tested in ``tests/shared_core/answer``; here the
engine must give what the core gives (same text, route and context) as
LlamaIndex responses and nodes, streaming or not, sync or async.
"""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import Settings
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode

from llama_index_conceptgraph import ConceptGraphQueryEngine, ConceptGraphRetriever, CoreEmbedding
from shared_core import HashingEmbedder
from shared_core.answer import AnswerConfig
from tests.shared_core.answer.corpus import build_index, build_kg
from tests.shared_core.answer.test_pipeline import ANSWER, QUESTION, script
from tests.shared_core.llm.scripted import ScriptedChat, word_deltas

LOGIC_STAGES = ["decompose", "logic_form", "precheck", "answer"]


def engine(chat: Any, *, streaming: bool = False, **config: Any) -> ConceptGraphQueryEngine:
    return ConceptGraphQueryEngine.from_defaults(build_index(), chat, build_kg(),
                                                 config=AnswerConfig(**config),
                                                 streaming=streaming)


def test_query_gives_what_the_core_pipeline_gives() -> None:
    core = engine(script()).pipeline.answer(QUESTION)
    response = engine(script()).query(QUESTION)
    assert isinstance(response, Response)
    assert response.response == core.text == ANSWER
    assert response.metadata is not None and response.metadata["route"] == "logic_form"
    assert response.metadata["trace"].names == LOGIC_STAGES
    nodes = response.source_nodes
    assert [n.node.node_id for n in nodes] == [e.piece_id for e in core.evidence]
    assert [n.node.get_content() for n in nodes] == [e.text for e in core.evidence]
    assert [n.score for n in nodes] == [e.score for e in core.evidence]
    assert [n.node.metadata["provenance"] for n in nodes] \
        == [e.provenance() for e in core.evidence]


def test_a_streaming_response_has_its_sources_before_the_first_token() -> None:
    chat = script()
    response = engine(chat, streaming=True).query(QUESTION)
    assert isinstance(response, StreamingResponse)
    trace = response.metadata["trace"]  # type: ignore[index]
    assert trace.names == LOGIC_STAGES[:3] and not trace.complete
    assert response.source_nodes and len(chat.calls) == 4  # the answer call not made yet
    assert list(response.response_gen) == word_deltas(ANSWER)
    answered = trace.stage("answer")
    assert answered is not None and answered.status == "ok"
    assert answered.output["text"] == ANSWER
    again = engine(script(), streaming=True).query(QUESTION)
    assert isinstance(again, StreamingResponse) and again.get_response().response == ANSWER


async def test_aquery_streams_and_answers() -> None:
    response = await engine(script(), streaming=True).aquery(QUESTION)
    assert isinstance(response, AsyncStreamingResponse)
    assert response.source_nodes
    assert [t async for t in response.async_response_gen()] == word_deltas(ANSWER)
    assert response.metadata["trace"].names == LOGIC_STAGES  # type: ignore[index]
    whole = await engine(script()).aquery(QUESTION)
    assert isinstance(whole, Response) and whole.response == ANSWER
    assert whole.metadata["route"] == "logic_form"  # type: ignore[index]


def test_an_llm_that_writes_nonsense_still_gets_an_answer_through_the_fallback() -> None:
    # MockLLM(max_tokens=3) answers "text text text" to every prompt: no plan, no keys
    response = engine(MockLLM(max_tokens=3)).query(QUESTION)
    assert response.response == "text text text"
    metadata = response.metadata
    assert metadata is not None and metadata["route"] == "dual_level"
    assert metadata["fallback_reason"].startswith("the decomposition failed (unparsable: ")
    assert [(s.name, s.status) for s in metadata["trace"].stages] \
        == [("decompose", "failed"), ("keys", "fallback"), ("dual_level", "ok"),
            ("answer", "ok")]
    assert response.source_nodes


def test_kg_facts_are_nodes_of_their_own_tied_to_their_chunk() -> None:
    keys = '{"low_level_keywords": ["Eiffel Tower"], "high_level_keywords": ["designed"]}'
    response = engine(script(keys=keys), logic_form=False).query(QUESTION)
    sources = [n.node.metadata["provenance"]["source"] for n in response.source_nodes]
    # a relation the entity key already brought counts once, for that key
    assert set(sources) == {"concept", "kg_entity"}
    for n in response.source_nodes:
        source = n.node.metadata["provenance"]["source"]
        if source.startswith("kg_"):
            # the KG's tea facts came from chunk d, the Eiffel ones from chunk c
            chunk = "d" if ("Tea" in n.node.get_content() or "Assam" in n.node.get_content()) \
                else "c"
            assert n.node.metadata["chunk_id"] == chunk
            assert n.node.node_id.startswith(f"{chunk}#{source}:")


def test_retrieve_is_dual_level_with_no_llm() -> None:
    chat = ScriptedChat([])  # any call would fail the test
    nodes = engine(chat).retrieve(QueryBundle("Who designed the Eiffel Tower?"))
    assert nodes and chat.calls == []
    assert {n.node.metadata["provenance"]["level"] for n in nodes} <= {"low", "high"}


def test_nodes_keep_the_chunks_metadata_and_source_document() -> None:
    nodes = [TextNode(id_="ada", text="Ada Lovelace wrote the first computer program.",
                      metadata={"file_name": "ada.txt"},
                      relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc-1")}),
             TextNode(id_="babbage", text="Charles Babbage designed the Analytical Engine.")]
    retriever = ConceptGraphRetriever.from_defaults(
        nodes, embed_model=CoreEmbedding(HashingEmbedder()))
    query_engine = ConceptGraphQueryEngine.from_defaults(
        retriever, ScriptedChat(["Ada Lovelace"]),
        config=AnswerConfig(logic_form=False, llm_keys=False))
    response = query_engine.query("Who wrote the first computer program?")
    first = response.source_nodes[0].node
    assert response.response == "Ada Lovelace"
    assert first.node_id == "ada" and first.metadata["file_name"] == "ada.txt"
    assert first.ref_doc_id == "doc-1"
    # what the engine adds stays out of prompts and embeddings
    assert "provenance" in first.excluded_llm_metadata_keys


def test_the_query_is_one_callback_event_with_its_response() -> None:
    debug = LlamaDebugHandler()
    query_engine = ConceptGraphQueryEngine(engine(script()).pipeline,
                                           callback_manager=CallbackManager([debug]))
    response = query_engine.query(QUESTION)
    pairs = debug.get_event_pairs(CBEventType.QUERY)
    assert len(pairs) == 1
    assert pairs[0][0].payload["query_str"] == QUESTION  # type: ignore[index]
    assert pairs[0][1].payload["response"] is response  # type: ignore[index]


def test_settings_llm_is_the_default() -> None:
    before = Settings._llm
    Settings.llm = MockLLM(max_tokens=2)
    try:
        response = ConceptGraphQueryEngine.from_defaults(
            build_index(), config=AnswerConfig(logic_form=False, llm_keys=False)).query(QUESTION)
    finally:
        Settings._llm = before
    assert response.response == "text text"


def test_bad_arguments_are_named() -> None:
    pipeline = engine(script()).pipeline
    with pytest.raises(TypeError, match="pipeline must be an AnswerPipeline"):
        ConceptGraphQueryEngine("pipeline")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="streaming must be True or False"):
        ConceptGraphQueryEngine(pipeline, streaming="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="llama_index LLM or a conceptgraph ChatModel"):
        ConceptGraphQueryEngine.from_defaults(build_index(), "gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty or blank"):
        ConceptGraphQueryEngine(pipeline).query("  ")



def test_a_fused_retriever_is_refused_with_what_to_pass_instead() -> None:
    """The answer pipeline reads our KG, not a fused retriever's framework one."""
    from llama_index_conceptgraph import FusedConceptKGRetriever

    concept = ConceptGraphRetriever(build_index())
    fused = FusedConceptKGRetriever(concept, kg_retriever=concept)
    with pytest.raises(TypeError, match=r"not a FusedConceptKGRetriever.*Pass the "
                                        r"ConceptGraphRetriever it fuses"):
        ConceptGraphQueryEngine.from_defaults(fused, script())  # type: ignore[arg-type]
    answered = ConceptGraphQueryEngine.from_defaults(concept, script(), build_kg())
    assert answered.pipeline.index is concept.index
