"""ConceptGraphRetriever: construction, k and budget, provenance, async, persistence, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from pydantic import ValidationError

from benchmarks.faults import swap_concept_vectors
from langchain_conceptgraph import ConceptGraphRetriever, CoreEmbeddings, to_core_embedder
from shared_core import ConceptGraphConfig, HashingEmbedder, content_id, count_tokens
from shared_core.store import CorruptIndexError, index_folder

from .conftest import CORPUS

QUERY = "Who wrote the first computer program?"


@pytest.fixture
def retriever(documents: list[Document], embeddings: CoreEmbeddings) -> ConceptGraphRetriever:
    return ConceptGraphRetriever.from_documents(documents, embeddings)


def test_documents_mirror_the_core_result_with_provenance(
    retriever: ConceptGraphRetriever,
) -> None:
    docs = retriever.invoke(QUERY)
    core = retriever.index.retrieve(QUERY)
    assert [d.id for d in docs] == [hit.id for hit in core.chunks]
    assert [d.page_content for d in docs] == [hit.text for hit in core.chunks]
    # "ada" is the only chunk with "wrote" and "program": a direct concept's chunk, ranked first
    top = docs[0]
    assert top.id == "ada"
    assert top.metadata["title"] == "ada"  # the input document's own metadata survives
    assert top.metadata["chunk_id"] == "ada"
    assert top.metadata["score"] == pytest.approx(core.chunks[0].score)
    assert top.metadata["provenance"]["stage"] == "direct"
    assert top.metadata["provenance"]["hop"] == 0
    assert "ada" in retriever.index.concept_chunks(top.metadata["provenance"]["concept"])


def test_k_field_and_k_argument_cut_the_context_order(retriever: ConceptGraphRetriever) -> None:
    everything = [d.id for d in retriever.invoke(QUERY)]
    assert len(everything) > 3
    assert [d.id for d in retriever.invoke(QUERY, k=2)] == everything[:2]
    limited = retriever.model_copy(update={"k": 3})
    assert [d.id for d in limited.invoke(QUERY)] == everything[:3]
    assert [d.id for d in limited.invoke(QUERY, k=1)] == everything[:1]  # the call wins


def test_budget_skips_or_stops_at_the_chunk_that_does_not_fit(
    retriever: ConceptGraphRetriever, documents: list[Document], embeddings: CoreEmbeddings,
) -> None:
    first = count_tokens(CORPUS["ada"])  # 15 tokens
    assert [d.id for d in retriever.invoke(QUERY, budget=first)] == ["ada"]
    # default overflow="skip": in 14 tokens ada is passed over and the later chunks of the
    # full order that still fit are taken greedily
    budget = first - 1
    expected, used = [], 0
    for doc in retriever.invoke(QUERY, budget=10_000):
        if used + count_tokens(doc.page_content) <= budget:
            expected.append(doc.id)
            used += count_tokens(doc.page_content)
    assert expected and "ada" not in expected
    assert [d.id for d in retriever.invoke(QUERY, budget=budget)] == expected
    # overflow="stop", the paper's rule: the overflowing chunk ends retrieval
    stopping = ConceptGraphRetriever.from_documents(
        documents, embeddings, config=ConceptGraphConfig(overflow="stop"))
    assert stopping.invoke(QUERY, budget=budget) == []
    tight = retriever.model_copy(update={"budget": first})
    assert [d.id for d in tight.invoke(QUERY)] == ["ada"]


async def test_async_matches_sync(retriever: ConceptGraphRetriever) -> None:
    sync = retriever.invoke(QUERY, k=4)
    assert await retriever.ainvoke(QUERY, k=4) == sync
    assert [d.id for d in await retriever.ainvoke(QUERY, budget=15)] == ["ada"]


def test_any_langchain_embeddings_and_a_persisted_index(
    documents: list[Document], tmp_path: Path
) -> None:
    embeddings = DeterministicFakeEmbedding(size=64)
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings, k=3)
    assert retriever.index.embedder.model_id == "langchain/DeterministicFakeEmbedding"
    assert retriever.index.embedder.dim == 64  # probed from one embedding
    retriever.save(tmp_path / "graph")
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "graph", embeddings, k=3)
    assert loaded.invoke(QUERY) == retriever.invoke(QUERY)
    with pytest.raises(ValueError, match="dim 32"):
        ConceptGraphRetriever.from_persist_dir(tmp_path / "graph",
                                               DeterministicFakeEmbedding(size=32))
    swap_concept_vectors(index_folder(tmp_path / "graph"))
    assert ConceptGraphRetriever.from_persist_dir(tmp_path / "graph", embeddings, k=3).k == 3
    with pytest.raises(CorruptIndexError, match="concept vectors are not the means"):
        ConceptGraphRetriever.from_persist_dir(tmp_path / "graph", embeddings, verify=True)


def test_core_embeddings_are_unwrapped_so_the_model_id_is_the_cores() -> None:
    embedder = HashingEmbedder(64)
    assert to_core_embedder(CoreEmbeddings(embedder)) is embedder


def test_documents_without_ids_get_content_ids_and_duplicates_are_one_chunk(
    embeddings: CoreEmbeddings,
) -> None:
    text = CORPUS["turing"]
    docs = [Document(page_content=text), Document(page_content=text),
            Document(page_content=CORPUS["curie"])]
    retriever = ConceptGraphRetriever.from_documents(docs, embeddings)
    assert retriever.index.chunk_ids == sorted([content_id(text), content_id(CORPUS["curie"])])
    assert retriever.invoke("Turing machine")[0].id == content_id(text)


def test_add_documents_extends_the_graph(retriever: ConceptGraphRetriever) -> None:
    new = Document(page_content="Linus Torvalds created the Linux kernel.", id="linux")
    assert retriever.add_documents([new]) == ["linux"]
    assert len(retriever.index) == len(CORPUS) + 1
    assert retriever.invoke("Who created the Linux kernel?")[0].id == "linux"


@pytest.mark.parametrize("field,value", [("k", 0), ("budget", 0), ("top_k", -1), ("hops", -1),
                                         ("k", True)])
def test_bad_settings_are_rejected(retriever: ConceptGraphRetriever, field: str,
                                   value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        ConceptGraphRetriever(index=retriever.index, **{field: value})


def test_bad_call_arguments_are_rejected(retriever: ConceptGraphRetriever) -> None:
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        retriever.invoke(QUERY, k=0)
    with pytest.raises(ValueError, match="budget must be an int >= 1"):
        retriever.invoke(QUERY, budget=-5)
    with pytest.raises(TypeError):
        retriever.invoke(QUERY, top_n=3)
    with pytest.raises(ValueError, match="empty"):
        retriever.invoke("   ")


def test_bad_documents_are_rejected(embeddings: CoreEmbeddings) -> None:
    with pytest.raises(TypeError, match="sequence of Document"):
        ConceptGraphRetriever.from_documents("just a string", embeddings)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"documents\[1\] must be a Document"):
        ConceptGraphRetriever.from_documents(
            [Document(page_content="fine"), "not a doc"], embeddings)  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"documents\[0\] is empty or whitespace"):
        ConceptGraphRetriever.from_documents([Document(page_content=" ")], embeddings)
    with pytest.raises(ValueError, match=r"documents\[0\] and documents\[1\] share id 'x' "
                                         "but differ in text"):
        ConceptGraphRetriever.from_documents(
            [Document(page_content="one", id="x"), Document(page_content="two", id="x")],
            embeddings)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        ConceptGraphRetriever.from_documents(
            [Document(page_content="one", metadata={"bad": object()})], embeddings)
    with pytest.raises(TypeError, match="LangChain Embeddings"):
        ConceptGraphRetriever.from_documents([Document(page_content="one")],
                                             HashingEmbedder())  # type: ignore[arg-type]


class AsymmetricEmbeddings(Embeddings):
    """Passages by their own text; a query by a stand-in sentence, like an E5-style prefix."""

    def __init__(self) -> None:
        self.core = HashingEmbedder()
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.core.embed(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self.core.embed(["Marie Curie won the Nobel Prize"])[0].tolist()  # type: ignore[no-any-return]


def test_queries_go_through_embed_query(documents: list[Document]) -> None:
    embeddings = AsymmetricEmbeddings()
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings)
    # "Q" has no terms (too short for the analyzer), so only its vector can find Curie,
    # and only embed_query maps it onto the Curie sentence
    assert retriever.invoke("Q")[0].id == "curie"
    assert embeddings.queries == ["Q"]
