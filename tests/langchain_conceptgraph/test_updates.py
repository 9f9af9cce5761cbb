"""Incremental updates on the retriever and the selector, the relevance floor, KNN selection."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from pydantic import ValidationError

from langchain_conceptgraph import ConceptGraphRetriever, CoreChunkSelector, CoreEmbeddings
from shared_core import ConceptGraphConfig

from .conftest import CORPUS

QUERY = "Who wrote the first computer program?"
BY_CHUNKS = ConceptGraphConfig(select_by="chunks", theta_co=1)


def ids(docs: list[Document]) -> list[str]:
    return [str(d.id) for d in docs]


@pytest.fixture
def retriever_docs(documents: list[Document], embeddings: CoreEmbeddings) -> ConceptGraphRetriever:
    return ConceptGraphRetriever.from_documents(documents, embeddings)


def test_delete_gives_the_retriever_that_never_held_them(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings)
    assert retriever.invoke(QUERY)[0].id == "ada"
    assert retriever.delete(["ada", "never-added"]) is True  # unknown ids are skipped
    assert retriever.delete(["ada"]) is True  # deleting twice is not an error
    fresh = ConceptGraphRetriever.from_documents(documents[1:], embeddings)
    assert retriever.index.chunk_ids == fresh.index.chunk_ids == sorted(set(CORPUS) - {"ada"})
    assert retriever.invoke(QUERY) == fresh.invoke(QUERY)


async def test_async_add_and_delete(documents: list[Document],
                                    embeddings: CoreEmbeddings) -> None:
    retriever = ConceptGraphRetriever.from_documents(documents[:4], embeddings)
    assert await retriever.aadd_documents(documents[4:]) == list(CORPUS)[4:]
    assert await retriever.adelete(["turing", "hopper"]) is True
    assert retriever.index.chunk_ids == sorted(set(CORPUS) - {"turing", "hopper"})


def test_delete_refuses_none_and_a_single_id(retriever_docs: ConceptGraphRetriever) -> None:
    with pytest.raises(ValueError, match="ids is None: pass the ids to delete"):
        retriever_docs.delete()
    with pytest.raises(TypeError, match="ids must be an iterable of str, not str"):
        retriever_docs.delete("ada")  # a str is a sequence of str: refused all the same
    assert len(retriever_docs.index) == len(CORPUS)


def test_the_same_chunk_with_two_metadatas_is_refused(embeddings: CoreEmbeddings) -> None:
    docs = [Document(page_content=CORPUS["ada"], id="ada", metadata={"v": 1}),
            Document(page_content=CORPUS["ada"], id="ada", metadata={"v": 2})]
    with pytest.raises(ValueError, match=r"documents\[0\] and documents\[1\] are the same chunk "
                                         r"\(id 'ada'\) with different metadata"):
        ConceptGraphRetriever.from_documents(docs, embeddings)


def test_min_score_drops_what_is_below_the_floor(retriever_docs: ConceptGraphRetriever) -> None:
    floored = retriever_docs.model_copy(update={"min_score": 0.3})
    # cosines to the query: ada .68, hopper .34, every other chunk below .3
    assert ids(floored.invoke(QUERY)) == ["ada", "hopper"]
    assert ids(floored.invoke(QUERY)) == [c.id for c in retriever_docs.index.retrieve(
        QUERY, min_score=0.3).chunks]
    assert floored.invoke("zebra saxophone quartet") == []
    assert len(retriever_docs.invoke("zebra saxophone quartet")) == len(CORPUS)  # no floor


@pytest.mark.parametrize("value", [1.5, -2.0, "high"])
def test_min_score_is_validated(retriever_docs: ConceptGraphRetriever, value: object) -> None:
    with pytest.raises(ValidationError, match="min_score"):
        ConceptGraphRetriever(index=retriever_docs.index, min_score=value)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ selector
def test_selector_add_and_delete_shape_later_selections(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    selector = CoreChunkSelector(embeddings, kappa=0.5, config=BY_CHUNKS)
    assert selector.add_documents(documents[:4]) == list(CORPUS)[:4]
    assert selector.last_selection is None  # added, not selected
    assert selector.delete(["ada", "never-added"]) is True
    kept = selector.transform_documents(documents[4:])
    reference = CoreChunkSelector(embeddings, kappa=0.5, config=BY_CHUNKS)
    reference.add_documents(documents[1:4])
    assert ids(kept) == ids(reference.transform_documents(documents[4:]))
    assert len(kept) == 2 and selector.index.chunk_ids == reference.index.chunk_ids


async def test_selector_async_add_and_delete(documents: list[Document],
                                             embeddings: CoreEmbeddings) -> None:
    selector = CoreChunkSelector(embeddings)
    assert await selector.aadd_documents(documents) == list(CORPUS)
    assert await selector.adelete(list(CORPUS)[:3]) is True
    assert len(selector.index) == len(CORPUS) - 3


@pytest.mark.parametrize("method", ["concept", "knn", "random"])
def test_selector_method_is_the_cores(documents: list[Document], embeddings: CoreEmbeddings,
                                      method: str) -> None:
    selector = CoreChunkSelector(embeddings, kappa=0.5, method=method,  # type: ignore[arg-type]
                                 config=BY_CHUNKS)
    kept = ids(selector.transform_documents(documents))
    expected = selector.index.select(0.5, method=method).kept_ids  # type: ignore[arg-type]
    assert kept == [cid for cid in CORPUS if cid in expected] and len(kept) == 4


def test_method_per_call_and_unknown_methods(documents: list[Document],
                                             embeddings: CoreEmbeddings) -> None:
    selector = CoreChunkSelector(embeddings, kappa=0.5, config=BY_CHUNKS)
    knn = ids(selector.transform_documents(documents, method="knn"))
    assert knn == ["ada", "babbage", "cern", "curie"]  # KET-RAG's KNN PageRank, best half
    assert ids(selector.transform_documents(documents)) == ["ada", "hopper", "web", "curie"]
    with pytest.raises(ValueError, match="method must be one of concept, coverage, knn, random"):
        CoreChunkSelector(embeddings, method="pagerank")  # type: ignore[arg-type]
    with pytest.raises(ValueError,
                       match="method must be one of concept, coverage, knn, random, got 'x'"):
        selector.transform_documents(documents, method="x")
