"""G2ConS local search on the concept graph (§3.2.1), under a token budget.

1. The ``top_k`` concepts most similar to the query are the direct concepts.
2. Local reranking: concept by concept, in similarity order, that concept's
   chunks ordered by their similarity to the query join the context.
3. BFS from the direct concepts up to ``hops`` gives the expanded concepts;
   global reranking orders all of their chunks together by query similarity.
4. A chunk that does not fit the budget ends retrieval (the paper), or with
   ``overflow="skip"`` is passed over for later, smaller ones.

The functions here take arrays and return chunk positions with provenance;
``ConceptGraphIndex`` maps positions to ids and texts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from ..config import Overflow
from ..graph.pagerank import bfs_hops
from .vector_index import top_k_indices

Stage = Literal["direct", "expanded", "similarity"]
ChunkScorer = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, slots=True)
class Hit:
    """One chunk placed in the context, by position, with why it is there."""

    chunk: int
    score: float
    tokens: int
    concept: int
    concept_similarity: float
    stage: Stage
    hop: int


@dataclass(frozen=True)
class SearchTrace:
    """What the search did: the seeds, how far expansion went, why it stopped."""

    direct_concepts: tuple[int, ...]
    expanded_concepts: int
    tokens_used: int
    stopped_by_budget: bool


def fill_budget(order: np.ndarray, tokens: np.ndarray, budget: int,
                overflow: Overflow) -> np.ndarray:
    """The units of ``order`` that go into the context, greedily, in order.

    Runs that fit are taken a whole prefix at a time (one cumulative sum), so the
    Python loop turns only once per overflowing unit, not once per unit.
    """
    order = np.asarray(order, dtype=np.int64)
    sizes = np.asarray(tokens, dtype=np.int64)[order]
    taken: list[np.ndarray] = []
    remaining, pos = int(budget), 0
    while pos < len(order):
        fits = np.cumsum(sizes[pos:]) <= remaining
        n = len(fits) if fits.all() else int(np.argmin(fits))
        taken.append(order[pos:pos + n])
        remaining -= int(sizes[pos:pos + n].sum())
        pos += n
        if pos == len(order) or overflow == "stop":
            break
        smaller = np.flatnonzero(sizes[pos:] <= remaining)
        if not len(smaller):
            break
        pos += int(smaller[0])
    return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


class _Context:
    """The growing context of the paper's search: budget bookkeeping for both stages."""

    def __init__(self, chunk_tokens: np.ndarray, budget: int, overflow: Overflow,
                 min_similarity: float | None = None) -> None:
        self.chunk_tokens = chunk_tokens
        self.min_similarity = min_similarity
        self.budget = budget
        self.overflow = overflow
        self.used = 0
        self.placed = np.zeros(len(chunk_tokens), dtype=bool)
        self.hits: list[Hit] = []
        self.full = False

    def offer(self, chunk: int, score: float, concept: int, similarity: float,
              stage: Stage, hop: int) -> None:
        if self.placed[chunk] or self.full:
            return
        if self.min_similarity is not None and score < self.min_similarity:
            return  # below the relevance floor: never placed, and not an overflow
        tokens = int(self.chunk_tokens[chunk])
        if self.used + tokens > self.budget:
            if self.overflow == "stop":
                self.full = True
            return
        self.placed[chunk] = True
        self.used += tokens
        self.hits.append(Hit(chunk, score, tokens, concept, similarity, stage, hop))
        if self.used >= self.budget:
            self.full = True


