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

The graph is built from a state's concept vectors the first time a query needs it and
kept with that state: an update makes a new state, whose first such query builds its
own (2.3 s over 30 K concepts, 30 s over 212 K on two cores). It suits indexes that
are queried far more than updated; it is not saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from .ann import EF_CONSTRUCTION, LINKS_PER_NODE, HnswVectorIndex, _faiss
from .fused import reached_hops, weights_by_hop
from .vector_index import row_scores, top_k_indices

if TYPE_CHECKING:  # the state package imports the search package
    from ..state.rows import Rows

# candidates asked per direct concept: concepts tied at the last direct place then
# reach the exact scores, which break ties to the lower position as the scan does.
# The beam is the unit index's (``ann.EF_SEARCH``, 128): 99.1 % of MuSiQue's direct
# concepts (top_k 25, MiniLM) in 0.4 ms
CANDIDATES_PER_DIRECT = 2


@dataclass(frozen=True, eq=False)
class ConceptHnsw:
    """HNSW over the vectors of the concepts ``usable`` (those that link a unit); it is
    searched as the units' HNSW is, with a beam per call, so concurrent queries never
    share one."""

    graph: HnswVectorIndex
    usable: np.ndarray

    @classmethod
    def build(cls, vectors: Rows, usable: np.ndarray) -> ConceptHnsw:
        faiss = _faiss("concept_search='hnsw'")
        usable = np.asarray(usable, dtype=np.int64)
        rows = np.ascontiguousarray(np.asarray(vectors[usable], dtype=np.float32))
        index = faiss.IndexHNSWFlat(rows.shape[1], LINKS_PER_NODE, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = EF_CONSTRUCTION
        if len(rows):
            index.add(rows)
        return cls(HnswVectorIndex(index), usable)

    def candidates(self, query: np.ndarray, k: int) -> np.ndarray:
        """Concept positions the graph proposes for the ``k`` most similar (up to ``k``)."""
        rows, _ = self.graph.search(query, k)
        return self.usable[rows]


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
    # ascending, so that equal cosines go to the lower position, as in the scan
    found = np.sort(graph_index.candidates(query, CANDIDATES_PER_DIRECT * top_k))
    similarity[found] = row_scores(vectors, found, query)
    direct = found[top_k_indices(similarity[found], top_k)]
    hop_of = reached_hops(adjacency, direct, hops, exact)
    reached = np.flatnonzero(hop_of >= 0)
    unscored = reached[np.isnan(similarity[reached])]
    if len(unscored):
        similarity[unscored] = row_scores(vectors, unscored, query)
    return similarity, (weights_by_hop(similarity, hop_of, decay, exact), hop_of)
