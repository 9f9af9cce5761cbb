"""CoreChunkSelector inside PropertyGraphIndex.from_documents and IngestionPipeline."""

from __future__ import annotations

import logging

import pytest
from llama_index.core import Document
from llama_index.core.graph_stores.types import TRIPLET_SOURCE_KEY
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.prompts.default_prompts import DEFAULT_KG_TRIPLET_EXTRACT_PROMPT
from llama_index.core.schema import TextNode

from llama_index_conceptgraph import CoreChunkSelector, CoreEmbedding
from shared_core import ConceptGraphConfig, HashingEmbedder, count_tokens

from .conftest import CORPUS, TEXTS, CountingEmbedding, TableLLM, build_pg_index


def extraction_prompt(text: str) -> str:
    """What SimpleLLMPathExtractor sends for one chunk (default prompt, 10 triples)."""
    return DEFAULT_KG_TRIPLET_EXTRACT_PROMPT.format(text=text, max_knowledge_triplets=10)


def test_only_core_chunks_reach_the_extractor_at_kappa_02(
    documents: list[Document], table_llm: TableLLM, embed_model: CoreEmbedding
) -> None:
    pg_index, selector = build_pg_index(documents, table_llm, embed_model, kappa=0.2)

    kept = selector.selection.kept_ids
    assert selector.index.embedder is embed_model.embedder  # the index's embed_model, reused
    assert len(selector.index) == 10 and len(kept) == 2  # ceil(0.2 * 10)
    kept_texts = [selector.index.get(cid).text for cid in kept]
    sent = table_llm.extraction_prompts()
    assert sorted(sent) == sorted(extraction_prompt(t) for t in kept_texts)
    # the graph holds only the kept chunks and only the facts extracted from them
    stored = pg_index.property_graph_store.get_llama_nodes(selector.index.chunk_ids)
    assert {n.node_id for n in stored} == set(kept)
    relations = pg_index.property_graph_store.graph.relations.values()
    assert {r.properties[TRIPLET_SOURCE_KEY] for r in relations} == set(kept)
    expected = {(s.capitalize(), p.capitalize(), o.capitalize())
                for _, text, triples in CORPUS if text in kept_texts for s, p, o in triples}
    assert {(r.source_id, r.label, r.target_id) for r in relations} == expected

    report = selector.report
    assert (report.chunks_total, report.chunks_kept) == (10, 2)
    assert report.tokens_kept == sum(count_tokens(t) for t in kept_texts)
    assert report.tokens_total == sum(count_tokens(t) for t in TEXTS)


def test_tokens_sent_to_the_extractor_fall_with_kappa(
    documents: list[Document], embed_model: CoreEmbedding
) -> None:
    table = {text: triples for _, text, triples in CORPUS}
    full_llm, pruned_llm = TableLLM(table=table), TableLLM(table=table)
    template_tokens = count_tokens(extraction_prompt(""))
    build_pg_index(documents, full_llm, embed_model, kappa=1.0)
    _, selector = build_pg_index(documents, pruned_llm, embed_model, kappa=0.2,
                                 prompt_tokens_per_chunk=template_tokens)

    full = sum(count_tokens(p) for p in full_llm.extraction_prompts())
    pruned = sum(count_tokens(p) for p in pruned_llm.extraction_prompts())
    assert len(full_llm.extraction_prompts()) == 10
    assert len(pruned_llm.extraction_prompts()) == 2
    assert full == sum(count_tokens(extraction_prompt(t)) for t in TEXTS)
    kept_texts = [selector.index.get(c).text for c in selector.selection.kept_ids]
    assert pruned == sum(count_tokens(extraction_prompt(t)) for t in kept_texts)
    # the report's estimate (chunk tokens + template tokens per chunk) matches what was sent,
    # up to a token or two where the chunk text meets the template
    report = selector.report
    assert report.extraction_input_tokens == report.tokens_kept + 2 * template_tokens
    assert abs(report.extraction_input_tokens - pruned) <= 2 * 2
    assert abs(report.extraction_input_tokens_all - full) <= 2 * 10


def test_in_ingestion_pipeline_logs_and_keeps_the_report(
    documents: list[Document], caplog: pytest.LogCaptureFixture
) -> None:
    selector = CoreChunkSelector(kappa=0.5, embed_model=CoreEmbedding(HashingEmbedder(256)),
                                 config=ConceptGraphConfig(select_by="chunks"))
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=0), selector])
    with caplog.at_level(logging.INFO, logger="conceptgraph"):
        nodes = pipeline.run(documents=documents)
    assert sorted(n.node_id for n in nodes) == sorted(selector.selection.kept_ids)
    assert len(nodes) == 5
    assert selector.report.summary() in caplog.text
    assert "kept 5/10 chunks" in caplog.text


def test_retriever_reuses_the_selector_graph_without_embedding_again(
    documents: list[Document],
) -> None:
    embed = CountingEmbedding()
    selector = CoreChunkSelector(kappa=0.5, embed_model=embed)
    nodes = SentenceSplitter(chunk_size=128, chunk_overlap=0)(documents)
    selector(nodes)
    embedded = len(embed.texts)
    assert embedded > 10  # sentences of ten chunks, plus the dimension probe
    retriever = selector.as_retriever()
    assert retriever.index is selector.index
    hits = retriever.retrieve("Who discovered polonium?")
    assert "polonium" in hits[0].node.get_content()
    assert len(embed.texts) == embedded and embed.queries == ["Who discovered polonium?"]


def test_a_second_run_extends_the_same_graph(embed_model: CoreEmbedding) -> None:
    selector = CoreChunkSelector(kappa=0.5, embed_model=embed_model,
                                 config=ConceptGraphConfig(select_by="chunks"))
    first = [TextNode(id_=key, text=text) for key, text, _ in CORPUS[:6]]
    second = [TextNode(id_=key, text=text) for key, text, _ in CORPUS[6:]]
    assert len(selector(first)) == 3
    kept = selector(second)
    assert len(selector.index) == 10
    assert len(kept) == 2 and selector.report.chunks_total == 4  # only the new chunks ranked
    assert {n.node_id for n in kept} <= {key for key, _, _ in CORPUS[6:]}


def test_bad_input(embed_model: CoreEmbedding) -> None:
    with pytest.raises(ValueError, match="kappa"):
        CoreChunkSelector(kappa=0.0)
    with pytest.raises(ValueError, match="kappa"):
        CoreChunkSelector(kappa=1.5)
    with pytest.raises(TypeError, match="BaseEmbedding"):
        CoreChunkSelector(embed_model="text-embedding-3-small")  # type: ignore[arg-type]
    selector = CoreChunkSelector(embed_model=embed_model)
    with pytest.raises(RuntimeError, match="has not run yet"):
        _ = selector.report
    with pytest.raises(TypeError, match="sequence of llama_index BaseNode"):
        selector("Marie Curie")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"nodes\[0\] is empty or whitespace"):
        selector([TextNode(text="")])
    assert selector([]) == []

