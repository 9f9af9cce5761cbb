"""A LangChain vector store as the index's vector store: InMemoryVectorStore, Chroma and
Qdrant (its embedded local mode; Qdrant takes only UUIDs as ids)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.embeddings.fake import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_qdrant import QdrantVectorStore, RetrievalMode, SparseEmbeddings, SparseVector
from qdrant_client import QdrantClient
from qdrant_client.models import Distance, PointStruct, SparseVectorParams, VectorParams

from langchain_conceptgraph import ConceptGraphRetriever, CoreEmbeddings, LangChainVectorStore
from shared_core import ConceptGraphConfig, HashingEmbedder
from shared_core.search.external import KEY_FIELD, chunk_digest, key_uuid, parse_key, row_key
from shared_core.store import index_folder
from tests.shared_core.search.test_external import reopened

from .conftest import CORPUS

QUERIES = ["Who wrote the first computer program?", "Where is CERN?", "first compiler"]
# two candidates per query: which rows the store proposes decides the ranking
CONFIG = ConceptGraphConfig(candidates=2, theta_co=1, theta_sem=0.0)


def answers(retriever: ConceptGraphRetriever) -> list[list[tuple[str, float]]]:
    return [[(d.id or "", round(d.metadata["score"], 9)) for d in retriever.invoke(q)]
            for q in QUERIES]


def in_process(documents: list[Document], embeddings: CoreEmbeddings) -> ConceptGraphRetriever:
    config = ConceptGraphConfig(**{**CONFIG.to_dict(), "vector_index": "hnsw"})
    return ConceptGraphRetriever.from_documents(documents, embeddings, config=config)


def chunk_ids(store: LangChainVectorStore) -> set[str]:
    return {parse_key(k)[0] for k in store.list_keys()}  # type: ignore[index]


def chroma(tmp_path: Path, embeddings: CoreEmbeddings) -> Chroma:
    client = chromadb.PersistentClient(
        str(tmp_path / "chroma"), settings=chromadb.Settings(anonymized_telemetry=False))
    return Chroma("conceptgraph", embedding_function=embeddings, client=client)


def qdrant(embeddings: CoreEmbeddings, client: QdrantClient | None = None) -> QdrantVectorStore:
    client = client or QdrantClient(":memory:")
    client.create_collection("conceptgraph", vectors_config=VectorParams(
        size=len(embeddings.embed_query("size")), distance=Distance.COSINE))
    return QdrantVectorStore(client=client, collection_name="conceptgraph", embedding=embeddings)


class WordSparseEmbeddings(SparseEmbeddings):
    """Sparse vectors as a hybrid Qdrant store makes them: here one unit weight per
    distinct lower-cased word, at the word's CRC32. Counts the documents it embeds."""

    def __init__(self) -> None:
        self.documents = 0

    def embed_documents(self, texts: list[str]) -> list[SparseVector]:
        self.documents += len(texts)
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> SparseVector:
        import zlib

        indices = sorted({zlib.crc32(w.encode()) for w in text.lower().split()})
        return SparseVector(indices=indices, values=[1.0] * len(indices))


def qdrant_hybrid(embeddings: Embeddings, sparse: SparseEmbeddings) -> QdrantVectorStore:
    client = QdrantClient(":memory:")
    client.create_collection(
        "conceptgraph", vectors_config={"dense": VectorParams(
            size=len(embeddings.embed_query("size")), distance=Distance.COSINE)},
        sparse_vectors_config={"langchain-sparse": SparseVectorParams()})
    return QdrantVectorStore(client=client, collection_name="conceptgraph",
                             embedding=embeddings, retrieval_mode=RetrievalMode.HYBRID,
                             vector_name="dense", sparse_embedding=sparse)


def open_store(kind: str, tmp_path: Path, embeddings: CoreEmbeddings) -> VectorStore:
    if kind == "memory":
        return InMemoryVectorStore(embedding=embeddings)
    return chroma(tmp_path, embeddings) if kind == "chroma" else qdrant(embeddings)


@pytest.mark.parametrize("kind", ["memory", "chroma", "qdrant"])
def test_a_langchain_store_retrieves_what_the_in_process_index_retrieves(
        tmp_path: Path, documents: list[Document], embeddings: CoreEmbeddings,
        kind: str) -> None:
    raw = open_store(kind, tmp_path, embeddings)
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings, config=CONFIG,
                                                     vector_store=raw)
    assert retriever.index.stats()["vector_index"] == "store:LangChainVectorStore"
    assert answers(retriever) == answers(in_process(documents, embeddings))
    # each one-sentence chunk is one document in the store, keyed and tagged with its chunk;
    # Qdrant holds it under the key's UUID, the key in its metadata
    corpus = retriever.index.state.corpus  # the chunk's metadata is part of its keys
    key = row_key("ada", chunk_digest(CORPUS["ada"], corpus.metadata[corpus.position["ada"]]),
                  "s", 0)
    held = raw.get_by_ids([key_uuid(key) if kind == "qdrant" else key])
    assert [(d.page_content, d.metadata["chunk_id"], d.metadata["title"]) for d in held] == [
        (CORPUS["ada"], "ada", "ada")]
    assert held[0].metadata.get(KEY_FIELD) == (key if kind == "qdrant" else None)


