"""Fused concept ranking: every retrieval unit ranked at once from two views.

The paper's local search (``search.local.local_search``) fills the budget concept by
concept, so the first direct concept's chunks all come before the second's, and a
unit that matches five query concepts ranks no higher than one that matches one.
Here the concept graph instead supplies *evidence* for every unit:

    evidence(u) = sum over the concepts c linked to u of idf(c) * w(c)

where ``w(c) = max(0, cos(query, c))`` for the ``top_k`` direct concepts, that
times ``decay ** hop`` for the concepts BFS reaches within ``hops``, and 1 for
query terms that are concepts when exact matching is on. Units are then ordered
by reciprocal-rank fusion of their evidence rank and their query-similarity rank
(the paper's reranking score): ``1/(k + rank_sim) + 1/(k + rank_evidence)``, the
second term only for units with evidence, plus optionally a lexical (BM25) rank
the same way, for the names and numbers a small embedder blurs. ``benchmarks/RESULTS.md`` has the
measurements that made this the default ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..config import Overflow
from ..graph.concepts import smoothed_idf
from ..graph.entries import column_entry_counts, entry_counts
from ..graph.pagerank import bfs_reached
from ..select.scores import rank_by_score
from .candidates import (
    PositiveView,
    RescoredView,
    ScannedSimilarity,
    UnitSimilarity,
    UnitView,
    count_better,
    top_positions,
)
from .local import Hit, SearchTrace, Stage, fill_budget
from .postings import postings_view
from .side_thread import part_beside
from .sparse_values import SparseValues, distinct_sorted, sorted_index_of
from .vector_index import top_k_indices
from .walk import WalkGraph


def inverse_document_frequency(unit_links: sp.spmatrix) -> np.ndarray:
    """Smoothed idf of each concept over the retrieval units: log((n+1)/(df+1)) + 1."""
    n_units = unit_links.shape[0]
    df = column_entry_counts(unit_links, "positive").astype(np.float64)
    return smoothed_idf(n_units, df)


def descending_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of every entry by descending score; ties go to the lower index."""
    order = rank_by_score(scores)
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


@dataclass(frozen=True, eq=False)
class ConceptWeighting:
    """The concepts one query's evidence reads, ascending, and what it reads of each:
    hop (0 direct or an exact seed, > 0 reached by BFS), cosine to the query, and
    evidence weight. Only these: the vocabulary grows with the corpus
    (``search.sparse_values``)."""

    concepts: np.ndarray
    hops: np.ndarray
    similarity: np.ndarray
    weights: np.ndarray

    def values(self, idf: np.ndarray) -> SparseValues:
        """Each concept's evidence value, ``weight * idf``."""
        return SparseValues(self.concepts, self.weights * idf[self.concepts])

    def index_of(self, concepts: np.ndarray) -> np.ndarray:
        """Where each of ``concepts`` sits here, -1 where the query did not reach it."""
        return sorted_index_of(self.concepts, concepts)

    def direct(self) -> np.ndarray:
        """The direct concepts (and exact seeds), most similar first, ties to the lower."""
        hop0 = self.hops == 0
        return self.concepts[hop0][np.argsort(-self.similarity[hop0], kind="stable")]

    @property
    def expanded_count(self) -> int:
        return int(np.count_nonzero(self.hops > 0))


def concept_weights(
    concept_similarity: np.ndarray,
    adjacency: sp.csr_matrix,
    *,
    top_k: int,
    hops: int,
    decay: float,
    exact: np.ndarray | None = None,
    usable: np.ndarray | None = None,
) -> ConceptWeighting:
    """The concepts the evidence reads, from every concept's cosine to the query.

    ``usable`` (concept positions) limits the direct concepts to those that link a
    unit, as the paper's search does, so a unit-less concept never takes a seed slot.
    """
    n = len(concept_similarity)
    pool = np.arange(n) if usable is None else np.asarray(usable, dtype=np.int64)
    direct = pool[top_k_indices(concept_similarity[pool], top_k)]
    concepts, hop = reached_concepts(adjacency, direct, hops, exact)
    return weighted(concepts, hop, concept_similarity[concepts], decay, exact)


