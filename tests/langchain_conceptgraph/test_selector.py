"""CoreChunkSelector: only core chunks reach LLMGraphTransformer; the cost report."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from langchain_core.documents import Document

from langchain_conceptgraph import CoreChunkSelector, CoreEmbeddings
from shared_core import ConceptGraphConfig, content_id, count_tokens

from .conftest import CORPUS
from .fakes import FakeGraphExtractor

with warnings.catch_warnings():  # langchain-experimental announces its own sunset on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_experimental.graph_transformers import LLMGraphTransformer


def test_llm_graph_transformer_receives_only_core_chunks(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    selector = CoreChunkSelector(embeddings, kappa=0.5)
    core = selector.transform_documents(documents)
    # ceil(0.5 * 8) = 4 chunks, the core's own choice, in input order
    assert len(core) == 4
    expected = selector.index.select(0.5).kept_ids
    assert [d.id for d in core] == [d.id for d in documents if d.id in expected]
    assert sorted(d.id for d in core) == sorted(expected)
    llm = FakeGraphExtractor()
    graph_docs = LLMGraphTransformer(llm=llm).convert_to_graph_documents(core)
    assert llm.calls == 4  # not 8
    assert llm.inputs == [CORPUS[d.id] for d in core]
    dropped = set(CORPUS) - set(expected)
    assert len(dropped) == 4 and not {CORPUS[c] for c in dropped} & set(llm.inputs)
    assert [g.source.id for g in graph_docs] == [d.id for d in core]  # sources keep their ids


def test_cost_report_is_logged_and_retrievable(
    documents: list[Document], embeddings: CoreEmbeddings, caplog: pytest.LogCaptureFixture
) -> None:
    selector = CoreChunkSelector(embeddings, kappa=0.8, prompt_tokens_per_chunk=100)
    assert selector.last_report is None
    with caplog.at_level(logging.INFO, logger="conceptgraph"):
        core = selector.transform_documents(documents)
    report = selector.last_report
    assert report is not None
    kept_tokens = sum(count_tokens(d.page_content) for d in core)
    # 8 chunks, 101 tokens; kappa 0.8 of the tokens: the ranked prefix within 80.8 tokens,
    # so the next chunk in rank order would not fit; each kept chunk adds 100 prompt tokens
    assert (report.chunks_total, report.tokens_total) == (8, 101)
    assert report.tokens_kept == kept_tokens <= 0.8 * 101
    assert selector.last_selection is not None
    following = selector.last_selection.ranked_ids[report.chunks_kept]
    assert kept_tokens + selector.index.get(following).tokens > 0.8 * 101
    assert report.extraction_input_tokens == kept_tokens + report.chunks_kept * 100
    assert report.extraction_input_tokens_all == 101 + 8 * 100
    assert report.summary() in caplog.messages
    assert selector.last_selection is not None
    assert sorted(selector.last_selection.kept_ids) == sorted(d.id for d in core)


async def test_async_transform_then_async_extraction(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    selector = CoreChunkSelector(embeddings, kappa=0.5)
    core = await selector.atransform_documents(documents)
    sync_ids = [d.id for d in CoreChunkSelector(embeddings, kappa=0.5)
                .transform_documents(documents)]
    assert [d.id for d in core] == sync_ids
    llm = FakeGraphExtractor()
    graph_docs = await LLMGraphTransformer(llm=llm).aconvert_to_graph_documents(core)
    assert llm.calls == 4
    assert sorted(llm.inputs) == sorted(CORPUS[cid] for cid in sync_ids)
    assert len(graph_docs) == 4


def test_documents_without_ids_get_their_chunk_id(embeddings: CoreEmbeddings) -> None:
    docs = [Document(page_content=text) for text in CORPUS.values()]
    core = CoreChunkSelector(embeddings, kappa=1.0).transform_documents(docs)
    assert [d.id for d in core] == [content_id(t) for t in CORPUS.values()]
    assert [d.page_content for d in core] == list(CORPUS.values())
    assert all(d.id is None for d in docs)  # inputs are not mutated


def test_repeated_documents_are_kept_or_dropped_together(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    twice = documents + documents[:2]
    selector = CoreChunkSelector(embeddings, kappa=0.5)
    core = selector.transform_documents(twice)
    kept = set(selector.index.select(0.5).kept_ids)
    assert [d.id for d in core] == [d.id for d in twice if d.id in kept]
    assert selector.last_report is not None and selector.last_report.chunks_total == 8


def test_per_call_kappa_and_a_second_batch_share_one_graph(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    # kappa from the config (0.8), as a share of chunks here
    selector = CoreChunkSelector(embeddings, config=ConceptGraphConfig(select_by="chunks"))
    assert len(selector.transform_documents(documents[:4])) == 4  # ceil(0.8 * 4)
    assert len(selector.transform_documents(documents[4:], kappa=0.25)) == 1  # ceil(0.25 * 4)
    assert len(selector.index) == 8  # both batches in one concept graph
    report = selector.last_report
    assert report is not None and (report.chunks_total, report.chunks_kept) == (4, 1)


def test_the_selectors_graph_serves_retrieval_and_persists(
    documents: list[Document], embeddings: CoreEmbeddings, tmp_path: Path
) -> None:
    selector = CoreChunkSelector(embeddings, kappa=0.5)
    selector.transform_documents(documents)
    retriever = selector.as_retriever(k=2)
    assert retriever.index is selector.index
    assert retriever.invoke("Where is CERN?")[0].id == "cern"
    selector.save(tmp_path / "graph")
    again = CoreChunkSelector.from_persist_dir(tmp_path / "graph", embeddings, kappa=0.5,
                                               verify=True)
    assert again.index.chunk_ids == selector.index.chunk_ids
    assert sorted(d.id for d in again.transform_documents(documents)) == sorted(
        selector.index.select(0.5).kept_ids)


def test_empty_input_is_empty_output(embeddings: CoreEmbeddings) -> None:
    selector = CoreChunkSelector(embeddings)
    assert selector.transform_documents([]) == []
    assert selector.last_report is None


def test_bad_input_is_rejected(embeddings: CoreEmbeddings, documents: list[Document]) -> None:
    with pytest.raises(ValueError, match="exactly one of embeddings or index"):
        CoreChunkSelector()
    index = CoreChunkSelector(embeddings).index
    with pytest.raises(ValueError, match="exactly one of embeddings or index"):
        CoreChunkSelector(embeddings, index=index)
    with pytest.raises(ValueError, match="config applies to a new index"):
        CoreChunkSelector(index=index, config=ConceptGraphConfig())
    with pytest.raises(ValueError, match="kappa"):
        CoreChunkSelector(embeddings, kappa=0.0)
    with pytest.raises(ValueError, match="kappa"):
        CoreChunkSelector(embeddings).transform_documents(documents, kappa=1.5)
    with pytest.raises(TypeError, match="unexpected keyword arguments: top_n"):
        CoreChunkSelector(embeddings).transform_documents(documents, top_n=3)
    with pytest.raises(ValueError, match="prompt_tokens_per_chunk"):
        CoreChunkSelector(embeddings, prompt_tokens_per_chunk=-1)
    with pytest.raises(TypeError, match=r"documents\[0\] must be a Document"):
        CoreChunkSelector(embeddings).transform_documents(["text"])  # type: ignore[list-item]