@pytest.mark.parametrize("kind", ["memory", "qdrant"])
def test_deletes_and_adds_reach_the_store_and_a_load_repairs_it(
        tmp_path: Path, documents: list[Document], embeddings: CoreEmbeddings,
        kind: str) -> None:
    store = LangChainVectorStore(open_store(kind, tmp_path, embeddings))
    assert store.uuid_ids == (kind == "qdrant")
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings, config=CONFIG,
                                                     vector_store=store)
    assert chunk_ids(store) == set(CORPUS)
    retriever.save(tmp_path / "idx")
    retriever.delete(["web", "cern"])
    retriever.add_documents([Document("Linus Torvalds wrote Linux.", id="linux")])
    assert chunk_ids(store) == set(CORPUS) - {"web", "cern"} | {"linux"}
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embeddings,
                                                    vector_store=store)
    repair = loaded.index.vector_store_repair
    assert repair is not None and (repair.written, repair.deleted) == (2, 1)
    assert chunk_ids(store) == set(CORPUS)
    assert answers(loaded) == answers(in_process(documents, embeddings))


class CountingEmbeddings(Embeddings):
    """LangChain embeddings over the index's model that count the documents they embed."""

    def __init__(self, model: Embeddings) -> None:
        self.model = model
        self.documents = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += len(texts)
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.model.embed_query(text)


def faiss_store(embeddings: Embeddings) -> VectorStore:
    import faiss
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS

    return FAISS(embedding_function=embeddings, docstore=InMemoryDocstore(),
                 index=faiss.IndexFlatL2(len(embeddings.embed_query("size"))),
                 index_to_docstore_id={})


class TextOnlyStore(VectorStore):
    """A LangChain store with no write of given vectors: it embeds what it is given."""

    def __init__(self, embedding: Embeddings) -> None:
        self.embedding = embedding
        self.rows: dict[str, tuple[Document, np.ndarray]] = {}

    @property
    def embeddings(self) -> Embeddings:
        return self.embedding

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        texts = list(texts)
        assert ids is not None and metadatas is not None
        vectors = self.embedding.embed_documents(texts)
        for i, text, meta, vector in zip(ids, texts, metadatas, vectors, strict=True):
            self.rows[i] = (Document(text, id=i, metadata=meta), np.asarray(vector))
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> None:
        for i in ids or []:
            self.rows.pop(i, None)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4,
                                    **kwargs: Any) -> list[Document]:
        held = list(self.rows.values())
        scores = [float(vector @ np.asarray(embedding)) for _, vector in held]
        return [held[i][0] for i in np.argsort(scores, kind="stable")[::-1][:k]]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return self.similarity_search_by_vector(self.embedding.embed_query(query), k)

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings,
                   metadatas: list[dict] | None = None, **kwargs: Any) -> TextOnlyStore:
        return cls(embedding)


@pytest.mark.filterwarnings("ignore:`langchain-community` is being sunset")
@pytest.mark.parametrize("kind", ["memory", "chroma", "faiss", "qdrant", "qdrant-hybrid",
                                  "text-only"])
