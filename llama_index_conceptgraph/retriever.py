"""``ConceptGraphRetriever``: G2ConS concept-graph retrieval as a LlamaIndex retriever."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.ingestion import run_transformations
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TransformComponent
from llama_index.core.settings import Settings
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import check_texts, normalise_rows
from shared_core.index import ConceptGraphIndex, RetrievalResult
from shared_core.pipeline import concept_context_items
from shared_core.records import add_records, delete_chunks, delete_where
from shared_core.search.external import VectorStoreBackend
from shared_core.store import read_manifest

from ._nodes import (
    REF_DOC_KEY,
    check_ref_doc_id,
    item_to_node,
    nodes_to_records,
    report_ref_doc_deleted,
)
from .embeddings import CoreEmbedding, resolve_embed_model, to_core_embedder
from .vector_store import to_backend

SIDECAR = "llama_index_conceptgraph.json"


class ConceptGraphRetriever(BaseRetriever):
    """Concept-graph retrieval (G2ConS) returning ``NodeWithScore``s.

    Node ids are the chunk ids, node metadata is carried through, and each node's
    metadata gains ``chunk_id``, ``score`` and ``provenance`` (the concept that
    brought it, its stage — direct, expanded or similarity only — and hop), kept
    out of LLM prompts.

    ``similarity_top_k`` caps the nodes returned (default ``None``: as many as the
    token ``budget`` holds, the bound G2ConS is defined by, as LangChain's ``k``);
    ``concept_top_k`` is how many concepts the query seeds, not a node count
    (``top_k`` is its deprecated name). ``min_score`` is a relevance floor: a node
    whose similarity to the query is below it is never returned, so an off-topic
    query gets nothing.

    The node id is the chunk id. A node passed twice is one chunk; the same id
    with different text or metadata raises ``ValueError`` naming both positions,
    and so does inserting an id the graph holds with new text (delete it first),
    since one of the two would be silently lost. The graph updates in place, as a
    ``VectorStoreIndex`` does: :meth:`insert_nodes`, :meth:`delete_nodes` (ids it
    does not hold are skipped) and :meth:`delete_ref_doc` (every node of one
    source document), each with an async twin. A retrieved node keeps its source
    document as its SOURCE relationship (``node.ref_doc_id``).

    The embedding model is, in order: ``embed_model``, ``Settings.embed_model`` if
    the app has set it, else the offline MiniLM default (:func:`default_embed_model`),
    never LlamaIndex's unset default (OpenAI, which needs a package and a key).

    >>> from llama_index.core.schema import TextNode
    >>> from shared_core import HashingEmbedder
    >>> from llama_index_conceptgraph import ConceptGraphRetriever, CoreEmbedding
    >>> retriever = ConceptGraphRetriever.from_defaults(
    ...     nodes=[TextNode(text="Ada Lovelace wrote the first program."),
    ...            TextNode(text="Charles Babbage designed the engine.")],
    ...     embed_model=CoreEmbedding(HashingEmbedder()))
    >>> retriever.retrieve("Who wrote the first program?")[0].node.get_content()
    'Ada Lovelace wrote the first program.'
    >>> retriever.insert_nodes([TextNode(id_="linux", text="Linus Torvalds wrote Linux.")])
    >>> retriever.retrieve("Who wrote Linux?")[0].node.node_id
    'linux'
    >>> retriever.delete_nodes(["linux", "never-inserted"])  # unknown ids are skipped
    """

    def __init__(
        self,
        index: ConceptGraphIndex,
        embed_model: BaseEmbedding | None = None,
        *,
        similarity_top_k: int | None = None,
        concept_top_k: int | None = None,
        hops: int | None = None,
        budget: int | None = None,
        min_score: float | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        top_k: int | None = None,
    ) -> None:
        """``embed_model`` embeds queries (``get_query_embedding``); without it the index's own."""
        if not isinstance(index, ConceptGraphIndex):
            raise TypeError(f"index must be a ConceptGraphIndex, got {type(index).__name__}")
        if embed_model is not None and not isinstance(embed_model, BaseEmbedding):
            raise TypeError(
                f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}"
            )
        if top_k is not None:
            if concept_top_k is not None:
                raise ValueError("pass concept_top_k only: top_k is its deprecated name")
            warnings.warn(
                "ConceptGraphRetriever(top_k=...) is deprecated: it counts concepts, not "
                "nodes; use concept_top_k=, and similarity_top_k= to cap the nodes returned",
                DeprecationWarning, stacklevel=2)
            concept_top_k = top_k
        _check_count("concept_top_k", concept_top_k)
        _check_count("similarity_top_k", similarity_top_k)
        given = {"top_k": concept_top_k, "hops": hops, "budget": budget, "min_score": min_score}
        overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        # validates, with the knob's name in the error
        ConceptGraphConfig.from_dict({**index.config.to_dict(), **overrides})
        self._index = index
        self._embed_model = embed_model
        self._overrides = overrides  # keyed by the core config's knob names
        self._similarity_top_k = similarity_top_k
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    # ---------------------------------------------------------------- building
    @classmethod
    def from_defaults(
        cls,
        nodes: Sequence[BaseNode] | None = None,
        *,
        documents: list[BaseNode] | None = None,
        transformations: list[TransformComponent] | None = None,
        embed_model: BaseEmbedding | None = None,
        config: ConceptGraphConfig | None = None,
        show_progress: bool = False,
        vector_store: BasePydanticVectorStore | VectorStoreBackend | None = None,
        vectors_in_store: bool = False,
        **kwargs: Any,
    ) -> ConceptGraphRetriever:
        """Build the concept graph over ``nodes``, or over ``documents`` split by
        ``transformations`` (default ``Settings.transformations``). ``vector_store``:
        a LlamaIndex vector store of the index's own that holds its sentence vectors
        and finds each query's candidates
        (:class:`~llama_index_conceptgraph.LlamaIndexVectorStore`).
        ``vectors_in_store=True`` (a ``MilvusVectorStore`` or ``QdrantStore``): the
        vectors stay in the store only, and updates read back the rows they need
        (see ``ConceptGraphIndex``)."""
        if (nodes is None) == (documents is None):
            raise ValueError("pass exactly one of nodes= or documents=")
        if documents is not None:
            if not isinstance(documents, list) or not documents:
                raise ValueError("documents must be a non-empty list of Documents")
            nodes = list(run_transformations(
                documents, transformations or Settings.transformations,
                show_progress=show_progress))
        records = nodes_to_records(nodes)
        if not records:
            raise ValueError("no nodes to build the concept graph from")
        embed_model = resolve_embed_model(embed_model)
        index = ConceptGraphIndex(to_core_embedder(embed_model), config,
                                  vector_store=None if vector_store is None
                                  else to_backend(vector_store),
                                  vectors_in_store=vectors_in_store)
        add_records(index, records, show_progress=show_progress)
        return cls(index, embed_model, **kwargs)

    @property
    def index(self) -> ConceptGraphIndex:
        return self._index

    @property
    def similarity_top_k(self) -> int | None:
        """Most nodes :meth:`retrieve` returns; ``None``: as many as the budget holds."""
        return self._similarity_top_k

    @property
    def concept_top_k(self) -> int:
        """Concepts the query seeds directly (the core config's ``top_k``)."""
        return int(self._overrides.get("top_k", self._index.config.top_k))

    @property
    def min_score(self) -> float | None:
        """The relevance floor on a node's similarity to the query (``None``: none)."""
        floor = self._overrides.get("min_score", self._index.config.min_score)
        return None if floor is None else float(floor)

    # ------------------------------------------------------------------ updates
    def insert_nodes(self, nodes: Sequence[BaseNode], *, show_progress: bool = False) -> None:
        """Add nodes to the concept graph (all or nothing); a node it holds embeds nothing."""
        add_records(self._index, nodes_to_records(nodes), show_progress=show_progress)

    async def ainsert_nodes(self, nodes: Sequence[BaseNode], *,
                            show_progress: bool = False) -> None:
        """:meth:`insert_nodes` in a worker thread (embedding is blocking work)."""
        await asyncio.to_thread(self.insert_nodes, nodes, show_progress=show_progress)

    def delete_nodes(self, node_ids: Sequence[str]) -> None:
        """Remove nodes from the graph, which becomes the one that never held them.

        Ids it does not hold are skipped, as LlamaIndex's vector stores skip them.
        """
        delete_chunks(self._index, node_ids, "node_ids")

    async def adelete_nodes(self, node_ids: Sequence[str]) -> None:
        """:meth:`delete_nodes` in a worker thread (rebuilding the graph is blocking work)."""
        await asyncio.to_thread(self.delete_nodes, node_ids)

    def delete_ref_doc(self, ref_doc_id: str) -> None:
        """Remove every node whose source document is ``ref_doc_id``; warns if there is none."""
        ref_doc_id = check_ref_doc_id(ref_doc_id)
        report_ref_doc_deleted(ref_doc_id, delete_where(self._index, REF_DOC_KEY, ref_doc_id))

    async def adelete_ref_doc(self, ref_doc_id: str) -> None:
        """:meth:`delete_ref_doc` in a worker thread."""
        await asyncio.to_thread(self.delete_ref_doc, ref_doc_id)

    # --------------------------------------------------------------- persistence
    def persist(self, persist_dir: str | Path) -> None:
        """Save the concept graph (core format, no pickle) plus a JSON sidecar of settings."""
        self._index.save(str(persist_dir))
        sidecar: dict[str, Any] = {"format": "llama_index_conceptgraph.retriever",
                                   "version": 1, **self._overrides}
        if self._similarity_top_k is not None:
            sidecar["similarity_top_k"] = self._similarity_top_k
        (Path(persist_dir) / SIDECAR).write_text(json.dumps(sidecar, indent=2), encoding="utf-8")

    @classmethod
    def from_persist_dir(
        cls, persist_dir: str | Path, embed_model: BaseEmbedding | None = None, *,
        verify: bool = False,
        vector_store: BasePydanticVectorStore | VectorStoreBackend | None = None,
        vectors_in_store: bool = False,
        scores_in_store: bool = False,
        writer: bool = False,
        **kwargs: Any
    ) -> ConceptGraphRetriever:
        """Load a persisted retriever; ``embed_model`` must be the model it was built with.

        ``verify=True`` derives the saved graph again and refuses a save that differs
        (for a directory from a source you do not trust; see ``ConceptGraphIndex.load``).
        ``vector_store``: the store the index was built with; it is reconciled with
        the saved chunks (rows added or deleted after the last save are repaired).
        ``vectors_in_store=True``: a read-only replica that reads its vectors from
        ``vector_store`` (a ``MilvusVectorStore`` or ``QdrantStore``) and holds none;
        with ``scores_in_store=True`` the store scores the rows a query needs instead
        of returning them; with ``writer=True`` the index's one writer, which holds no
        vector either: inserts, deletes and ``persist`` read and write the store (see
        ``ConceptGraphIndex.load``).
        """
        embed_model = resolve_embed_model(embed_model)
        dim = read_manifest(persist_dir).get("embedding_dim")
        embedder = to_core_embedder(embed_model, dim if isinstance(dim, int) else None)
        index = ConceptGraphIndex.load(str(persist_dir), embedder, verify=verify,
                                       vector_store=None if vector_store is None
                                       else to_backend(vector_store),
                                       vectors_in_store=vectors_in_store,
                                       scores_in_store=scores_in_store, writer=writer)
        settings: dict[str, Any] = {}
        sidecar = Path(persist_dir) / SIDECAR
        if sidecar.is_file():
            stored = json.loads(sidecar.read_text(encoding="utf-8"))
            # the sidecar keeps the core config's knob names: its top_k is concept_top_k
            names = {"top_k": "concept_top_k", "hops": "hops", "budget": "budget",
                     "min_score": "min_score", "similarity_top_k": "similarity_top_k"}
            settings = {names[k]: stored[k] for k in names if k in stored}
        return cls(index, embed_model, **{**settings, **kwargs})

    # ----------------------------------------------------------------- retrieval
    def query_vector(self, query: str) -> np.ndarray:
        """The unit query vector, from the LlamaIndex model's query embedding when given."""
        check_texts([query], "query")
        if self._embed_model is None or self._own_query_embedding():
            return self._index.embed_query(query)
        return self._normalise(self._embed_model.get_query_embedding(query))

    async def aquery_vector(self, query: str) -> np.ndarray:
        check_texts([query], "query")
        if self._embed_model is None or self._own_query_embedding():
            return await asyncio.to_thread(self._index.embed_query, query)
        return self._normalise(await self._embed_model.aget_query_embedding(query))

    def _normalise(self, vector: list[float]) -> np.ndarray:
        embedder = self._index.embedder
        return normalise_rows([vector], 1, embedder.dim, embedder.model_id)[0]

    def _own_query_embedding(self) -> bool:
        """Whether the index's embedder embeds queries (no separate LlamaIndex model)."""
        return self._embed_model is None or isinstance(self._embed_model, CoreEmbedding)

    def _settings(self, budget: int | None) -> dict[str, Any]:
        settings = dict(self._overrides)
        if budget is not None:
            settings["budget"] = budget
        return settings

    def _search(self, vector: np.ndarray, query: str, budget: int | None) -> RetrievalResult:
        return self._index.retrieve_by_vector(vector, query=query, **self._settings(budget))

    def retrieve_result(self, query: str, *, budget: int | None = None) -> RetrievalResult:
        """The core's full result (direct concepts, tokens by stage), not just the nodes.

        Only the budget bounds it: ``similarity_top_k`` caps the nodes, not this.
        With the index's own embedder the search is ``index.retrieve`` itself, the
        call LangChain's retriever makes, so both give the same scores to the bit.
        """
        if self._own_query_embedding():
            check_texts([query], "query")
            return self._index.retrieve(query, **self._settings(budget))
        return self._search(self.query_vector(query), query, budget)

    async def aretrieve_result(self, query: str, *, budget: int | None = None) -> RetrievalResult:
        """:meth:`retrieve_result` without blocking the event loop."""
        if self._own_query_embedding():
            check_texts([query], "query")
            return await self._index.aretrieve(query, **self._settings(budget))
        vector = await self.aquery_vector(query)
        return await asyncio.to_thread(self._search, vector, query, budget)

    def _to_nodes(self, result: RetrievalResult) -> list[NodeWithScore]:
        items = concept_context_items(result)
        if self._similarity_top_k is not None:
            items = items[: self._similarity_top_k]
        return [item_to_node(item) for item in items]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._to_nodes(self.retrieve_result(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._to_nodes(await self.aretrieve_result(query_bundle.query_str))


def _check_count(name: str, value: object) -> None:
    """``None`` or a positive int; the error names the argument the caller used."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive int or None, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value}")
