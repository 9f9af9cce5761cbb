"""A LangChain ``VectorStore`` as the concept graph's vector store (Chroma, PGVector, ...)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from shared_core.search.external import (
    KEY_FIELD,
    UUID_ID_STORES,
    FrameworkStore,
    VectorStoreBackend,
    as_backend,
    qdrant_keys,
)

from .embeddings import CoreEmbeddings

# cosine below which a store's own embedding of a text is another model's
SAME_MODEL_COSINE = 0.99

logger = logging.getLogger("conceptgraph")


class LangChainVectorStore(FrameworkStore):
    """Any LangChain ``VectorStore`` as a ``VectorStoreBackend`` of a concept graph index.

    Rows are documents whose id is the row's key, whose text is its sentence (or
    unit) and whose metadata is its chunk's id, its part and the chunk's scalar
    metadata. The store's embeddings must be the index's model (checked on the
    first write, by embedding one text: ``ValueError`` otherwise).

    LangChain has no common way to hand a store vectors, so rows are written with
    the index's own vectors where the store has a known way to take them:
    ``InMemoryVectorStore``; Chroma; ``QdrantVectorStore`` in its dense and hybrid
    modes, the hybrid mode's sparse vectors made by the store's own sparse
    embeddings; and any store with an ``add_embeddings(text_embeddings, metadatas,
    ids)`` or ``add_embeddings(texts, embeddings, metadatas, ids)``, such as FAISS,
    PGVector, Elasticsearch and OpenSearch. Any other store embeds each row again
    with its own embeddings, with a warning on the ``conceptgraph`` logger: give it
    ``CoreEmbeddings`` over the index's (cached) embedder and nothing is embedded
    twice. ``takes_vectors`` says which case a store is.

    Give the store a collection of its own: the index deletes any row of its key
    form it does not hold. The store must list its ids: ``InMemoryVectorStore``,
    Chroma, FAISS and Qdrant (``langchain-qdrant``) do; for another, pass
    ``list_ids``.

    Stores whose ids must be UUIDs (Qdrant; ``uuid_ids``, on by default for it)
    hold each row under a UUID made from its key, with the key in the metadata
    field ``conceptgraph_key``; their ``list_ids`` returns those keys.

    Setup:
        ```bash
        pip install conceptgraph langchain-chroma   # or any LangChain vector store
        ```

    Instantiate:
        ```python
        from langchain_core.vectorstores import InMemoryVectorStore
        from shared_core import HashingEmbedder
        from langchain_conceptgraph import CoreEmbeddings, LangChainVectorStore

        embeddings = CoreEmbeddings(HashingEmbedder())
        store = LangChainVectorStore(InMemoryVectorStore(embedding=embeddings))
        ```

    Build a retriever on it:
        ```python
        from langchain_core.documents import Document
        from langchain_conceptgraph import ConceptGraphRetriever

        retriever = ConceptGraphRetriever.from_documents(
            [Document("Ada Lovelace wrote the first program.", id="ada"),
             Document("Charles Babbage designed the engine.", id="babbage")], embeddings,
            vector_store=store)
        ```

    Invoke (the store proposes the candidates, the index ranks them):
        ```python
        docs = retriever.invoke("Who wrote the first program?")
        assert docs[0].id == "ada"
        assert {k.split("#")[0] for k in store.list_keys()} == {"ada", "babbage"}
        ```
    """

    def __init__(self, store: VectorStore,
                 list_ids: Callable[[VectorStore], Iterable[str]] | None = None,
                 uuid_ids: bool | None = None) -> None:
        if not isinstance(store, VectorStore):
            raise TypeError(f"store must be a LangChain VectorStore, got {type(store).__name__}")
        super().__init__(store, list_ids or _known_listing(store), uuid_ids)
        self._model_checked = False
        self._write_vectors = vector_writer(store)
        # a store without embeddings is refused with its first write (``_check_model``)
        if self._write_vectors is None and not isinstance(store.embeddings,
                                                          (CoreEmbeddings, type(None))):
            logger.warning(
                "%s has no known way to take the index's vectors, so its own embeddings "
                "(%s) embed every row again: a second bill with a paid API. Give the store "
                "CoreEmbeddings over the index's embedder, whose cache answers instead",
                type(store).__name__, type(store.embeddings).__name__)

    @property
    def takes_vectors(self) -> bool:
        """Whether rows are written with the index's vectors (else the store embeds them)."""
        return self._write_vectors is not None

    def upsert(self, keys: Sequence[str], vectors: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[Mapping[str, Any]]) -> None:
        if not len(keys):
            return
        metas = self.row_metadatas(keys, metadatas)
        if not self._model_checked:
            self._check_model(texts[0], np.asarray(vectors[0], dtype=np.float32))
        ids = self.row_ids(keys)
        if self._write_vectors is not None:
            self._write_vectors(ids, np.asarray(vectors, dtype=np.float32), list(texts), metas)
            return
        self.store.add_documents([Document(id=i, page_content=t, metadata=m)
                                  for i, t, m in zip(ids, texts, metas, strict=True)], ids=ids)

    def _check_model(self, text: str, vector: np.ndarray) -> None:
        embeddings = self.store.embeddings
        if embeddings is None:
            raise ValueError(f"{type(self.store).__name__} has no dense embeddings, and the "
                             "index finds rows by dense vectors: give the store the index's "
                             "embeddings (a Qdrant store in its dense or hybrid mode)")
        own = np.asarray(embeddings.embed_documents([text])[0], dtype=np.float32)
        if own.shape != vector.shape:
            raise ValueError(f"the store embeds with {own.shape[0]} dimensions, the index with "
                             f"{vector.shape[0]}: give the store the index's embeddings")
        cosine = float(own @ vector / (np.linalg.norm(own) * np.linalg.norm(vector) or 1.0))
        if cosine < SAME_MODEL_COSINE:
            raise ValueError(f"the store embeds a text at cosine {cosine:.3f} to the index's "
                             "vector of it: it uses another model; give the store the "
                             "index's embeddings")
        self._model_checked = True

    def delete(self, keys: Sequence[str]) -> None:
        if len(keys):
            self.store.delete(ids=self.row_ids(keys))

    def search(self, query: np.ndarray, k: int) -> list[str]:
        if k <= 0:
            return []
        found = self.store.similarity_search_by_vector(np.asarray(query).tolist(), k=k)
        return [self.key_of(doc.id, doc.metadata) for doc in found]


