"""ConceptGraphRetriever and ConceptGraphPostprocessor against real llama-index-core objects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_index.core import Document
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from benchmarks.faults import swap_concept_vectors
from llama_index_conceptgraph import (
    ConceptGraphPostprocessor,
    ConceptGraphRetriever,
    CoreEmbedding,
    to_core_embedder,
)
from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.store import CorruptIndexError, index_folder

from .conftest import CORPUS, CountingEmbedding

QUERY = "Who discovered polonium?"


def corpus_nodes() -> list[TextNode]:
    return [TextNode(id_=key, text=text, metadata={"title": key.title(), "year": i})
            for i, (key, text, _) in enumerate(CORPUS)]


@pytest.fixture
def retriever(embed_model: CoreEmbedding) -> ConceptGraphRetriever:
    return ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(), embed_model=embed_model)


def test_node_metadata_carried_through_and_provenance_added(
    retriever: ConceptGraphRetriever,
) -> None:
    results = retriever.retrieve(QUERY)
    top = results[0]
    assert top.node.node_id == "curie-polonium"
    assert top.node.get_content() == CORPUS[0][1]
    assert top.node.metadata["title"] == "Curie-Polonium"
    assert top.node.metadata["year"] == 0
    assert top.node.metadata["chunk_id"] == "curie-polonium"
    assert top.node.metadata["provenance"]["stage"] == "direct"
    assert top.node.metadata["provenance"]["concept"] in CORPUS[0][1].lower()
    assert top.score == pytest.approx(top.node.metadata["score"])
    # provenance is for callers, not for the LLM prompt; user metadata still is
    llm_view = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "provenance" not in llm_view and "title: Curie-Polonium" in llm_view
    # node ids are unique chunk ids, ordered as the core's local search returns them
    core = retriever.retrieve_result(QUERY)
    assert [n.node.node_id for n in results] == [c.id for c in core.chunks]


def test_uses_settings_embed_model_when_none_given(settings_embed_model: CoreEmbedding) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=corpus_nodes())
    assert retriever.index.embedder is settings_embed_model.embedder
    assert retriever.index.embedder.dim == 128


def test_any_base_embedding_is_wrapped_and_queries_use_query_embedding() -> None:
    embed = CountingEmbedding()
    retriever = ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(), embed_model=embed)
    assert retriever.index.embedder.model_id == "llama-index/CountingEmbedding/unknown"
    assert retriever.index.embedder.dim == 128  # found by one probe embedding
    embedded = len(embed.texts)
    assert retriever.retrieve(QUERY)[0].node.node_id == "curie-polonium"
    assert embed.queries == [QUERY] and len(embed.texts) == embedded


def test_from_documents_splits_with_the_given_transformations(
    embed_model: CoreEmbedding,
) -> None:
    docs = [Document(text=" ".join(text for _, text, _ in CORPUS[:5]))]
    retriever = ConceptGraphRetriever.from_defaults(
        documents=docs, embed_model=embed_model,
        transformations=[SentenceSplitter(chunk_size=40, chunk_overlap=0)])
    assert len(retriever.index) > 1
    top = retriever.retrieve(QUERY)[0]
    assert "polonium" in top.node.get_content()


def test_persist_round_trip(
    retriever: ConceptGraphRetriever, embed_model: CoreEmbedding, tmp_path: Path
) -> None:
    tuned = ConceptGraphRetriever(retriever.index, embed_model, concept_top_k=3, hops=1,
                                  budget=50)
    tuned.persist(tmp_path / "cg")
    sidecar = json.loads((tmp_path / "cg" / "llama_index_conceptgraph.json").read_text())
    assert (sidecar["top_k"], sidecar["hops"], sidecar["budget"]) == (3, 1, 50)
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "cg", embed_model=embed_model)
    before, after = tuned.retrieve(QUERY), loaded.retrieve(QUERY)
    assert [(n.node.node_id, n.score, n.node.metadata) for n in after] == \
           [(n.node.node_id, n.score, n.node.metadata) for n in before]
    assert loaded.retrieve_result(QUERY).budget == 50
    with pytest.raises(ValueError, match="built with embedding model"):
        ConceptGraphRetriever.from_persist_dir(tmp_path / "cg",
                                               embed_model=CoreEmbedding(HashingEmbedder(64)))
    swap_concept_vectors(index_folder(tmp_path / "cg"))
    ConceptGraphRetriever.from_persist_dir(tmp_path / "cg", embed_model=embed_model)
    with pytest.raises(CorruptIndexError, match="concept vectors are not the means"):
        ConceptGraphRetriever.from_persist_dir(tmp_path / "cg", embed_model=embed_model,
                                               verify=True)


def test_persist_round_trip_with_a_plain_base_embedding(tmp_path: Path) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(),
                                                    embed_model=CountingEmbedding())
    retriever.persist(tmp_path / "cg")
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "cg",
                                                    embed_model=CountingEmbedding())
    assert [n.node.node_id for n in loaded.retrieve(QUERY)] == \
           [n.node.node_id for n in retriever.retrieve(QUERY)]


async def test_async_retrieve_matches_sync() -> None:
    embed = CountingEmbedding()
    retriever = ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(), embed_model=embed)
    sync = retriever.retrieve(QUERY)
    asynced = await retriever.aretrieve(QUERY)
    assert [(n.node.node_id, n.score) for n in asynced] == [(n.node.node_id, n.score)
                                                              for n in sync]
    assert embed.queries == [QUERY, QUERY]


def test_bad_input_is_rejected_clearly(embed_model: CoreEmbedding) -> None:
    with pytest.raises(ValueError, match="no nodes"):
        ConceptGraphRetriever.from_defaults(nodes=[], embed_model=embed_model)
    with pytest.raises(TypeError, match=r"nodes\[0\] must be a llama_index BaseNode"):
        ConceptGraphRetriever.from_defaults(nodes=["plain text"], embed_model=embed_model)  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"nodes\[0\] is empty or whitespace"):
        ConceptGraphRetriever.from_defaults(nodes=[TextNode(text="  ")], embed_model=embed_model)
    with pytest.raises(ValueError, match="exactly one"):
        ConceptGraphRetriever.from_defaults(embed_model=embed_model)
    with pytest.raises(TypeError, match="BaseEmbedding"):
        ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(), embed_model="openai")  # type: ignore[arg-type]
    index = ConceptGraphIndex(HashingEmbedder(), ConceptGraphConfig())
    with pytest.raises(ValueError, match="concept_top_k"):
        ConceptGraphRetriever(index, concept_top_k=0)
    with pytest.raises(TypeError, match="ConceptGraphIndex"):
        ConceptGraphRetriever("index")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        ConceptGraphRetriever(index).retrieve("   ")


def test_works_inside_retriever_query_engine(retriever: ConceptGraphRetriever) -> None:
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(QUERY)
    assert [n.node.node_id for n in response.source_nodes] == \
           [n.node.node_id for n in retriever.retrieve(QUERY)]
    # MockLLM echoes its prompt: the context sent holds the chunk text, not the provenance
    assert CORPUS[0][1] in str(response) and "provenance" not in str(response)


async def test_works_inside_retriever_query_engine_async(
    retriever: ConceptGraphRetriever,
) -> None:
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = await engine.aquery(QUERY)
    assert response.source_nodes[0].node.node_id == "curie-polonium"


@pytest.mark.parametrize("use_async", [False, True])
def test_member_of_query_fusion_retriever(
    retriever: ConceptGraphRetriever, embed_model: CoreEmbedding, use_async: bool
) -> None:
    other = ConceptGraphRetriever.from_defaults(
        nodes=[TextNode(id_="extra", text="Polonium was named after Poland by Marie Curie.")],
        embed_model=embed_model)
    fusion = QueryFusionRetriever([retriever, other], llm=MockLLM(), num_queries=1,
                                  mode="reciprocal_rerank", use_async=use_async)
    ids = [n.node.node_id for n in fusion.retrieve(QUERY)]
    assert {"curie-polonium", "extra"} <= set(ids)
    # reciprocal rank fusion: each retriever's first hit ties for the best fused score
    assert set(ids[:2]) == {"curie-polonium", "extra"}


def test_postprocessor_reorders_and_prunes(retriever: ConceptGraphRetriever) -> None:
    concept_order = [n.node.node_id for n in retriever.retrieve(QUERY)]
    by_id = {n.node_id: n for n in corpus_nodes()}
    stranger = TextNode(id_="stranger", text="Not in the concept graph.")
    # candidates as another retriever might rank them: the concept graph's picks last
    candidates = [NodeWithScore(node=stranger, score=0.9)] + [
        NodeWithScore(node=by_id[i], score=0.5) for i in reversed(concept_order)]

    post = ConceptGraphPostprocessor(retriever=retriever)
    out = post.postprocess_nodes(candidates, query_str=QUERY)
    assert [n.node.node_id for n in out] == [*concept_order, "stranger"]
    assert out[0].node.metadata["provenance"]["stage"] == "direct"
    assert out[0].node.metadata["title"] == "Curie-Polonium"
    assert "provenance" not in by_id["curie-polonium"].metadata  # input nodes untouched
    assert out[-1] is candidates[0]

    pruned = ConceptGraphPostprocessor(retriever=retriever, drop_unmatched=True, top_n=2)
    assert [n.node.node_id for n in pruned.postprocess_nodes(candidates, query_str=QUERY)] \
        == concept_order[:2]
    with pytest.raises(ValueError, match="needs the query"):
        post.postprocess_nodes(candidates)
    with pytest.raises(TypeError, match="ConceptGraphRetriever"):
        ConceptGraphPostprocessor(retriever="r")  # type: ignore[arg-type]


def test_core_embedding_round_trips_to_the_same_core_embedder() -> None:
    inner = HashingEmbedder(32)
    assert to_core_embedder(CoreEmbedding(inner)) is inner
    with pytest.raises(TypeError, match="Embedder protocol"):
        CoreEmbedding("hashing")  # type: ignore[arg-type]
