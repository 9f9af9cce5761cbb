"""The concept graph's edges: sentence-level concept vectors and filtered co-occurrence.

G2ConS §3.2: an edge joins concepts w_i, w_j iff Co(w_i, w_j) >= theta_co (chunks
in which both occur) and cos(Vector(w_i), Vector(w_j)) >= theta_sem, weighted by
the Dice coefficient 2·Co / (|T_i| + |T_j|). Every step is sparse linear algebra;
cosines are computed only for pairs that pass the co-occurrence threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..embeddings.base import sparse_times_vectors

# Pairs whose cosines are taken at a time. The gathered rows stay in cache: blocks of
# 2^18 pairs (800 MB of gathered rows) ran 3.6x slower here (benchmarks/RESULTS.md).
PAIR_BLOCK = 2048


def concept_vectors(
    sentence_concepts: sp.csr_matrix, sentence_embeddings: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 1: each concept's vector is the mean embedding of the sentences containing it.

    ``sentence_concepts`` is a (sentences x concepts) 0/1 matrix. Returns the unit-norm
    mean vectors and |S_w|. A concept with no sentence gets a zero vector (and
    similarity 0 to everything), never a chunk-level stand-in: the paper's ablation
    shows chunk-level vectors collapse retrieval.
    """
    incidence = sp.csc_matrix(sentence_concepts, dtype=np.float32)
    incidence.data[:] = 1.0
    counts = np.asarray(incidence.sum(axis=0)).ravel().astype(np.int64)
    sums = np.asarray(sparse_times_vectors(incidence.T, sentence_embeddings), dtype=np.float32)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    vectors = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)
    return np.ascontiguousarray(vectors, dtype=np.float32), counts


def cooccurrence(chunk_links: sp.csr_matrix) -> sp.csr_matrix:
    """Co(w_i, w_j): the number of chunks linked to both concepts (diagonal removed)."""
    links = sp.csr_matrix(chunk_links, dtype=np.int32)
    links.data[:] = 1
    co = sp.csr_matrix(links.T @ links)
    co.setdiag(0)
    co.eliminate_zeros()
    return co


@dataclass(frozen=True)
class ConceptEdges:
    """Undirected edges, one row per pair with source < target."""

    source: np.ndarray
    target: np.ndarray
    cooccurrence: np.ndarray
    cosine: np.ndarray
    dice: np.ndarray

    def __len__(self) -> int:
        return len(self.source)


def concept_edges(
    chunk_links: sp.csr_matrix,
    vectors: np.ndarray,
    theta_co: int,
    theta_sem: float,
) -> ConceptEdges:
    """The semantically filtered co-occurrence edges with their Dice weights."""
    co = sp.triu(cooccurrence(chunk_links), k=1).tocoo()
    strong = co.data >= theta_co
    return _filtered(co.row[strong], co.col[strong], co.data[strong], vectors, theta_sem,
                     chunk_counts(chunk_links))


def chunk_counts(chunk_links: sp.spmatrix) -> np.ndarray:
    """|T_w|: how many chunks each concept links (the Dice denominators), float64."""
    return np.asarray((sp.csc_matrix(chunk_links) != 0).sum(axis=0)).ravel().astype(np.float64)


def edges_touching(
    chunk_links_csc: sp.csc_matrix,
    vectors: np.ndarray,
    theta_co: int,
    theta_sem: float,
    concepts: np.ndarray,
) -> ConceptEdges:
    """The edges :func:`concept_edges` gives that have an endpoint in ``concepts``.

    An incremental refresh recomputes only these: co-occurrence counts, cosines
    and Dice weights of every other pair depend on columns that did not change.
    The cost is the co-occurrence rows of ``concepts`` alone.
    """
    links = sp.csc_matrix(chunk_links_csc, dtype=np.int32)
    links.data[:] = 1
    concepts = np.asarray(concepts, dtype=np.int64)
    co = sp.csr_matrix(links[:, concepts].T @ links.tocsr()).tocoo()
    strong = co.data >= theta_co  # most pairs fail it: drop them before anything else
    own, other, counts = concepts[co.row[strong]], co.col[strong], co.data[strong]
    chosen = np.zeros(links.shape[1], dtype=bool)
    chosen[concepts] = True
    # a pair inside ``concepts`` appears twice: keep it from its lower end
    once = (other != own) & (~chosen[other] | (own < other))
    src = np.minimum(own, other)[once]
    dst = np.maximum(own, other)[once]
    return _filtered(src, dst, counts[once], vectors, theta_sem, chunk_counts(links))


def _filtered(src: np.ndarray, dst: np.ndarray, counts: np.ndarray, vectors: np.ndarray,
              theta_sem: float, chunk_count: np.ndarray) -> ConceptEdges:
    """Pairs (src < dst) that passed theta_co, kept by theta_sem, weighted and sorted."""
    cos = pair_cosines(vectors, src, dst)
    keep = cos >= theta_sem
    src, dst, counts, cos = src[keep], dst[keep], counts[keep], cos[keep]
    dice = 2.0 * counts / (chunk_count[src] + chunk_count[dst])
    return _sorted_edges(src, dst, counts, cos, dice)


def pair_cosines(vectors: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """cos(vectors[src[i]], vectors[dst[i]]) for every i, float32.

    Each value depends on its pair alone, never on the batch it was computed in,
    so a refresh or a load that recomputes some pairs gets the same bits.
    """
    cos = np.zeros(len(src), dtype=np.float32)
    for start in range(0, len(src), PAIR_BLOCK):
        s = slice(start, start + PAIR_BLOCK)
        cos[s] = np.einsum("ij,ij->i", vectors[src[s]], vectors[dst[s]])
    return cos


def _sorted_edges(src: np.ndarray, dst: np.ndarray, counts: np.ndarray, cos: np.ndarray,
                  dice: np.ndarray) -> ConceptEdges:
    order = np.lexsort((dst, src))
    return ConceptEdges(
        source=src[order].astype(np.int64),
        target=dst[order].astype(np.int64),
        cooccurrence=counts[order].astype(np.int64),
        cosine=cos[order].astype(np.float32),
        dice=dice[order].astype(np.float64),
    )


def joined_edges(parts: list[ConceptEdges]) -> ConceptEdges:
    """Edge lists over disjoint pairs as one, in the canonical (source, target) order."""
    return _sorted_edges(*(np.concatenate([getattr(p, name) for p in parts]) for name in
                           ("source", "target", "cooccurrence", "cosine", "dice")))


def kept_edges(edges: ConceptEdges, new_position: np.ndarray,
               changed: np.ndarray) -> ConceptEdges:
    """The edges between unchanged concepts, renumbered (``new_position``: old -> new).

    Concepts keep their (term) order, so a renumbered pair stays source < target.
    """
    keep = ~(changed[edges.source] | changed[edges.target])
    return ConceptEdges(
        source=new_position[edges.source[keep]],
        target=new_position[edges.target[keep]],
        cooccurrence=edges.cooccurrence[keep],
        cosine=edges.cosine[keep],
        dice=edges.dice[keep],
    )


def adjacency(edges: ConceptEdges, n_concepts: int, weighted: bool = True) -> sp.csr_matrix:
    """Symmetric adjacency matrix, Dice-weighted or 0/1."""
    weights = edges.dice if weighted else np.ones(len(edges))
    rows = np.concatenate([edges.source, edges.target])
    cols = np.concatenate([edges.target, edges.source])
    data = np.concatenate([weights, weights]).astype(np.float64)
    return sp.csr_matrix((data, (rows, cols)), shape=(n_concepts, n_concepts))