def reached_concepts(adjacency: sp.csr_matrix, direct: np.ndarray, hops: int,
                     exact: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The concepts within ``hops`` of the direct concepts and the ``exact`` seeds
    (ascending), and each one's hop."""
    if exact is not None and len(exact):
        direct = np.union1d(direct, exact)
    if not adjacency.shape[0]:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return bfs_reached(adjacency, direct, hops)


def weighted(concepts: np.ndarray, hops: np.ndarray, similarity: np.ndarray, decay: float,
             exact: np.ndarray | None = None) -> ConceptWeighting:
    """The reached ``concepts`` with their evidence weights: max(0, cos) * decay ** hop,
    1 for the ``exact`` seeds (all of them among ``concepts``)."""
    weights = (np.maximum(similarity, 0.0) * decay ** hops).astype(np.float64, copy=False)
    if exact is not None and len(exact):
        at = sorted_index_of(concepts, exact)
        weights[at[at >= 0]] = 1.0
    return ConceptWeighting(concepts, hops, similarity, weights)


def fused_search(
    concept_similarity: np.ndarray | None,
    unit_links: sp.csr_matrix,
    adjacency: sp.csr_matrix,
    unit_similarity: np.ndarray | UnitSimilarity,
    unit_tokens: np.ndarray,
    idf: np.ndarray,
    *,
    lexical: np.ndarray | UnitView | None = None,
    top_k: int,
    hops: int,
    decay: float,
    rrf_k: int,
    budget: int,
    overflow: Overflow = "stop",
    exact: np.ndarray | None = None,
    usable: np.ndarray | None = None,
    min_similarity: float | None = None,
    candidates: int | None = None,
    unit_links_csc: sp.csc_matrix | None = None,
    walk: WalkGraph | None = None,
    walk_seeds: np.ndarray | None = None,
    walk_hops: int = 0,
    walk_width: int = 200,
    walk_postings: int | None = None,
    weighting: ConceptWeighting | None = None,
    evidence_found: np.ndarray | None = None,
    ranks_beside: bool = False,
) -> tuple[list[Hit], SearchTrace]:
    """Fill the budget with units in fused order; each hit names its strongest concept.

    ``unit_links`` is (units x concepts), ``unit_similarity`` cos(query, unit) for
    every unit or a :class:`~shared_core.search.candidates.UnitSimilarity` view,
    ``lexical`` (optional) a third view such as BM25, every unit's score or a view
    (``search.candidates.UnitView``), fused like the evidence (no term where it is 0). A
    unit placed without any concept evidence has stage
    ``"similarity"`` and concept -1. ``usable`` (concepts that link a unit) is
    derived from ``unit_links`` when not given. Units whose similarity is below
    ``min_similarity`` are never placed, whatever their evidence.

    ``candidates`` limits the ranking to the pool of the best ``candidates`` units
    of each view; ``None`` ranks every unit. A unit outside the pool ranks beyond
    ``candidates`` in every view, so it scores under ``3 / (rrf_k + candidates)``
    and the ``(candidates + 1 - 2 rrf_k) / 3`` best units by similarity alone all
    score more: with ``candidates`` well above the units a budget holds, the
    context is the one a full ranking gives. A pool unit's rank in a view where it
    is not among the best is exact when few units remain, estimated from an even
    sample of them otherwise (``search.candidates.ranks_beyond``).

    ``weighting`` is :func:`concept_weights` of these arguments, made by a caller that
    searched a concept graph instead of scanning every concept
    (``search.concepts.searched_weighting``; ``concept_similarity`` may then be None,
    nothing else reads it), or that needed the concept values first: to ask an engine
    for the units with evidence (``evidence_found``: its term postings,
    ``search.external.TermPostingsBackend``) in the same request as the BM25 view's.
    Those units are scored exactly here (:func:`found_evidence_view`); without
    ``evidence_found`` the postings are read here.

    ``ranks_beside`` ranks the pool by similarity on the query's second thread while
    this one ranks it in the other views (``search.side_thread``): at a million passages
    the two take about as long (``benchmarks/results/NOTES.md``, fifty-third round).
    """
    if evidence_found is not None and weighting is None:
        raise ValueError("evidence_found needs the weighting its concept values came from")
    if weighting is None:
        if concept_similarity is None:
            raise ValueError("fused_search needs concept_similarity or a weighting")
        if usable is None:  # an index passes it: it is the same per query
            usable = np.flatnonzero(np.bincount(unit_links.indices,
                                                minlength=len(concept_similarity)))
        weighting = concept_weights(concept_similarity, adjacency, top_k=top_k, hops=hops,
                                    decay=decay, exact=exact, usable=usable)
    similarity = (ScannedSimilarity(np.asarray(unit_similarity))
                  if isinstance(unit_similarity, np.ndarray) else unit_similarity)
    concept_value = weighting.values(idf)
    links_csc = sp.csc_matrix(unit_links) if unit_links_csc is None else unit_links_csc
    views: list[UnitView] = [
        evidence_view(links_csc, concept_value, unit_links) if evidence_found is None
        else found_evidence_view(evidence_found, unit_links, concept_value)]
    if isinstance(lexical, np.ndarray):
        views.append(PositiveView.of_scores(np.asarray(lexical, dtype=np.float64)))
    elif lexical is not None:
        views.append(lexical)
    if walk_hops:
        graph = walk or WalkGraph(sp.csr_matrix(unit_links), given_csc=links_csc)
        if walk_seeds is None:
            seeds = concept_value.where(weighting.hops == 0)
        else:
            seeded = distinct_sorted(np.asarray(walk_seeds, dtype=np.int64))
            seeds = SparseValues(seeded, idf[seeded])
        if walk_postings is None:
            views.append(PositiveView.of_scores(graph.unit_scores(
                seeds, similarity.n_units, hops=walk_hops, width=walk_width)))
        else:
            views.append(graph.unit_view(seeds, similarity.n_units, hops=walk_hops,
                                         width=walk_width, max_postings=walk_postings))
    view_tops = [view.top(candidates) for view in views]
    top_units, top_sims = similarity.top(candidates)
    if candidates is None:
        pool = np.arange(similarity.n_units)
    else:
        pool = distinct_sorted(np.concatenate([top_units, *view_tops])).astype(np.int64)
    with part_beside(lambda: similarity_ranks(similarity, pool, top_units, top_sims),
                     beside=ranks_beside) as ranked_by_similarity:
        view_terms = []
        for view, view_top in zip(views, view_tops, strict=True):
            ranks = view.ranks(pool, view_top)
            view_terms.append((ranks > 0) / (rrf_k + ranks))
        sims, sim_ranks = ranked_by_similarity.result()
    fused = 1.0 / (rrf_k + sim_ranks)
    for term in view_terms:  # the sums of one thread's ranking, in its order
        fused += term
    ranked = rank_by_score(fused)
    if min_similarity is not None:
        ranked = ranked[sims[ranked] >= min_similarity]
    order = pool[ranked]
    placed = fill_budget(order, unit_tokens, budget, overflow)
    best = strongest_concept(unit_links, placed, concept_value)
    score_of = dict(zip(order.tolist(), fused[ranked].tolist(), strict=True))
    at = weighting.index_of(best)  # a unit's strongest concept has a value: it was reached
    hits = []
    for unit, concept, i in zip(placed.tolist(), best.tolist(), at.tolist(), strict=True):
        hop = int(weighting.hops[i]) if concept >= 0 else 0
        stage: Stage = "similarity" if concept < 0 else "direct" if hop == 0 else "expanded"
        concept_sim = float(weighting.similarity[i]) if concept >= 0 else 0.0
        hits.append(Hit(unit, score_of[unit], int(unit_tokens[unit]), concept, concept_sim,
                        stage, hop))
    trace = SearchTrace(
        direct_concepts=tuple(int(c) for c in weighting.direct()),
        expanded_concepts=weighting.expanded_count,
        tokens_used=int(unit_tokens[placed].sum()),
        stopped_by_budget=len(placed) < len(order),
    )
    return hits, trace


def similarity_ranks(similarity: UnitSimilarity, pool: np.ndarray, top_units: np.ndarray,
                     top_sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pool unit's cosine and its 1-based rank by cosine among all units.

    ``top_units`` is the similarity view's best list. From a vector index it is
    approximate: a pool unit found through another view can score, exactly,
    above the list's last unit. Such a unit belongs inside the list, so it and
    the list are ranked together by exact score; only units that rank below the
    whole list get a rank estimated beyond it (``ranks_below``).
    """
    in_top = top_positions(pool, top_units)
    sim_ranks = in_top + 1.0
    below = in_top < 0
    sims = np.empty(len(pool), dtype=np.float64)
    sims[~below] = top_sims[in_top[~below]]  # scored once, when they were found
    if not below.any():
        return sims, sim_ranks
    sims[below] = similarity.score(pool[below])
    inside = np.zeros(len(pool), dtype=bool)
    if len(top_units):  # above the last listed unit: a higher cosine, or equal and lower id
        last_sim, last_unit = float(top_sims[-1]), int(top_units[-1])
        inside[below] = (sims[below] > last_sim) | ((sims[below] == last_sim)
                                                    & (pool[below] < last_unit))
    beyond = below & ~inside
    if beyond.any():  # below the list and every unit it missed (the sample may not say so)
        sim_ranks[beyond] = np.maximum(
            similarity.ranks_below(pool[beyond], sims[beyond], top_units),
            len(top_units) + np.count_nonzero(inside) + 1.0)
    if inside.any():  # the list and the units it missed, ranked together
        listed = ~beyond
        known_units = np.concatenate([top_units, pool[inside]])
        known_sims = np.concatenate([np.asarray(top_sims, dtype=np.float64), sims[inside]])
        sim_ranks[listed] = 1.0 + count_better(known_units, known_sims, pool[listed],
                                               sims[listed])
    return sims, sim_ranks


def evidence_view(links_csc: sp.csc_matrix, concept_value: SparseValues,
                  links_csr: sp.spmatrix | None = None) -> PositiveView:
    """The units with evidence and their evidence, reading only the postings of concepts
    with a value.

    The sum over a unit's concepts runs in ascending concept order, as a row
    product would, so the result is the same to the last bit. When the valued
    concepts' postings are most of the matrix anyway, one row product (CSR, the
    faster layout) replaces the posting reads: a zero adds nothing.
    """
    valued = concept_value.where(concept_value.values != 0)
    if int(entry_counts(links_csc, valued.positions).sum()) * 2 >= links_csc.nnz:
        links = links_csc if links_csr is None else links_csr
        return PositiveView.of_scores(np.asarray(links @ valued.dense(links_csc.shape[1]),
                                                 dtype=np.float64).ravel())
    return postings_view(links_csc, valued.positions, valued.values)


def found_evidence_view(found: np.ndarray, unit_links: sp.csr_matrix,
                        concept_value: SparseValues) -> RescoredView:
    """The evidence view over units found elsewhere (an engine's postings): each scored
    exactly from its own row of ``unit_links``, the same sum in the same order as
    :func:`evidence_view`'s, and ranked beyond the found ones from an even sample."""
    # as given when CSR: scipy's constructor may copy a mapped matrix's indices
    links = unit_links if isinstance(unit_links, sp.csr_matrix) else sp.csr_matrix(unit_links)
    dense = concept_value.dense(links.shape[1])

    def exact(units: np.ndarray) -> np.ndarray:
        if not len(units):
            return np.zeros(0, dtype=np.float64)
        return np.asarray(links[units] @ dense, dtype=np.float64).ravel()

    return RescoredView.of_found(found, exact, links.shape[0])


def strongest_concept(unit_links: sp.csr_matrix, units: np.ndarray,
                      concept_value: np.ndarray | SparseValues) -> np.ndarray:
    """For each unit, its linked concept of largest positive value (-1 if none).

    Ties go to the lower concept index, as ``argmax`` would; one sort for all units.
    """
    rows_of = sp.csr_matrix(unit_links[units])
    rows = np.repeat(np.arange(len(units)), np.diff(rows_of.indptr))
    values = (concept_value.at(rows_of.indices) if isinstance(concept_value, SparseValues)
              else concept_value[rows_of.indices])
    order = np.lexsort((rows_of.indices, -values, rows))
    first = np.r_[True, rows[order][1:] != rows[order][:-1]] if len(order) else order.astype(bool)
    best = np.full(len(units), -1, dtype=np.int64)
    winners = order[first]
    positive = values[winners] > 0
    best[rows[winners][positive]] = rows_of.indices[winners][positive]
    return best
