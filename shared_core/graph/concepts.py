"""Concept extraction: TF-IDF keywords per chunk (Ramos 2003).

Everything a concept needs (which chunks it was extracted from, which chunks and
sentences contain it) is sparse algebra on the term counts of
:func:`shared_core.text.terms.count_terms`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def smoothed_idf(n_docs: int, df: np.ndarray) -> np.ndarray:
    """ln((1+n)/(1+df)) + 1 (scikit-learn's smoothing): one formula for tfidf and evidence."""
    return np.log((1.0 + n_docs) / (1.0 + np.asarray(df, dtype=np.float64))) + 1.0


def tfidf(chunk_term_counts: sp.csr_matrix) -> sp.csr_matrix:
    """TF-IDF with raw term counts and smoothed idf, ln((1+n)/(1+df)) + 1 (scikit-learn's)."""
    counts = sp.csr_matrix(chunk_term_counts, dtype=np.float64)
    n_docs = counts.shape[0]
    idf = smoothed_idf(n_docs, np.bincount(counts.indices, minlength=counts.shape[1]))
    weighted = counts.copy()
    weighted.data *= idf[weighted.indices]
    return weighted


def top_n_per_row(scores: sp.csr_matrix, n: int) -> sp.csr_matrix:
    """Binary mask of the ``n`` highest entries of each row; ties go to the lower column.

    Vectorised: two stable sorts over all nonzeros (by value, then by row, which
    keeps each row's entries by value and, among equal values, by column, as a
    three-key lexsort would, in three quarters of its time), then each entry's
    rank in its row.
    """
    scores = sp.csr_matrix(scores)
    scores.sort_indices()
    n_rows = scores.shape[0]
    rows = np.repeat(np.arange(n_rows), np.diff(scores.indptr))
    by_value = np.argsort(-scores.data, kind="stable")  # ties keep (row, column) order
    order = by_value[np.argsort(rows[by_value], kind="stable")]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - scores.indptr[rows[order]]
    keep = (rank < n) & (scores.data > 0)
    mask = sp.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.float32), (rows[keep], scores.indices[keep])),
        shape=scores.shape,
    )
    return mask


def extract_concepts(chunk_term_counts: sp.csr_matrix, concepts_per_chunk: int) -> sp.csr_matrix:
    """Which terms each chunk contributes as concepts: its top TF-IDF keywords."""
    return top_n_per_row(tfidf(chunk_term_counts), concepts_per_chunk)
