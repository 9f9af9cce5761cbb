"""The steps both framework adapters perform, written once.

Adapters translate framework objects to and from plain records; the
behaviour (building or extending the concept graph, choosing core chunks,
running the concept and KG paths concurrently, fusing them) lives here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from .config import ConceptGraphConfig
from .embeddings.base import Embedder
from .embeddings.models import FunctionEmbedder
from .fusion import ContextItem, FusedContext, FusedItem, KGFact, fuse_contexts, kg_context_items
from .index import ConceptGraphIndex, RetrievalResult, RetrievedChunk, SelectionMethod
from .records import ChunkRecords, add_records, check_ids, delete_chunks, delete_where
from .select.cost import Selection
from .select.scores import select_by_scores

logger = logging.getLogger("conceptgraph")


@dataclass(frozen=True)
class CoreChunks:
    """The outcome of pruning: the index (reusable for retrieval) and the selection."""

    index: ConceptGraphIndex
    selection: Selection

    def keeps(self, chunk_id: str) -> bool:
        return chunk_id in self._kept

    @cached_property
    def _kept(self) -> frozenset[str]:
        return frozenset(self.selection.kept_ids)


SELECTION_METHODS: tuple[SelectionMethod, ...] = ("concept", "coverage", "knn", "random")


def check_selection_method(method: object) -> SelectionMethod:
    """``method`` if it names a selection, checked before anything is embedded."""
    for known in SELECTION_METHODS:
        if method == known:
            return known
    raise ValueError(f"method must be one of {', '.join(SELECTION_METHODS)}, got {method!r}")


def select_core_chunks(
    texts: Sequence[str],
    ids: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]] | None = None,
    *,
    kappa: float,
    method: SelectionMethod = "concept",
    index: ConceptGraphIndex | None = None,
    embedder: Embedder | None = None,
    config: ConceptGraphConfig | None = None,
    prompt_tokens_per_chunk: int = 0,
    show_progress: bool = False,
) -> CoreChunks:
    """Add the chunks to a concept graph (new, or ``index``) and choose the core ones.

    Selection ranks only the chunks passed in, against the graph built over all
    chunks the index holds, so repeated pipeline runs share one graph. ``method``
    is :meth:`ConceptGraphIndex.select`'s (G2ConS ``"concept"``, KET-RAG ``"knn"``,
    or the ``"random"`` baseline). The cost report is logged at INFO on the
    ``conceptgraph`` logger.
    """
    method = check_selection_method(method)
    if index is None:
        if embedder is None:
            raise ValueError("select_core_chunks needs an index or an embedder")
        index = ConceptGraphIndex(embedder, config)
    index.add(texts, ids=ids, metadatas=metadatas, show_progress=show_progress)
    full = index.select(kappa, method=method, prompt_tokens_per_chunk=prompt_tokens_per_chunk)
    wanted = list(dict.fromkeys(ids))
    if len(wanted) == len(index):
        selection = full
    else:
        scores = np.array([full.scores[i] for i in wanted])
        tokens = np.array([index.get(i).tokens for i in wanted])
        selection = select_by_scores(wanted, scores, tokens, kappa, prompt_tokens_per_chunk,
                                     by=full.report.by)
        # the ranking still came from the whole graph: keep what the index said about it
        selection = replace(selection, report=replace(selection.report,
                                                      graph_edges=full.report.graph_edges))
    logger.info(selection.report.summary())
    return CoreChunks(index=index, selection=selection)


IndexFactory = Callable[[], ConceptGraphIndex]


class IncrementalSelector:
    """One concept graph that batches of chunks join, and the latest batch's core chunks.

    What a selector adapter keeps between calls, behind one lock: two threads
    selecting at once both land in the same graph (never in two graphs, one of
    them lost), and :attr:`last_selection` is that of the call that finished
    last, never a mix of two. The graph may be created on first use by
    ``create``, once the framework has said which embedding model to use.
    """

    def __init__(self, index: ConceptGraphIndex | None = None) -> None:
        if index is not None and not isinstance(index, ConceptGraphIndex):
            raise TypeError(f"index must be a ConceptGraphIndex, got {type(index).__name__}")
        self._index = index
        self._selection: Selection | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # frameworks pickle their components (worker processes): a lock cannot be
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def index(self) -> ConceptGraphIndex | None:
        """The concept graph over every chunk seen so far; ``None`` before the first."""
        return self._index

    @property
    def last_selection(self) -> Selection | None:
        return self._selection

    def _index_or_create(self, create: IndexFactory | None) -> ConceptGraphIndex:
        if self._index is None:
            if create is None:
                raise RuntimeError("no concept graph yet, and no way to create one was given")
            self._index = create()
        return self._index

    def select(
        self,
        records: ChunkRecords,
        *,
        kappa: float,
        method: SelectionMethod = "concept",
        prompt_tokens_per_chunk: int = 0,
        show_progress: bool = False,
        create: IndexFactory | None = None,
    ) -> CoreChunks:
        """Add the records to the graph and choose their core chunks, as
        :func:`select_core_chunks` does; the latest selection is kept."""
        method = check_selection_method(method)
        with self._lock:
            index = self._index_or_create(create)
            core = select_core_chunks(
                list(records.texts), list(records.ids), list(records.metadatas), kappa=kappa,
                method=method, index=index, prompt_tokens_per_chunk=prompt_tokens_per_chunk,
                show_progress=show_progress)
            self._selection = core.selection
        return core

    def add(self, records: ChunkRecords, *, show_progress: bool = False,
            create: IndexFactory | None = None) -> list[str]:
        """Add the records without selecting; returns every input's chunk id."""
        with self._lock:
            return add_records(self._index_or_create(create), records,
                               show_progress=show_progress)

    def delete(self, ids: object) -> list[str]:
        """Delete the chunks it holds among ``ids`` (:func:`~shared_core.records.delete_chunks`)."""
        with self._lock:
            if self._index is None:
                check_ids(ids)
                return []
            return delete_chunks(self._index, ids)

    def delete_where(self, key: str, value: object) -> list[str]:
        """Delete every chunk whose metadata holds ``key: value``; returns their ids."""
        with self._lock:
            return [] if self._index is None else delete_where(self._index, key, value)


