"""A LlamaIndex vector store as the concept graph's vector store (Qdrant, Chroma, pgvector, ...)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery

from shared_core.search.external import FrameworkStore, VectorStoreBackend, as_backend


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

    >>> from llama_index.core.vector_stores import SimpleVectorStore
    >>> from llama_index_conceptgraph import LlamaIndexVectorStore
    >>> store = LlamaIndexVectorStore(SimpleVectorStore())
    """

    def __init__(self, store: BasePydanticVectorStore,
                 list_ids: Callable[[BasePydanticVectorStore], Iterable[str]] | None = None
                 ) -> None:
        if not isinstance(store, BasePydanticVectorStore):
            raise TypeError("store must be a LlamaIndex BasePydanticVectorStore, got "
                            f"{type(store).__name__}")
        super().__init__(store, list_ids or _listed_ids)

    def upsert(self, keys: Sequence[str], vectors: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[Mapping[str, Any]]) -> None:
        if not len(keys):
            return
        self.store.delete_nodes(node_ids=list(keys))  # add() appends in many stores
        self.store.add([TextNode(id_=k, text=t, embedding=v, metadata=dict(m))
                        for k, t, v, m in zip(keys, texts, np.asarray(vectors).tolist(),
                                              metadatas, strict=True)])

    def delete(self, keys: Sequence[str]) -> None:
        if len(keys):
            self.store.delete_nodes(node_ids=list(keys))

    def search(self, query: np.ndarray, k: int) -> list[str]:
        if k <= 0:
            return []
        found = self.store.query(VectorStoreQuery(query_embedding=np.asarray(query).tolist(),
                                                  similarity_top_k=k))
        if found.ids is not None:
            return list(found.ids)
        return [node.node_id for node in found.nodes or []]


def _listed_ids(store: BasePydanticVectorStore) -> list[str]:
    if isinstance(store, SimpleVectorStore):
        return list(store.data.embedding_dict)
    if type(store).__name__ == "ChromaVectorStore":  # its get_nodes needs the ids asked for
        return list(store.client.get(include=[])["ids"])
    try:
        return [node.node_id for node in store.get_nodes()]
    except (NotImplementedError, TypeError) as exc:
        raise TypeError(f"{type(store).__name__} cannot list the nodes it holds, which the "
                        "index needs to repair the store after a crash: pass list_ids=a "
                        "function returning every node id in the store") from exc




def to_backend(store: object) -> VectorStoreBackend:
    """A LlamaIndex vector store wrapped as a backend, or a ``VectorStoreBackend`` as given."""
    return as_backend(store, BasePydanticVectorStore, LlamaIndexVectorStore,
                      "a LlamaIndex BasePydanticVectorStore")
