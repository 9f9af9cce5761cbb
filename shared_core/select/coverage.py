"""Coverage-aware selection: core chunks that together carry the most concept mass.

Ranking chunks by the PageRank of their own concepts keeps chunks that say the
same things: the ten chunks about the most central concept all score high, and
the second nine add nothing the first did not. Greedy weighted max-coverage
instead picks, at each step, the chunk whose *not yet covered* concepts carry the
most weight per token. Coverage is a monotone submodular function, so greedy
gets within (1 - 1/e) of the best selection of its size (Nemhauser, Wolsey and
Fisher, 1978); per token it is the usual cost-scaled greedy.

With ``repeat`` in (0, 1) a concept seen ``n`` times already still counts
``repeat ** n`` of its weight (a softer, still submodular, coverage): a second
chunk about a central concept is worth something, a tenth almost nothing.
"""

from __future__ import annotations

import heapq

import numpy as np
import scipy.sparse as sp

from .scores import chunk_scores


def coverage_order(chunk_links: sp.csr_matrix, concept_weight: np.ndarray,
                   cost: np.ndarray, *, repeat: float = 0.0) -> np.ndarray:
    """Chunk indices in greedy max-coverage order: best marginal weight per unit of cost.

    ``chunk_links`` is (chunks x concepts), ``concept_weight`` non-negative,
    ``cost`` positive per chunk (tokens, or ones to count chunks). Lazy greedy:
    a chunk's gain only falls as others are picked, so a stale gain that still
    tops the heap after recomputing is the true best. Ties go to the lower
    index. Once nothing more can be gained (``repeat`` 0 and every weighted
    concept covered), the rest follow by their full weight per cost.
    """
    if not 0.0 <= repeat < 1.0:
        raise ValueError(f"repeat must be in [0, 1), got {repeat!r}")
    links = sp.csr_matrix(chunk_links)
    weight = np.asarray(concept_weight, dtype=np.float64)
    cost = np.maximum(np.asarray(cost, dtype=np.float64), 1e-12)
    n = links.shape[0]
    indptr, indices = links.indptr, links.indices
    full = chunk_scores(links, weight, "sum") / cost
    # counted[c]: the factor a concept still counts with (1, then repeat, repeat**2 ...)
    counted = np.ones(len(weight), dtype=np.float64)
    heap = [(-gain, i) for i, gain in enumerate(full.tolist())]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        concepts = indices[indptr[i]:indptr[i + 1]]
        gain = float(weight[concepts] @ counted[concepts]) / cost[i]
        if heap and (-gain, i) > heap[0]:  # another chunk may still gain more
            heapq.heappush(heap, (-gain, i))
            continue
        if gain <= 0.0:  # the best left gains nothing: neither does any other
            break
        order.append(i)
        counted[concepts] *= repeat
    picked = np.zeros(n, dtype=bool)
    picked[order] = True
    rest = np.flatnonzero(~picked)
    rest = rest[np.lexsort((rest, -full[rest]))]
    return np.concatenate([np.asarray(order, dtype=np.int64), rest.astype(np.int64)])


def order_scores(order: np.ndarray) -> np.ndarray:
    """Scores that rank chunks in ``order`` (first highest), for the score-based selection."""
    scores = np.empty(len(order), dtype=np.float64)
    scores[order] = np.arange(len(order), 0, -1, dtype=np.float64)
    return scores