# writes rows with given vectors: (ids, float32 rows, texts, metadatas)
VectorWriter = Callable[[list[str], np.ndarray, list[str], list[dict[str, Any]]], None]


def vector_writer(store: VectorStore) -> VectorWriter | None:
    """How to write rows into ``store`` with vectors already made, where it has a way to
    take them; None where only its own embeddings can make them (``add_documents``)."""
    if isinstance(store, InMemoryVectorStore):
        def in_memory(ids: list[str], vectors: np.ndarray, texts: list[str],
                      metas: list[dict[str, Any]]) -> None:
            # the entries its own add_documents writes, with the vectors given
            for i, vector, text, meta in zip(ids, vectors.tolist(), texts, metas, strict=True):
                store.store[i] = {"id": i, "vector": vector, "text": text, "metadata": meta}

        return in_memory
    # the class's attribute: reading the store's runs its property, which raises
    # ValueError (not AttributeError) while its collection is not initialised
    if type(store).__name__ == "Chroma" and hasattr(type(store), "_collection"):
        def chroma(ids: list[str], vectors: np.ndarray, texts: list[str],
                   metas: list[dict[str, Any]]) -> None:
            # what its add_texts sends the collection once it has embedded the texts
            collection = store._collection  # type: ignore[attr-defined]
            collection.upsert(ids=ids, embeddings=vectors, documents=texts, metadatas=metas)

        return chroma
    mode = getattr(getattr(store, "retrieval_mode", None), "value", None)
    if type(store).__name__ == "QdrantVectorStore" and mode in ("dense", "hybrid"):
        def qdrant(ids: list[str], vectors: np.ndarray, texts: list[str],
                   metas: list[dict[str, Any]]) -> None:
            # the points its add_texts builds once it has embedded the texts; in hybrid
            # mode each also takes the store's own sparse vector of its text
            from qdrant_client.models import PointStruct, SparseVector

            rows: list[dict[str, Any]] = [{store.vector_name: v}  # type: ignore[attr-defined]
                                          for v in vectors.tolist()]
            if mode == "hybrid":
                sparse = store.sparse_embeddings.embed_documents(texts)  # type: ignore[attr-defined]
                if len(sparse) != len(texts):
                    raise ValueError(f"the store's sparse embeddings returned {len(sparse)} "
                                     f"vectors for {len(texts)} texts")
                for row, vector in zip(rows, sparse, strict=True):
                    row[store.sparse_vector_name] = SparseVector(  # type: ignore[attr-defined]
                        indices=vector.indices, values=vector.values)
            text_key = store.content_payload_key  # type: ignore[attr-defined]
            meta_key = store.metadata_payload_key  # type: ignore[attr-defined]
            store.client.upsert(store.collection_name, points=[  # type: ignore[attr-defined]
                PointStruct(id=i, vector=row, payload={text_key: text, meta_key: meta})
                for i, row, text, meta in zip(ids, rows, texts, metas, strict=True)])

        return qdrant
    add_embeddings = getattr(store, "add_embeddings", None)
    if not callable(add_embeddings):
        return None
    try:
        names = set(inspect.signature(add_embeddings).parameters)
    except (TypeError, ValueError):  # a signature Python cannot read
        return None
    if {"text_embeddings", "metadatas", "ids"} <= names:  # FAISS, Elasticsearch, OpenSearch
        def pairs(ids: list[str], vectors: np.ndarray, texts: list[str],
                  metas: list[dict[str, Any]]) -> None:
            add_embeddings(text_embeddings=list(zip(texts, vectors.tolist(), strict=True)),
                           metadatas=metas, ids=ids)

        return pairs
    if {"texts", "embeddings", "metadatas", "ids"} <= names:  # PGVector and others
        def columns(ids: list[str], vectors: np.ndarray, texts: list[str],
                    metas: list[dict[str, Any]]) -> None:
            add_embeddings(texts=texts, embeddings=vectors.tolist(), metadatas=metas, ids=ids)

        return columns
    return None


