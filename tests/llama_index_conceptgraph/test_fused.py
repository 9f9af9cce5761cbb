"""FusedConceptKGRetriever over a real, offline-built PropertyGraphIndex."""

from __future__ import annotations

import asyncio
import threading

import pytest
from llama_index.core import Document, PropertyGraphIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

from llama_index_conceptgraph import (
    ConceptGraphRetriever,
    CoreEmbedding,
    FusedConceptKGRetriever,
    relation_sourced_retriever,
    run_outside_event_loop,
)
from shared_core import ContextItem, RetrievalResult, count_tokens
from shared_core.fusion import merge_by_chunk

from .conftest import CORPUS, TableLLM, build_pg_index, chunk_ids_by_key

QUERY = "Who discovered polonium?"


class FixedRetriever(BaseRetriever):
    """A KG retriever stand-in returning fixed results, optionally meeting a barrier first."""

    def __init__(self, results: list[NodeWithScore],
                 barrier: threading.Barrier | None = None) -> None:
        self._results = results
        self._barrier = barrier
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self._barrier is not None:
            self._barrier.wait()
        return list(self._results)


def fact(text: str, node_id: str | None = None, source: str | None = None) -> NodeWithScore:
    relationships = {} if source is None else {
        NodeRelationship.SOURCE: RelatedNodeInfo(node_id=source)}
    node = TextNode(text=text, relationships=relationships, **({"id_": node_id} if node_id else {}))
    return NodeWithScore(node=node, score=1.0)


@pytest.fixture
def built(documents: list[Document], table_llm: TableLLM, embed_model: CoreEmbedding
          ) -> tuple[PropertyGraphIndex, FusedConceptKGRetriever, dict[str, str]]:
    pg_index, selector = build_pg_index(documents, table_llm, embed_model, kappa=1.0)
    fused = FusedConceptKGRetriever.from_defaults(pg_index, selector=selector)
    return pg_index, fused, chunk_ids_by_key(selector)


def test_facts_vote_for_the_chunk_they_came_from(
    built: tuple[PropertyGraphIndex, FusedConceptKGRetriever, dict[str, str]],
) -> None:
    pg_index, fused, ids = built
    # ours: "Marie curie -> Discovered -> Polonium" came from the polonium chunk, which
    # the concept path also finds, so that chunk is voted to the front
    context = fused.fuse(QUERY)
    first = context.items[0]
    assert (first.item.chunk_id, first.path) == (ids["curie-polonium"], "both")
    assert [f.path for f in context.items].count("both") == 1

    # stock: the same fact is credited to Marie Curie's entity, whose source is the last
    # chunk that mentioned her (the Nobel chunk), so the polonium chunk gets no vote
    stock = FusedConceptKGRetriever(fused._concept, pg_index.as_retriever(include_text=True))
    stock_paths = {f.item.chunk_id: f.path for f in stock.fuse(QUERY).items}
    assert stock_paths[ids["curie-polonium"]] == "concept"
    kg_stock = pg_index.as_retriever(include_text=False).retrieve(QUERY)
    assert [(n.node.get_content(), n.node.ref_doc_id) for n in kg_stock] == [
        ("Marie curie -> Discovered -> Polonium", ids["nobel"])]
    kg_ours = relation_sourced_retriever(pg_index, include_text=False).retrieve(QUERY)
    assert [(n.node.get_content(), n.node.ref_doc_id) for n in kg_ours] == [
        ("Marie curie -> Discovered -> Polonium", ids["curie-polonium"])]


def test_fused_nodes_carry_path_and_provenance(
    built: tuple[PropertyGraphIndex, FusedConceptKGRetriever, dict[str, str]],
) -> None:
    _, fused, ids = built
    nodes = fused.retrieve(QUERY)
    assert [n.node.node_id for n in nodes] == [f.item.chunk_id for f in fused.fuse(QUERY).items]
    top = nodes[0].node
    assert top.node_id == ids["curie-polonium"]
    assert top.metadata["fusion"] == {"path": "both", "concept_rank": 0, "kg_rank": 0}
    assert top.metadata["provenance"]["stage"] == "direct"
    assert "Marie Curie discovered polonium" in top.get_content()


