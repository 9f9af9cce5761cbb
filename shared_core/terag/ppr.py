"""Personalized PageRank on TERAG's directed graph, by sparse power iteration.

networkx's definition (``nx.pagerank`` with ``personalization`` and
``dangling=None``): a walker at a node without out-edges restarts from the
personalization vector. The loop itself is :func:`shared_core.graph.power_iteration`,
shared with the concept graph's PageRank.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..graph import power_iteration
from .seeds import Seed, restart_vector


def personalized_pagerank(
    adjacency: sp.spmatrix,
    personalization: np.ndarray,
    damping: float = 0.85,
    tol: float = 1e-8,
    max_iter: int = 200,
) -> tuple[np.ndarray, int]:
    """PPR on a directed 0/1 or weighted graph (``adjacency[i, j]`` = edge i -> j).

    Power iteration until the L1 change is below ``tol``; returns the scores
    (summing to 1) and the iterations run.
    """
    adj = sp.csr_matrix(adjacency, dtype=np.float64)
    n = adj.shape[0]
    p = np.asarray(personalization, dtype=np.float64)
    if adj.shape != (n, n) or p.shape != (n,):
        raise ValueError(f"adjacency {adj.shape} and personalization {p.shape} do not match")
    if (p < 0).any() or p.sum() <= 0:
        raise ValueError("personalization must be non-negative with a positive sum")
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping!r}")
    p = p / p.sum()
    return power_iteration(transition_transpose(adj), out_degree(adj) == 0, p, damping,
                           tol, max_iter)


def out_degree(adj: sp.csr_matrix) -> np.ndarray:
    """Row sums: a node's out-degree on a 0/1 graph (0 marks a dangling node)."""
    return np.asarray(adj.sum(axis=1)).ravel()


def transition_transpose(adj: sp.csr_matrix) -> sp.csr_matrix:
    """Column-stochastic P^T (rows of dangling nodes stay zero), for x <- P^T x."""
    degree = out_degree(adj)
    inv = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    return sp.csr_matrix((sp.diags(inv) @ adj).T)


def ranked_passages(passage_mass: np.ndarray) -> np.ndarray:
    """Passages the walk reached (mass > 0), most PPR mass first, ties to the lower index."""
    reached = np.flatnonzero(passage_mass > 0)
    return reached[np.lexsort((reached, -passage_mass[reached]))]


def passage_mass(transition_t: sp.csr_matrix, dangling: np.ndarray, seeds: Sequence[Seed],
                 n_passages: int, *, damping: float, tol: float,
                 max_iter: int) -> tuple[np.ndarray, int]:
    """PPR from ``seeds`` (Eq. 5's restart vector); the passages' mass and the iterations.

    Graph nodes are passages first, then concepts (:mod:`.graph`); a seed's node is
    its concept index plus ``n_passages``.
    """
    restart = restart_vector(seeds, transition_t.shape[0], n_passages)
    rank, iterations = power_iteration(transition_t, dangling, restart, damping, tol, max_iter)
    return rank[:n_passages], iterations
