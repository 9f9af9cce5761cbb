"""Walks on the concept graph: PageRank (conjugate gradients on an undirected graph, power
iteration otherwise; TERAG's PPR by power iteration), BFS hops."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .entries import compressed_entries, entry_counts


def pagerank(
    adj: sp.csr_matrix,
    damping: float = 0.85,
    tol: float = 1e-10,
    max_iter: int = 200,
    start: np.ndarray | None = None,
    symmetric: bool = False,
) -> np.ndarray:
    """PageRank on a weighted graph (networkx's definition), to ``n * tol`` in L1.

    Dangling nodes (no edges) spread their mass uniformly; scores sum to 1.
    ``start`` warm-starts the solver (e.g. the rank before a small update): the
    fixed point is the same, within the tolerance, in fewer iterations.
    ``symmetric``: ``adj`` equals its transpose (an undirected graph, as the
    concept graph is). PageRank is then a symmetric positive definite system,
    solved by conjugate gradients (:func:`symmetric_pagerank`) in about half the
    products of power iteration. Otherwise it is power iteration.
    """
    n = adj.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    if symmetric:
        return symmetric_pagerank(adj, damping, n * tol, max_iter, start)[0]
    transition, dangling = _transition(adj)
    return power_iteration(transition, dangling, None, damping, n * tol, max_iter, start)[0]


def symmetric_pagerank(
    adj: sp.csr_matrix,
    damping: float,
    tol: float,
    max_iter: int,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """PageRank of an undirected graph by conjugate gradients; scores and iterations.

    With A symmetric and D its out-weights, PageRank solves
    ``x = d·(A D⁻¹ x + s/n) + (1-d)/n``, s the dangling nodes' mass. Its solution is
    ``c·z`` for ``z = d·A D⁻¹ z + 1/n`` (``c`` makes it sum to 1), and ``z = D^½ y``
    turns that into ``(I - d·D^-½ A D^-½) y = D^-½ / n``: symmetric, with eigenvalues
    in [1-d, 1+d], so conjugate gradients contract the error by
    (√κ-1)/(√κ+1) = 0.56 a step at d = 0.85 (κ = (1+d)/(1-d)), where power iteration
    contracts it by d = 0.85. Isolated nodes have ``z = 1/n``.

    The stop is power iteration's: the L1 distance one power step would move the
    result, which here is ``c·|D^½ r|₁`` for the system's residual r, below ``tol``.
    The residual is recomputed from the solution before stopping, so rounding in the
    recurrence cannot end it early. A negative weight (not a PageRank graph) raises.
    """
    n = adj.shape[0]
    if adj.nnz and float(adj.data.min()) < 0:
        raise ValueError("PageRank needs non-negative edge weights")
    out_weight = np.asarray(adj.sum(axis=1)).ravel()
    dangling = out_weight == 0
    root = np.sqrt(out_weight)  # D^1/2 (0 for dangling nodes)
    inverse_root = np.divide(1.0, root, out=np.zeros(n), where=~dangling)  # D^-1/2

    def system(y: np.ndarray) -> np.ndarray:  # (I - d D^-1/2 A D^-1/2) y
        return y - damping * (inverse_root * (adj @ (inverse_root * y)))

    # z is 1/n at the isolated nodes whatever y is, so the scale c is fixed
    scale = (1 - damping) / (1 - damping * float(dangling.sum()) / n)

    def moves(residual: np.ndarray) -> float:  # L1 of one power step from c·z
        return scale * float(np.abs(root * residual).sum())

    target = inverse_root / n
    if start is None:
        y = np.zeros(n)
    else:
        if start.shape != (n,) or not np.all(start >= 0) or start.sum() <= 0:
            raise ValueError("start must be a non-negative vector with one entry per node")
        y = inverse_root * (np.asarray(start, dtype=np.float64) / start.sum()) / scale
    iterations = 0
    while True:  # a restart only if the recurrence's residual drifted from the true one
        residual = target - system(y)
        moved = moves(residual)
        if moved < tol or moved == 0.0 or iterations >= max_iter:
            rank = scale * (root * y)
            rank[dangling] = scale / n
            return rank / rank.sum(), iterations
        direction = residual.copy()
        squared = _dot(residual, residual)
        while iterations < max_iter and squared > 0.0:
            iterations += 1
            product = system(direction)
            step = squared / _dot(direction, product)
            y += step * direction
            residual -= step * product
            if moves(residual) < tol:
                break
            squared, previous = _dot(residual, residual), squared
            direction = residual + (squared / previous) * direction


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """a·b without BLAS: on a busy two-core machine OpenBLAS's threads, woken for a dot
    of 65 K entries, took 8-16 ms a call (and slowed the sparse products after it)."""
    return float(np.einsum("i,i->", a, b))


def pagerank_residual(adj: sp.csr_matrix, rank: np.ndarray, damping: float = 0.85) -> float:
    """L1 distance ``rank`` moves in one power step: ~0 for the PageRank of ``adj``."""
    n = adj.shape[0]
    # P^T x = A^T (x / out-weight): one product, no transition matrix built (a load checks
    # a saved rank this way; the rounding differs from power_iteration's by ~1e-16 a node)
    inv, dangling = _inverse_out_weights(adj)
    spread = rank * inv
    step = damping * (adj.T @ spread + rank[dangling].sum() / n) + (1 - damping) / n
    return float(np.abs(step - rank).sum())


def _transition(adj: sp.csr_matrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """The column-stochastic transition matrix (transposed rows) and the dangling nodes."""
    inv, dangling = _inverse_out_weights(adj)
    return sp.csr_matrix(sp.diags(inv) @ adj).T.tocsr(), dangling


def _inverse_out_weights(adj: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """1 / each node's out-weight (0 for a dangling node), and the dangling nodes."""
    out_weight = np.asarray(adj.sum(axis=1)).ravel()
    dangling = out_weight == 0
    return np.divide(1.0, out_weight, out=np.zeros(len(out_weight)), where=~dangling), dangling


def power_iteration(
    transition_t: sp.csr_matrix | spla.LinearOperator,
    dangling: np.ndarray,
    restart: np.ndarray | None,
    damping: float,
    tol: float,
    max_iter: int,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """x <- d·(P^T x + dangling mass·r) + (1-d)·r until the L1 change is below ``tol``.

    One loop for PageRank and TERAG's PPR: ``restart`` is the distribution r (also
    the start), or None for uniform, computed as ``/ n`` rather than ``* (1/n)`` so
    PageRank keeps its exact floats. ``start`` replaces the starting vector (it is
    scaled to sum to 1). Returns the scores (summing to 1) and iterations.
    """
    n = transition_t.shape[0]
    if start is not None:
        if start.shape != (n,) or not np.all(start >= 0) or start.sum() <= 0:
            raise ValueError("start must be a non-negative vector with one entry per node")
        x = np.asarray(start, dtype=np.float64) / start.sum()
    else:
        x = np.full(n, 1.0 / n) if restart is None else restart.copy()
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 (the count is returned)
        previous = x
        spill = previous[dangling].sum()
        if restart is None:
            x = damping * (transition_t @ previous + spill / n) + (1 - damping) / n
        else:
            x = damping * (transition_t @ previous + spill * restart) + (1 - damping) * restart
        if np.abs(x - previous).sum() < tol:
            break
    return x / x.sum(), iterations


def bfs_hops(adj: sp.csr_matrix, seeds: np.ndarray, max_hops: int) -> np.ndarray:
    """Hop distance from the nearest seed for every concept (-1 when unreached):
    :func:`bfs_reached` laid out over all of them."""
    hops = np.full(adj.shape[0], -1, dtype=np.int64)
    reached, hop = bfs_reached(adj, seeds, max_hops)
    hops[reached] = hop
    return hops


def bfs_reached(adj: sp.csr_matrix, seeds: np.ndarray, max_hops: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The concepts within ``max_hops`` of a seed (ascending) and each one's hop distance.

    Per hop, a small frontier's adjacency rows are gathered (the cost is their
    entries); a frontier whose rows hold more than a quarter of the entries takes
    one sparse matrix-vector product instead. The gather follows every stored
    entry and the product every positive one, the same set for a graph whose
    weights are positive, as a concept graph's are; no Python loop over nodes or
    pairs, and nothing as long as the graph unless the product is taken.
    """
    n = adj.shape[0]
    frontier = np.unique(np.asarray(seeds, dtype=np.int64))
    reached, hops = [frontier], [np.zeros(len(frontier), dtype=np.int64)]
    seen = frontier
    for hop in range(1, max_hops + 1):
        if not len(frontier):
            break
        if int(entry_counts(adj, frontier).sum()) * 4 < adj.nnz:
            neighbours, _ = compressed_entries(adj, frontier)
            touched = np.unique(neighbours).astype(np.int64, copy=False)
        else:
            in_frontier = np.zeros(n, dtype=np.float64)
            in_frontier[frontier] = 1.0
            touched = np.flatnonzero((adj.T @ in_frontier) > 0)
        frontier = touched[~np.isin(touched, seen, assume_unique=True)]
        reached.append(frontier)
        hops.append(np.full(len(frontier), hop, dtype=np.int64))
        seen = np.union1d(seen, frontier)
    concepts = np.concatenate(reached)
    order = np.argsort(concepts, kind="stable")
    return concepts[order], np.concatenate(hops)[order]
