"""Concept extraction: TF-IDF keywords per chunk (Ramos 2003).

Everything a concept needs (which chunks it was extracted from, which chunks and
sentences contain it) is sparse algebra on the term counts of
:func:`shared_core.text.terms.count_terms`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .entries import entry_positions, kept_indptr
from .loops import top_entries_compiled


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

    Rows with at most ``n`` entries keep them all. Longer rows are sorted each on
    its own, batched by length: each batch is a dense block (rows of similar length,
    padded to the longest, padding last), sorted along its rows by value, stably, so
    equal values keep their column order. Global sorts of every entry (by value, then
    by row) had been most of a million-passage refresh's concept extraction. With
    numba, one loop keeps each row's best entries instead
    (:func:`~shared_core.graph.loops.top_entries_compiled`): the same entries.
    """
    scores = sp.csr_matrix(scores)
    scores.sort_indices()
    compiled = top_entries_compiled(scores.indptr, scores.data, n)
    keep = compiled if compiled is not None else _top_entries(scores, n)
    indptr = kept_indptr(scores.indptr, keep)
    return sp.csr_matrix((np.ones(int(indptr[-1]), dtype=np.float32), scores.indices[keep],
                          indptr), shape=scores.shape)


def _top_entries(scores: sp.csr_matrix, n: int) -> np.ndarray:
    """numpy's :func:`top_n_per_row` mask, over ``scores``' entries (sorted by column)."""
    lengths = np.diff(scores.indptr)
    keep = np.zeros(scores.nnz, dtype=bool)
    short = np.flatnonzero((lengths > 0) & (lengths <= n))
    keep[entry_positions(scores, short)[0]] = True
    width = max(n, 1)
    while n > 0 and width < int(lengths.max(initial=0)):
        batch = np.flatnonzero((lengths > width) & (lengths <= 2 * width))
        width *= 2
        if not len(batch):
            continue
        positions, owner = entry_positions(scores, batch)
        offset = positions - scores.indptr[batch][owner]
        block = np.full((len(batch), int(lengths[batch].max())), np.inf)
        block[owner, offset] = -scores.data[positions]
        best = np.argsort(block, axis=1, kind="stable")[:, :n]
        keep[(scores.indptr[batch][:, None] + best).ravel()] = True
    keep &= scores.data > 0
    return keep


def extract_concepts(chunk_term_counts: sp.csr_matrix, concepts_per_chunk: int) -> sp.csr_matrix:
    """Which terms each chunk contributes as concepts: its top TF-IDF keywords."""
    return top_n_per_row(tfidf(chunk_term_counts), concepts_per_chunk)