def test_rows_are_written_with_the_index_s_vectors_where_the_store_takes_them(
        tmp_path: Path, documents: list[Document], embeddings: CoreEmbeddings,
        kind: str) -> None:
    # the store's embeddings embed one text to check the model; where the store takes
    # vectors (memory, Chroma, Qdrant, add_embeddings: FAISS) nothing else, else every row
    counting = CountingEmbeddings(embeddings)
    sparse = WordSparseEmbeddings()
    raw = (faiss_store(counting) if kind == "faiss" else TextOnlyStore(counting)
           if kind == "text-only" else qdrant_hybrid(counting, sparse)
           if kind == "qdrant-hybrid" else open_store(kind, tmp_path, counting))  # type: ignore[arg-type]
    store = LangChainVectorStore(raw, list_ids=(lambda s: list(s.rows))  # type: ignore[attr-defined]
                                 if kind == "text-only" else None)
    counting.documents = 0  # Qdrant's own check of its collection embeds a text
    assert store.takes_vectors is (kind != "text-only")
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings, config=CONFIG,
                                                     vector_store=store)
    rows = len(store.list_keys())
    assert rows == len(retriever.index.state.corpus.sentence_spans) == len(CORPUS)
    assert counting.documents == (1 if store.takes_vectors else 1 + rows)
    assert answers(retriever) == answers(in_process(documents, embeddings))
    retriever.delete(["web"])
    retriever.add_documents([Document("Linus Torvalds wrote Linux.", id="linux")])
    assert chunk_ids(store) == set(CORPUS) - {"web"} | {"linux"}
    assert counting.documents == (1 if store.takes_vectors else 2 + rows)
    # the row holds the index's vector of its text, as the store would have made it
    key = next(k for k in store.list_keys() if k.startswith("linux#"))
    found = raw.similarity_search_by_vector(embeddings.embed_query("Linus Torvalds wrote "
                                                                   "Linux."), k=1)
    assert [store.key_of(d.id, d.metadata) for d in found] == [key]
    if kind == "qdrant-hybrid":  # and the store's own sparse vector of it, made once a row
        assert sparse.documents == rows + 1
        point = raw.client.retrieve("conceptgraph", [key_uuid(key)], with_vectors=True)[0]
        held = point.vector["langchain-sparse"]  # type: ignore[index]
        made = sparse.embed_query("Linus Torvalds wrote Linux.")
        assert (held.indices, held.values) == (made.indices, made.values)
        hybrid = raw.similarity_search("Linus Torvalds wrote Linux.", k=1)  # both vectors
        assert [store.key_of(d.id, d.metadata) for d in hybrid] == [key]
    else:
        assert sparse.documents == 0


def test_a_store_that_will_embed_every_row_again_says_so(
        embeddings: CoreEmbeddings, caplog: pytest.LogCaptureFixture) -> None:
    """Only a store with no known way to take vectors, whose embeddings are not the
    index's cached ones, embeds each row a second time: that one is warned about."""
    with caplog.at_level("WARNING", logger="conceptgraph"):
        LangChainVectorStore(TextOnlyStore(embeddings), list_ids=lambda s: [])
        LangChainVectorStore(InMemoryVectorStore(embedding=CountingEmbeddings(embeddings)))
        # none to embed with: its first write refuses it (below), so no warning first
        LangChainVectorStore(TextOnlyStore(None), list_ids=lambda s: [])  # type: ignore[arg-type]
        assert caplog.records == []
        LangChainVectorStore(TextOnlyStore(CountingEmbeddings(embeddings)),
                             list_ids=lambda s: [])
    assert [r.getMessage() for r in caplog.records] == [
        "TextOnlyStore has no known way to take the index's vectors, so its own embeddings "
        "(CountingEmbeddings) embed every row again: a second bill with a paid API. Give "
        "the store CoreEmbeddings over the index's embedder, whose cache answers instead"]


def test_a_store_with_no_dense_embeddings_is_refused(documents: list[Document],
                                                     embeddings: CoreEmbeddings) -> None:
    """Qdrant's sparse mode holds no dense vectors for the index to search: refused on
    the first write, before any row is written."""
    client = QdrantClient(":memory:")
    client.create_collection("conceptgraph", vectors_config={},
                             sparse_vectors_config={"langchain-sparse": SparseVectorParams()})
    raw = QdrantVectorStore(client=client, collection_name="conceptgraph",
                            retrieval_mode=RetrievalMode.SPARSE,
                            sparse_embedding=WordSparseEmbeddings())
    with pytest.raises(ValueError, match=r"QdrantVectorStore has no dense embeddings, and the "
                                         r"index finds rows by dense vectors"):
        ConceptGraphRetriever.from_documents(documents, embeddings, vector_store=raw)
    assert client.count("conceptgraph").count == 0


def test_a_qdrant_collection_holding_other_points_is_refused(
        documents: list[Document], embeddings: CoreEmbeddings) -> None:
    raw = qdrant(embeddings)
    other = key_uuid("someone else's")
    raw.client.upsert("conceptgraph", [PointStruct(
        id=other, vector=embeddings.embed_query("x"), payload={"metadata": {"a": 1}})])
    with pytest.raises(ValueError, match=rf"holds 1 ids that are not a conceptgraph index's "
                                         rf"\(e.g. '{other}'\)"):
        ConceptGraphRetriever.from_documents(documents, embeddings, vector_store=raw)
    assert raw.client.count("conceptgraph").count == 1  # left untouched


def test_a_store_embedding_with_another_model_is_refused(
        documents: list[Document], embeddings: CoreEmbeddings) -> None:
    other = InMemoryVectorStore(embedding=DeterministicFakeEmbedding(size=HashingEmbedder().dim))
    with pytest.raises(ValueError, match=r"at cosine .* another model; give the store the "
                                         r"index's embeddings"):
        ConceptGraphRetriever.from_documents(documents, embeddings, vector_store=other)
    smaller = InMemoryVectorStore(embedding=DeterministicFakeEmbedding(size=8))
    with pytest.raises(ValueError, match=r"the store embeds with 8 dimensions, the index "
                                         "with 256"):
        ConceptGraphRetriever.from_documents(documents, embeddings, vector_store=smaller)
    assert list(other.store) == [] and list(smaller.store) == []