def provenance_metadata(hit: RetrievedChunk) -> dict[str, Any]:
    """The metadata a retrieved chunk carries into a framework object."""
    return hit.metadata()


ConceptPath = Callable[[], Sequence[ContextItem]]


def fuse_paths(
    concept_path: ConceptPath,
    kg_path: ConceptPath,
    *,
    budget: int,
    lam: float,
    share_unused: bool = False,
) -> FusedContext:
    """Run both retrieval paths in parallel threads, then the λ ensemble."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="conceptgraph-path") as pool:
        concept_future = pool.submit(concept_path)
        kg_future = pool.submit(kg_path)
        concept_items, kg_items = concept_future.result(), kg_future.result()
    return fuse_contexts(concept_items, kg_items, budget=budget, lam=lam,
                         share_unused=share_unused)


async def afuse_paths(
    concept_path: Awaitable[Sequence[ContextItem]],
    kg_path: Awaitable[Sequence[ContextItem]],
    *,
    budget: int,
    lam: float,
    share_unused: bool = False,
) -> FusedContext:
    """Await both retrieval paths concurrently, then the λ ensemble."""
    concept_items, kg_items = await asyncio.gather(concept_path, kg_path)
    return fuse_contexts(concept_items, kg_items, budget=budget, lam=lam,
                         share_unused=share_unused)


def function_embedder(
    embed: Callable[[list[str]], Any], model_id: str, dim: int | None = None,
    embed_query: Callable[[str], Any] | None = None,
) -> FunctionEmbedder:
    """Wrap a framework's batch-embed function as the core's ``Embedder``.

    Framework embedding objects rarely state their width, yet the index needs it
    before the first chunk (array shapes, the check on load), so without ``dim``
    one probe text is embedded to find it.
    """
    if not isinstance(model_id, str) or not model_id:
        raise ValueError(f"model_id must be a non-empty str, got {model_id!r}")
    if dim is None:
        probe = np.asarray(embed(["dimension probe"]), dtype=np.float32)
        if probe.ndim != 2 or probe.shape[0] != 1 or probe.shape[1] < 1:
            raise ValueError(
                f"{model_id} returned shape {probe.shape} for one text; pass dim= explicitly"
            )
        dim = int(probe.shape[1])
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise ValueError(f"dim must be a positive int, got {dim!r}")
    return FunctionEmbedder(embed, model_id, dim, embed_query)


def concept_context_items(result: RetrievalResult) -> list[ContextItem]:
    """The concept path as fusion input, with the metadata a concept retriever returns."""
    return [hit.to_context_item() for hit in result.chunks]


def kg_context_item(
    text: str,
    source_chunk_id: str,
    *,
    score: float = 0.0,
    metadata: Mapping[str, Any] | None = None,
) -> ContextItem:
    """A KG-path result tied to the chunk it was extracted from.

    The source chunk id is what makes a fact the concept path also found a
    vote for that chunk rather than a second copy of it.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("a KG context item needs non-empty text")
    [item] = kg_context_items([KGFact(text, source_chunk_id, score, metadata or {})])
    return item


