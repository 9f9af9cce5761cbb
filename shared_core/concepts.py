"""Concept extraction: terms per sentence, and TF-IDF keywords per chunk (Ramos 2003).

Terms are counted per sentence once, into a sparse sentence x term matrix with a
vocabulary that only grows. Everything a concept needs (which chunks it was
extracted from, which chunks and sentences contain it) is sparse algebra on that
matrix, so adding chunks only tokenizes the new text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

Analyzer = Callable[[str], list[str]]


def term_analyzer(ngram_max: int = 1, min_chars: int = 2) -> Analyzer:
    """Lowercased word n-grams without English stop words (sklearn's list).

    N-grams are built over the stop-word-free token stream, as scikit-learn's
    ``TfidfVectorizer`` does.
    """
    pattern = re.compile(rf"\b\w{{{min_chars},}}\b")
    stop = ENGLISH_STOP_WORDS

    def analyze(text: str) -> list[str]:
        tokens = [t for t in pattern.findall(text.lower()) if t not in stop]
        if ngram_max == 1:
            return tokens
        grams = list(tokens)
        for n in range(2, ngram_max + 1):
            grams.extend(" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
        return grams

    return analyze


def count_terms(
    texts: Sequence[str], vocabulary: dict[str, int], analyzer: Analyzer
) -> sp.csr_matrix:
    """Term counts of ``texts`` as CSR; unseen terms are appended to ``vocabulary``."""
    indptr = [0]
    indices: list[int] = []
    for text in texts:
        for term in analyzer(text):
            idx = vocabulary.get(term)
            if idx is None:
                idx = len(vocabulary)
                vocabulary[term] = idx
            indices.append(idx)
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.int32)
    matrix = sp.csr_matrix(
        (data, np.asarray(indices, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
        shape=(len(texts), len(vocabulary)),
    )
    matrix.sum_duplicates()
    return matrix


def tfidf(chunk_term_counts: sp.csr_matrix) -> sp.csr_matrix:
    """TF-IDF with raw term counts and smoothed idf, ln((1+n)/(1+df)) + 1 (scikit-learn's)."""
    counts = sp.csr_matrix(chunk_term_counts, dtype=np.float64)
    n_docs = counts.shape[0]
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    idf = np.log((1.0 + n_docs) / (1.0 + df)) + 1.0
    weighted = counts.copy()
    weighted.data *= idf[weighted.indices]
    return weighted


def top_n_per_row(scores: sp.csr_matrix, n: int) -> sp.csr_matrix:
    """Binary mask of the ``n`` highest entries of each row; ties go to the lower column.

    Vectorised: one lexsort over all nonzeros, then each entry's rank in its row.
    """
    scores = sp.csr_matrix(scores)
    scores.sort_indices()
    n_rows = scores.shape[0]
    rows = np.repeat(np.arange(n_rows), np.diff(scores.indptr))
    order = np.lexsort((scores.indices, -scores.data, rows))
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
