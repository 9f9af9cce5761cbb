"""``CoreChunkSelector``: prune chunks before LLM KG extraction, as a LlamaIndex transformation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.schema import BaseNode, TransformComponent

from shared_core.config import ConceptGraphConfig
from shared_core.index import ConceptGraphIndex, SelectionMethod
from shared_core.pipeline import IncrementalSelector, IndexFactory, check_selection_method
from shared_core.select import CostReport, Selection

from ._nodes import REF_DOC_KEY, check_ref_doc_id, nodes_to_records, report_ref_doc_deleted
from .embeddings import resolve_embed_model, to_core_embedder
from .retriever import ConceptGraphRetriever


class CoreChunkSelector(TransformComponent):
    """Keep only the G2ConS core chunks (concept PageRank per token) for KG extraction.

    The best chunks within ``kappa`` of the tokens are kept, so KG extraction costs about
    ``kappa`` of extracting everything (``ConceptGraphConfig(select_by="chunks")`` makes
    kappa a share of chunks, as in the paper). ``method="knn"`` ranks by KET-RAG's KNN
    chunk-graph PageRank instead, ``"random"`` is the baseline.

    Put it after the splitter: only the kept nodes reach ``kg_extractors``. Every node
    (kept or not) goes into one concept graph, which :meth:`as_retriever` reuses, so
    nothing is embedded twice. The cost report is logged on the ``conceptgraph``
    logger and kept in :attr:`report`. The embedding model is, in order: the one
    given here, the ``embed_model`` the index was given, ``Settings.embed_model`` if
    the app has set it, else the offline MiniLM default (``default_embed_model``),
    never LlamaIndex's unset default (OpenAI, which needs a package and a key).
    Selection ranks chunks against one shared graph, so run ``IngestionPipeline`` with
    the default ``num_workers=None``: worker processes would each see only their batch.
    Threads may call it at once: each batch joins the one graph, and :attr:`selection`
    is the latest finished call's. :meth:`acall` (``IngestionPipeline.arun``) runs in a
    worker thread, so the event loop is not blocked while sentences are embedded.

    The node id is the chunk id. A node passed twice is one chunk, kept or dropped
    once; the same id with different text or metadata raises ``ValueError`` naming
    both positions. :meth:`insert_nodes` puts nodes in the graph without selecting
    (they shape later rankings), :meth:`delete_nodes` and :meth:`delete_ref_doc`
    remove them, as on a ``VectorStoreIndex``.

    >>> from llama_index.core import Document
    >>> from llama_index.core.ingestion import IngestionPipeline
    >>> from llama_index.core.node_parser import SentenceSplitter
    >>> from shared_core import HashingEmbedder
    >>> from llama_index_conceptgraph import CoreChunkSelector, CoreEmbedding
    >>> selector = CoreChunkSelector(kappa=0.5, embed_model=CoreEmbedding(HashingEmbedder()))
    >>> docs = [Document(text="Ada Lovelace wrote the first program for the engine."),
    ...         Document(text="Charles Babbage designed the engine; Lovelace programmed it.")]
    >>> nodes = IngestionPipeline(transformations=[SentenceSplitter(), selector]).run(
    ...     documents=docs)
    >>> len(nodes), selector.report.chunks_total
    (1, 2)
    >>> selector.delete_ref_doc(docs[1].doc_id)  # its chunk leaves the graph
    >>> len(selector.index)
    1

    In a ``PropertyGraphIndex``: ``PropertyGraphIndex.from_documents(docs,
    transformations=[SentenceSplitter(), selector], kg_extractors=[...])``.
    """

    kappa: float = Field(default=0.8, gt=0.0, le=1.0,
                         description="Share of tokens (of chunks with select_by='chunks') "
                                     "kept for KG extraction.")
    prompt_tokens_per_chunk: int = Field(
        default=0, ge=0, description="Extractor prompt tokens per chunk, for the cost report.")
    method: SelectionMethod = Field(
        default="concept", description="How chunks are ranked: 'concept' (G2ConS), 'knn' "
                                       "(KET-RAG's KNN chunk graph) or 'random'.")

    _embed_model: BaseEmbedding | None = PrivateAttr(default=None)
    _config: ConceptGraphConfig | None = PrivateAttr(default=None)
    _selector: IncrementalSelector = PrivateAttr()  # the graph, the lock, the latest selection

    @field_validator("method", mode="before")
    @classmethod
    def _check_method(cls, value: object) -> SelectionMethod:
        return check_selection_method(value)

    def __init__(
        self,
        kappa: float = 0.8,
        *,
        embed_model: BaseEmbedding | None = None,
        config: ConceptGraphConfig | None = None,
        index: ConceptGraphIndex | None = None,
        prompt_tokens_per_chunk: int = 0,
        method: SelectionMethod = "concept",
        **kwargs: Any,
    ) -> None:
        """``index`` continues an existing concept graph instead of starting a new one."""
        fields: dict[str, Any] = {"kappa": kappa, "method": method,
                                  "prompt_tokens_per_chunk": prompt_tokens_per_chunk}
        super().__init__(**fields, **kwargs)
        if embed_model is not None and not isinstance(embed_model, BaseEmbedding):
            raise TypeError(
                f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}"
            )
        if config is not None and not isinstance(config, ConceptGraphConfig):
            raise TypeError(f"config must be a ConceptGraphConfig, got {type(config).__name__}")
        if index is not None and not isinstance(index, ConceptGraphIndex):
            raise TypeError(f"index must be a ConceptGraphIndex, got {type(index).__name__}")
        self._embed_model = embed_model
        self._config = config
        self._selector = IncrementalSelector(index)

    @classmethod
    def from_defaults(
        cls,
        kappa: float = 0.8,
        embed_model: BaseEmbedding | None = None,
        config: ConceptGraphConfig | None = None,
        prompt_tokens_per_chunk: int = 0,
        method: SelectionMethod = "concept",
    ) -> CoreChunkSelector:
        return cls(kappa, embed_model=embed_model, config=config,
                   prompt_tokens_per_chunk=prompt_tokens_per_chunk, method=method)

    @classmethod
    def class_name(cls) -> str:
        return "CoreChunkSelector"

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        """Index ``nodes`` in the concept graph and return only the core ones, in input order.

        ``kwargs`` are whatever the caller passes to every transformation
        (``PropertyGraphIndex.from_documents`` forwards its own keyword arguments).
        """
        records = nodes_to_records(nodes)
        if not records:
            return []
        core = self._selector.select(
            records, kappa=self.kappa, method=self.method,
            prompt_tokens_per_chunk=self.prompt_tokens_per_chunk,
            show_progress=bool(kwargs.get("show_progress", False)),
            create=self._index_factory(kwargs.get("embed_model")))
        return [node for node, cid in zip(nodes, records.input_ids, strict=True)
                if core.keeps(cid)]

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        """:meth:`__call__` in a worker thread: embedding would otherwise block the event loop."""
        return await asyncio.to_thread(self.__call__, nodes, **kwargs)

    def _index_factory(self, passed: object = None) -> IndexFactory:
        """How the graph is created on first use (called under the selector's lock).

        The model is the one given here, else the ``embed_model`` the caller passed
        (``PropertyGraphIndex`` passes its own), else :func:`resolve_embed_model`'s.
        """
        def create() -> ConceptGraphIndex:
            if self._embed_model is None and isinstance(passed, BaseEmbedding):
                self._embed_model = passed
            self._embed_model = resolve_embed_model(self._embed_model)
            return ConceptGraphIndex(to_core_embedder(self._embed_model), self._config)

        return create

    # ----------------------------------------------------------------- updates
    def insert_nodes(self, nodes: Sequence[BaseNode], *, show_progress: bool = False) -> None:
        """Put nodes in the concept graph without selecting: they shape later rankings."""
        self._selector.add(nodes_to_records(nodes), show_progress=show_progress,
                           create=self._index_factory())

    async def ainsert_nodes(self, nodes: Sequence[BaseNode], *,
                            show_progress: bool = False) -> None:
        """:meth:`insert_nodes` in a worker thread (embedding is blocking work)."""
        await asyncio.to_thread(self.insert_nodes, nodes, show_progress=show_progress)

    def delete_nodes(self, node_ids: Sequence[str]) -> None:
        """Remove nodes from the graph; ids it does not hold are skipped."""
        self._selector.delete(node_ids)

    async def adelete_nodes(self, node_ids: Sequence[str]) -> None:
        """:meth:`delete_nodes` in a worker thread (rebuilding the graph is blocking work)."""
        await asyncio.to_thread(self.delete_nodes, node_ids)

    def delete_ref_doc(self, ref_doc_id: str) -> None:
        """Remove every node whose source document is ``ref_doc_id``; warns if there is none."""
        ref_doc_id = check_ref_doc_id(ref_doc_id)
        report_ref_doc_deleted(ref_doc_id, self._selector.delete_where(REF_DOC_KEY, ref_doc_id))

    async def adelete_ref_doc(self, ref_doc_id: str) -> None:
        """:meth:`delete_ref_doc` in a worker thread."""
        await asyncio.to_thread(self.delete_ref_doc, ref_doc_id)

    # ----------------------------------------------------------------- results
    @property
    def selection(self) -> Selection:
        """The latest selection: kept/dropped ids, scores and the cost report."""
        selection = self._selector.last_selection
        if selection is None:
            raise RuntimeError("CoreChunkSelector has not run yet: no selection to report")
        return selection

    @property
    def report(self) -> CostReport:
        return self.selection.report

    @property
    def index(self) -> ConceptGraphIndex:
        """The concept graph over every chunk seen so far (kept or not)."""
        index = self._selector.index
        if index is None:
            raise RuntimeError("CoreChunkSelector has not run yet: no concept graph built")
        return index

    def as_retriever(self, **kwargs: Any) -> ConceptGraphRetriever:
        """A retriever over the concept graph this selector built: no second embedding pass."""
        return ConceptGraphRetriever(self.index, self._embed_model, **kwargs)
