"""A query's direct concepts found through HNSW instead of a scan of every concept vector.

The fused ranking seeds its evidence at the ``top_k`` concepts most similar to the
query. Finding them exactly multiplies the query by every concept vector, and a real
corpus's vocabulary keeps growing: about a million concepts at a million passages,
58-74 ms a query (``benchmarks.vocabulary``). ``concept_search="hnsw"`` asks an HNSW
graph over the concepts that link a unit for candidates instead, scores them exactly,
and keeps the best ``top_k``; every concept the ranking then reads (the direct ones,
the exact-match seeds, those BFS reaches) is scored exactly from its own vector. On
MuSiQue with MiniLM the graph finds 99.1 % of the direct concepts in 0.45 ms against
the scan's 1.98 ms (``benchmarks.concept_search``).

An update moves the vectors of the concepts whose sentences changed, and adds and
removes concepts. The graph is kept through it rather than built again
(:meth:`ConceptHnsw.refreshed`): a row stays while its concept has moved little
(``MAX_ROW_DRIFT``), since it only proposes candidates; new and moved concepts are
scanned beside it, until they are too many (``MAX_STALE_SHARE``) and the update builds
it again. It is built with the graph when ``concept_search="hnsw"`` (or by the first
query that asks for it), and saved with the index.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from .ann import EF_SEARCH, HnswVectorIndex
from .fused import reached_hops, weights_by_hop
from .vector_index import row_scores, top_k_indices

if TYPE_CHECKING:  # the state package imports the search package
    from ..state.rows import Rows

# candidates asked per direct concept: concepts tied at the last direct place then
# reach the exact scores, which break ties to the lower position as the scan does
CANDIDATES_PER_DIRECT = 2
# the search beam, twice the unit index's (``ann.EF_SEARCH``): over MuSiQue's and
# HotpotQA's 43.7 K concepts (MiniLM, 1,000 questions) the index kept 99.61 % of the
# scan's context at 256 against 98.88 % at 128, for 0.9 ms more a query (12.6 against
# 11.7 ms; the scan's 15.1); over the 100 K scale save's hashing vectors 0.85 against
# 0.80, for 0.2 ms (benchmarks/results/NOTES.md, thirty-seventh round)
BEAM = 2 * EF_SEARCH


# A concept keeps its row in the graph while its vector has moved at most this far
# (Euclidean, between unit vectors) since the row was written: the graph's inner product
# with a query then errs by at most this much, and it only proposes candidates, which are
# scored exactly. An update that moves it further puts it beside the graph (scanned).
# Measured on MuSiQue with MiniLM through ten updates of 1 % added and 0.5 % deleted
# (``benchmarks.concept_updates``, never built again): at 0.2 the kept graph found as
# many of the direct concepts as a graph built afresh, or more; at 0.4, 0.2 points
# fewer after ten updates; with no bound, 1.9 points fewer. A 1 % add moves 6 % of
# MuSiQue's concepts, half of them by more than 0.07.
MAX_ROW_DRIFT = 0.2
# Past this share stale (:meth:`ConceptHnsw.stale_share`), an update builds the graph
# again: the concepts beside it are scanned at every query, so it bounds that scan to a
# tenth of the full one.
MAX_STALE_SHARE = 0.1


@dataclass(frozen=True, eq=False)
class ConceptHnsw:
    """HNSW over the concepts that link a unit, kept through updates.

    ``row_concept`` is each graph row's concept position now (-1: dropped), ``row_drift``
    a bound on how far that concept's vector has moved since its row was written (the
    sum of each update's move), and ``beside`` the concepts that link a unit but have no
    live row (new, or moved past ``MAX_ROW_DRIFT``), sorted: they are scanned exactly at
    every query. An update derives a new one that shares the graph
    (:meth:`refreshed`), so a state's graph is never written: readers may search it.
    It is searched with a beam per call, so concurrent queries never share one.
    """

    graph: HnswVectorIndex
    row_concept: np.ndarray
    row_drift: np.ndarray
    beside: np.ndarray

    @classmethod
    def build(cls, vectors: Rows, usable: np.ndarray) -> ConceptHnsw:
        """A graph over the rows ``usable`` (sorted concept positions) of ``vectors``.

        Its vectors are quantised to a byte a dimension, as the units' are: a quarter of
        a second float32 copy, and on MuSiQue (MiniLM, ef 128) as many of the direct
        concepts found as over float32 rows (0.9932 against 0.9927), since candidates
        are scored exactly.
        """
        usable = np.asarray(usable, dtype=np.int64)
        rows = np.asarray(vectors[usable], dtype=np.float32).reshape(len(usable),
                                                                     vectors.shape[1])
        return cls(HnswVectorIndex.build(rows, "concept_search='hnsw'"), usable,
                   np.zeros(len(usable)), np.zeros(0, dtype=np.int64))

    @cached_property
    def live_rows(self) -> int:
        return int(np.count_nonzero(self.row_concept >= 0))

    def stale_share(self) -> float:
        """The larger of two costs of keeping the graph: the concepts beside it (scanned
        at every query) as a share of the concepts held, and the dropped rows (which a
        search steps over) as a share of its rows."""
        held = self.live_rows + len(self.beside)
        rows = len(self.row_concept)
        return max(len(self.beside) / held if held else 0.0,
                   (rows - self.live_rows) / rows if rows else 0.0)

    def candidates(self, vectors: Rows, query: np.ndarray, k: int) -> np.ndarray:
        """Concept positions, sorted, proposed for the ``k`` most similar: the graph's
        (asked for as many more as it holds dropped rows) and the best ``k`` beside it."""
        rows = len(self.row_concept)
        ask = min(rows, -(-k * rows // max(self.live_rows, 1)))
        found, _ = self.graph.search(query, ask, BEAM)
        proposed = self.row_concept[found]
        proposed = proposed[proposed >= 0]
        if len(self.beside):
            scores = row_scores(vectors, self.beside, query)
            proposed = np.concatenate([proposed, self.beside[top_k_indices(scores, k)]])
        return np.unique(proposed)

    def refreshed(self, new_of_old: np.ndarray, drift: np.ndarray, usable: np.ndarray,
                  max_stale_share: float | None = None) -> ConceptHnsw | None:
        """This graph after an update, or None when more than ``max_stale_share`` of it
        is stale (default ``MAX_STALE_SHARE``; :meth:`stale_share`): build one again.

        ``new_of_old`` is each old concept's new position (-1: gone), ``drift`` how far
        each new concept's vector moved (inf: new concept), ``usable`` the concepts that
        link a unit now (sorted).
        """
        was = self.row_concept
        concept = np.where(was >= 0, new_of_old[np.maximum(was, 0)], -1)
        at = np.maximum(concept, 0)
        row_drift = self.row_drift + np.where(concept >= 0, drift[at], 0.0)
        linked = np.zeros(len(drift), dtype=bool)
        linked[usable] = True
        live = (concept >= 0) & linked[at] & (row_drift <= MAX_ROW_DRIFT)
        held = np.zeros(len(drift), dtype=bool)
        held[concept[live]] = True
        usable = np.asarray(usable, dtype=np.int64)
        kept = ConceptHnsw(self.graph, np.where(live, concept, -1),
                           np.where(live, row_drift, 0.0), usable[~held[usable]])
        limit = MAX_STALE_SHARE if max_stale_share is None else max_stale_share
        return None if kept.stale_share() > limit else kept

    def check_holds(self, usable: np.ndarray, dim: int) -> None:
        """ValueError unless every concept of ``usable`` (sorted) has exactly one live row
        or is beside the graph, and nothing else is held (a saved graph's check)."""
        rows = len(self.row_concept)
        if (len(self.graph), int(self.graph.index.d)) != (rows, dim):
            raise ValueError(f"the concept graph holds {len(self.graph)} rows of "
                             f"{self.graph.index.d} dimensions; its row map has {rows}, "
                             f"the vectors {dim} dimensions")
        if self.row_drift.shape != (rows,) or not np.all(
                (self.row_drift >= 0) & (self.row_drift <= MAX_ROW_DRIFT)):
            raise ValueError(f"the concept graph's row drifts must be {rows} values "
                             f"in [0, {MAX_ROW_DRIFT}]")
        live = self.row_concept[self.row_concept >= 0]
        held = np.sort(np.concatenate([live, self.beside]))
        if (self.row_concept.min(initial=0) < -1 or np.any(np.diff(self.beside) <= 0)
                or not np.array_equal(held, usable)):
            raise ValueError("the concept graph must hold each concept that links a unit "
                             "once, by a row or beside the graph, and no other")


def direct_concepts(graph_index: ConceptHnsw, vectors: Rows, query: np.ndarray, top_k: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(direct, candidates, their cosines)``: the best ``top_k`` of the graph's
    ``CANDIDATES_PER_DIRECT * top_k`` candidates, by their exact cosines."""
    # sorted, so that equal cosines go to the lower position, as in the scan
    found = graph_index.candidates(vectors, query, CANDIDATES_PER_DIRECT * top_k)
    scores = row_scores(vectors, found, query)
    return found[top_k_indices(scores, top_k)], found, scores


def searched_weighting(graph_index: ConceptHnsw, vectors: Rows, adjacency: sp.csr_matrix,
                       query: np.ndarray, *, top_k: int, hops: int, decay: float,
                       exact: np.ndarray | None = None
                       ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """``(concept_similarity, (weights, hop_of))`` as ``search.fused.concept_weights``
    makes them, with the direct concepts the best ``top_k`` of the graph's candidates.

    ``concept_similarity`` holds the exact cosine of every concept the weighting reads
    (the candidates and every concept reached) and NaN elsewhere: nothing downstream
    reads another, and a NaN that did would not pass unseen.
    """
    n = adjacency.shape[0]
    similarity = np.full(n, np.nan, dtype=np.float32)
    direct, found, scores = direct_concepts(graph_index, vectors, query, top_k)
    similarity[found] = scores
    hop_of = reached_hops(adjacency, direct, hops, exact)
    reached = np.flatnonzero(hop_of >= 0)
    unscored = reached[np.isnan(similarity[reached])]
    if len(unscored):
        similarity[unscored] = row_scores(vectors, unscored, query)
    return similarity, (weights_by_hop(similarity, hop_of, decay, exact), hop_of)