def test_budget_shares_and_voting(embed_model: CoreEmbedding) -> None:
    concept = ConceptGraphRetriever.from_defaults(
        nodes=[TextNode(id_=key, text=text) for key, text, _ in CORPUS], embed_model=embed_model)
    top = concept.retrieve_result(QUERY).chunks[0]
    facts = ["Polonium -> Named after -> Poland",
             "Polonium -> Has symbol -> Po",
             "Pitchblende -> Is an ore of -> Uranium"]
    f1, f2 = count_tokens(facts[0]), count_tokens(facts[1])
    kg = FixedRetriever([fact(facts[0], "kg-1"),
                         fact("Marie curie -> Discovered -> Polonium", source=top.id),
                         fact(facts[1], "kg-2"), fact(facts[2], "kg-3")])
    # after the voted chunk, the KG share (λ=0.5) is exactly f1 + f2 tokens: kg-3 cannot fit
    budget = top.chunk.tokens + 2 * (f1 + f2) + 1
    fused = FusedConceptKGRetriever(concept, kg, lam=0.5, budget=budget)
    context = fused.fuse(QUERY)

    assert (context.items[0].item.chunk_id, context.items[0].path) == (top.id, "both")
    assert context.items[0].kg_rank == 1  # voted first even though the KG ranked it second
    kg_items = [f for f in context.items if f.path == "kg"]
    assert [(f.item.chunk_id, f.item.text) for f in kg_items] == [
        ("kg-1", facts[0]), ("kg-2", facts[1])]
    shares = context.tokens_by_path()
    assert shares == {"both": top.chunk.tokens, "kg": f1 + f2,
                      "concept": sum(f.item.tokens for f in context.items
                                     if f.path == "concept")}
    assert shares["concept"] <= f1 + f2  # (1 - λ) of the remaining 2(f1 + f2) + 1 tokens
    assert context.tokens <= budget
    concept_ids = [c.id for c in concept.retrieve_result(QUERY, budget=budget).chunks]
    got = [f.item.chunk_id for f in context.items if f.path == "concept"]
    assert got == [c for c in concept_ids if c in got]  # concept order kept


def test_facts_from_one_chunk_merge_into_one_item() -> None:
    items = [ContextItem("c1", "a -> r -> b", 7, 0.5), ContextItem("c2", "x -> r -> y", 7, 0.9),
             ContextItem("c1", "a -> s -> c", 7, 0.8), ContextItem("c1", "a -> r -> b", 7, 0.1)]
    merged = merge_by_chunk(items)
    assert [(m.chunk_id, m.text, m.score) for m in merged] == [
        ("c1", "a -> r -> b\na -> s -> c", 0.8), ("c2", "x -> r -> y", 0.9)]
    assert merged[0].tokens == count_tokens("a -> r -> b\na -> s -> c")


class WaitingConcept(ConceptGraphRetriever):
    """Concept retriever that only proceeds once the KG path is running too."""

    barrier: threading.Barrier | None = None
    started: asyncio.Event | None = None
    other: asyncio.Event | None = None

    def retrieve_result(self, query: str, *, budget: int | None = None) -> RetrievalResult:
        assert self.barrier is not None
        self.barrier.wait()
        return super().retrieve_result(query, budget=budget)

    async def aretrieve_result(self, query: str, *, budget: int | None = None
                               ) -> RetrievalResult:
        assert self.started is not None and self.other is not None
        self.started.set()
        await asyncio.wait_for(self.other.wait(), timeout=5)
        return await super().aretrieve_result(query, budget=budget)


class WaitingKG(BaseRetriever):
    def __init__(self, started: asyncio.Event, other: asyncio.Event) -> None:
        self._started, self._other = started, other
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise AssertionError("the async path must not call the sync KG retriever")

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self._started.set()
        await asyncio.wait_for(self._other.wait(), timeout=5)
        return [fact("Polonium -> Named after -> Poland", "kg-1")]


