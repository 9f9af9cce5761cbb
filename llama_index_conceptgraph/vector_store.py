"""A LlamaIndex vector store as the concept graph's vector store (Qdrant, Chroma, pgvector, ...)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery

from shared_core.search.external import (
    KEY_FIELD,
    FrameworkStore,
    VectorStoreBackend,
    as_backend,
    qdrant_keys,
)


class LlamaIndexVectorStore(FrameworkStore):
    """Any LlamaIndex ``BasePydanticVectorStore`` as a ``VectorStoreBackend`` of an index.

    Rows are ``TextNode``s carrying the index's own vectors (nothing is embedded
    again): the node id is the row's key, the text its sentence (or unit), the
    metadata its chunk's id, its part and the chunk's scalar metadata. The store
    must take any string as a node id, delete nodes by id (``delete_nodes``), and
    list them: ``SimpleVectorStore``, ``ChromaVectorStore`` and stores implementing
    ``get_nodes()`` without arguments do;
    for another, pass ``list_ids``. Give the index a store (collection) of its own:
    it deletes any row of its key form that it does not hold.

    Stores whose ids must be UUIDs (Qdrant; ``uuid_ids``, on by default for it)
    hold each row under a UUID made from its key, with the key in the metadata
    field ``conceptgraph_key``; they are listed through ``get_nodes()``, and a
    ``list_ids`` for such a store returns those keys.

    >>> from llama_index.core.vector_stores import SimpleVectorStore
    >>> from llama_index_conceptgraph import LlamaIndexVectorStore
    >>> store = LlamaIndexVectorStore(SimpleVectorStore())
    """

    def __init__(self, store: BasePydanticVectorStore,
                 list_ids: Callable[[BasePydanticVectorStore], Iterable[str]] | None = None,
                 uuid_ids: bool | None = None) -> None:
        if not isinstance(store, BasePydanticVectorStore):
            raise TypeError("store must be a LlamaIndex BasePydanticVectorStore, got "
                            f"{type(store).__name__}")
        self._collection_seen = False
        super().__init__(store, list_ids or self._listed, uuid_ids)

    def upsert(self, keys: Sequence[str], vectors: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[Mapping[str, Any]]) -> None:
        if not len(keys):
            return
        ids = self.row_ids(keys)
        if not self._without_collection():
            self.store.delete_nodes(node_ids=ids)  # add() appends in many stores
        self.store.add([TextNode(id_=i, text=t, embedding=v, metadata=m)
                        for i, t, v, m in zip(ids, texts, np.asarray(vectors).tolist(),
                                              self.row_metadatas(keys, metadatas), strict=True)])

    def delete(self, keys: Sequence[str]) -> None:
        if len(keys) and not self._without_collection():
            self.store.delete_nodes(node_ids=self.row_ids(keys))

    def search(self, query: np.ndarray, k: int) -> list[str]:
        if k <= 0:
            return []
        found = self.store.query(VectorStoreQuery(query_embedding=np.asarray(query).tolist(),
                                                  similarity_top_k=k))
        if found.ids is not None and not self.uuid_ids:
            return list(found.ids)
        if found.nodes is not None:
            return [self.key_of(node.node_id, node.metadata) for node in found.nodes]
        raise ValueError(f"{type(self.store).__name__} answered a query without its nodes, so "
                         "they cannot be matched to the index's rows")

    def _without_collection(self) -> bool:
        """Whether the store is a Qdrant store before its first add, which creates its
        collection: it holds nothing, and Qdrant refuses to list or delete in it. Asked
        of the server until the collection is seen, never after."""
        if self._collection_seen or type(self.store).__name__ != "QdrantVectorStore":
            return False
        self._collection_seen = bool(self.store.client.collection_exists(
            self.store.collection_name))
        return not self._collection_seen

    def _listed(self, store: BasePydanticVectorStore) -> list[str]:
        """Every row's id (its key), or with UUID ids every row's key from its metadata
        (a node without one gives its id, which the index then refuses as not its own)."""
        if self._without_collection():
            return []
        name = type(store).__name__
        if name == "QdrantVectorStore":  # its metadata sits at the payload's top
            return qdrant_keys(store.client, store.collection_name,  # type: ignore[attr-defined]
                               (KEY_FIELD,))
        if not self.uuid_ids and isinstance(store, SimpleVectorStore):
            return list(store.data.embedding_dict)
        if not self.uuid_ids and name == "ChromaVectorStore":  # its get_nodes needs ids
            return list(store.client.get(include=[])["ids"])
        try:
            nodes = store.get_nodes()
        except (NotImplementedError, TypeError) as exc:
            raise TypeError(f"{name} cannot list the nodes it holds, which the index needs to "
                            "repair the store after a crash: pass list_ids=a function "
                            "returning every node id in the store (with UUID ids, every "
                            f"row's key: metadata field {KEY_FIELD!r})") from exc
        if not self.uuid_ids:
            return [node.node_id for node in nodes]
        return [str(node.metadata.get(KEY_FIELD, node.node_id)) for node in nodes]


def to_backend(store: object) -> VectorStoreBackend:
    """A LlamaIndex vector store wrapped as a backend, or a ``VectorStoreBackend`` as given."""
    return as_backend(store, BasePydanticVectorStore, LlamaIndexVectorStore,
                      "a LlamaIndex BasePydanticVectorStore")
