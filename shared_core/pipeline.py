"""The steps both framework adapters perform, written once.

Adapters translate framework objects to and from plain records; the
behaviour (building or extending the concept graph, choosing core chunks,
running the concept and KG paths concurrently, fusing them) lives here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .config import ConceptGraphConfig
from .embeddings import Embedder
from .fusion import ContextItem, FusedContext, fuse_contexts
from .index import ConceptGraphIndex, RetrievedChunk
from .selection import Selection, select_by_scores

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


def select_core_chunks(
    texts: Sequence[str],
    ids: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]] | None = None,
    *,
    kappa: float,
    index: ConceptGraphIndex | None = None,
    embedder: Embedder | None = None,
    config: ConceptGraphConfig | None = None,
    prompt_tokens_per_chunk: int = 0,
    show_progress: bool = False,
) -> CoreChunks:
    """Add the chunks to a concept graph (new, or ``index``) and choose the core ones.

    Selection ranks only the chunks passed in, against the graph built over all
    chunks the index holds, so repeated pipeline runs share one graph. The cost
    report is logged at INFO on the ``conceptgraph`` logger.
    """
    if index is None:
        if embedder is None:
            raise ValueError("select_core_chunks needs an index or an embedder")
        index = ConceptGraphIndex(embedder, config)
    index.add(texts, ids=ids, metadatas=metadatas, show_progress=show_progress)
    full = index.select(kappa, prompt_tokens_per_chunk=prompt_tokens_per_chunk)
    wanted = list(dict.fromkeys(ids))
    if len(wanted) == len(index):
        selection = full
    else:
        scores = np.array([full.scores[i] for i in wanted])
        tokens = np.array([index.get(i).tokens for i in wanted])
        selection = select_by_scores(wanted, scores, tokens, kappa, prompt_tokens_per_chunk)
    logger.info(selection.report.summary())
    return CoreChunks(index=index, selection=selection)


def provenance_metadata(hit: RetrievedChunk) -> dict[str, Any]:
    """The metadata a retrieved chunk carries into a framework object."""
    return {
        **hit.chunk.metadata,
        "chunk_id": hit.chunk.id,
        "score": hit.score,
        "provenance": hit.provenance.to_dict(),
    }


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