def fused_metadata(fused: FusedItem) -> dict[str, Any]:
    """Metadata of one fused item: its own, plus which path found it and at what rank."""
    return {
        **fused.item.metadata,
        "chunk_id": fused.item.chunk_id,
        "score": fused.item.score,
        "fusion": {"path": fused.path, "concept_rank": fused.concept_rank,
                   "kg_rank": fused.kg_rank},
    }


def rerank_by_concepts(
    index: ConceptGraphIndex,
    query_vector: np.ndarray,
    candidate_ids: Sequence[str],
    *,
    query: str = "",
    top_k: int | None = None,
    hops: int | None = None,
) -> tuple[list[RetrievedChunk], list[str]]:
    """Order candidate chunks (e.g. another retriever's hits) by the concept graph's search.

    The search is the index's own for this query (its words feed the lexical view
    and exact-match seeds), with a budget of the whole index, so only ``top_k``
    and ``hops`` limit its reach. See :func:`rank_candidates` for what is returned.
    """
    wanted = list(dict.fromkeys(candidate_ids))
    if not wanted or len(index) == 0:
        return [], wanted
    result = index.retrieve_by_vector(query_vector, query=query, top_k=top_k, hops=hops,
                                      budget=whole_index_budget(index))
    return rank_candidates(result, wanted)


def whole_index_budget(index: ConceptGraphIndex) -> int:
    """A budget that holds every retrieval unit, so that it never limits a search."""
    return max(1, int(index.state.graph.unit_tokens.sum()))


def rank_candidates(result: RetrievalResult,
                    candidate_ids: Sequence[str]) -> tuple[list[RetrievedChunk], list[str]]:
    """The candidates ``result`` reaches, in the order it first reaches them, and the rest.

    A chunk retrieved as sentence units (``a#u0``, ``a#u1``) counts once, at its
    first unit's place, with its best unit's hit; ``hit.chunk_id`` names the
    candidate. The unreached candidates keep their given order, deduplicated.
    """
    wanted = list(dict.fromkeys(candidate_ids))
    candidates = set(wanted)
    best: dict[str, RetrievedChunk] = {}
    for hit in result.chunks:
        cid = hit.chunk_id
        if cid in candidates and (cid not in best or hit.score > best[cid].score):
            best[cid] = hit  # a dict keeps the first-reached position on update
    return list(best.values()), [cid for cid in wanted if cid not in best]
