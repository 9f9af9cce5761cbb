"""The adapter inside stock LlamaIndex machinery, offline: query fusion, ingestion into a
PropertyGraphIndex with a real extractor class, an event loop. (Two threads selecting at
once: tests/parity.)"""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from llama_index.core import Document, PropertyGraphIndex, VectorStoreIndex
from llama_index.core.graph_stores.types import TRIPLET_SOURCE_KEY
from llama_index.core.indices.property_graph import SimpleLLMPathExtractor
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.prompts.default_prompts import DEFAULT_KG_TRIPLET_EXTRACT_PROMPT
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
from llama_index.core.schema import TextNode

from llama_index_conceptgraph import (
    ConceptGraphPostprocessor,
    ConceptGraphRetriever,
    CoreChunkSelector,
    CoreEmbedding,
    run_outside_event_loop,
)
from shared_core import ConceptGraphConfig, HashingEmbedder

from .conftest import CORPUS, TableLLM

QUERY = "Who discovered polonium?"
BY_CHUNKS = ConceptGraphConfig(select_by="chunks")


def corpus_nodes() -> list[TextNode]:
    return [TextNode(id_=key, text=text) for key, text, _ in CORPUS]


# ------------------------------------------------------------------ query fusion
def test_retriever_and_postprocessor_around_query_fusion_call_no_llm_to_fuse(
    embed_model: CoreEmbedding, table_llm: TableLLM
) -> None:
    concept = ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(), embed_model=embed_model)
    vector = VectorStoreIndex(corpus_nodes(), embed_model=embed_model).as_retriever(
        similarity_top_k=3)
    fusion = QueryFusionRetriever([concept, vector], llm=table_llm, num_queries=1,
                                  use_async=False, mode=FUSION_MODES.RECIPROCAL_RANK,
                                  similarity_top_k=4)
    concept_ids = [n.node.node_id for n in concept.retrieve(QUERY)]
    assert concept_ids[:5] == ["curie-polonium", "rutherford", "nobel", "pierre", "warsaw"]
    assert [n.node.node_id for n in vector.retrieve(QUERY)] == ["curie-polonium", "rutherford",
                                                                 "warsaw"]
    fused = fusion.retrieve(QUERY)
    assert table_llm.prompts == []  # one query: none generated, so the LLM was never asked
    # reciprocal rank fusion (k=60) merges a chunk found by both retrievers into one node
    # (same hash, whatever provenance the concept path added): ranks 0+0, 1+1, 4+2, then 2
    assert [(n.node.node_id, n.score) for n in fused] == [
        ("curie-polonium", 2 / 60), ("rutherford", 2 / 61), ("warsaw", 1 / 64 + 1 / 62),
        ("nobel", 1 / 62)]

    # the postprocessor puts the fused nodes in the concept graph's order, with its scores
    concept_hits = {n.node.node_id: n.score for n in concept.retrieve(QUERY)}
    expected = ["curie-polonium", "rutherford", "nobel", "warsaw"]
    post = ConceptGraphPostprocessor(retriever=concept)
    engine = RetrieverQueryEngine.from_args(fusion, llm=table_llm, node_postprocessors=[post])
    response = engine.query(QUERY)
    assert [n.node.node_id for n in response.source_nodes] == expected
    assert [n.score for n in response.source_nodes] == [concept_hits[i] for i in expected]
    assert response.source_nodes[0].node.metadata["provenance"]["stage"] == "direct"
    # one LLM call, the answer: TableLLM answers with the first line of its context
    assert len(table_llm.prompts) == 1 and str(response) == CORPUS[0][1]


# ------------------------------------------------- ingestion into a PropertyGraphIndex
def extraction_prompt(text: str) -> str:
    return DEFAULT_KG_TRIPLET_EXTRACT_PROMPT.format(text=text, max_knowledge_triplets=10)


def check_only_core_chunks_were_extracted(
    pg_index: PropertyGraphIndex, selector: CoreChunkSelector, llm: TableLLM
) -> None:
    kept = selector.selection.kept_ids
    kept_texts = [selector.index.get(cid).text for cid in kept]
    assert sorted(llm.extraction_prompts()) == sorted(extraction_prompt(t) for t in kept_texts)
    relations = pg_index.property_graph_store.graph.relations.values()
    assert {r.properties[TRIPLET_SOURCE_KEY] for r in relations} == set(kept)
    expected = {(s.capitalize(), p.capitalize(), o.capitalize())
                for _, text, triples in CORPUS if text in kept_texts for s, p, o in triples}
    assert {(r.source_id, r.label, r.target_id) for r in relations} == expected