def test_sync_paths_run_concurrently(embed_model: CoreEmbedding) -> None:
    # each path blocks until the other has started: run one after the other, they time out
    barrier = threading.Barrier(2, timeout=5)
    concept = WaitingConcept.from_defaults(
        nodes=[TextNode(id_=k, text=t) for k, t, _ in CORPUS], embed_model=embed_model)
    assert isinstance(concept, WaitingConcept)
    concept.barrier = barrier
    fused = FusedConceptKGRetriever(
        concept, FixedRetriever([fact("Polonium -> Named after -> Poland", "kg-1")], barrier))
    assert "kg-1" in [n.node.node_id for n in fused.retrieve(QUERY)]


async def test_async_paths_run_concurrently(embed_model: CoreEmbedding) -> None:
    concept_started, kg_started = asyncio.Event(), asyncio.Event()
    concept = WaitingConcept.from_defaults(
        nodes=[TextNode(id_=k, text=t) for k, t, _ in CORPUS], embed_model=embed_model)
    assert isinstance(concept, WaitingConcept)
    concept.started, concept.other = concept_started, kg_started
    fused = FusedConceptKGRetriever(concept, WaitingKG(kg_started, concept_started))
    nodes = await fused.aretrieve(QUERY)
    assert nodes[0].node.node_id == "curie-polonium"
    assert "kg-1" in [n.node.node_id for n in nodes]


@pytest.mark.filterwarnings("ignore:coroutine 'arun_transformations' was never awaited")
async def test_async_build_and_retrieve_inside_a_running_loop(
    documents: list[Document], table_llm: TableLLM, embed_model: CoreEmbedding
) -> None:
    # a PropertyGraphIndex build calls asyncio.run, which a running loop refuses ...
    with pytest.raises(RuntimeError, match="running event loop"):
        build_pg_index(documents, table_llm, embed_model, kappa=1.0)
    # ... so the helper builds it in a worker thread
    pg_index, selector = run_outside_event_loop(
        build_pg_index, documents, table_llm, embed_model, 1.0)
    ids = chunk_ids_by_key(selector)
    fused = FusedConceptKGRetriever.from_defaults(pg_index, selector=selector)
    asynced = await fused.aretrieve(QUERY)
    assert asynced[0].node.node_id == ids["curie-polonium"]
    assert asynced[0].node.metadata["fusion"]["path"] == "both"
    sync = fused.retrieve(QUERY)
    assert [(n.node.node_id, n.node.metadata["fusion"]) for n in asynced] == \
           [(n.node.node_id, n.node.metadata["fusion"]) for n in sync]


def test_in_a_query_engine_end_to_end(
    built: tuple[PropertyGraphIndex, FusedConceptKGRetriever, dict[str, str]],
    table_llm: TableLLM,
) -> None:
    _, fused, ids = built
    response = RetrieverQueryEngine.from_args(fused, llm=table_llm).query(QUERY)
    assert response.source_nodes[0].node.node_id == ids["curie-polonium"]
    # the table LLM answers with the first line of its context: the voted chunk
    assert str(response) == CORPUS[0][1]


def test_bad_arguments(
    built: tuple[PropertyGraphIndex, FusedConceptKGRetriever, dict[str, str]],
) -> None:
    pg_index, fused, _ = built
    with pytest.raises(TypeError, match="ConceptGraphRetriever"):
        FusedConceptKGRetriever(pg_index.as_retriever(), pg_index.as_retriever())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="BaseRetriever"):
        FusedConceptKGRetriever(fused._concept, "kg")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lam"):
        FusedConceptKGRetriever(fused._concept, pg_index.as_retriever(), lam=1.5)
    with pytest.raises(ValueError, match="budget"):
        FusedConceptKGRetriever(fused._concept, pg_index.as_retriever(), budget=0)
    with pytest.raises(ValueError, match="selector"):
        FusedConceptKGRetriever.from_defaults(pg_index)
    with pytest.raises(ValueError, match="pg_index"):
        FusedConceptKGRetriever.from_defaults(concept_retriever=fused._concept)
    with pytest.raises(TypeError, match="PropertyGraphIndex"):
        relation_sourced_retriever("index")  # type: ignore[arg-type]