class AppendOnlyStore(VectorStore):
    """A store with LangChain's minimal surface (add and search, no listing), like many
    remote ones."""

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None,
                  **kwargs: Any) -> list[str]:
        raise AssertionError("never reached: the store is refused first")

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return []

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings,
                   metadatas: list[dict] | None = None, **kwargs: Any) -> AppendOnlyStore:
        return cls()


def test_a_store_that_cannot_list_its_ids_needs_list_ids(embeddings: CoreEmbeddings) -> None:
    with pytest.raises(TypeError, match=r"cannot list the ids a AppendOnlyStore holds.*"
                                        "pass list_ids="):
        LangChainVectorStore(AppendOnlyStore())
    listed = LangChainVectorStore(AppendOnlyStore(), list_ids=lambda store: ["a#0"])
    assert list(listed.list_keys()) == ["a#0"]


def test_vector_store_must_be_a_store(documents: list[Document],
                                      embeddings: CoreEmbeddings) -> None:
    with pytest.raises(TypeError, match=r"must be a LangChain VectorStore or a conceptgraph "
                                        "VectorStoreBackend, got int"):
        ConceptGraphRetriever.from_documents(documents, embeddings, vector_store=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a LangChain VectorStore, got dict"):
        LangChainVectorStore({})  # type: ignore[arg-type]


@pytest.mark.allow_hosts(["127.0.0.1"])
@pytest.mark.parametrize("engine", ["milvus", "qdrant"])
def test_an_engine_store_with_term_postings_plugs_into_the_retriever(
        tmp_path: Path, documents: list[Document], embeddings: CoreEmbeddings,
        engine: str) -> None:
    """The core's engine backends as a LangChain user passes them: the views' units found
    in the engine (one request for both term queries), the same answers as in process.
    Qdrant's goes through the client of the user's own ``QdrantVectorStore``, in a
    collection of its own beside the user's."""
    from shared_core import MilvusVectorStore, QdrantStore

    store: MilvusVectorStore | QdrantStore
    if engine == "milvus":
        store = MilvusVectorStore(str(tmp_path / "vectors.db"), "cg", index_type="FLAT",
                                  term_postings=True)
    else:
        theirs = qdrant(embeddings)
        theirs.add_texts(["A document of the user's own."])
        store = QdrantStore(theirs.client, "cg", term_postings=True)
    retriever = ConceptGraphRetriever.from_documents(documents, embeddings, config=CONFIG,
                                                     vector_store=store)
    assert retriever.index.stats()["vector_index"] == f"store:{type(store).__name__}+terms"
    assert answers(retriever) == answers(in_process(documents, embeddings))
    if engine == "qdrant":  # the user's collection is left as it was
        assert theirs.client.count("conceptgraph").count == 1
    # a read-only replica of the saved index, reading its vectors from the engine
    retriever.save(tmp_path / "idx")
    replica = ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embeddings,
                                                     vector_store=store, vectors_in_store=True)
    assert replica.index.is_replica and answers(replica) == answers(retriever)
    # one whose engine scores the rows a query needs, instead of returning them
    scored = ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embeddings,
                                                    vector_store=store, vectors_in_store=True,
                                                    scores_in_store=True)
    assert [[i for i, _ in q] for q in answers(scored)] == [[i for i, _ in q]
                                                            for q in answers(retriever)]
    # the writer that holds no vector: a delete reads its rows from the engine, and the
    # save holds no vector file
    writer = ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embeddings,
                                                    vector_store=store, vectors_in_store=True,
                                                    writer=True)
    assert writer.index.vectors_in_store and not writer.index.is_replica

    held = ConceptGraphRetriever.from_documents(documents, embeddings, config=CONFIG,
                                                vector_store=reopened(store, "held", terms=True))
    gone = writer.index.chunk_ids[0]
    writer.delete([gone])
    held.delete([gone])
    assert answers(writer) == answers(held)
    writer.save(tmp_path / "idx")
    assert not (index_folder(tmp_path / "idx") / "sentence_embeddings.npy").exists()
    # and one built that way from the start, in a collection of its own
    built = ConceptGraphRetriever.from_documents(documents, embeddings, config=CONFIG,
                                                 vector_store=reopened(store, "built", terms=True),
                                                 vectors_in_store=True)
    assert built.index.vectors_in_store
    assert answers(built) == answers(in_process(documents, embeddings))
    store.close()