def local_search(
    concept_similarity: np.ndarray,
    concept_chunks: sp.csc_matrix,
    adjacency: sp.csr_matrix,
    chunk_similarity: np.ndarray | ChunkScorer,
    chunk_tokens: np.ndarray,
    *,
    top_k: int,
    hops: int,
    budget: int,
    overflow: Overflow = "stop",
    seeds: np.ndarray | None = None,
    min_similarity: float | None = None,
) -> tuple[list[Hit], SearchTrace]:
    """Run local + global reranking; return the placed chunks in context order.

    ``concept_similarity`` is cos(query, concept) per concept, ``concept_chunks``
    the (chunks x concepts) links, ``chunk_similarity`` cos(query, chunk) per chunk,
    or a function scoring given chunk positions, so that only the candidate chunks
    (those of the direct and expanded concepts) are ever scored. ``seeds`` are
    concepts that lead the direct concepts (e.g. exact matches of query terms);
    the most similar other concepts fill the rest of ``top_k``. Chunks whose
    similarity is below ``min_similarity`` are passed over.
    """
    concept_chunks = sp.csc_matrix(concept_chunks)
    context = _Context(chunk_tokens, budget, overflow, min_similarity)
    usable = np.flatnonzero(np.diff(concept_chunks.indptr) > 0)
    direct = usable[top_k_indices(concept_similarity[usable], top_k)]
    if seeds is not None and len(seeds):
        lead = np.asarray(list(dict.fromkeys(int(s) for s in seeds)), dtype=np.int64)[:top_k]
        rest = usable[top_k_indices(concept_similarity[usable], top_k + len(lead))]
        direct = np.concatenate([lead, rest[~np.isin(rest, lead)]])[:top_k]
    chunk_sim = _LazyScores(chunk_similarity, len(chunk_tokens))
    chunk_sim.ensure(_columns(concept_chunks, direct))

    for concept in direct:
        start, end = concept_chunks.indptr[concept], concept_chunks.indptr[concept + 1]
        chunks = concept_chunks.indices[start:end]
        chunks = chunks[np.lexsort((chunks, -chunk_sim.values[chunks]))]
        for chunk in chunks:
            context.offer(int(chunk), float(chunk_sim.values[chunk]), int(concept),
                          float(concept_similarity[concept]), "direct", 0)
            if context.full:
                break
        if context.full:
            break

    expanded_count = 0
    if hops > 0 and not context.full and len(direct):
        hop_of = bfs_hops(adjacency, direct, hops)
        expanded = np.flatnonzero(hop_of > 0)
        expanded_count = len(expanded)
        if expanded_count:
            pool = sp.csc_matrix(concept_chunks[:, expanded]).tocoo()
            chunk_ids = pool.row.astype(np.int64)
            concepts = expanded[pool.col]
            # each chunk is credited to its nearest (then most query-similar) expanded concept
            order = np.lexsort((-concept_similarity[concepts], hop_of[concepts], chunk_ids))
            chunk_ids, concepts = chunk_ids[order], concepts[order]
            first = np.r_[True, chunk_ids[1:] != chunk_ids[:-1]]
            chunk_ids, concepts = chunk_ids[first], concepts[first]
            fresh = ~context.placed[chunk_ids]
            chunk_ids, concepts = chunk_ids[fresh], concepts[fresh]
            chunk_sim.ensure(chunk_ids)
            rerank = np.lexsort((chunk_ids, -chunk_sim.values[chunk_ids]))
            for chunk, concept in zip(chunk_ids[rerank], concepts[rerank], strict=True):
                context.offer(int(chunk), float(chunk_sim.values[chunk]), int(concept),
                              float(concept_similarity[concept]), "expanded", int(hop_of[concept]))
                if context.full:
                    break

    trace = SearchTrace(
        direct_concepts=tuple(int(c) for c in direct),
        expanded_concepts=expanded_count,
        tokens_used=context.used,
        stopped_by_budget=context.full,
    )
    return context.hits, trace


def _columns(matrix: sp.csc_matrix, columns: np.ndarray) -> np.ndarray:
    """All row indices stored in the given columns of a CSC matrix."""
    if not len(columns):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([matrix.indices[matrix.indptr[c]:matrix.indptr[c + 1]]
                           for c in columns.tolist()])


class _LazyScores:
    """Chunk-query similarities computed on first need, once per chunk."""

    def __init__(self, source: np.ndarray | ChunkScorer, n_chunks: int) -> None:
        if callable(source):
            self._scorer: ChunkScorer | None = source
            self.values = np.full(n_chunks, np.nan, dtype=np.float64)
        else:
            self._scorer = None
            self.values = np.asarray(source, dtype=np.float64)

    def ensure(self, chunks: np.ndarray) -> None:
        if self._scorer is None or not len(chunks):
            return
        missing = np.unique(chunks[np.isnan(self.values[chunks])])
        if len(missing):
            self.values[missing] = self._scorer(missing)
