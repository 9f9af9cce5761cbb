"""``FusedConceptKGRetriever``: the concept path and a KG path, run concurrently and fused.

Fusion itself (λ shares, overlap voting, dedup by chunk) is ``shared_core``'s; this
module turns LlamaIndex results into context items tied to their source chunks.
The stock PropertyGraphIndex retrievers tie a fact to the ``triplet_source_id`` of
its *subject entity*, which ends up holding the last chunk that mentioned the
entity; the ``RelationSourced*`` retrievers tie it to the chunk the relation was
extracted from, so a fact votes for the chunk it really came from.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.graph_stores.types import TRIPLET_SOURCE_KEY, Triplet
from llama_index.core.indices.property_graph import (
    LLMSynonymRetriever,
    PropertyGraphIndex,
    VectorContextRetriever,
)
from llama_index.core.indices.property_graph.sub_retrievers.base import BasePGRetriever
from llama_index.core.llms import LLM
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
)

from shared_core.fusion import ContextItem, FusedContext, KGFact, kg_context_items
from shared_core.pipeline import afuse_paths, concept_context_items, fuse_paths, fused_metadata

from ._nodes import item_to_node
from .retriever import ConceptGraphRetriever
from .selector import CoreChunkSelector

T = TypeVar("T")


class _RelationSourced(BasePGRetriever):
    """Point each fact's SOURCE at its relation's own ``triplet_source_id``."""

    def _get_nodes_with_score(
        self, triplets: list[Triplet], scores: list[float] | None = None
    ) -> list[NodeWithScore]:
        results = super()._get_nodes_with_score(triplets, scores)
        for result, (_subject, relation, _object) in zip(results, triplets, strict=True):
            source = relation.properties.get(TRIPLET_SOURCE_KEY)
            if isinstance(source, str) and source:
                result.node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(
                    node_id=source)
        return results


class RelationSourcedSynonymRetriever(_RelationSourced, LLMSynonymRetriever):
    """``LLMSynonymRetriever`` whose facts point at the chunk they were extracted from."""


class RelationSourcedVectorContextRetriever(_RelationSourced, VectorContextRetriever):
    """``VectorContextRetriever`` whose facts point at the chunk they were extracted from."""


def relation_sourced_retriever(
    pg_index: PropertyGraphIndex,
    *,
    include_text: bool = True,
    llm: LLM | None = None,
    embed_model: BaseEmbedding | None = None,
    **kwargs: Any,
) -> BaseRetriever:
    """The retriever ``pg_index.as_retriever()`` builds, with facts attributed correctly.

    Same sub-retrievers (synonym expansion; vector context when KG nodes are
    embedded), same defaults (the index's LLM and embed model unless given).
    """
    if not isinstance(pg_index, PropertyGraphIndex):
        raise TypeError(f"pg_index must be a PropertyGraphIndex, got {type(pg_index).__name__}")
    store = pg_index.property_graph_store
    use_async = kwargs.pop("use_async", None)
    subs: list[BasePGRetriever] = [RelationSourcedSynonymRetriever(
        graph_store=store, include_text=include_text,
        llm=llm or getattr(pg_index, "_llm", None), **kwargs)]
    embed_model = embed_model or getattr(pg_index, "_embed_model", None)
    if embed_model is not None and (store.supports_vector_queries or pg_index.vector_store):
        subs.append(RelationSourcedVectorContextRetriever(
            graph_store=store, vector_store=pg_index.vector_store, include_text=include_text,
            embed_model=embed_model, **kwargs))
    extra = {} if use_async is None else {"use_async": use_async}
    return pg_index.as_retriever(sub_retrievers=subs, **extra)


def run_outside_event_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn`` here, or in a worker thread when an event loop is running.

    ``PropertyGraphIndex`` builds and inserts call ``asyncio.run``, which fails
    inside a running loop (Jupyter, async apps); a thread has no loop of its own.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


class FusedConceptKGRetriever(BaseRetriever):
    """Concept-graph context and KG context in one budget (G2ConS weighted ensemble).

    Both paths run concurrently. Chunks both paths found come first; the concept
    path fills at most (1−λ) and the KG path at most λ of what remains of
    ``budget`` tokens. Each node's metadata carries ``fusion`` (path and ranks).

    >>> from llama_index.core.schema import TextNode
    >>> from shared_core import HashingEmbedder
    >>> from llama_index_conceptgraph import ConceptGraphRetriever, CoreEmbedding
    >>> concept = ConceptGraphRetriever.from_defaults(
    ...     nodes=[TextNode(id_="a", text="Ada Lovelace wrote the first program."),
    ...            TextNode(id_="b", text="Charles Babbage designed the engine.")],
    ...     embed_model=CoreEmbedding(HashingEmbedder()))
    >>> fused = FusedConceptKGRetriever(concept, kg_retriever=concept, lam=0.6, budget=500)
    >>> top = fused.retrieve("Who wrote the first program?")[0]
    >>> top.node.node_id, top.node.metadata["fusion"]["path"]
    ('a', 'both')

    Over a PropertyGraphIndex built with a :class:`CoreChunkSelector`, the KG path
    defaults to the index's own retrievers with facts attributed correctly:
    ``FusedConceptKGRetriever.from_defaults(pg_index, selector=selector)``.
    """

    def __init__(
        self,
        concept_retriever: ConceptGraphRetriever,
        kg_retriever: BaseRetriever,
        *,
        lam: float | None = None,
        budget: int | None = None,
        share_unused: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        """``lam`` (KG share) and ``budget`` default to the concept graph's config."""
        if not isinstance(concept_retriever, ConceptGraphRetriever):
            raise TypeError("concept_retriever must be a ConceptGraphRetriever, "
                            f"got {type(concept_retriever).__name__}")
        if not isinstance(kg_retriever, BaseRetriever):
            raise TypeError("kg_retriever must be a llama_index BaseRetriever, "
                            f"got {type(kg_retriever).__name__}")
        config = concept_retriever.index.config
        config = replace(config, lam=config.lam if lam is None else lam,
                         budget=config.budget if budget is None else budget)  # validates
        self._concept = concept_retriever
        self._kg = kg_retriever
        self._lam, self._budget = config.lam, config.budget
        self._share_unused = bool(share_unused)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_defaults(
        cls,
        pg_index: PropertyGraphIndex | None = None,
        *,
        selector: CoreChunkSelector | None = None,
        concept_retriever: ConceptGraphRetriever | None = None,
        kg_retriever: BaseRetriever | None = None,
        include_text: bool = True,
        llm: LLM | None = None,
        lam: float | None = None,
        budget: int | None = None,
        share_unused: bool = False,
        **kg_kwargs: Any,
    ) -> FusedConceptKGRetriever:
        """Concept path from ``concept_retriever`` or the ``selector``'s graph; KG path from
        ``kg_retriever`` or :func:`relation_sourced_retriever` over ``pg_index``."""
        if concept_retriever is None:
            if selector is None:
                raise ValueError("pass concept_retriever= or the selector= that built the graph")
            concept_retriever = selector.as_retriever()
        if kg_retriever is None:
            if pg_index is None:
                raise ValueError("pass kg_retriever= or the pg_index= to retrieve facts from")
            kg_retriever = relation_sourced_retriever(
                pg_index, include_text=include_text, llm=llm, **kg_kwargs)
        return cls(concept_retriever, kg_retriever, lam=lam, budget=budget,
                   share_unused=share_unused)

    # ------------------------------------------------------------------ paths
    def _source_chunk(self, node: BaseNode) -> str:
        """A KG result's chunk: itself if it is a chunk, else the node it is SOURCEd from."""
        if node.node_id in self._concept.index:
            return node.node_id
        return node.ref_doc_id or node.node_id

    def _kg_items(self, results: list[NodeWithScore]) -> list[ContextItem]:
        return kg_context_items(
            KGFact(r.node.get_content(metadata_mode=MetadataMode.NONE),
                   self._source_chunk(r.node), r.score or 0.0, r.node.metadata)
            for r in results)

    def _concept_path(self, query: str) -> list[ContextItem]:
        return concept_context_items(self._concept.retrieve_result(query, budget=self._budget))

    def _kg_path(self, query: str) -> list[ContextItem]:
        return self._kg_items(self._kg.retrieve(QueryBundle(query_str=query)))

    async def _aconcept_path(self, query: str) -> list[ContextItem]:
        result = await self._concept.aretrieve_result(query, budget=self._budget)
        return concept_context_items(result)

    async def _akg_path(self, query: str) -> list[ContextItem]:
        return self._kg_items(await self._kg.aretrieve(QueryBundle(query_str=query)))

    def fuse(self, query: str) -> FusedContext:
        """The fused context itself: items with their path, ranks and token counts."""
        return fuse_paths(lambda: self._concept_path(query), lambda: self._kg_path(query),
                          budget=self._budget, lam=self._lam, share_unused=self._share_unused)

    async def afuse(self, query: str) -> FusedContext:
        return await afuse_paths(self._aconcept_path(query), self._akg_path(query),
                                 budget=self._budget, lam=self._lam,
                                 share_unused=self._share_unused)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        fused = self.fuse(query_bundle.query_str)
        return [item_to_node(f.item, fused_metadata(f)) for f in fused.items]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        fused = await self.afuse(query_bundle.query_str)
        return [item_to_node(f.item, fused_metadata(f)) for f in fused.items]