def _known_listing(store: VectorStore) -> Callable[[VectorStore], Iterable[str]]:
    """How to list the ids of the stores that can be listed without a query."""
    if isinstance(store, InMemoryVectorStore):
        return lambda s: list(s.store)  # type: ignore[attr-defined]
    if type(store).__name__ == "FAISS" and hasattr(store, "index_to_docstore_id"):
        return lambda s: list(s.index_to_docstore_id.values())  # type: ignore[attr-defined]
    if type(store).__name__ == "Chroma" and hasattr(store, "get"):
        return lambda s: s.get(include=[])["ids"]  # type: ignore[attr-defined]
    if type(store).__name__ in UUID_ID_STORES and hasattr(store, "client"):
        return lambda s: qdrant_keys(s.client, s.collection_name,  # type: ignore[attr-defined]
                                     (getattr(s, "metadata_payload_key", "metadata"), KEY_FIELD))
    raise TypeError(f"cannot list the ids a {type(store).__name__} holds, which the index "
                    "needs to repair the store after a crash: pass list_ids=a function "
                    "returning every id in the store")


def to_backend(store: object) -> VectorStoreBackend:
    """A LangChain vector store wrapped as a backend, or a ``VectorStoreBackend`` as given."""
    return as_backend(store, VectorStore, LangChainVectorStore, "a LangChain VectorStore")