@pytest.mark.parametrize("method", ["concept", "knn"])
def test_selector_in_an_ingestion_pipeline_feeding_a_property_graph_index(
    documents: list[Document], table_llm: TableLLM, embed_model: CoreEmbedding, method: str
) -> None:
    selector = CoreChunkSelector(kappa=0.3, method=method,  # type: ignore[arg-type]
                                 embed_model=embed_model, config=BY_CHUNKS)
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=0), selector])
    nodes = pipeline.run(documents=documents)
    assert len(nodes) == 3 and len(selector.index) == 10  # ceil(0.3 * 10) of ten chunks
    core = selector.index.select(0.3, method=method)  # type: ignore[arg-type]
    assert set(selector.selection.kept_ids) == set(core.kept_ids)
    pg_index = PropertyGraphIndex(nodes=nodes, kg_extractors=[SimpleLLMPathExtractor(
        llm=table_llm)], llm=table_llm, embed_model=embed_model, embed_kg_nodes=False)
    assert len(table_llm.extraction_prompts()) == 3
    check_only_core_chunks_were_extracted(pg_index, selector, table_llm)
    # a document withdrawn later leaves the concept graph by its id, as on a vector index
    withdrawn = selector.selection.kept_ids[0]
    source = selector.index.get(withdrawn).metadata["ref_doc_id"]
    selector.delete_ref_doc(source)
    assert withdrawn not in selector.index and len(selector.index) == 9


async def test_async_ingestion_runs_the_selector_off_the_event_loop(
    documents: list[Document], table_llm: TableLLM, embed_model: CoreEmbedding
) -> None:
    selector = CoreChunkSelector(kappa=0.3, embed_model=embed_model, config=BY_CHUNKS)
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=0), selector])
    nodes = await pipeline.arun(documents=documents)  # calls selector.acall
    sync_selector = CoreChunkSelector(kappa=0.3, embed_model=embed_model, config=BY_CHUNKS)
    sync_nodes = IngestionPipeline(transformations=[
        SentenceSplitter(chunk_size=128, chunk_overlap=0), sync_selector]).run(documents=documents)
    assert [n.node_id for n in nodes] != [] and \
        [n.get_content() for n in nodes] == [n.get_content() for n in sync_nodes]
    # PropertyGraphIndex builds with asyncio.run: from a running loop, in a worker thread
    pg_index = run_outside_event_loop(
        PropertyGraphIndex, nodes=nodes, kg_extractors=[SimpleLLMPathExtractor(llm=table_llm)],
        llm=table_llm, embed_model=embed_model, embed_kg_nodes=False)
    check_only_core_chunks_were_extracted(pg_index, selector, table_llm)


# --------------------------------------------------------------- threads and the loop
class GatedEmbedder:
    """Hashing vectors, released only once the test opens the gate (or after two seconds)."""

    model_id = "gated-hashing"
    dim = 64

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.gate = threading.Event()
        self.opened: list[bool] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.opened.append(self.gate.wait(timeout=2))
        return self.inner.embed(texts)


async def test_acall_leaves_the_event_loop_free_while_it_embeds() -> None:
    embedder = GatedEmbedder()
    selector = CoreChunkSelector(kappa=0.5, embed_model=CoreEmbedding(embedder),
                                 config=BY_CHUNKS)

    async def open_gate() -> None:  # can only run if acall is not holding the loop
        embedder.gate.set()

    kept, _ = await asyncio.gather(selector.acall(corpus_nodes()), open_gate())
    assert embedder.opened and all(embedder.opened)
    assert len(kept) == 5


def test_a_selector_pickles_for_worker_processes(
    embed_model: CoreEmbedding, caplog: pytest.LogCaptureFixture
) -> None:
    # LlamaIndex pickles transformations for IngestionPipeline(num_workers=...), dropping
    # with a warning any private attribute that will not pickle (a lock would not); on
    # unpickling it re-runs __init__ with the public fields alone
    selector = CoreChunkSelector(kappa=0.5, method="knn", embed_model=embed_model)
    with caplog.at_level(logging.WARNING):
        copy = pickle.loads(pickle.dumps(selector))
    assert "unpickleable" not in caplog.text
    assert (copy.kappa, copy.method) == (0.5, "knn")
    # the model comes with the call, as PropertyGraphIndex passes its own
    fresh = CoreChunkSelector(kappa=0.5, method="knn")
    assert [n.node_id for n in copy(corpus_nodes(), embed_model=embed_model)] == \
        [n.node_id for n in fresh(corpus_nodes(), embed_model=embed_model)]
    assert copy.index.embedder is embed_model.embedder
