"""TERAG's graph (§3.2, §4.2): passage nodes, concept nodes, two edge types.

- ``has_passage``: concept -> passage, for every passage the concept was
  extracted from (provenance);
- ``co_occurrence``: concept <-> concept, both directions, once per pair of
  concepts extracted from a common passage (duplicates avoided, so the graph
  is unweighted).

Nodes are numbered passages first (0..n_passages-1), then concepts. Passages have
no out-edges: in PPR a walker that reaches one restarts from the seeds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..graph import cooccurrence


def passage_concept_links(rows: Sequence[Sequence[int]], n_concepts: int) -> sp.csr_matrix:
    """The 0/1 passages x concepts matrix from each passage's concept indices.

    A concept listed twice for one passage is one link (TERAG's edges are unweighted).
    """
    if isinstance(n_concepts, bool) or not isinstance(n_concepts, int) or n_concepts < 0:
        raise ValueError(f"n_concepts must be an int >= 0, got {n_concepts!r}")
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.fromiter((c for r in rows for c in r), dtype=np.int64, count=int(indptr[-1]))
    if len(indices) and (indices.min() < 0 or indices.max() >= n_concepts):
        raise ValueError(f"concept indices must be in [0, {n_concepts})")
    links = sp.csr_matrix((np.ones(len(indices)), indices, indptr),
                          shape=(len(rows), n_concepts))
    links.sum_duplicates()
    return sp.csr_matrix(links != 0, dtype=np.float64)


def concept_passage_graph(links: sp.csr_matrix) -> sp.csr_matrix:
    """TERAG's directed 0/1 adjacency from the passages x concepts links: passages first.

    concept -> passage for every link (has_passage), concept <-> concept when both
    are linked to some passage (co_occurrence). One sparse product, no loop over pairs.
    """
    links = sp.csr_matrix(links != 0, dtype=np.float64)
    n_passages, n_concepts = links.shape
    co = cooccurrence(links)
    co = sp.csr_matrix(co != 0, dtype=np.float64)
    top = sp.csr_matrix((n_passages, n_passages + n_concepts), dtype=np.float64)
    bottom = sp.hstack([sp.csr_matrix(links.T), co], format="csr")
    return sp.csr_matrix(sp.vstack([top, bottom], format="csr"))
